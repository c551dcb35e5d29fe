"""The cuDF half of the backend: every cuDF / dask_cudf / pylibcudf / KvikIO call of gpupipe.

Nothing here runs before a cuDF partition exists: `gpupipe.backends` registers `register` as
the lazy cuDF hook of the seam (`gpupipe.backends.dispatch`), and the readers and the runner
import this module only on the cuDF backend. ``import cudf`` succeeding proves nothing (it
imports on machines without a GPU and fails at first use): `probe_computation` is what the
runner's probe runs.

Kernels read a string column's device buffers in place (`column_buffers`); their results come
back as numpy arrays and are applied with cuDF's own operations.
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa

from gpupipe.backends import dispatch


def probe_computation() -> int:
    """A tiny cuDF computation (6 when the GPU works); raises where cuDF cannot run."""
    import cudf

    return int(cudf.Series([1, 2, 3]).sum())


# --------------------------------------------------------------------------- the seam

@functools.cache  # each seam operation asks once (dask's lazy registration is per Dispatch)
def register() -> None:
    """Register the cuDF implementations of the seam's operations (called by the seam the first
    time it meets a cuDF object)."""
    import cudf

    @dispatch.text_buffers.register(cudf.Series)
    def _text_buffers(series):
        return column_buffers(series)

    @dispatch.kernels_for.register((cudf.DataFrame, cudf.Series))
    def _kernels_for(obj):
        from gpupipe.kernels import gpu

        return gpu

    @dispatch.string_column.register(cudf.Series)
    def _string_column(like, offsets, data, keep=None):
        new = cudf.Series.from_arrow(pa.LargeStringArray.from_buffers(
            len(like), pa.py_buffer(offsets), pa.py_buffer(data)))
        new.index = like.index
        if keep is not None and not keep.all():
            new = new.where(cudf.Series(keep, index=like.index), like)
        return new

    @dispatch.label_column.register((cudf.DataFrame, cudf.Series))
    def _label_column(like, codes, labels):
        table = pa.array([None, *labels], type=pa.large_string())
        out = cudf.Series.from_arrow(table.take(pa.array(codes.astype("int32"))))
        out.index = like.index
        return out

    @dispatch.filter_rows.register(cudf.DataFrame)
    def _filter_rows(frame, keep):
        return frame[np.asarray(keep, dtype=bool)].reset_index(drop=True)

    @dispatch.arrow_table.register(cudf.DataFrame)
    def _arrow_table(frame):
        from gpupipe.frame import canonical_arrow

        return canonical_arrow(frame.to_arrow(preserve_index=False))

    @dispatch.byte_size.register(cudf.Series)
    def _byte_size(series):
        return int(series.str.byte_count().sum()) if len(series) else 0

    @dispatch.to_host.register(cudf.DataFrame)
    def _to_host(frame):
        from gpupipe.frame import from_arrow

        return from_arrow(_arrow_table(frame))

    @dispatch.take_text.register(cudf.Series)
    def _take_text(series, rows):
        return series.take(np.asarray(rows, dtype=np.int64)).to_arrow().cast(
            pa.large_string())

    @dispatch.like.register((cudf.DataFrame, cudf.Series))
    def _like(like, frame):
        out = cudf.DataFrame.from_arrow(dispatch.arrow_table(frame))
        if len(out) == len(like):
            out.index = like.index
        return out


def column_buffers(series):
    """``(offsets, chars)`` device arrays of a cuDF string Series, zero-copy: the offsets child
    (int32, or int64 for large strings) and the character data, honouring the column's offset
    (cuDF 26.10: ``Series.to_pylibcudf() -> (pylibcudf.Column, metadata)``).

    The buffers are first marked exposed (``access(scope="external")``): with cuDF spilling on,
    a buffer could otherwise be on the host, or be moved there while a kernel reads it. An empty
    column may have no offsets child at all (libcudf), so it gets a one-entry offsets array."""
    from numba import cuda

    with series._column.access(mode="read", scope="external"):
        col, _ = series.to_pylibcudf()
    if col.size() == 0 or col.num_children() == 0:
        return cuda.to_device(np.zeros(1, np.int32)), cuda.device_array(1, np.uint8)
    child = col.child(0)
    wide = child.type().id().name == "INT64"
    start = child.offset() + col.offset()
    offsets = cuda.as_cuda_array(child.data()).view(np.int64 if wide else np.int32)
    offsets = offsets[start: start + col.size() + 1]
    data = col.data()
    chars = cuda.as_cuda_array(data).view(np.uint8) if data is not None and data.nbytes else \
        cuda.device_array(1, np.uint8)
    return offsets, chars


# --------------------------------------------------------------------------- frames

def from_host(frame):
    """A cuDF copy of a pandas partition (a cuDF one is returned as it is)."""
    import cudf

    if isinstance(frame, cudf.DataFrame):
        return frame
    return cudf.DataFrame.from_arrow(dispatch.arrow_table(frame))


def read_parquet(path: str, columns: list[str], not_null: list[str]) -> dict | None:
    """The ``columns`` of a Parquet file decoded on the GPU (through KvikIO) as cuDF Series, or
    None where the host reader must decide: pages cuDF cannot decode, or a null in one of the
    ``not_null`` columns (the host reader names those rows)."""
    import cudf

    try:  # pandas metadata off: an id column saved as the pandas index stays a column
        table = cudf.read_parquet(path, columns=columns, use_pandas_metadata=False)
    except Exception:  # corrupt pages: the host reader sets the file aside or stops the run
        return None
    if any(table[c].isna().any() for c in not_null):
        return None
    return {c: table[c].reset_index(drop=True) for c in columns}


def frame(columns: dict):
    """A cuDF partition from cuDF Series or host Arrow arrays (copied over), in that order."""
    import cudf

    return cudf.DataFrame({name: col if isinstance(col, cudf.Series) else
                           cudf.Series.from_arrow(col) for name, col in columns.items()})


# --------------------------------------------------------------------------- GPU reads (io-bench)

def kvikio_read_files(paths: list[str]) -> int:
    """Read every file into GPU memory with KvikIO; bytes read."""
    import os

    import cupy
    import kvikio

    total = 0
    for p in paths:
        buf = cupy.empty(os.path.getsize(p), dtype=cupy.uint8)
        with kvikio.CuFile(p, "r") as f:
            total += f.read(buf)
    return total


def cudf_read_parquet_files(paths: list[str]) -> int:
    """Decode every Parquet file with cuDF; bytes of the files."""
    import os

    import cudf

    total = 0
    for p in paths:
        cudf.read_parquet(p)
        total += os.path.getsize(p)
    return total
