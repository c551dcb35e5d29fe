"""A stage that fails on some documents: under ``on_error: skip`` the partition is bisected and
only those documents are set aside with the exception; under ``fail`` the run stops naming the
stage, the partition, its input file and the cause."""

from __future__ import annotations

import pandas as pd
import pytest

import gpupipe as gp
from gpupipe.errors import StageError
from tests.conftest import write_jsonl


def poison_stage():
    from gpupipe.stages import Transform, stage
    from gpupipe.stages.registry import all_stages

    if "poison_demo" not in all_stages():
        @stage("poison_demo")
        class Poison(Transform):
            """Upper-case the text; fails on a partition holding a POISON document."""

            def transform(self, df):
                bad = df["text"].str.contains("POISON")
                if bad.any():
                    raise ValueError(f"cannot handle {int(bad.sum())} poisoned document(s)")
                return df.assign(text=df["text"].str.upper())

    return all_stages()["poison_demo"]()


@pytest.fixture
def corpus(tmp_path):
    rows = [{"id": f"d{k:03d}", "text": f"document {k} " + ("POISON" if k in (7, 8, 41) else "ok")}
            for k in range(60)]
    write_jsonl(tmp_path / "in" / "a.jsonl", rows[:30])
    write_jsonl(tmp_path / "in" / "b.jsonl", rows[30:])
    return tmp_path / "in"


def test_skip_isolates_the_failing_documents(client, corpus, tmp_path):
    res = gp.Pipeline(input={"path": str(corpus), "id_column": "id", "on_error": "skip"},
                      output=str(tmp_path / "o"), stages=[poison_stage()]).run(
        client=client, progress=False)
    data = res.to_pandas()
    assert sorted(data["id"]) == [f"d{k:03d}" for k in range(60) if k not in (7, 8, 41)]
    assert (data["text"] == data["text"].str.upper()).all()   # the rest went through the stage
    errors = pd.read_parquet(tmp_path / "o" / "rejected" / "poison_demo" / "errors")
    assert sorted(errors["id"]) == ["d007", "d008", "d041"]
    assert set(errors["reason"]) == {"stage_error"}
    assert set(errors["error"]) == {"ValueError: cannot handle 1 poisoned document(s)"}
    assert res.stage("poison_demo")["drops"] == {"stage_error": 3}
    assert res.summary["accounting"]["balanced"]


def test_fail_names_stage_partition_file_and_cause(client, corpus, tmp_path):
    with pytest.raises(StageError) as e:
        gp.Pipeline(input={"path": str(corpus), "id_column": "id"}, output=str(tmp_path / "o"),
                    stages=[poison_stage()]).run(client=client, progress=False)
    msg = str(e.value)
    assert "stage 'poison_demo' (stages[0]) failed on partition" in msg
    assert "a.jsonl" in msg or "b.jsonl" in msg
    assert "ValueError: cannot handle" in msg


def test_a_changed_input_or_setting_is_named_before_resuming(client, corpus, tmp_path, caplog):
    import logging
    import shutil

    def run(min_words):
        return gp.Pipeline(input={"path": str(corpus), "id_column": "id"},
                           output=str(tmp_path / "o"),
                           stages=[{"stage": "length_filter", "min_words": min_words}]).run(
            client=client, progress=False)

    run(2)
    with caplog.at_level(logging.WARNING, logger="gpupipe"):
        caplog.clear()
        run(2)
        assert [r.message for r in caplog.records if "resuming" in r.message] == []
        run(3)
        shutil.copy(corpus / "a.jsonl", corpus / "c.jsonl")
        res = run(3)
    said = [r.message for r in caplog.records if "resuming" in r.message]
    out = str(tmp_path / "o")
    assert said == [
        f"resuming {out}: stages[0] length_filter: min_words: 2 -> 3; the stages from there on "
        f"are recomputed",
        f"resuming {out}: input files added: {corpus / 'c.jsonl'}; the stages from there on are "
        f"recomputed"]
    assert res.summary["output"]["docs"] == 90


