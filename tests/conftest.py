"""Shared fixtures: one real `distributed.LocalCluster` for the session, real sample text."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# run by .venv-triton's Python (pytriton needs numpy < 2), never imported by the suite
collect_ignore = ["triton_server.py"]
SAMPLE = REPO / "data" / "sample"
# a `gpupipe server` of the developer's never runs the suite's commands (tests/test_server.py
# starts servers of its own)
os.environ["GPUPIPE_SERVER"] = "off"


@pytest.fixture(scope="session")
def client():
    """A 2-worker process-based local cluster, shared by the tests that run pipelines."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=":0", memory_limit="2GB") as cluster, \
            Client(cluster) as c:
        yield c


@pytest.fixture(scope="session")
def sample_records() -> list[dict]:
    """Every record of the committed sample corpus (real text from Debian documentation)."""
    records = []
    for path in sorted(SAMPLE.glob("*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            records.extend(json.loads(line) for line in f)
    assert len(records) > 1000
    return records


def write_jsonl(path: Path, records: list[dict], *, compress: bool = False) -> Path:
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data, mtime=0) if compress else data)
    return path


@pytest.fixture
def small_corpus(tmp_path, sample_records) -> Path:
    """Three JSONL files (plain, gzip, plain) of real documents, 300 in all."""
    recs = sample_records[:100] + sample_records[-200:]
    d = tmp_path / "in"
    write_jsonl(d / "a.jsonl", recs[:120])
    write_jsonl(d / "b.jsonl.gz", recs[120:250], compress=True)
    write_jsonl(d / "c.jsonl", recs[250:])
    return d


@pytest.fixture(autouse=True)
def _chdir_repo(monkeypatch):
    # pipeline files use paths relative to the repository root, as `make demo` does
    monkeypatch.chdir(REPO)
    os.environ.setdefault("PYTHONHASHSEED", "0")


def pytest_collection_modifyitems(config, items):
    """`gpu` tests run only where a GPU ran a cuDF computation (imports alone prove nothing);
    ``slow`` tests (the fault soak) only when asked for: ``pytest -m slow``."""
    if "slow" not in (config.getoption("-m") or ""):
        slow = pytest.mark.skip(reason="slow: run with `pytest -m slow`")
        for item in items:
            if "slow" in item.keywords:
                item.add_marker(slow)
    if not any("gpu" in item.keywords for item in items):
        return
    from gpupipe.runner.cluster import probe_gpu

    usable, why = probe_gpu()
    if usable:
        return
    skip = pytest.mark.skip(reason=f"no usable GPU: {why}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
