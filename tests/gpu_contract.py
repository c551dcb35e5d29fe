"""Every name and keyword gpupipe uses from the GPU packages (cuDF 26.10, pylibcudf, dask-cuda,
KvikIO, CuPy): the list `tests/test_gpu_contract.py` checks against the installed packages.

``import cudf`` works on a machine without a GPU (it fails only at first use), so the check runs
wherever the ``gpu`` extra is installed: ``make check-gpu-api`` makes such a venv. The list is
kept complete by `test_gpu_contract.test_every_gpu_name_in_the_code_is_in_the_contract`, which
reads gpupipe's source for ``cudf.X`` / ``pylibcudf.X`` / ... and fails on a name missing here.

Each entry: (module, dotted attribute, keywords gpupipe passes by name, why).
Methods called on cuDF objects by the code shared with pandas (the seam, the Filter base class)
are listed too, since no static scan can find them. (The dedup groups are resolved on the host
since the step runner: their pandas calls are no longer part of the contract.)
"""

from __future__ import annotations

CALLS: list[tuple[str, str, tuple[str, ...], str]] = [
    # --- cuDF: construction and conversion (gpupipe/backends/cudf.py)
    ("cudf", "Series", ("index",), "probe_gpu, keep masks"),
    ("cudf", "Series.from_arrow", (), "string_column, label_column, derived ids"),
    ("cudf", "Series.to_pylibcudf", (), "backends.cudf.column_buffers (zero-copy buffers)"),
    ("cudf", "Series.where", (), "string_column (keep=...)"),
    ("cudf", "Series.isna", (), "Parquet GPU reader: nulls go to the host reader"),
    ("cudf", "Series.any", (), "Parquet GPU reader"),
    ("cudf", "Series.sum", (), "probe_gpu, byte_size"),
    ("cudf", "Series.reset_index", ("drop",), "Parquet GPU reader"),
    ("cudf", "Series.index", (), "string_column, label_column"),
    ("cudf", "Series.take", (), "take_text: the rows pii_redact rewrites on the host"),
    ("cudf", "Series.to_arrow", (), "take_text"),
    ("cudf", "DataFrame", (), "Parquet GPU reader"),
    ("cudf", "DataFrame.from_arrow", (), "to_backend, like"),
    ("cudf", "DataFrame.to_arrow", ("preserve_index",), "arrow_table, to_host"),
    ("cudf", "DataFrame.reset_index", ("drop",), "filter_rows"),
    ("cudf", "DataFrame.__getitem__", (), "filter_rows (boolean mask), column access"),
    ("cudf", "DataFrame.assign", (), "Filter annotate mode, keep_rejected"),
    ("cudf", "read_parquet", ("columns", "use_pandas_metadata"), "Parquet GPU reader, io-bench"),
    ("cudf.core.column.column", "ColumnBase.access", (), "column_buffers: mark exposed "
     "(mode=, scope= pass through **kwargs to Buffer.access)"),
    ("cudf.core.buffer.spillable_buffer", "SpillableBufferOwner.mark_exposed", (),
     "what access(scope='external') does: unspill, never spill again"),
    ("cudf.core.accessors.string", "StringMethods.byte_count", (), "byte_size"),
    # --- pylibcudf: the string column's buffers (gpupipe/backends/cudf.py)
    ("pylibcudf", "Column.child", (), "offsets child"),
    ("pylibcudf", "Column.num_children", (), "empty columns have no offsets child"),
    ("pylibcudf", "Column.offset", (), "sliced columns"),
    ("pylibcudf", "Column.size", (), "rows"),
    ("pylibcudf", "Column.data", (), "chars buffer"),
    ("pylibcudf", "Column.type", (), "offsets width"),
    ("pylibcudf", "DataType.id", (), "offsets width"),
    # --- dask-cuda (gpupipe/runner/cluster.py local_cuda_cluster; keywords from cuda_cluster_kwargs)
    ("dask_cuda", "LocalCUDACluster", (), "cluster: {kind: cuda}"),
    # --- KvikIO and CuPy (io.kvikio settings, io-bench)
    ("kvikio", "defaults.set", (), "apply_kvikio_settings (kvikio.defaults is a submodule)"),
    ("kvikio", "CompatMode", (), "apply_kvikio_settings: compat_mode takes the enum"),
    ("kvikio", "CuFile", (), "io-bench kvikio reads"),
    ("kvikio", "CuFile.read", (), "io-bench kvikio reads"),
    ("cupy", "empty", ("dtype",), "io-bench buffers"),
    ("cupy", "uint8", (), "io-bench buffers"),
]

#: modules whose ``module.X`` uses in gpupipe's source must appear in `CALLS`
MODULES = ("cudf", "pylibcudf", "dask_cuda", "dask_cudf", "kvikio", "cupy")