def test_a_full_disk_is_a_clear_error_and_leaves_no_partial_file(tmp_path):
    """RLIMIT_FSIZE stands in for a full disk: every write past 200 kB fails (EFBIG, which
    Python's processes receive as an error, not as SIGXFSZ)."""
    import os
    import resource
    import subprocess
    import sys

    from tests.conftest import REPO

    pipe = tmp_path / "p.yaml"
    pipe.write_text(f"input: {{path: {REPO / 'data' / 'sample'}}}\n"
                    f"stages: [{{stage: length_filter, min_words: 5}}]\n"
                    f"output: {{path: {tmp_path / 'o'}}}\n")

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))

    r = subprocess.run([os.path.join(os.path.dirname(sys.executable), "gpupipe"), "run",
                        str(pipe), "-w", "1", "--no-progress"], capture_output=True, text=True,
                       preexec_fn=limit, timeout=300)
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and ": cannot write: " in last
    assert "[errno 27] File too large" in last and "run again to resume" in last
    assert "Traceback" not in r.stderr
    written = [p for p in (tmp_path / "o").rglob("*") if p.is_file()]
    assert [p for p in written if p.name.startswith(".")] == []   # no temporary file left
    # every Parquet file there is whole (a reader opens it)
    import json

    import pyarrow.parquet as pq

    for p in written:
        if p.suffix == ".parquet":
            pq.read_metadata(p)

    assert json.loads((tmp_path / "o" / "run.json").read_text())["status"] == "failed"


def batch_limit_stage():
    from gpupipe.stages import Transform, stage
    from gpupipe.stages.registry import all_stages

    if "batch_limit_demo" not in all_stages():
        @stage("batch_limit_demo")
        class BatchLimit(Transform):
            """Fails on a call with more than 16 rows (a limit of a model server, say)."""

            def transform(self, df):
                if len(df) > 16:
                    raise RuntimeError(f"batch of {len(df)} rows is over the limit of 16")
                return df.assign(text=df["text"].str.upper())

    return all_stages()["batch_limit_demo"]()


def test_a_stage_failing_on_a_whole_partition_but_on_no_half_loses_nothing(
        client, corpus, tmp_path):
    """Was: the bisection found no failing document and crashed on ``pd.concat([])``. Now the
    halves' results stand, nothing is set aside, and no errors file is written."""
    res = gp.Pipeline(input={"path": str(corpus), "id_column": "id", "on_error": "skip"},
                      output=str(tmp_path / "o"), stages=[batch_limit_stage()]).run(
        client=client, progress=False)
    data = res.to_pandas()
    assert data["id"].tolist() == [f"d{k:03d}" for k in range(60)]
    assert (data["text"] == data["text"].str.upper()).all()
    assert res.stage("batch_limit_demo")["drops"] == {}
    assert not (tmp_path / "o" / "rejected" / "batch_limit_demo").exists()
    assert res.summary["accounting"]["balanced"]


def test_check_sees_the_run_and_a_plugin_check_without_context_still_runs(client, corpus,
                                                                          tmp_path):
    from gpupipe.stages import Transform, stage
    from gpupipe.stages.registry import all_stages

    if "check_demo" not in all_stages():
        @stage("check_demo")
        class CheckDemo(Transform):
            """Refuses to run after a stage named length_filter."""

            def check(self, ctx=None):
                if any(s.stage_name == "length_filter" for s in ctx.earlier):
                    raise ValueError(f"not after length_filter (position {ctx.position})")

            def transform(self, df):
                return df

        @stage("old_check_demo")
        class OldCheckDemo(Transform):
            """A plugin's check from before it took a context."""

            def check(self):
                return "checked the old way"

            def transform(self, df):
                return df

    new, old = all_stages()["check_demo"], all_stages()["old_check_demo"]
    with pytest.raises(gp.SpecError, match=r"stage 1 \(check_demo\): not after length_filter "
                                           r"\(position 1\)"):
        gp.Pipeline(input={"path": str(corpus), "id_column": "id"}, output=str(tmp_path / "a"),
                    stages=[gp.stages.LengthFilter(), new()]).run(client=client, progress=False)
    assert not (tmp_path / "a" / "data").exists()
    res = gp.Pipeline(input={"path": str(corpus), "id_column": "id"},
                      output=str(tmp_path / "b"), stages=[new(), old()]).run(
        client=client, progress=False)
    assert res.summary["output"]["docs"] == 60
