"""The benchmark scripts run (small scale): a broken benchmark is a broken deliverable."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


@pytest.mark.parametrize("script, args, key", [
    ("bench_quickstart.py", ["--scale", "1"], "end_to_end"),
    ("bench_shards.py", ["--scale", "1"], "pipeline_on_dask"),
    ("bench_dedup.py", ["--near", "50", "--memory-scales", "1"], "gpupipe"),
    ("bench_filters.py", ["--scale", "1"], "filters.gopher_quality.gpupipe"),
])
def test_benchmark_script_runs(script, args, key):
    r = subprocess.run([sys.executable, f"benchmarks/{script}", *args, "--workers", "1"],
                       capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads(r.stdout)
    for part in key.split("."):
        report = report[part]
    assert report["seconds"] > 0
