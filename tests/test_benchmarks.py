"""The benchmark scripts run (small scale): a broken benchmark is a broken deliverable."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


@pytest.mark.parametrize("script, args, key, exact", [
    # the quickstart pipeline keeps 1,660 of the 1,808 sample documents
    ("bench_quickstart.py", ["--scale", "1"], "end_to_end", {"docs_out": 1660}),
    # 3 train + 2 valid + 1 test shards of the bench's split
    ("bench_shards.py", ["--scale", "1"], "pipeline_on_dask", {"shards": 6}),
    # 1,612 documents after the bench's length filter, 50 planted copies of which 27 removed
    ("bench_dedup.py", ["--near", "50", "--scales", "1", "--memory-scales", "1"],
     "end_to_end_1x.gpupipe_verify_signature",
     {"removed": 27, "recall_above_threshold": "21/24"}),
    ("bench_filters.py", ["--scale", "1"], "filters.gopher_quality", {}),
])
def test_benchmark_script_runs(script, args, key, exact):
    """Each script runs at small scale and measures the documents it claims to: the counts it
    reports are exact (a benchmark of the wrong work would change them)."""
    r = subprocess.run([sys.executable, f"benchmarks/{script}", *args, "--workers", "1"],
                       capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stderr[-2000:]
    full = json.loads(r.stdout)
    report = full
    for part in key.split("."):
        report = report[part]
    assert {k: report[k] for k in exact} == exact
    if script == "bench_filters.py":
        assert full["documents"] == 1808 and report["docs"] == 1808
        assert report["gpupipe"]["docs_per_s"] > 0
        if full["datatrove"]:   # the peer is optional: when it ran, on the same documents
            assert 0.99 <= report["agreement"] <= 1.0 and report["ratio"] > 0
    if script == "bench_dedup.py":
        assert full["docs"] == 1612 and full["planted_near"] == 50


def test_bench_startup_runs():
    """bench_startup.py times whole runs in new processes; `import gpupipe` loads none of the
    heavy libraries, and both start methods run the pipeline."""
    r = subprocess.run([sys.executable, "benchmarks/bench_startup.py", "--repeat", "1",
                        "--workers", "1"], capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stderr[-2000:]
    full = json.loads(r.stdout)
    assert full["import_gpupipe_loads"] == "[]"
    assert (full["workers"], full["repeat"]) == (1, 1)
    assert all(full[k] > 0 for k in ("run_forkserver", "run_spawn", "bare_dask_spawn"))


def test_bench_gpu_runs_in_the_simulator():
    """bench_gpu.py is for a GPU machine; the simulator shows the script itself works."""
    import os

    pytest.importorskip("numba_cuda")
    r = subprocess.run([sys.executable, "benchmarks/bench_gpu.py", "--scale", "1", "--sample",
                        "4", "--max-doc-bytes", "120", "--repeat", "1"],
                       capture_output=True, text=True, timeout=400,
                       env={**os.environ, "NUMBA_ENABLE_CUDASIM": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads(r.stdout)
    assert report["documents"] == 4
    assert {k: v["mismatches"] for k, v in report["kernels"].items()} == {
        "count_chars_words": 0, "normalize_quick_check": 0, "text_cleanup": 0, "substrings": 0,
        "word_tokens": 0, "gopher_quality": 0,
        "gopher_repetition": 0, "fineweb_quality": 0, "c4_quality": 0, "xxh64": 0,
        "minhash_chars": 0, "minhash_words": 0, "language_id": 0,
        "langid_prepare_check": 0, "pii_prefilter": 0, "decontamination": 0,
        "span_units": 0, "span_cut": 0, "bpe": 0}
    assert report["gopher_pair"]["target_gpu_gb_per_s"] == 1.0
    tok = report["tokenize"]   # the stage's device path on the 4 documents, against HF
    assert tok["docs_with_other_ids"] == 0 and tok["tokens"] == 97   # HF: 97 ids
    assert tok["engine"].startswith("gpupipe (byte-level BPE, gpt2 pre-tokenizer")


def test_bench_gpu_pipeline_mode_runs_the_pandas_half_here():
    """`bench_gpu.py --pipeline` on a machine without a GPU: the pandas run with its per-stage
    figures, and the cuDF run reported as skipped (on a GPU machine it runs both)."""
    from gpupipe.runner.cluster import probe_gpu

    if probe_gpu()[0]:
        pytest.skip("a GPU works here: the cuDF half runs too (the gpu tests cover it)")
    r = subprocess.run([sys.executable, "benchmarks/bench_gpu.py", "--pipeline",
                        "pipelines/quickstart.yaml", "--scale", "1", "--workers", "1"],
                       capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads(r.stdout)
    stages = report["runs"]["pandas"]["stages"]
    assert list(stages) == ["0:normalize_text", "1:length_filter", "2:tokenize"]
    assert {s["backend"] for s in stages.values()} == {"pandas"}
    assert report["runs"]["pandas"]["docs_out"] == 1660
    assert report["runs"]["cudf"]["skipped"].startswith("no usable GPU")


def test_bench_warc_and_storage_run():
    """bench_warc.py and bench_storage.py at their smallest: the documents they measure are
    the crawl's 113 pages and the sample's 1,808 documents, and MDS reads back whole."""
    from tests.io.s3_server import available

    if not available():
        pytest.skip("the S3 test server is not installed (make .venv-moto/.installed)")
    r = subprocess.run([sys.executable, "benchmarks/bench_warc.py", "--copies", "1",
                        "--workers", "1", "--trafilatura-docs", "10",
                        "--datatrove-python", "/nonexistent"],
                       capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stderr[-2000:]
    warc = json.loads(r.stdout)
    assert (warc["docs"], warc["read"]["records"], warc["datatrove"]) == (113, 349, None)
    assert warc["gpupipe"]["resiliparse"]["per_core_vs_extractor"] > 0
    r = subprocess.run([sys.executable, "benchmarks/bench_storage.py", "--scale", "1",
                        "--repeat", "1"], capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stderr[-2000:]
    storage = json.loads(r.stdout)
    assert storage["s3_read"]["docs"] == [1808, 1808]
    assert storage["s3_write"]["upload"]["files"] == 27   # the run directory, every file
    assert storage["mds_write"]["read_back"] == {"sequences": 1808, "equal": 1808}
