"""The step runner: a global stage killed inside any of its steps resumes from the tasks that
finished, and gives the same result as an uninterrupted run."""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pytest

import gpupipe as gp
from gpupipe.stages import ExactDedup, FuzzyDedup
from gpupipe.stages.steps import StepContext, bucket_of, write_buckets


def files(d):
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*.parquet")) if p.is_file()}


def kill_inside(work, step_dirs, k, out):
    """The state a kill leaves while step ``k`` runs: steps before it complete, half of its
    tasks done (every file is written under a temporary name and renamed, so a task either
    left its files and marker or nothing usable), later steps not started, no output."""
    for later in step_dirs[k + 1:]:
        shutil.rmtree(work / later)
    d = work / step_dirs[k]
    (d / "_complete.json").unlink(missing_ok=True)
    markers = sorted((d / "_done").glob("*.json")) if (d / "_done").exists() else []
    for m in markers[::2]:
        m.unlink()
    shutil.rmtree(out / "data")
    return len(markers[::2]) if markers else 1


@pytest.mark.parametrize("stage", [FuzzyDedup(verify="jaccard", jaccard_threshold=0.6),
                                   ExactDedup()], ids=["fuzzy", "exact"])
def test_resume_after_a_kill_inside_each_step(client, planted, tmp_path, stage):
    out = tmp_path / "o"
    pipe = gp.Pipeline(input={"path": str(planted["dir"]), "id_column": "id"}, output=str(out),
                       stages=[stage])
    first = pipe.run(client=client, progress=False)
    expected, audit = files(out / "data"), files(out / "dedup")
    info = first.stage(stage.stage_name)
    work = out / "checkpoints" / f"01-{stage.stage_name}.work"
    step_dirs = sorted(p.name for p in work.iterdir() if p.is_dir())
    names = [s["step"] for s in info["steps"]]
    assert step_dirs == [f"{k:02d}-{n}" for k, n in enumerate(names)]
    for k in range(len(names) - 1):  # every step but the output step, whose dir is data/
        redo = kill_inside(work, step_dirs, k, out)
        again = pipe.run(client=client, progress=False)
        steps = again.stage(stage.stage_name)["steps"]
        assert [s["computed"] for s in steps[:k]] == [0] * k, names[k]
        assert steps[k]["computed"] == redo, names[k]
        assert files(out / "data") == expected, names[k]
        assert files(out / "dedup") == audit, names[k]
        assert again.stage(stage.stage_name)["counters"] == info["counters"], names[k]
        assert again.stage(stage.stage_name)["drops"] == info["drops"]
    # inside the output step: its finished partitions (file, stats, marker) stay, the segment
    # is not complete, the others are redone
    seg = json.loads((out / "data" / "_segment.json").read_text())
    (out / "data" / "_segment.json").write_text(json.dumps({**seg, "complete": False}))
    gone = sorted((out / "data" / "_done").iterdir())[1::2]
    for m in gone:
        m.unlink()
        (out / "data" / f"{m.name}.parquet").unlink()
    # files a SIGKILL left half-written under their temporary names (no clean-up runs)
    index = out / "dedup" / "index" / stage.stage_name
    (index / "manifest.json").unlink()
    half = [out / "data" / ".part-00003.parquet.tmp-0123456789ab",
            index / ".part-00003.parquet.tmp-0123456789ab",
            out / "dedup" / "duplicates.parquet" / ".0-x-part-00003.parquet.tmp-0123456789ab"]
    for f in half:
        f.write_bytes(b"PAR1 cut short")
    again = pipe.run(client=client, progress=False)
    assert not any(f.exists() for f in half) and not list(out.rglob(".*.tmp-*"))
    assert (index / "manifest.json").exists()   # committed again once every partition is
    steps = again.stage(stage.stage_name)["steps"]
    assert [s["computed"] for s in steps] == [0] * (len(steps) - 1) + [len(gone)]
    assert len(gone) == 2 and files(out / "data") == expected and files(out / "dedup") == audit
    assert again.stage(stage.stage_name)["counters"] == info["counters"]
    assert again.stage(stage.stage_name)["drops"] == info["drops"]
    assert again.summary["output"]["docs"] == first.summary["output"]["docs"]


def test_buckets_route_equal_keys_together(tmp_path):
    t = pa.table({"k1": [5, 7, 5, 9, 7, 5], "k2": [1, 1, 1, 2, 1, 3], "v": list(range(6))})
    b = bucket_of(t, ("k1", "k2"), 3)
    assert b[0] == b[2] and b[1] == b[4] and all(0 <= x < 3 for x in b)
    write_buckets(t, b, 3, str(tmp_path / "s" / "part-00000.arrow"))
    ctx = StepContext(source=None, work_dir=str(tmp_path), output_dir=str(tmp_path), position=0,
                      buckets=3)
    got = [ctx.bucket("s", j) for j in range(3)]
    rows = sorted(v for g in got if g is not None for v in g["v"].to_pylist())
    assert rows == list(range(6))
    for j, g in enumerate(got):
        if g is not None:
            assert set(g["v"].to_pylist()) == {i for i in range(6) if b[i] == j}


def test_run_json_has_each_step_and_merged_counters(client, planted, tmp_path):
    res = gp.Pipeline(input={"path": str(planted["dir"]), "id_column": "id"},
                      output=str(tmp_path / "o"), stages=[ExactDedup()]).run(client=client,
                                                                            progress=False)
    with open(tmp_path / "o" / "run.json") as f:
        st = json.load(f)["stages"][0]
    # the audit and the index are the drop step's side outputs, placed by the runner
    assert [s["step"] for s in st["steps"]] == ["keys", "losers", "drop"]
    assert [s["tasks"] for s in st["steps"]] == [4, 4, 4]
    assert st["counters"] == {"documents": 620}
    assert st["drops"] == {"exact_duplicate": 20} == res.stage("exact_dedup")["drops"]
    assert res.summary["accounting"]["balanced"]
