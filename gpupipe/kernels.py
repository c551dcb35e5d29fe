"""Compiled CPU kernels (numba) over the UTF-8 buffers of Arrow string arrays.

Each kernel walks the bytes of every string once, without creating Python objects. They work
on ``(offsets, data)`` views of an Arrow (large_)string array, see `utf8_buffers`.
"""

from __future__ import annotations

import functools
import unicodedata

import numba
import numpy as np
import pyarrow as pa


def utf8_buffers(arr: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """Zero-copy ``(offsets int64[n + 1], data uint8[...])`` of a string array."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    if pa.types.is_string(arr.type):
        arr = arr.cast(pa.large_string())
    _, off_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(off_buf, dtype=np.int64)[arr.offset: arr.offset + len(arr) + 1]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(
        0, np.uint8)
    return offsets, data


@numba.njit(inline="always")
def fmix64(k):
    """MurmurHash3's 64-bit finaliser: a bijective mix of all bits of ``k`` (uint64)."""
    k ^= k >> np.uint64(33)
    k *= np.uint64(0xFF51AFD7ED558CCD)
    k ^= k >> np.uint64(33)
    k *= np.uint64(0xC4CEB9FE1A85EC53)
    k ^= k >> np.uint64(33)
    return k


@numba.njit(inline="always")
def _decode(data, i):
    """(code point, byte length) of the UTF-8 character starting at ``data[i]``."""
    b = np.int64(data[i])
    if b < 0x80:
        return b, 1
    if b < 0xE0:
        return ((b & 0x1F) << 6) | (np.int64(data[i + 1]) & 0x3F), 2
    if b < 0xF0:
        return (((b & 0x0F) << 12) | ((np.int64(data[i + 1]) & 0x3F) << 6)
                | (np.int64(data[i + 2]) & 0x3F)), 3
    return (((b & 0x07) << 18) | ((np.int64(data[i + 1]) & 0x3F) << 12)
            | ((np.int64(data[i + 2]) & 0x3F) << 6) | (np.int64(data[i + 3]) & 0x3F)), 4


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _count_words(offsets, data, out):
    # whitespace = exactly what Python's str.split() splits on
    n = data.shape[0]
    for k in range(out.shape[0]):
        i = offsets[k]
        end = offsets[k + 1]
        words = 0
        inword = False
        while i < end:
            b = data[i]
            ws = False
            step = 1
            if b < 0x80:
                ws = b == 32 or (9 <= b and b <= 13) or (28 <= b and b <= 31)
            elif b < 0xE0:
                step = 2
                if b == 0xC2 and i + 1 < n:
                    c = data[i + 1]
                    ws = c == 0x85 or c == 0xA0
            elif b < 0xF0:
                step = 3
                if i + 2 < n:
                    c = data[i + 1]
                    d = data[i + 2]
                    if b == 0xE2:
                        if c == 0x80:
                            ws = d <= 0x8A or d == 0xA8 or d == 0xA9 or d == 0xAF
                        elif c == 0x81:
                            ws = d == 0x9F
                    elif b == 0xE1:
                        ws = c == 0x9A and d == 0x80
                    elif b == 0xE3:
                        ws = c == 0x80 and d == 0x80
            else:
                step = 4
            if ws:
                inword = False
            elif not inword:
                inword = True
                words += 1
            i += step
        out[k] = words
    return out


def count_words(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Words per string, identical to ``len(s.split())``."""
    offsets, data = utf8_buffers(arr)
    return _count_words(offsets, data, np.empty(len(offsets) - 1, dtype=np.int64))


@functools.cache
def stable_table(form: str) -> np.ndarray:
    """``table[cp]`` is True when BMP code point ``cp`` can never change under ``form``,
    whatever surrounds it (quick-check Yes, combining class 0, never the second half of a
    canonical composition). Built once per process from `unicodedata`."""
    seconds = set()
    for cp in range(0x10000):
        dec = unicodedata.decomposition(chr(cp))
        if dec and not dec.startswith("<"):
            parts = dec.split()
            if len(parts) == 2:
                seconds.add(int(parts[1], 16))
    table = np.zeros(0x10000, dtype=np.bool_)
    for cp in range(0x10000):
        if 0xD800 <= cp <= 0xDFFF or 0x1100 <= cp <= 0x11FF or cp in seconds:
            continue  # surrogates; Hangul jamo compose algorithmically
        c = chr(cp)
        # code points unassigned in Python's Unicode version may have a decomposition in the
        # newer Unicode that Arrow's normaliser knows: always let Arrow look at them
        table[cp] = (unicodedata.category(c) != "Cn" and unicodedata.combining(c) == 0
                     and unicodedata.is_normalized(form, c))
    return table


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _needs_normalization(offsets, data, table, out):
    for k in range(out.shape[0]):
        i = offsets[k]
        end = offsets[k + 1]
        need = False
        while i < end:
            if data[i] < 0x80:  # ASCII never changes under any normal form
                i += 1
                continue
            cp, step = _decode(data, i)
            i += step
            if cp >= table.shape[0] or not table[cp]:
                need = True
                break
        out[k] = need
    return out


def needs_normalization(arr: pa.Array | pa.ChunkedArray, form: str) -> np.ndarray:
    """Per string: whether Unicode normalisation ``form`` might change it (never a false "no")."""
    offsets, data = utf8_buffers(arr)
    return _needs_normalization(offsets, data, stable_table(form),
                                np.empty(len(offsets) - 1, dtype=np.bool_))


@functools.cache
def separator_table() -> np.ndarray:
    """``table[cp]``: code point ``cp`` separates words for dedup shingling — Unicode
    punctuation (P*), symbols (S*) and whitespace. Covers planes 0-1 (emoji included)."""
    table = np.zeros(0x20000, dtype=np.bool_)
    for cp in range(0x20000):
        c = chr(cp)
        cat = unicodedata.category(c)
        table[cp] = cat[0] in "PSZ" or c.isspace()
    return table


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _split_words(offsets, data, table, out_data, word_offsets, row_offsets):
    """Words of every string: runs between separators, ASCII digits replaced by '0'."""
    n_out = 0
    n_words = 0
    word_offsets[0] = 0
    row_offsets[0] = 0
    for k in range(offsets.shape[0] - 1):
        i = offsets[k]
        end = offsets[k + 1]
        inword = False
        while i < end:
            cp, step = _decode(data, i)
            sep = cp < table.shape[0] and table[cp]
            if sep:
                if inword:
                    n_words += 1
                    word_offsets[n_words] = n_out
                    inword = False
            else:
                inword = True
                if 48 <= cp <= 57:
                    out_data[n_out] = 48
                    n_out += 1
                else:
                    for s in range(step):
                        out_data[n_out] = data[i + s]
                        n_out += 1
            i += step
        if inword:
            n_words += 1
            word_offsets[n_words] = n_out
        row_offsets[k + 1] = n_words
    return n_out, n_words


def split_words(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``list<large_string>`` of the words of each string (separators: punctuation, symbols,
    whitespace; ASCII digits become ``0``), in one compiled pass."""
    offsets, data = utf8_buffers(arr)
    n = len(offsets) - 1
    out_data = np.empty(max(1, data.size), dtype=np.uint8)
    word_offsets = np.empty(data.size // 1 + 2, dtype=np.int64)
    row_offsets = np.empty(n + 1, dtype=np.int64)
    n_out, n_words = _split_words(offsets, data, separator_table(), out_data, word_offsets,
                                  row_offsets)
    words = pa.LargeStringArray.from_buffers(
        n_words, pa.py_buffer(word_offsets[: n_words + 1].tobytes()),
        pa.py_buffer(out_data[:n_out].tobytes()))
    return pa.LargeListArray.from_arrays(pa.array(row_offsets), words)
