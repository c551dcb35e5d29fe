"""The canonical partition: a dataframe with string columns ``id`` and ``text`` (plus columns stages
add). This module is where pandas <-> Arrow conversions live, so stages stay columnar and dtypes
are the same at every stage boundary (Dask's ``string[pyarrow]``, missing values as ``pd.NA``).
It is also the pandas half of the backend seam (`gpupipe.seam`)."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from gpupipe import seam

ID = "id"
TEXT = "text"
STRING = pd.StringDtype("pyarrow")


def _pandas_type(t: pa.DataType):
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return STRING
    if (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
            or pa.types.is_struct(t)):
        return pd.ArrowDtype(t)  # e.g. token lists stay Arrow lists, not object arrays
    return None


def from_arrow(table: pa.Table) -> pd.DataFrame:
    """A pandas partition from an Arrow table, with Arrow-backed ``string`` and list columns."""
    return table.replace_schema_metadata(None).to_pandas(types_mapper=_pandas_type)


def canonical_arrow(table: pa.Table) -> pa.Table:
    """A partition's Arrow table as every backend writes it: strings as ``large_string``, no
    schema metadata. The same rows give the same table, hence the same Parquet bytes, whether
    they come from pandas or cuDF."""
    fields = [pa.field(f.name, pa.large_string()) if pa.types.is_string(f.type) else
              f.remove_metadata() for f in table.schema]
    return table.replace_schema_metadata(None).cast(pa.schema(fields))


def to_arrow(df: pd.DataFrame) -> pa.Table:
    """Arrow table of a partition, without pandas metadata (plain Parquet any tool reads)."""
    return canonical_arrow(pa.Table.from_pandas(df, preserve_index=False))


def empty_frame(extra: dict[str, str] | None = None) -> pd.DataFrame:
    """A zero-row canonical partition (Dask ``meta``)."""
    cols = {ID: pd.Series([], dtype=STRING), TEXT: pd.Series([], dtype=STRING)}
    for name, dtype in (extra or {}).items():
        cols[name] = pd.Series([], dtype=STRING if dtype == "string" else dtype)
    return pd.DataFrame(cols)


def text_array(series: pd.Series) -> pa.Array:
    """The Arrow array behind a string column, as one contiguous ``large_string`` array
    (zero-copy for an Arrow-backed column held in one chunk)."""
    arr = pa.array(series, type=pa.large_string(), from_pandas=True)
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    return arr


def string_series(values: pa.Array | pa.ChunkedArray, index: pd.Index) -> pd.Series:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    return pd.Series(pd.arrays.ArrowStringArray(values), index=index)


def utf8_bytes(series: pd.Series) -> int:
    """Total UTF-8 size of a string column in bytes."""
    if len(series) == 0:
        return 0
    return int(pc.sum(pc.binary_length(text_array(series))).as_py() or 0)


# --------------------------------------------------------------------------- the pandas half

@seam.text_buffers.register(pd.Series)
def _text_buffers(series: pd.Series):
    from gpupipe.kernels.utf8 import utf8_buffers

    return utf8_buffers(text_array(series))


@seam.kernels_for.register((pd.DataFrame, pd.Series))
def _kernels_for(obj):
    from gpupipe.kernels import cpu

    return cpu


@seam.string_column.register(pd.Series)
def _string_column(like: pd.Series, offsets, data, keep=None) -> pd.Series:
    new = pa.LargeStringArray.from_buffers(len(like), pa.py_buffer(offsets), pa.py_buffer(data))
    if keep is not None and not keep.all():
        new = pc.if_else(pa.array(keep), new, text_array(like))
    return string_series(new, like.index)


@seam.label_column.register((pd.DataFrame, pd.Series))
def _label_column(like, codes, labels) -> pd.Series:
    table = pa.array([None, *labels], type=pa.large_string())
    return string_series(table.take(pa.array(codes.astype("int32"))), like.index)


@seam.arrow_table.register(pd.DataFrame)
def _arrow_table(frame: pd.DataFrame) -> pa.Table:
    return to_arrow(frame)


@seam.byte_size.register(pd.Series)
def _byte_size(series: pd.Series) -> int:
    return utf8_bytes(series)


@seam.to_host.register(pd.DataFrame)
def _to_host(frame: pd.DataFrame) -> pd.DataFrame:
    return frame


@seam.like.register((pd.DataFrame, pd.Series))
def _like(like, frame: pd.DataFrame) -> pd.DataFrame:
    if len(frame) == len(like) and not frame.index.equals(like.index):
        return frame.set_axis(like.index)
    return frame


@seam.take_text.register(pd.Series)
def _take_text(series: pd.Series, rows) -> pa.Array:
    return text_array(series).take(pa.array(rows, pa.int64()))


@seam.filter_rows.register(pd.DataFrame)
def _filter_rows(frame: pd.DataFrame, keep) -> pd.DataFrame:
    return frame[keep].reset_index(drop=True)
