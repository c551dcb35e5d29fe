"""Vectorised text measures shared by stages (Arrow compute kernels and compiled kernels)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpupipe.kernels import utf8

__all__ = ["count_chars", "count_words"]


def count_words(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Words per string, identical to ``len(s.split())``."""
    return utf8.count_words(*utf8.utf8_buffers(arr))


def count_chars(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Number of Unicode code points per string (== ``len(s)``)."""
    values = pc.utf8_length(arr)
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    return values.to_numpy(zero_copy_only=False)
