"""A run directory on object storage, against the real S3-compatible server process through
s3fs: a pipeline from ``s3://`` to ``s3://`` equals a local run byte for byte; a run SIGKILLed
there resumes from the bucket with an empty staging directory (another machine); ``against:``
reads an earlier run's index from the bucket; wrong credentials, a missing bucket, a foreign
prefix and a foreign staging directory stop with clear errors and delete nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

import gpupipe as gp
from gpupipe.errors import OutputError
from gpupipe.io.mirror import RunMirror, rank
from gpupipe.stages import ExactDedup, LengthFilter, NormalizeText, Tokenize
from tests.conftest import REPO
from tests.io.remote import digests, local_files, run_cli
from tests.io.s3_server import available

pytest.importorskip("s3fs")
pytestmark = [pytest.mark.xdist_group("s3"), pytest.mark.skipif(
    not available(), reason="the S3 test server is not installed (make .venv-moto/.installed)")]

BIN = os.path.join(os.path.dirname(sys.executable), "gpupipe")
INPUT = "s3://corpus/sample/*.jsonl.gz"
STAGES = [{"stage": "normalize_text"}, {"stage": "length_filter", "min_words": 20},
          {"stage": "exact_dedup"}, {"stage": "tokenize", "tokenizer": "data/tokenizer.json"}]


def spec(s3, out: str, staging, **output) -> dict:
    return {"version": 1, "name": "s3-out",
            "input": {"path": INPUT, "id_column": "id", "storage_options": s3.options()},
            "stages": STAGES,
            "output": {"path": out, "shards": {"num_shards": 2}, "staging": str(staging),
                       **({"storage_options": s3.options()} if out.startswith("s3://") else {}),
                       **output}}


def remote_files(s3, prefix: str) -> dict[str, bytes]:
    fs = s3.fs()
    return {k[len(prefix) + 1:]: fs.cat_file(k) for k in fs.find(prefix)}


@pytest.fixture(scope="module", autouse=True)
def runs_bucket(s3):
    if not s3.fs().exists("runs"):
        s3.fs().mkdir("runs")


@pytest.fixture(scope="module")
def reference(s3, client, tmp_path_factory):
    """The same pipeline with a local run directory."""
    out = tmp_path_factory.mktemp("s3-out") / "local"
    pipe = gp.Pipeline(input={"path": INPUT, "id_column": "id", "storage_options": s3.options()},
                       stages=[NormalizeText(), LengthFilter(min_words=20), ExactDedup(),
                               Tokenize(tokenizer="data/tokenizer.json")],
                       output={"path": str(out), "shards": {"num_shards": 2}})
    res = pipe.run(client=client, progress=False)
    assert res.stats["output"]["docs"] == 1660
    return digests(local_files(out))


def test_a_run_to_s3_equals_a_local_run(s3, client, reference, tmp_path):
    res = gp.Pipeline(**spec(s3, "s3://runs/whole", tmp_path / "stage")).run(
        client=client, progress=False)
    remote = remote_files(s3, "runs/whole")
    assert digests(remote) == reference and len(reference) == 14
    assert res.output == str(tmp_path / "stage")
    assert res.stats["output"]["remote"] == "s3://runs/whole"
    run = json.loads(remote["run.json"])
    assert run["status"] == "complete" and run["pipeline"]["output"]["path"] == "s3://runs/whole"
    assert "report.html" in remote and "shards/manifest.json" in remote
    # the staging directory is a copy of the bucket's run, byte for byte
    assert local_files(tmp_path / "stage") == remote
    # no credential is written down: secrets are masked in run.json (and so in the report)
    text = remote["run.json"].decode()
    assert s3.secret not in text and '"secret": "***"' in text
    assert s3.secret.encode() not in remote["report.html"]


def test_killed_on_one_machine_resumed_on_another(s3, reference, tmp_path):
    """SIGKILL of the whole run inside exact_dedup; the rerun starts from an empty staging
    directory, downloads what the bucket holds and recomputes only what was not committed."""
    first = tmp_path / "first.json"
    first.write_text(json.dumps(spec(s3, "s3://runs/killed", tmp_path / "a", sync_seconds=0)))
    env = {**os.environ, "GPUPIPE_FAILPOINTS": "step/exact_dedup/losers/0"}
    p = subprocess.run([BIN, "run", str(first), "-w", "1", "--no-progress"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=300, start_new_session=True)
    assert p.returncode == -signal.SIGKILL, p.stderr[-3000:]
    held = remote_files(s3, "runs/killed")
    assert json.loads(held["run.json"])["status"] == "running"
    assert "checkpoints/00-length_filter/_segment.json" in held
    assert not any(k.startswith(("data/", "shards/")) for k in held)
    # every marker in the bucket has its data there
    done = [k for k in held if "/_done/" in k and k.startswith("checkpoints/00-")]
    assert len(done) == 5 and all(k.replace("_done/", "") + ".parquet" in held for k in done)

    run_cli(spec(s3, "s3://runs/killed", tmp_path / "b"), tmp_path / "second.json",
            "s3://runs/killed")
    remote = remote_files(s3, "runs/killed")
    assert digests(remote) == reference
    run = json.loads(remote["run.json"])
    assert [(s["name"], s["computed"], s["reused"]) for s in run["segments"]] == [
        ("00-length_filter", 0, 5), ("01-exact_dedup", 5, 0), ("02-tokenize", 5, 0)]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_random_kills_with_background_uploads_resume_to_the_same_bytes(s3, reference, tmp_path,
                                                                      seed):
    """A soak: uploads every 0.1 s while the run works, SIGKILL of the whole run at two random
    moments, each rerun from an empty staging directory. Whatever state the bucket was left in,
    the last run completes with the reference bytes."""
    import random

    rng = random.Random(seed)
    url = f"s3://runs/soak-{seed}"
    for attempt in range(3):
        pipe = tmp_path / f"{attempt}.json"
        pipe.write_text(json.dumps(spec(s3, url, tmp_path / f"stage-{attempt}",
                                        sync_seconds=0.1)))
        p = subprocess.Popen([BIN, "run", str(pipe), "-w", "2", "--no-progress"], cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True)
        try:
            p.communicate(timeout=rng.uniform(2, 9) if attempt < 2 else 300)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            continue
        assert p.returncode == 0
        break
    remote = remote_files(s3, f"runs/soak-{seed}")
    assert json.loads(remote["run.json"])["status"] == "complete"
    assert digests(remote) == reference


def test_against_an_index_on_s3(s3, client, tmp_path):
    """exact_dedup against a run in the bucket: every document it kept is a duplicate here."""
    gp.Pipeline(**spec(s3, "s3://runs/earlier", tmp_path / "stage")).run(
        client=client, progress=False)
    later = gp.Pipeline(
        input={"path": "data/sample/python-docs-01.jsonl.gz", "id_column": "id"},
        stages=[NormalizeText(), LengthFilter(min_words=20),
                ExactDedup(against=("s3://runs/earlier",), storage_options=s3.options())],
        output={"path": str(tmp_path / "later")})
    res = later.run(client=client, progress=False)
    st = res.stage("exact_dedup")
    assert st["docs_in"] == 347 and st["docs_out"] == 0
    assert st["drops"] == {"exact_duplicate": 347}
    audit = pq.read_table(tmp_path / "later" / "dedup" / "duplicates.parquet").to_pydict()
    assert set(audit["duplicate_run"]) == {"s3://runs/earlier"}
    # the fingerprint follows the earlier run's ETags: unchanged, nothing is recomputed
    again = later.run(client=client, progress=False)
    assert [s["computed"] for s in again.stats["segments"]] == [0, 0]
    with pytest.raises(gp.SpecError, match=r"exact_dedup.against: 's3://runs/nothing' is not a "
                                           r"gpupipe run directory"):
        later.model_copy(update={"stages": [ExactDedup(
            against=("s3://runs/nothing",), storage_options=s3.options())]}).run(
            client=client, progress=False)


def test_clear_errors_and_nothing_deleted(s3, client, tmp_path):
    fs = s3.fs()
    pipe = gp.Pipeline(**spec(s3, "s3://runs/errors", tmp_path / "stage"))

    def run(**output):
        new = pipe.output.model_copy(update=output)
        return pipe.model_copy(update={"output": new}).run(client=client, progress=False)

    with pytest.raises(OutputError, match=r"s3://runs/errors: access denied to bucket 'runs' "
                                          r".*output.storage_options"):
        run(storage_options={**s3.options(), "secret": "wrong"})
    with pytest.raises(OutputError, match=r"the bucket 'no-such-bucket' does not exist"):
        run(path="s3://no-such-bucket/run")
    fs.pipe_file("runs/foreign/notes.txt", b"not a run")
    with pytest.raises(OutputError, match=r"'s3://runs/foreign' is not empty and holds no "
                                          r"gpupipe run .*nothing was deleted"):
        run(path="s3://runs/foreign", staging=str(tmp_path / "foreign"))
    assert fs.cat_file("runs/foreign/notes.txt") == b"not a run"
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("precious")
    with pytest.raises(OutputError, match=r"output.staging .*mine' is not empty and is not the "
                                          r"staging directory"):
        run(staging=str(mine))
    assert (mine / "thesis.tex").read_text() == "precious"
    with pytest.raises(gp.SpecError, match=r"output.path 's3://corpus' contains the input file"):
        run(path="s3://corpus")


def test_push_order_and_overwrite(s3, tmp_path):
    """Data before markers before segment states before run.json; a file deleted in staging
    is deleted from the bucket; overwrite empties the prefix."""
    assert [rank(r) for r in ("data/part-00000.parquet", "checkpoints/x/_done/part-00000",
                              "checkpoints/x/_segment.json", "shards/manifest.json",
                              "run.json", "stats/x/part-00000.json")] == [0, 1, 2, 2, 3, 0]
    stage = tmp_path / "stage"
    m = RunMirror("s3://runs/order", str(stage), s3.options(), 0)
    m.pull()
    (stage / "seg" / "_done").mkdir(parents=True)
    (stage / "seg" / "part-0.parquet").write_bytes(b"data")
    (stage / "seg" / "_done" / "part-0").write_bytes(b"")
    (stage / "run.json").write_text("{}")
    (stage / "seg" / ".part-1.parquet.tmp-abc").write_bytes(b"partial")
    assert m.push() == {"uploaded": 3, "deleted": 0}
    assert m.push() == {"uploaded": 0, "deleted": 0}
    assert sorted(remote_files(s3, "runs/order")) == ["run.json", "seg/_done/part-0",
                                                       "seg/part-0.parquet"]
    (stage / "seg" / "_done" / "part-0").unlink()
    assert m.push() == {"uploaded": 0, "deleted": 1}
    m.clear()
    assert not s3.fs().exists("runs/order/run.json") and not stage.exists()
