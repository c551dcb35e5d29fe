"""The benchmark scripts run (small scale): a broken benchmark is a broken deliverable."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


@pytest.mark.parametrize("script, key", [("bench_quickstart.py", "end_to_end"),
                                         ("bench_shards.py", "pipeline_on_dask")])
def test_benchmark_script_runs(script, key):
    r = subprocess.run([sys.executable, f"benchmarks/{script}", "--scale", "1", "--workers", "1"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads(r.stdout)
    assert report[key]["seconds"] > 0
