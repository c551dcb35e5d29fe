"""Compiling the CPU kernels ahead (`gpupipe.kernels.warm`): the plan spreads them over each
host's workers, a run records what it compiled, and `gpupipe warmup` fills numba's cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import gpupipe as gp
from gpupipe.kernels import aot
from gpupipe.kernels.checks import CHECKS
from gpupipe.kernels.warm import COST, STAGE_KERNELS, kernels_for, plan
from gpupipe.stages import GopherQuality, LengthFilter
from gpupipe.stages.registry import all_stages
from tests.conftest import REPO

BIN = os.path.join(os.path.dirname(sys.executable), "gpupipe")


def test_every_kernel_named_is_a_check_with_a_cost_and_every_stage_exists():
    checks = {c.name for c in CHECKS}
    assert {k for ks in STAGE_KERNELS.values() for k in ks} <= checks
    assert set(COST) == checks
    assert set(STAGE_KERNELS) <= set(all_stages())


def test_the_plan_compiles_each_kernel_once_per_host_longest_first():
    names = kernels_for(["normalize_text", "gopher_quality", "c4_quality", "span_dedup"])
    assert names == ["count_chars_words", "normalize_quick_check", "text_cleanup",
                     "gopher_quality", "c4_quality", "span_units", "span_cut"]
    got = plan(names, {"tcp://a:1": "a", "tcp://a:2": "a", "tcp://b:1": "b"})
    assert got == {
        # 4.6 s, then 2.2 + 1.1 + 0.5 + 0.1 while the other worker has 4.5 + 4.5
        "tcp://a:1": ["text_cleanup", "gopher_quality", "span_cut", "count_chars_words",
                      "normalize_quick_check"],
        "tcp://a:2": ["c4_quality", "span_units"],
        "tcp://b:1": ["text_cleanup", "c4_quality", "span_units", "gopher_quality", "span_cut",
                      "count_chars_words", "normalize_quick_check"],
    }
    assert plan([], {"tcp://a:1": "a"}) == {}


def test_a_run_compiles_ahead_and_records_it(client, tmp_path):
    (tmp_path / "in.jsonl").write_text("".join(
        json.dumps({"text": f"document number {i} has a few words in it."}) + "\n"
        for i in range(20)))
    res = gp.Pipeline(input=str(tmp_path / "in.jsonl"), output=str(tmp_path / "o"),
                      stages=[LengthFilter(min_words=3), GopherQuality()]).run(
                          client=client, progress=False)
    compiled = json.loads((tmp_path / "o" / "run.json").read_text())["compile"]
    assert sorted(compiled["kernels"]) == ["count_chars_words", "gopher_quality"]
    assert compiled["workers"] == 2 and compiled["cpu_seconds"] >= 0
    here = aot.state()    # the workers run as this process does
    assert compiled["code"] == [here.get("why") and f"jit ({here['why']})" or here["kernels"]]
    assert res.stage("length_filter")["docs_out"] == 20


def test_warmup_fills_the_cache_and_refuses_unknown_stages(tmp_path):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"), "GPUPIPE_AOT": "0"}
    r = subprocess.run([BIN, "warmup", "--stages", "length_filter"], env=env, cwd=REPO,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"compiling 1 CPU kernels into {tmp_path / 'cache'}" in r.stdout
    assert "count_chars_words" in r.stdout and "ok: 1 kernels" in r.stdout
    cached = [f for _, _, fs in os.walk(tmp_path / "cache") for f in fs]
    assert any(f.endswith(".nbi") for f in cached) and any(f.endswith(".nbc") for f in cached)
    r = subprocess.run([BIN, "warmup", "--stages", "length_filter,gopher_qualty"], env=env,
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "unknown stage(s) gopher_qualty" in r.stderr


def test_warmup_cuda_without_a_gpu_is_a_clear_error_before_compiling():
    pytest.importorskip("numba_cuda")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    proc = subprocess.run([sys.executable, "-m", "gpupipe.cli", "warmup", "--cuda"], env=env,
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout + proc.stderr
    assert proc.stderr.startswith("error: warmup --cuda: no usable GPU (no CUDA driver")
    assert "run it on the GPU node" in proc.stderr and "--compile-only" in proc.stderr


def test_cuda_kernels_cache_on_disk_keyed_by_every_kernel_source(tmp_path):
    """Each CUDA kernel caches its machine code (numba-cuda's disk cache), and an entry's key
    holds a digest of all of gpupipe.kernels: an edit to a routine in another module (bpe.py
    for `_bpe_kernel`) misses the cache instead of loading a stale kernel."""
    pytest.importorskip("numba_cuda")
    import shutil

    from gpupipe.kernels import gpu

    assert len(gpu.KERNELS) == 20
    assert all(type(k._cache).__name__ == "_SourceKeyedCache" for k, _ in gpu.KERNELS)

    class Codegen:   # what a GPU's code generator tells the key: target and compute capability
        def magic_tuple(self):
            return ("nvptx64-nvidia-cuda", (9, 0), "")

    sig = gpu._expand(gpu.KERNELS[0][1][0])[0]
    key = gpu._bpe_kernel._cache._index_key(tuple(sig), Codegen())
    assert key[-1] == ("gpupipe.kernels", gpu.sources_digest())
    same, edited = tmp_path / "same", tmp_path / "edited"
    for copy in (same, edited):
        shutil.copytree(REPO / "gpupipe" / "kernels", copy,
                        ignore=shutil.ignore_patterns("__py*"))
    with open(edited / "bpe.py", "a") as f:
        f.write("\n# an edit\n")
    assert gpu.sources_digest(str(same)) == gpu.sources_digest()
    assert gpu.sources_digest(str(edited)) != gpu.sources_digest()
