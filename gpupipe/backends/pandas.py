"""The pandas half of the backend seam (`gpupipe.backends.dispatch`): partitions are pandas
frames with Arrow-backed string columns, and kernels read the Arrow buffers in host memory."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from gpupipe.backends import dispatch
from gpupipe.frame import string_series, text_array, to_arrow, utf8_bytes


@dispatch.text_buffers.register(pd.Series)
def _text_buffers(series: pd.Series):
    from gpupipe.kernels.utf8 import utf8_buffers

    return utf8_buffers(text_array(series))


@dispatch.kernels_for.register((pd.DataFrame, pd.Series))
def _kernels_for(obj):
    from gpupipe.kernels import cpu

    return cpu


@dispatch.string_column.register(pd.Series)
def _string_column(like: pd.Series, offsets, data, keep=None) -> pd.Series:
    new = pa.LargeStringArray.from_buffers(len(like), pa.py_buffer(offsets), pa.py_buffer(data))
    if keep is not None and not keep.all():
        new = pc.if_else(pa.array(keep), new, text_array(like))
    return string_series(new, like.index)


@dispatch.label_column.register((pd.DataFrame, pd.Series))
def _label_column(like, codes, labels) -> pd.Series:
    table = pa.array([None, *labels], type=pa.large_string())
    return string_series(table.take(pa.array(codes.astype("int32"))), like.index)


@dispatch.arrow_table.register(pd.DataFrame)
def _arrow_table(frame: pd.DataFrame) -> pa.Table:
    return to_arrow(frame)


@dispatch.byte_size.register(pd.Series)
def _byte_size(series: pd.Series) -> int:
    return utf8_bytes(series)


@dispatch.to_host.register(pd.DataFrame)
def _to_host(frame: pd.DataFrame) -> pd.DataFrame:
    return frame


@dispatch.like.register((pd.DataFrame, pd.Series))
def _like(like, frame: pd.DataFrame) -> pd.DataFrame:
    if len(frame) == len(like) and not frame.index.equals(like.index):
        return frame.set_axis(like.index)
    return frame


@dispatch.take_text.register(pd.Series)
def _take_text(series: pd.Series, rows) -> pa.Array:
    return text_array(series).take(pa.array(rows, pa.int64()))


@dispatch.filter_rows.register(pd.DataFrame)
def _filter_rows(frame: pd.DataFrame, keep) -> pd.DataFrame:
    return frame[keep].reset_index(drop=True)
