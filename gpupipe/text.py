"""Vectorised text measures shared by stages (Arrow compute kernels, RE2 regular expressions)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Exactly the characters Python's str.split() treats as whitespace, so word counts here equal
# len(text.split()) — the definition users check results against in a notebook.
WHITESPACE_CLASS = (
    r"\t\n\x0b\x0c\r\x1c-\x1f \x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}"
    r"\x{202f}\x{205f}\x{3000}"
)
WORD = f"[^{WHITESPACE_CLASS}]+"


def count_words(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Number of whitespace-separated words per string (== ``len(s.split())``)."""
    from gpupipe.kernels import count_words as kernel

    return kernel(arr)


def count_chars(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Number of Unicode code points per string (== ``len(s)``)."""
    return _to_numpy(pc.utf8_length(arr))


def _to_numpy(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    return values.to_numpy(zero_copy_only=False)
