"""UTF-8 decoding and character classes, shared by every text kernel.

Kernels read the ``(offsets, data)`` view of an Arrow (large_)string array (`utf8_buffers`) and
decode each document into code points once, so lengths are Python ``len`` (code points) and the
character predicates of `gpupipe.charsets.char_table` are Python's.
"""

from __future__ import annotations

import functools
import unicodedata

import numpy as np
import pyarrow as pa

from gpupipe.charsets import LINEBREAK, SPACE, char_table
from gpupipe.kernels.target import device, entry

__all__ = ["char_table", "count_chars", "count_words", "decode", "decode_doc", "has", "next_line",
           "separator_table", "split_words", "strip", "utf8_buffers"]


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


def scatter_buffers(n: int, rows, strings) -> tuple[np.ndarray, np.ndarray]:
    """``(offsets, data)`` of ``n`` strings: ``strings[k]`` at position ``rows[k]`` (increasing),
    empty elsewhere. With `gpupipe.backends.dispatch.string_column`'s ``keep`` it writes a few rewritten
    rows back into a column without touching the others."""
    off, data = utf8_buffers(strings)
    lens = np.zeros(n, np.int64)
    lens[np.asarray(rows, dtype=np.int64)] = np.diff(off)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    return offsets, data


@device(inline=True)
def decode(data, i):
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


@device(inline=True)
def decode_doc(data, start, end, cp):
    """Code points of ``data[start:end]`` into ``cp``; returns their number."""
    n = 0
    i = start
    while i < end:
        c, step = decode(data, i)
        cp[n] = c
        n += 1
        i += step
    return n


@device(inline=True)
def has(T, c, flag):
    """Code point ``c`` is in class ``flag`` of the class table ``T``."""
    return (T[c] & flag) != 0


# --------------------------------------------------------------------------- characters

@device
def count_chars_doc(data, start, end):
    """Code points of the UTF-8 string ``data[start:end]`` (Python's ``len``)."""
    n = 0
    for i in range(start, end):
        if (data[i] & 0xC0) != 0x80:
            n += 1
    return n


@entry
def _count_chars_cpu(offsets, data, out):
    for d in range(out.shape[0]):
        out[d] = count_chars_doc(data, offsets[d], offsets[d + 1])
    return out


def count_chars(offsets, data) -> np.ndarray:
    """int64 code points per string, identical to ``len(s)``."""
    return _count_chars_cpu(offsets, data, np.empty(len(offsets) - 1, dtype=np.int64))


# --------------------------------------------------------------------------- whitespace words

@device
def count_words_doc(data, start, end):
    """Words of ``data[start:end]`` as ``str.split()`` splits them (Python's whitespace)."""
    n = data.shape[0]
    i = start
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
    return words


@entry
def _count_words_cpu(offsets, data, out):
    for d in range(out.shape[0]):
        out[d] = count_words_doc(data, offsets[d], offsets[d + 1])
    return out


def count_words(offsets, data) -> np.ndarray:
    """int64 words per string, identical to ``len(s.split())``."""
    return _count_words_cpu(offsets, data, np.empty(len(offsets) - 1, dtype=np.int64))


# --------------------------------------------------------------------------- substrings

def pattern_bytes(patterns) -> tuple[np.ndarray, np.ndarray]:
    """``(UTF-8 bytes, int64 offsets)`` of a list of strings (substrings to count)."""
    raw = [p.encode("utf-8") for p in patterns]
    offsets = np.zeros(len(raw) + 1, np.int64)
    np.cumsum([len(r) for r in raw], out=offsets[1:])
    data = np.frombuffer(b"".join(raw), dtype=np.uint8).copy() if raw else np.zeros(0, np.uint8)
    return (data if data.size else np.zeros(1, np.uint8)), offsets


@device
def count_substrings_doc(data, start, end, pat, pat_off):
    """Occurrences of every pattern in ``data[start:end]``, summed; each pattern counted left
    to right without overlaps (Arrow's ``count_substring``). UTF-8 is self-synchronising, so
    comparing bytes is comparing characters."""
    total = 0
    for p in range(pat_off.shape[0] - 1):
        a = pat_off[p]
        m = pat_off[p + 1] - a
        if m == 0:
            continue
        i = start
        while i + m <= end:
            j = 0
            while j < m and data[i + j] == pat[a + j]:
                j += 1
            if j == m:
                total += 1
                i += m
            else:
                i += 1
    return total


@entry
def _count_substrings_cpu(offsets, data, pat, pat_off, out):
    for d in range(out.shape[0]):
        out[d] = count_substrings_doc(data, offsets[d], offsets[d + 1], pat, pat_off)
    return out


def count_substrings(offsets, data, patterns) -> np.ndarray:
    """int64 per string: non-overlapping occurrences of each of ``patterns``, summed."""
    pat, pat_off = pattern_bytes(patterns)
    return _count_substrings_cpu(offsets, data, pat, pat_off,
                                 np.empty(len(offsets) - 1, dtype=np.int64))


# --------------------------------------------------------------------------- dedup shingle words

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


@entry(boundscheck=False)
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
            cp, step = decode(data, i)
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
    whitespace; ASCII digits become ``0``), in one compiled pass. CPU only: its output size is
    known only after the pass."""
    offsets, data = utf8_buffers(arr)
    n = len(offsets) - 1
    out_data = np.empty(max(1, data.size), dtype=np.uint8)
    word_offsets = np.empty(data.size + 2, dtype=np.int64)
    row_offsets = np.empty(n + 1, dtype=np.int64)
    n_out, n_words = _split_words(offsets, data, separator_table(), out_data, word_offsets,
                                  row_offsets)
    words = pa.LargeStringArray.from_buffers(
        n_words, pa.py_buffer(word_offsets[: n_words + 1].tobytes()),
        pa.py_buffer(out_data[:n_out].tobytes()))
    return pa.LargeListArray.from_arrays(pa.array(row_offsets), words)


# --------------------------------------------------------------------------- lines

@device
def next_line(cp, pos, n, T):
    """(end of the line starting at pos, start of the next) with str.splitlines semantics."""
    e = pos
    while e < n and not has(T, cp[e], LINEBREAK):
        e += 1
    if e >= n:
        return n, n
    if cp[e] == 13 and e + 1 < n and cp[e + 1] == 10:
        return e, e + 2
    return e, e + 1


@device
def strip(cp, a, b, T):
    """(start, end) of cp[a:b] without leading and trailing whitespace (``str.strip``)."""
    while a < b and has(T, cp[a], SPACE):
        a += 1
    while b > a and has(T, cp[b - 1], SPACE):
        b -= 1
    return a, b
