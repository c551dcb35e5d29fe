"""The dataframe backend: pandas + pyarrow (default) or cuDF.

This is the only module that may import cudf / dask_cudf / dask_cuda / kvikio / cupy, and only
lazily. ``import cudf`` succeeding proves nothing (it imports on machines without a GPU and fails
at first use), so a GPU counts as usable only after a small computation ran on it.
"""

from __future__ import annotations

import dataclasses
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
        return BackendChoice("cudf", "requested")
    if usable:
        return BackendChoice("cudf", f"auto: {why}")
    return BackendChoice("pandas", f"auto: no usable GPU ({why})")


# --------------------------------------------------------------------------- moving partitions

def to_backend(frame, name: str):
    """``frame`` (pandas or cuDF) on backend ``name``; unchanged when it is there already. The
    runner calls this before every stage, so a stage without a native path for the run's
    backend gets a pandas partition, and the next native stage gets it back on the device."""
    from gpupipe import seam

    if name == "pandas":
        return seam.to_host(frame)
    if name != "cudf":
        raise ValueError(f"unknown backend {name!r}")
    import cudf  # noqa: PLC0415

    if isinstance(frame, cudf.DataFrame):
        return frame
    return cudf.DataFrame.from_arrow(seam.arrow_table(frame))


def read_partition(source, i: int, backend: str):
    """`ReadResult` of partition ``i`` with its frame on ``backend``. On cuDF, a Parquet file
    whose columns are plain strings without nulls is decoded on the GPU (`cudf.read_parquet`,
    through KvikIO); anything else, and every JSON Lines file, is read by the host reader, which
    counts and sets aside bad records with their file and line, and is then copied over."""
    if backend == "cudf":
        from gpupipe.io.parquet import ParquetSource

        if isinstance(source, ParquetSource):
            result = _read_parquet_on_gpu(source, i)
            if result is not None:
                return result
    result = source.read(i)
    if backend == "pandas":
        return result
    return dataclasses.replace(result, frame=to_backend(result.frame, backend))


def meta_on(meta, backend: str):
    """An empty frame (Dask ``meta``) of ``backend``: it decides which collection Dask builds
    (a pandas one or a dask_cudf one)."""
    return to_backend(meta, backend)


def _read_parquet_on_gpu(source, i: int):
    """The GPU fast path of `ParquetSource.read`, or None where the host reader must decide."""
    import os

    import cudf  # noqa: PLC0415
    import pyarrow as pa
    import pyarrow.parquet as pq

    from gpupipe.frame import ID, TEXT
    from gpupipe.io.source import ReadResult

    path = source.files[i]
    try:
        schema = pq.read_schema(path)
    except Exception:  # the host reader names the corrupt file
        return None
    wanted = source.wanted_columns()
    strings = [source.text_column, *([source.id_column] if source.id_column else [])]
    if any(c not in schema.names for c in wanted) or not all(
            pa.types.is_string(schema.field(c).type) or pa.types.is_large_string(
                schema.field(c).type) for c in strings):
        return None
    try:  # pandas metadata off: an id column saved as the pandas index stays a column
        table = cudf.read_parquet(path, columns=wanted, use_pandas_metadata=False)
    except Exception:  # corrupt pages: the host reader sets the file aside or stops the run
        return None
    if any(table[c].isna().any() for c in strings):
        return None  # the host reader sets the rows aside with their row numbers
    if source.id_column is None:
        ids = cudf.Series.from_arrow(source.derived_ids(path, len(table)))
    else:
        ids = table[source.id_column]
    frame = cudf.DataFrame({ID: ids.reset_index(drop=True),
                            TEXT: table[source.text_column].reset_index(drop=True)})
    for c in source.columns:
        frame[c] = table[c].reset_index(drop=True)
    text_bytes = int(frame[TEXT].str.byte_count().sum()) if len(frame) else 0
    stats = {"files": 1, "compressed_bytes": os.path.getsize(path), "bytes": text_bytes,
             "files_corrupt": 0, "blank_lines": 0, "text_bytes": text_bytes, "docs": len(frame)}
    return ReadResult(frame, stats, {}, None)


# --------------------------------------------------------------------------- the cuDF half of the seam

