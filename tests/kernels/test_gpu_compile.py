"""Layer 1 of the GPU checks: every CUDA kernel compiles to PTX for sm_80 and sm_90 (numba-cuda's
NVVM; no GPU needed), through the CLI a user runs."""

from __future__ import annotations

import re

import numpy as np
import pytest

from gpupipe.cli import main

pytest.importorskip("numba_cuda")

KERNELS = {"_count_chars_kernel", "_count_words_kernel", "_needs_normalization_kernel", "_count_tokens_kernel",
           "_gopher_quality_kernel", "_gopher_repetition_kernel", "_fineweb_kernel",
           "_c4_kernel", "_xxh64_kernel", "_minhash_kernel", "_minhash_ngrams_kernel",
           "_langid_kernel", "_clean_kernel", "_langid_prepare_kernel",
           "_count_substrings_kernel", "_pii_kernel", "_contamination_kernel",
           "_span_units_kernel", "_cut_units_kernel", "_bpe_kernel"}


def test_every_kernel_compiles_for_sm80_and_sm90(capsys):
    assert main(["check-gpu", "--compile-only", "--arch", "sm_80,sm_90"]) == 0
    out = capsys.readouterr().out
    compiled = set(re.findall(r"^\s+(_\w+_kernel)\s+sm_(?:80|90)\s", out, re.M))
    assert compiled == KERNELS
    for arch in ("sm_80", "sm_90"):
        assert len(re.findall(rf"^\s+_\w+_kernel\s+{arch}\s", out, re.M)) >= len(KERNELS)
    assert f"ok: {len(KERNELS)} CUDA kernels compile for sm_80, sm_90" in out


def test_langid_ptx_has_no_fused_multiply_add():
    """The scores stay bit-identical to the CPU's only if no product is fused with its add."""
    from gpupipe.kernels.gpu import _langid_kernel, kernel_ptx

    ptxs = kernel_ptx(_langid_kernel, "sm_90")
    assert len(ptxs) == 2   # int64 offsets (host Arrow arrays) and int32 (cuDF columns)
    for ptx in ptxs:
        assert "fma.rn.f32" not in ptx and "mul.f32" not in ptx  # only mul.rn.f32, never fused
        assert "mul.rn.f32" in ptx


def test_the_declared_types_are_those_the_launchers_pass():
    """`compile_ptx` compiles the argument types declared beside each kernel; a launcher that
    passed other types would run a specialization CI never compiled. Every launch of every
    check on the synthetic sample is recorded and must match a declared variant."""
    from numba import typeof

    from gpupipe.kernels import gpu
    from gpupipe.kernels.checks import CHECKS, synthetic_sample

    declared = {k.py_func.__name__: {s for sig in sigs for s in gpu._expand(sig)}
                for k, sigs in gpu.KERNELS}
    seen: dict[str, set] = {}

    def record(kernel, n, *args):   # types only: nothing is launched
        seen.setdefault(kernel.py_func.__name__, set()).add(tuple(typeof(a) for a in args))

    sample = synthetic_sample()
    real = gpu._launch, gpu.to_device, gpu._zeros, gpu._empty, gpu._fold_on_device
    try:
        gpu._launch = record
        gpu.to_device = lambda x: np.array(x)   # a device copy is writable and contiguous
        gpu._zeros, gpu._empty = np.zeros, np.empty
        gpu._fold_on_device = lambda: gpu.contamination.fold_table()
        for check in CHECKS:
            check.gpu(sample)
    finally:
        gpu._launch, gpu.to_device, gpu._zeros, gpu._empty, gpu._fold_on_device = real
    assert set(seen) == set(declared) == KERNELS
    for name, sigs in seen.items():
        assert sigs <= declared[name], (name, sigs - declared[name])


def test_bad_architecture_is_a_spec_error(capsys):
    assert main(["check-gpu", "--compile-only", "--arch", "ampere"]) == 2
    assert "--arch" in capsys.readouterr().err
