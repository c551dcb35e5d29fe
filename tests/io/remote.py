"""What the remote-filesystem tests share (S3, GCS, HTTP): the sample corpus put in a bucket,
every partition of a source read, and the digests of a run directory's data files."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

from gpupipe.runner.sources import make_source
from gpupipe.spec import InputSpec
from tests.conftest import REPO

SAMPLE = sorted((REPO / "data" / "sample").glob("*.jsonl.gz"))
WARC = REPO / "data" / "web" / "docs-crawl.warc.gz"


def fill_corpus(fs) -> None:
    """A ``corpus`` bucket on ``fs`` (an fsspec filesystem) with the sample JSONL files under
    ``sample/`` and the WARC crawl under ``crawl/``."""
    fs.mkdir("corpus")
    for f in SAMPLE:
        fs.put_file(str(f), f"corpus/sample/{f.name}")
    fs.put_file(str(WARC), f"corpus/crawl/{WARC.name}")


def frames(spec: InputSpec):
    """(the `ReadResult` of every partition, the source) of an input."""
    src = make_source(spec)
    return [src.read(i) for i in range(src.npartitions)], src


def digests(files: dict[str, bytes]) -> dict[str, str]:
    """sha256 of the data, shards, audit and index files of a run (by relative path)."""
    keep = (".parquet", ".bin", ".idx", ".npy")
    return {rel: hashlib.sha256(b).hexdigest() for rel, b in sorted(files.items())
            if rel.split("/", 1)[0] in ("data", "shards", "dedup") and rel.endswith(keep)}


def run_cli(spec: dict, path, url: str) -> None:
    """``gpupipe run`` (one worker) of ``spec`` written to ``path``, whose run directory is on
    ``url``: it succeeds and says where the remote copy is."""
    path.write_text(json.dumps(spec))
    r = subprocess.run([os.path.join(os.path.dirname(sys.executable), "gpupipe"), "run",
                        str(path), "-w", "1", "--no-progress"], cwd=REPO, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"remote: {url}" in r.stdout


def local_files(root) -> dict[str, bytes]:
    """Every file of a local run directory but the hidden ones, by relative path."""
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*")
            if p.is_file() and not p.name.startswith(".")}
