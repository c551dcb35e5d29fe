"""The canonical partition: a dataframe with string columns ``id`` and ``text`` (plus columns stages
add). This module is where pandas <-> Arrow conversions live, so stages stay columnar and dtypes
are the same at every stage boundary (Dask's ``string[pyarrow]``, missing values as ``pd.NA``).
The pandas half of the backend seam builds on it (`gpupipe.backends.pandas`)."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

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
    """A partition's Arrow table as every backend writes it: strings as ``large_string``, lists
    with Arrow's default element field (``item``, nullable: cuDF names its own), no schema
    metadata. The same rows give the same table, hence the same Parquet bytes, whether they
    come from pandas or cuDF."""
    fields = [pa.field(f.name, pa.large_string()) if pa.types.is_string(f.type) else
              pa.field(f.name, pa.list_(f.type.value_type)) if pa.types.is_list(f.type) else
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