@functools.cache  # each seam operation asks once (dask's lazy registration is per Dispatch)
def register_cudf_seam() -> None:
    """Register the cuDF implementations of `gpupipe.seam`'s operations (called by the seam the
    first time it meets a cuDF object). Kernels read the string column's device buffers in
    place; results come back as numpy arrays and are applied with cuDF's own operations."""
    import cudf  # noqa: PLC0415
    import numpy as np
    import pyarrow as pa

    from gpupipe import seam

    @seam.text_buffers.register(cudf.Series)
    def _text_buffers(series):
        from gpupipe.kernels.gpu import column_buffers

        return column_buffers(series)

    @seam.kernels_for.register((cudf.DataFrame, cudf.Series))
    def _kernels_for(obj):
        from gpupipe.kernels import gpu

        return gpu

    @seam.string_column.register(cudf.Series)
    def _string_column(like, offsets, data, keep=None):
        new = cudf.Series.from_arrow(pa.LargeStringArray.from_buffers(
            len(like), pa.py_buffer(offsets), pa.py_buffer(data)))
        new.index = like.index
        if keep is not None and not keep.all():
            new = new.where(cudf.Series(keep, index=like.index), like)
        return new

    @seam.label_column.register((cudf.DataFrame, cudf.Series))
    def _label_column(like, codes, labels):
        table = pa.array([None, *labels], type=pa.large_string())
        out = cudf.Series.from_arrow(table.take(pa.array(codes.astype("int32"))))
        out.index = like.index
        return out

    @seam.filter_rows.register(cudf.DataFrame)
    def _filter_rows(frame, keep):
        return frame[np.asarray(keep, dtype=bool)].reset_index(drop=True)

    @seam.arrow_table.register(cudf.DataFrame)
    def _arrow_table(frame):
        from gpupipe.frame import canonical_arrow

        return canonical_arrow(frame.to_arrow(preserve_index=False))

    @seam.byte_size.register(cudf.Series)
    def _byte_size(series):
        return int(series.str.byte_count().sum()) if len(series) else 0

    @seam.to_host.register(cudf.DataFrame)
    def _to_host(frame):
        from gpupipe.frame import from_arrow

        return from_arrow(_arrow_table(frame))

    @seam.take_text.register(cudf.Series)
    def _take_text(series, rows):
        return series.take(np.asarray(rows, dtype=np.int64)).to_arrow().cast(
            pa.large_string())

    @seam.like.register((cudf.DataFrame, cudf.Series))
    def _like(like, frame):
        out = cudf.DataFrame.from_arrow(seam.arrow_table(frame))
        if len(out) == len(like):
            out.index = like.index
        return out


# --------------------------------------------------------------------------- GPU clusters

UCX_INSTALL = "pip install 'gpupipe[gpu]' (distributed-ucxx-cu12 provides protocol: ucx)"


def device_memory_bytes() -> int | None:
    """Total memory of the first visible GPU (NVML), or None when there is none."""
    try:
        import pynvml  # noqa: PLC0415  (nvidia-ml-py, a dask-cuda dependency)

        pynvml.nvmlInit()
        try:
            if pynvml.nvmlDeviceGetCount() == 0:
                return None
            return int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).total)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML library, no driver, no device
        return None


def local_cuda_cluster(**kwargs):
    """A `dask_cuda.LocalCUDACluster`, or a `ClusterError` saying what is missing."""
    from gpupipe.errors import ClusterError

    if importlib.util.find_spec("dask_cuda") is None:
        raise ClusterError(f"cluster.kind: cuda needs dask-cuda, which is not installed: "
                           f"{GPU_INSTALL}; or use cluster.kind: local (CPU)")
    if kwargs.get("protocol") == "ucx" and importlib.util.find_spec("distributed_ucxx") is None:
        raise ClusterError(f"cluster.protocol: ucx needs the UCX communication backend "
                           f"(distributed-ucxx), which is not installed: {UCX_INSTALL}; "
                           f"or set protocol: tcp")
    if device_memory_bytes() is None:
        raise ClusterError("cluster.kind: cuda, but no NVIDIA GPU is visible here (NVML found "
                           "no device; check `nvidia-smi`, CUDA_VISIBLE_DEVICES and, in a "
                           "container, --gpus all); or use cluster.kind: local")
    from dask_cuda import LocalCUDACluster  # noqa: PLC0415

    try:
        return LocalCUDACluster(**kwargs)
    except Exception as e:
        raise ClusterError(f"cannot start a LocalCUDACluster: {type(e).__name__}: {e}") from e


def apply_kvikio_settings(env: dict[str, str]) -> dict[str, str]:
    """Run on a worker: export KVIKIO_* settings (read when KvikIO starts) and, if KvikIO is
    already loaded in this process, apply them to it too. Returns what the worker now has."""
    import os
    import sys

    os.environ.update(env)
    names = {"KVIKIO_COMPAT_MODE": "compat_mode", "KVIKIO_NTHREADS": "num_threads",
             "KVIKIO_TASK_SIZE": "task_size"}
    # connect() passes the whole extra worker environment: only KVIKIO_* keys concern KvikIO
    values = {names[k]: (v if k == "KVIKIO_COMPAT_MODE" else int(v))
              for k, v in env.items() if k in names}
    kvikio = sys.modules.get("kvikio")
    if kvikio is not None and values:
        try:
            import importlib  # noqa: PLC0415

            defaults = importlib.import_module("kvikio.defaults")  # a submodule: import it
            if "compat_mode" in values:  # KvikIO 26.10 takes its enum, not the string
                values["compat_mode"] = kvikio.CompatMode[values["compat_mode"]]
            defaults.set(values)
        except Exception as e:  # an older KvikIO: the variables apply to new processes only
            log.warning("KvikIO is already loaded and did not accept %s (%s); the settings "
                        "apply to worker processes started from now on", values, e)
    return {k: os.environ[k] for k in env}


# --------------------------------------------------------------------------- GPU reads (io-bench)

def kvikio_read_files(paths: list[str]) -> int:
    """Read every file into GPU memory with KvikIO; bytes read."""
    import os

    import cupy  # noqa: PLC0415
    import kvikio  # noqa: PLC0415

    total = 0
    for p in paths:
        buf = cupy.empty(os.path.getsize(p), dtype=cupy.uint8)
        with kvikio.CuFile(p, "r") as f:
            total += f.read(buf)
    return total


def cudf_read_parquet_files(paths: list[str]) -> int:
    """Decode every Parquet file with cuDF; bytes of the files."""
    import os

    import cudf  # noqa: PLC0415

    total = 0
    for p in paths:
        cudf.read_parquet(p)
        total += os.path.getsize(p)
    return total
