"""Input from object storage: a real S3-compatible server process (moto_server, credentials
checked) reached through the real s3fs client over HTTP. JSONL, Parquet and WARC read from
``s3://`` equal the same files read from disk; a run resumes on unchanged objects and sees a
changed one; wrong credentials and a missing bucket stop with the bucket named."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gpupipe as gp
from gpupipe.errors import InputError
from gpupipe.runner.resume import describe_changes
from gpupipe.runner.sources import make_source
from gpupipe.spec import InputSpec
from gpupipe.stages import LengthFilter, NormalizeText, Tokenize
from tests.conftest import REPO
from tests.io.remote import SAMPLE, WARC, frames
from tests.io.s3_server import available

pytest.importorskip("s3fs")
pytestmark = [pytest.mark.xdist_group("s3"), pytest.mark.skipif(
    not available(), reason="the S3 test server is not installed (make .venv-moto/.installed)")]



def test_jsonl_from_s3_equals_local(s3):
    remote, src = frames(InputSpec(path="s3://corpus/sample/", id_column=None,
                                   storage_options=s3.options()))
    local, _ = frames(InputSpec(path=str(REPO / "data" / "sample"), id_column=None))
    assert src.files == tuple(f"s3://corpus/sample/{f.name}" for f in SAMPLE)
    assert len(remote) == len(local) == len(SAMPLE) == 5
    for a, b in zip(remote, local):
        assert a.frame.equals(b.frame)   # derived ids too: <file>:<line> relative to the root
        assert a.stats == b.stats
    assert remote[0].frame["id"].iloc[0] == "debian-docs.jsonl.gz:1"


def test_parquet_and_warc_from_s3(s3, tmp_path):
    table = pa.table({"id": ["a", "b", "c"], "text": ["one", "two", "three"],
                      "score": [0.5, 0.25, 1.0]})
    pq.write_table(table, tmp_path / "t.parquet")
    s3.fs().put_file(str(tmp_path / "t.parquet"), "corpus/pq/t.parquet")
    (got,), _ = frames(InputSpec(path="s3://corpus/pq/*.parquet", id_column="id",
                                 columns=["score"], storage_options=s3.options()))
    assert got.frame["text"].tolist() == ["one", "two", "three"]
    assert got.frame["score"].tolist() == [0.5, 0.25, 1.0]
    assert got.stats["compressed_bytes"] == os.path.getsize(tmp_path / "t.parquet")
    # a WARC file cut into partitions at record starts, through ranged reads
    remote, src = frames(InputSpec(path="s3://corpus/crawl/docs-crawl.warc.gz",
                                   blocksize=100_000, storage_options=s3.options()))
    local, lsrc = frames(InputSpec(path=str(WARC), blocksize=100_000))
    assert src.blocks == lsrc.blocks and len(src.blocks) == 9
    for a, b in zip(remote, local):
        assert a.frame.equals(b.frame) and a.stats == b.stats


def test_wrong_credentials_and_missing_bucket(s3):
    with pytest.raises(InputError, match=r"s3://corpus/sample/: access denied to bucket "
                                         r"'corpus' .*check the credentials"):
        make_source(InputSpec(path="s3://corpus/sample/", storage_options={
            **s3.options(), "key": "AKIAWRONG", "secret": "wrong"}))
    with pytest.raises(InputError, match=r"s3://no-such-bucket/x.jsonl: the bucket "
                                         r"'no-such-bucket' does not exist"):
        make_source(InputSpec(path="s3://no-such-bucket/x.jsonl",
                              storage_options=s3.options()))
    with pytest.raises(InputError, match=r"'s3://corpus/nothing/\*.jsonl' matches no file"):
        make_source(InputSpec(path="s3://corpus/nothing/*.jsonl", storage_options=s3.options()))


def pipeline(s3, out, path="s3://corpus/sample/*.jsonl.gz"):
    return gp.Pipeline(
        input={"path": path, "id_column": "id", "storage_options": s3.options()},
        output={"path": str(out), "shards": {"num_shards": 2}},
        stages=[NormalizeText(), LengthFilter(min_words=20),
                Tokenize(tokenizer="data/tokenizer.json")])


def test_a_run_from_s3_equals_a_local_run_and_resumes(s3, client, tmp_path):
    res = pipeline(s3, tmp_path / "s3").run(client=client, progress=False)
    local = gp.Pipeline(
        input={"path": "data/sample/*.jsonl.gz", "id_column": "id"},
        output={"path": str(tmp_path / "local"), "shards": {"num_shards": 2}},
        stages=[NormalizeText(), LengthFilter(min_words=20),
                Tokenize(tokenizer="data/tokenizer.json")]).run(client=client, progress=False)
    assert res.stats["output"]["docs"] == local.stats["output"]["docs"] == 1660
    for p in sorted((tmp_path / "local" / "shards").rglob("*.bin")):
        twin = tmp_path / "s3" / p.relative_to(tmp_path / "local")
        assert twin.read_bytes() == p.read_bytes(), p.name
    run = json.loads((tmp_path / "s3" / "run.json").read_text())
    assert run["read"]["files"] == 5
    # the same objects: every partition is reused; a changed object is seen
    again = pipeline(s3, tmp_path / "s3").run(client=client, progress=False)
    assert again.stats["output"]["docs"] == 1660
    seg = json.loads((tmp_path / "s3" / "run.json").read_text())["segments"][0]
    assert (seg["computed"], seg["reused"]) == (0, 5)
    s3.fs().pipe_file("corpus/sample/python-docs-02.jsonl.gz",
                      (REPO / "data/sample/python-docs-01.jsonl.gz").read_bytes())
    name = "s3://corpus/sample/python-docs-02.jsonl.gz"
    before = run["input_files"]
    pipeline(s3, tmp_path / "s3").run(client=client, progress=False)
    after = json.loads((tmp_path / "s3" / "run.json").read_text())
    assert [f for f in before if before[f] != after["input_files"][f]] == [name]
    assert after["segments"][0]["computed"] == 5
    assert describe_changes(str(tmp_path / "s3" / "run.json"), after["pipeline"], before,
                            "another") == [f"input files modified: {name}"]
    s3.fs().put_file(str(REPO / "data/sample/python-docs-02.jsonl.gz"),
                     "corpus/sample/python-docs-02.jsonl.gz")


def test_cli_with_credentials_from_the_environment(s3, tmp_path):
    """What a user on a cluster does: the endpoint in the pipeline file, the keys in the
    environment (read by every worker's botocore)."""
    spec = {"version": 1, "name": "s3-cli",
            "input": {"path": "s3://corpus/crawl/", "format": "warc",
                      "storage_options": {"endpoint_url": s3.endpoint}},
            "stages": [{"stage": "extract_html", "timeout": None}],
            "output": {"path": str(tmp_path / "out")}}
    path = tmp_path / "p.json"
    path.write_text(json.dumps(spec))
    env = {**os.environ, "AWS_ACCESS_KEY_ID": s3.key, "AWS_SECRET_ACCESS_KEY": s3.secret,
           "AWS_DEFAULT_REGION": "us-east-1"}
    r = subprocess.run([sys.executable, "-m", "gpupipe.cli", "run", str(path), "--workers", "1"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["read"]["docs"] == 113 and run["stages"][0]["docs_out"] == 113
    env["AWS_SECRET_ACCESS_KEY"] = "wrong"
    r = subprocess.run([sys.executable, "-m", "gpupipe.cli", "run", str(path), "--workers", "1",
                        "-o", str(tmp_path / "bad")], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode != 0
    assert "access denied to bucket 'corpus'" in r.stderr and "Traceback" not in r.stderr


def test_eval_set_on_s3(s3, tmp_path):
    """decontaminate's evaluation sets read from the bucket equal the same files on disk."""
    from gpupipe.stages import Decontaminate
    from gpupipe.stages.filters.decontaminate import EvalSet, load_samples

    quiz = REPO / "data" / "evals" / "python_quiz.jsonl"
    s3.fs().put_file(str(quiz), "corpus/evals/python_quiz.jsonl")
    remote = EvalSet(name="quiz", path="s3://corpus/evals/*.jsonl", text_column="passage",
                     storage_options=s3.options())
    local = EvalSet(name="quiz", path=str(quiz), text_column="passage")
    assert load_samples(remote) == load_samples(local) and len(load_samples(local)) == 24
    stage = Decontaminate(eval_sets=[remote])
    (entry,) = stage.identity()["quiz"]
    assert entry[0] == "s3://corpus/evals/python_quiz.jsonl" and entry[1] == quiz.stat().st_size
    bad = EvalSet(name="quiz", path="s3://corpus/evals/*.jsonl", text_column="passage",
                  storage_options={**s3.options(), "secret": "wrong"})
    with pytest.raises(gp.SpecError, match="eval set 'quiz': .*access denied to bucket 'corpus'"):
        load_samples(bad)
