"""The dataframe backend: pandas + pyarrow (default) or cuDF.

This is the only module that may import cudf / dask_cudf / dask_cuda / kvikio / cupy, and only
lazily. ``import cudf`` succeeding proves nothing (it imports on machines without a GPU and fails
at first use), so a GPU counts as usable only after a small computation ran on it.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
from dataclasses import dataclass

from gpupipe.errors import BackendUnavailableError

log = logging.getLogger(__name__)

GPU_INSTALL = "pip install 'gpupipe[gpu]'  (RAPIDS 26.10, CUDA 12, an NVIDIA GPU and driver)"


@dataclass(frozen=True)
class BackendChoice:
    name: str  # "pandas" | "cudf"
    reason: str


@functools.lru_cache(maxsize=1)
def probe_gpu() -> tuple[bool, str]:
    """(usable, why) — runs a tiny cuDF computation; cached for the process."""
    if importlib.util.find_spec("cudf") is None:
        return False, "cuDF is not installed"
    try:
        import cudf  # noqa: PLC0415  (lazy on purpose)

        if int(cudf.Series([1, 2, 3]).sum()) != 6:
            return False, "cuDF returned a wrong result on a test computation"
    except Exception as e:  # any failure at first use means no usable GPU
        return False, f"cuDF is installed but cannot run ({type(e).__name__}: {e})"
    return True, "a GPU ran a cuDF test computation"


def resolve_backend(requested: str) -> BackendChoice:
    """Turn ``backend: auto | pandas | cudf`` into the backend this run uses."""
    if requested == "pandas":
        return BackendChoice("pandas", "requested")
    usable, why = probe_gpu()
    if requested == "cudf":
        if not usable:
            raise BackendUnavailableError(
                f"backend: cudf cannot be used here: {why}. Install the GPU extra with "
                f"{GPU_INSTALL}, or set backend: pandas (or auto) to run on CPU."
            )
        raise BackendUnavailableError(
            "backend: cudf — a GPU works here, but this gpupipe version does not execute "
            "stages on cuDF partitions yet; set backend: auto or pandas to run on CPU."
        )
    if usable:
        return BackendChoice("pandas", "auto: GPU found, but cuDF execution is not available "
                                       "in this gpupipe version; using pandas")
    return BackendChoice("pandas", f"auto: no usable GPU ({why})")
