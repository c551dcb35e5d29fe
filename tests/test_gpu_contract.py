"""The API contract with the GPU packages: every name and keyword gpupipe uses exists in the
installed cuDF 26.10 / dask-cuda / KvikIO (runs wherever ``.[gpu]`` is installed, GPU or not:
``make check-gpu-api``), and the list of those names is complete (runs everywhere)."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
from pathlib import Path

import pytest

from tests.gpu_contract import CALLS, MODULES

GPUPIPE = Path(__file__).resolve().parent.parent / "gpupipe"


def _uses_in_source() -> set[tuple[str, str]]:
    """``(module, attribute)`` for every ``module.attr`` (and ``from module import attr``) in
    gpupipe, where ``module`` is one of `MODULES`."""
    found = set()
    for path in GPUPIPE.rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in MODULES:
                found.add((node.value.id, node.attr))
            elif isinstance(node, ast.ImportFrom) and node.module in MODULES:
                found.update((node.module, a.name) for a in node.names)
    return found


def test_every_gpu_name_in_the_code_is_in_the_contract():
    listed = {(mod, attr.split(".")[0]) for mod, attr, _, _ in CALLS}
    used = _uses_in_source()
    assert ("cudf", "read_parquet") in used  # the scan sees the code
    assert sorted(used - listed) == []


def test_the_cluster_keywords_come_from_the_spec_mapping():
    """Every keyword `cuda_cluster_kwargs` can produce, for the checks below."""
    assert set(_cluster_keywords()) >= {"protocol", "rmm_pool_size", "enable_infiniband",
                                        "enable_cudf_spill", "CUDA_VISIBLE_DEVICES", "env"}


def _cluster_keywords() -> list[str]:
    import gpupipe as gp
    from gpupipe.runner.cluster import cuda_cluster_kwargs

    full = gp.Pipeline(input="data/sample", output="out/x", cluster={
        "kind": "cuda", "protocol": "ucx", "interface": "ib0", "enable_infiniband": True,
        "enable_nvlink": True, "enable_rdmacm": True, "rmm_pool_size": "8GB",
        "device_memory_limit": 0.8, "devices": [0, 1]}).cluster
    return sorted(cuda_cluster_kwargs(full, workers=2, env={"A": "1"}))


def _resolve(module: str, dotted: str):
    obj = importlib.import_module(module)
    for part in dotted.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:  # a submodule not imported by its package (kvikio.defaults)
            obj = importlib.import_module(f"{obj.__name__}.{part}")
    return obj


def _accepts(obj, keywords) -> list[str]:
    """Keywords ``obj`` does not accept (none when it takes ``**kwargs`` or has no signature)."""
    try:
        params = inspect.signature(obj).parameters
    except (TypeError, ValueError):  # Cython methods without a signature: existence is checked
        return []
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return []
    return [k for k in keywords if k not in params]


@pytest.mark.skipif(importlib.util.find_spec("cudf") is None,
                    reason="cuDF is not installed (make check-gpu-api installs it in a venv)")
@pytest.mark.parametrize("module,dotted,keywords,why", CALLS,
                         ids=[f"{m}.{d}" for m, d, _, _ in CALLS])
def test_the_installed_gpu_packages_have_what_gpupipe_calls(module, dotted, keywords, why):
    obj = _resolve(module, dotted)
    assert _accepts(obj, keywords) == [], f"{module}.{dotted} ({why})"


@pytest.mark.skipif(importlib.util.find_spec("dask_cuda") is None, reason="no dask-cuda")
def test_local_cuda_cluster_takes_every_keyword_the_spec_produces():
    from dask_cuda import LocalCUDACluster

    params = inspect.signature(LocalCUDACluster.__init__).parameters
    # **kwargs go to distributed.LocalCluster, and from there to every worker's Nanny
    from distributed import LocalCluster, Nanny

    local = {**inspect.signature(LocalCluster.__init__).parameters,
             **inspect.signature(Nanny.__init__).parameters}
    missing = [k for k in _cluster_keywords() if k not in params and k not in local]
    assert missing == []
    # removed in dask-cuda 26.06: gpupipe must not pass them
    assert "jit_unspill" not in params and "enable_jit_unspill" not in _cluster_keywords()


@pytest.mark.skipif(importlib.util.find_spec("dask_cudf") is None, reason="no dask_cudf")
def test_dask_builds_cudf_collections_from_cudf_meta():
    """The runner never calls dask_cudf: Dask picks the collection from the partition type of
    ``meta`` (the ``dask.dataframe.backends`` entry point dask_cudf registers), and the Parquet
    engine of ``to_parquet(partition_on=...)`` (dedup losers) from the same ``meta``."""
    from importlib.metadata import entry_points

    import cudf
    from dask.dataframe.dask_expr.io.parquet import _set_parquet_engine, to_parquet
    from dask_cudf.io.parquet import CudfEngine

    assert "cudf" in {ep.name for ep in entry_points(group="dask.dataframe.backends")}
    assert _set_parquet_engine(meta=cudf.DataFrame()) is CudfEngine
    assert _accepts(to_parquet, ["partition_on", "write_index", "compute"]) == []


@pytest.mark.skipif(importlib.util.find_spec("kvikio") is None, reason="no KvikIO")
def test_kvikio_settings_apply_to_a_loaded_kvikio():
    """KvikIO's settings work without a GPU: what a worker that already loaded KvikIO gets."""
    import kvikio.defaults

    from gpupipe.runner.cluster import apply_kvikio_settings

    apply_kvikio_settings({"KVIKIO_COMPAT_MODE": "ON", "KVIKIO_NTHREADS": "3",
                           "KVIKIO_TASK_SIZE": str(8 << 20)})
    assert kvikio.defaults.get("compat_mode") == kvikio.CompatMode.ON
    assert kvikio.defaults.get("num_threads") == 3
    assert kvikio.defaults.get("task_size") == 8 << 20
