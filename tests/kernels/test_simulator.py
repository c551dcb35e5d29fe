"""Runs `sim_cases.py` in its own pytest process with the CUDA simulator on, and
``gpupipe check-gpu --simulate`` on the sample corpus."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numba_cuda")

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SIM_ENV = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}


def test_kernels_in_the_cuda_simulator_equal_the_cpu_kernels():
    proc = subprocess.run(
        # no warnings summary: the simulator's wrapping uint arithmetic warns on every hash, and
        # its ~150 lines would push a failure's traceback out of the tail shown below
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:warnings",
         str(HERE / "sim_cases.py")],
        env=SIM_ENV, capture_output=True, text=True, cwd=REPO, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert re.search(r"^5 passed", proc.stdout, re.M), proc.stdout[-2000:]


def test_check_gpu_simulate_on_the_sample_corpus():
    proc = subprocess.run(
        [sys.executable, "-m", "gpupipe.cli", "check-gpu", "--simulate", "--sample", "12",
         "data/sample"], capture_output=True, text=True, cwd=REPO, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = re.findall(r"^(\w+)\s+(\d+)\s+(\d+)\s", proc.stdout, re.M)
    assert len(rows) == 19
    assert all(docs == "12" and bad == "0" for _, docs, bad in rows), proc.stdout


def test_check_gpu_without_a_gpu_says_what_to_do():
    proc = subprocess.run([sys.executable, "-m", "gpupipe.cli", "check-gpu", "data/sample"],
                          capture_output=True, text=True, cwd=REPO, timeout=300,
                          env={k: v for k, v in os.environ.items()
                               if k != "NUMBA_ENABLE_CUDASIM"})
    assert proc.returncode == 2
    assert "no usable GPU" in proc.stderr
    assert "gpupipe[kernels-cu12]" in proc.stderr and "--simulate" in proc.stderr
