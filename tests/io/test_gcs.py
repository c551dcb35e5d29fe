"""``gs://`` input and output against a real Google Cloud Storage emulator process
(gcp-storage-emulator) through the real gcsfs client over HTTP: JSONL and WARC read from a
bucket equal the same files read from disk (a WARC file cut at record starts through ranged
reads); a pipeline from ``gs://`` to ``gs://`` equals a local run byte for byte and resumes on
another machine from the bucket alone; a missing bucket stops with the bucket named."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import gpupipe as gp
from gpupipe.errors import InputError, OutputError
from gpupipe.runner.sources import make_source
from gpupipe.spec import InputSpec
from gpupipe.stages import ExactDedup, LengthFilter, NormalizeText, Tokenize
from tests.conftest import REPO
from tests.io.gcs_server import available
from tests.io.remote import SAMPLE, WARC, digests, fill_corpus, frames, local_files, run_cli

pytest.importorskip("gcsfs")
pytestmark = [pytest.mark.xdist_group("gcs"), pytest.mark.skipif(
    not available(), reason="the GCS emulator is not installed (pip install -e '.[dev]')")]

@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
    from tests.io.gcs_server import GcsServer

    server = GcsServer(tmp_path_factory.mktemp("gcs"))
    try:
        fill_corpus(server.fs())
        server.fs().mkdir("runs")
        yield server
    finally:
        server.stop()


def test_jsonl_and_warc_from_gcs_equal_local(gcs):
    remote, src = frames(InputSpec(path="gs://corpus/sample/", id_column=None,
                                   storage_options=gcs.options()))
    local, _ = frames(InputSpec(path=str(REPO / "data" / "sample"), id_column=None))
    assert src.files == tuple(f"gs://corpus/sample/{f.name}" for f in SAMPLE)
    assert len(remote) == len(local) == 5
    for a, b in zip(remote, local):
        assert a.frame.equals(b.frame) and a.stats == b.stats
    assert remote[0].frame["id"].iloc[0] == "debian-docs.jsonl.gz:1"
    remote, src = frames(InputSpec(path="gs://corpus/crawl/*.warc.gz", blocksize=100_000,
                                   storage_options=gcs.options()))
    local, lsrc = frames(InputSpec(path=str(WARC), blocksize=100_000))
    assert src.blocks == lsrc.blocks and len(src.blocks) == 9
    for a, b in zip(remote, local):
        assert a.frame.equals(b.frame) and a.stats == b.stats
    assert sum(len(r.frame) for r in remote) == 113


STAGES = [{"stage": "normalize_text"}, {"stage": "length_filter", "min_words": 20},
          {"stage": "exact_dedup"}, {"stage": "tokenize", "tokenizer": "data/tokenizer.json"}]


def spec(gcs, out: str, staging) -> dict:
    return {"version": 1, "name": "gcs",
            "input": {"path": "gs://corpus/sample/*.jsonl.gz", "id_column": "id",
                      "storage_options": gcs.options()},
            "stages": STAGES,
            "output": {"path": out, "shards": {"num_shards": 2}, "staging": str(staging),
                       "storage_options": gcs.options()}}


def test_a_run_from_gcs_to_gcs_equals_a_local_run_and_resumes_elsewhere(gcs, client, tmp_path):
    local = tmp_path / "local"
    gp.Pipeline(input={"path": str(REPO / "data" / "sample" / "*.jsonl.gz"), "id_column": "id"},
                stages=[NormalizeText(), LengthFilter(min_words=20), ExactDedup(),
                        Tokenize(tokenizer="data/tokenizer.json")],
                output={"path": str(local), "shards": {"num_shards": 2}}).run(
        client=client, progress=False)
    reference = digests(local_files(local))
    assert len(reference) == 14

    res = gp.Pipeline(**spec(gcs, "gs://runs/whole", tmp_path / "a")).run(client=client,
                                                                         progress=False)
    assert res.stats["output"]["remote"] == "gs://runs/whole"
    fs = gcs.fs()
    remote = {k[len("runs/whole/"):]: fs.cat_file(k) for k in fs.find("runs/whole")}
    assert digests(remote) == reference
    run = json.loads(remote["run.json"])
    assert run["status"] == "complete" and run["output"]["docs"] == 1660
    assert "report.html" in remote and "shards/manifest.json" in remote
    versions = {k: fs.info(f"runs/whole/{k}")["generation"] for k in remote}

    # another machine, from the CLI: an empty staging directory; all is taken from the bucket
    run_cli(spec(gcs, "gs://runs/whole", tmp_path / "b"), tmp_path / "gcs.json",
            "gs://runs/whole")
    run = json.loads(fs.cat_file("runs/whole/run.json"))
    assert [(s["name"], s["computed"]) for s in run["segments"]] == [
        ("00-length_filter", 0), ("01-exact_dedup", 0), ("02-tokenize", 0)]
    # nothing was uploaded again but the records of the run and of its segments' states
    now = {k[len("runs/whole/"):]: fs.info(k)["generation"] for k in fs.find("runs/whole")}
    assert now.keys() == versions.keys()
    changed = sorted(k for k in now if now[k] != versions[k])
    assert "run.json" in changed, changed
    assert {k.rsplit("/", 1)[-1] for k in changed} <= {"run.json", "report.html",
                                                        "_segment.json"}, changed


def test_missing_bucket_is_named(gcs, client, tmp_path):
    """GCS's own words for a missing bucket (not the word "bucket"); a missing object of a
    bucket whose name holds that word is not a missing bucket."""
    with pytest.raises(InputError, match=r"gs://absent7/in/\*\.jsonl\.gz: the bucket "
                                         r"'absent7' does not exist"):
        make_source(InputSpec(path="gs://absent7/in/*.jsonl.gz", storage_options=gcs.options()))
    pipe = gp.Pipeline(**spec(gcs, "gs://absent8/run", tmp_path / "stage"))
    with pytest.raises(OutputError, match=r"gs://absent8/run: the bucket 'absent8' does not "
                                          r"exist"):
        pipe.run(client=client, progress=False)
    gcs.fs().mkdir("my-bucket")
    with pytest.raises(InputError, match=r"^input path 'gs://my-bucket/none\.jsonl' matches "
                                         r"no file; check input.path$"):
        make_source(InputSpec(path="gs://my-bucket/none.jsonl", storage_options=gcs.options()))


def test_the_words_of_a_missing_bucket():
    """gcsfs's texts: the listing path of a missing bucket, and a missing object's path in a
    bucket whose name holds the word "bucket"."""
    from gpupipe.io.files import remote_error

    assert str(remote_error("gs://my-bucket/x", FileNotFoundError("b/my-bucket/o"))) == (
        "gs://my-bucket/x: the bucket 'my-bucket' does not exist (b/my-bucket/o)")
    gone = "http://h/upload/storage/v1/b/my-bucket/o?name=x"
    assert "the bucket 'my-bucket' does not exist" in str(remote_error("gs://my-bucket/x",
                                                                       FileNotFoundError(gone)))
    obj = "http://h/storage/v1/b/my-bucket/o/x.jsonl"
    assert str(remote_error("gs://my-bucket/x.jsonl", FileNotFoundError(obj))) == (
        f"gs://my-bucket/x.jsonl: not found ({obj})")


def test_the_words_of_denied_access():
    """gcsfs's exceptions for 403 and 401 (the emulator checks no credentials, so they are made
    here, with gcsfs's own class for 401) name the bucket and where GCS credentials go."""
    from gcsfs.retry import HttpError

    from gpupipe.io.files import remote_error

    forbidden = OSError("Forbidden: b/corpus/o\nanonymous caller does not have access")
    assert str(remote_error("gs://corpus/x", forbidden)) == (
        "gs://corpus/x: access denied to bucket 'corpus' (Forbidden: b/corpus/o); check the "
        "credentials (GOOGLE_APPLICATION_CREDENTIALS, or the token of input.storage_options)")
    unauthorized = HttpError({"code": 401, "message": "Invalid Credentials"})
    assert "access denied to bucket 'corpus'" in str(
        remote_error("gs://corpus/x", unauthorized, "output.storage_options", OutputError))


@pytest.mark.parametrize("verbose", [False, True])
def test_the_cli_keeps_gcsfs_tracebacks_to_verbose_runs(verbose):
    """gcsfs logs each request it gives up on with a traceback before it raises; the run's
    error says it once (`remote_error`), so the CLI shows gcsfs's own log with -v only."""
    code = ("import logging, sys\nfrom gpupipe.cli import _configure_logging\n"
            f"_configure_logging({verbose})\n"
            "try:\n    raise ConnectionRefusedError(111, 'Connect call failed')\n"
            "except OSError as e:\n"
            "    logging.getLogger('gcsfs.retry').exception('_request out of retries: %s', e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0
    assert ("Traceback" in r.stderr and "out of retries" in r.stderr) == verbose, r.stderr
