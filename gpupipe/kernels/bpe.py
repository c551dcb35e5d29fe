"""Byte-level BPE, as Hugging Face ``tokenizers`` encodes with a GPT-2, Llama 3 or Qwen 2.5
style ``tokenizer.json``: added tokens split out, pre-tokenisation by the tokenizer's regex,
bytes mapped to their tokens, merges by rank.

**Added tokens** (``<|endoftext|>``, ...) are matched in the raw text first, leftmost-longest,
and each becomes its own id; the text between them is encoded on its own (the end of a piece
is the end of the text for the regex).

**Pre-tokenisation** is the tokenizer's regex, written out as a scanner over code points (the
character classes come from the regex engine of the installed ``tokenizers``:
`gpupipe.kernels.bpe_tables.class_table`, bits `LETTER`, `NUMBER`, `SPACE` and `NEWLINE` for ``\\r\\n``).
Each alternative is tried in the regex's order at the start of a piece, as a backtracking
engine would; `pretoken_end` documents the three patterns:

* ``GPT2``: ``'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+``
* ``LLAMA3``: ``(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|
  ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+``
* ``QWEN2``: the same with ``\\p{N}`` (one digit per piece).

**Merges**: a piece's bytes start as their single-byte tokens; the adjacent pair of lowest merge
rank merges first, the leftmost of equal ranks, until no pair has a merge (``tokenizers``'
``Word::merge_all``). Short pieces rescan a small array; long ones (a line of CJK, a run of
spaces) keep a heap, so a 50 kB piece costs ``n log n``, not ``n²``. With ``ignore_merges``
(Llama 3) a piece that is itself in the vocabulary is that token.

Tables (`gpupipe.kernels.bpe_tables.BpeTables`): merges in an open-addressing table keyed by the pair
``(left << 32) | right`` holding ``(rank << 32) | merged id``; the vocabulary (for
``ignore_merges``) keyed by `hash_bytes` of the token's bytes.

`encode` is the CPU launcher; `gpupipe.kernels.gpu.bpe_encode` runs the same routine on CUDA.
"""

from __future__ import annotations

import numpy as np

from gpupipe.kernels.catalog import (  # noqa: F401  (the modes and classes, re-exported)
    GPT2,
    LETTER,
    LLAMA3,
    NEWLINE,
    NUMBER,
    PATTERNS,
    QWEN2,
    SPACE,
)
from gpupipe.kernels.hashing import fmix64
from gpupipe.kernels.target import device, entry
from gpupipe.kernels.utf8 import decode

__all__ = ["GPT2", "LLAMA3", "QWEN2", "encode", "hash_bytes", "insert", "pretokens"]

#: pieces up to this many bytes merge by rescanning an array; longer ones through a heap
SHORT = 64
_EMPTY = np.uint64(0xFFFFFFFFFFFFFFFF)
_LOW = np.int64(0xFFFFFFFF)
_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


# --------------------------------------------------------------------------- pre-tokenisation

@device
def char_at(data, i, classes):
    """(class bits, byte length) of the character at ``data[i]``."""
    c, n = decode(data, i)
    return classes[c], n


@device
def run_of(data, i, end, classes, flag):
    """End of the run of characters with class ``flag`` that starts at ``i``."""
    while i < end:
        c, n = char_at(data, i, classes)
        if (c & flag) == 0:
            break
        i += n
    return i


@device
def run_other(data, i, end, classes):
    """End of the run of ``[^\\s\\p{L}\\p{N}]`` that starts at ``i``."""
    while i < end:
        c, n = char_at(data, i, classes)
        if (c & (LETTER | NUMBER | SPACE)) != 0:
            break
        i += n
    return i


@device
def lower(b):
    return b | 0x20 if 65 <= b <= 90 else b


@device
def contraction(data, j, end, fold):
    """End of ``s t m d re ve ll`` right after an apostrophe at ``j - 1``, or -1; ``fold``:
    case-insensitive (``(?i:...)``, where ``ſ`` is an ``s``)."""
    b = np.int64(data[j])
    if fold:
        b = lower(b)
        if b == 0xC5 and j + 1 < end and data[j + 1] == 0xBF:  # U+017F folds to s
            return j + 2
    if b == 115 or b == 116 or b == 109 or b == 100:  # s t m d
        return j + 1
    if j + 1 < end:
        c = np.int64(data[j + 1])
        if fold:
            c = lower(c)
        if (b == 114 and c == 101) or (b == 118 and c == 101) or (b == 108 and c == 108):
            return j + 2  # re ve ll
    return -1


@device
def space_run(data, i, end, classes, newlines):
    """A piece of whitespace at ``i``: ``\\s*[\\r\\n]+`` (``newlines``: up to the run's last
    newline), else ``\\s+(?!\\S)`` (all but the last character when text follows), else ``\\s+``
    (one character)."""
    k = i
    count = 0
    last = i
    nl_end = -1
    while k < end:
        c, n = char_at(data, k, classes)
        if (c & SPACE) == 0:
            break
        if newlines and (c & NEWLINE) != 0:
            nl_end = k + n
        last = k
        count += 1
        k += n
    if nl_end >= 0:
        return nl_end
    if k == end or count == 1:
        return k
    return last


@device
def pretoken_end(data, i, end, mode, classes):
    """End of the pre-token that starts at ``i`` (the regex of ``mode`` matched at ``i``, with
    ``end`` the end of the text)."""
    c0, n0 = char_at(data, i, classes)
    b0 = data[i]
    if b0 == 39 and i + 1 < end:  # the contractions
        e = contraction(data, i + 1, end, mode != GPT2)
        if e >= 0:
            return e
    if mode == GPT2:
        # ' ?\p{L}+' | ' ?\p{N}+' | ' ?[^\s\p{L}\p{N}]+'
        j, cj = i, c0
        if b0 == 32 and i + 1 < end:
            c1, _ = char_at(data, i + 1, classes)
            if (c1 & SPACE) == 0:
                j, cj = i + 1, c1
        if (cj & LETTER) != 0:
            return run_of(data, j, end, classes, np.int64(LETTER))
        if (cj & NUMBER) != 0:
            return run_of(data, j, end, classes, np.int64(NUMBER))
        if (cj & SPACE) == 0:
            return run_other(data, j, end, classes)
        return space_run(data, i, end, classes, mode != GPT2)
    # '[^\r\n\p{L}\p{N}]?\p{L}+'
    if (c0 & LETTER) != 0:
        return run_of(data, i, end, classes, np.int64(LETTER))
    if (c0 & (NEWLINE | LETTER | NUMBER)) == 0 and i + n0 < end:
        c1, _ = char_at(data, i + n0, classes)
        if (c1 & LETTER) != 0:
            return run_of(data, i + n0, end, classes, np.int64(LETTER))
    # '\p{N}{1,3}' (Llama 3) or '\p{N}' (Qwen 2.5)
    if (c0 & NUMBER) != 0:
        k = i + n0
        if mode == LLAMA3:
            for _ in range(2):
                if k >= end:
                    break
                c, n = char_at(data, k, classes)
                if (c & NUMBER) == 0:
                    break
                k += n
        return k
    # ' ?[^\s\p{L}\p{N}]+[\r\n]*'
    j, cj = i, c0
    if b0 == 32 and i + 1 < end:
        c1, _ = char_at(data, i + 1, classes)
        if (c1 & (LETTER | NUMBER | SPACE)) == 0:
            j, cj = i + 1, c1
    if (cj & (LETTER | NUMBER | SPACE)) == 0:
        k = run_other(data, j, end, classes)
        while k < end and (data[k] == 10 or data[k] == 13):
            k += 1
        return k
    return space_run(data, i, end, classes, mode != GPT2)


# --------------------------------------------------------------------------- tables

@device
def pair_value(mkeys, mvals, mask, a, b):
    """``(rank << 32) | merged id`` of the pair ``(a, b)``, or -1 when it has no merge."""
    key = (np.uint64(a) << np.uint64(32)) | np.uint64(b)
    h = np.int64(fmix64(key) & np.uint64(mask))
    while True:
        k = mkeys[h]
        if k == key:
            return mvals[h]
        if k == _EMPTY:
            return np.int64(-1)
        h = (h + 1) & mask


@device
def hash_bytes(data, a, b):
    """64-bit hash of ``data[a:b]`` (FNV-1a, then fmix64)."""
    h = _FNV_OFFSET
    for i in range(a, b):
        h = (h ^ np.uint64(data[i])) * _FNV_PRIME
    return fmix64(h)


@device
def vocab_id(data, a, b, vkeys, vrows, vmask, vbytes, voff, vids):
    """The id of the token whose bytes are ``data[a:b]``, or -1."""
    h = hash_bytes(data, a, b)
    s = np.int64(h & np.uint64(vmask))
    while True:
        r = vrows[s]
        if r < 0:
            return -1
        if vkeys[s] == h and voff[r + 1] - voff[r] == b - a:
            same = True
            for t in range(b - a):
                if vbytes[voff[r] + t] != data[a + t]:
                    same = False
                    break
            if same:
                return vids[r]
        s = (s + 1) & vmask


@entry
def insert(keys, vals, tkeys, tvals, mask):
    """Put ``keys[k] -> vals[k]`` into the open-addressing table ``(tkeys, tvals)`` (``tkeys``
    filled with all ones); a key given twice keeps its last value (as a merges list with a
    pair twice does in ``tokenizers``: the later rank)."""
    for k in range(keys.shape[0]):
        key = keys[k]
        h = np.int64(fmix64(key) & np.uint64(mask))
        while tkeys[h] != _EMPTY and tkeys[h] != key:
            h = (h + 1) & mask
        tkeys[h] = key
        tvals[h] = vals[k]


@entry
def hash_all(offsets, data, out):
    """`hash_bytes` of every string of ``(offsets, data)``."""
    for k in range(out.shape[0]):
        out[k] = hash_bytes(data, offsets[k], offsets[k + 1])


# --------------------------------------------------------------------------- merges

@device
def _heap_push(heap, n, key):
    heap[n] = key
    i = n
    while i > 0:
        p = (i - 1) >> 1
        if heap[p] <= heap[i]:
            break
        t = heap[p]
        heap[p] = heap[i]
        heap[i] = t
        i = p
    return n + 1


@device
def _heap_pop(heap, n):
    top = heap[0]
    n -= 1
    heap[0] = heap[n]
    i = 0
    while True:
        a = 2 * i + 1
        if a >= n:
            break
        if a + 1 < n and heap[a + 1] < heap[a]:
            a += 1
        if heap[i] <= heap[a]:
            break
        t = heap[a]
        heap[a] = heap[i]
        heap[i] = t
        i = a
    return top, n


@device
def merge_short(data, a, b, byte_id, mkeys, mvals, mmask, ids, pv, out, o):
    """Merges of the piece ``data[a:b]`` by rescanning its pairs; writes its ids at ``out[o]``,
    returns the next free position."""
    n = b - a
    for k in range(n):
        ids[k] = byte_id[data[a + k]]
    for k in range(n - 1):
        pv[k] = pair_value(mkeys, mvals, mmask, ids[k], ids[k + 1])
    while n > 1:
        best = -1
        bv = np.int64(0)
        for k in range(n - 1):
            v = pv[k]
            if v >= 0 and (best < 0 or v < bv):
                best = k
                bv = v
        if best < 0:
            break
        ids[best] = np.int32(bv & _LOW)
        for k in range(best + 1, n - 1):
            ids[k] = ids[k + 1]
            pv[k] = pv[k + 1]
        n -= 1
        if best + 1 < n:
            pv[best] = pair_value(mkeys, mvals, mmask, ids[best], ids[best + 1])
        if best > 0:
            pv[best - 1] = pair_value(mkeys, mvals, mmask, ids[best - 1], ids[best])
    for k in range(n):
        out[o + k] = ids[k]
    return o + n


@device
def merge_long(data, a, b, byte_id, mkeys, mvals, mmask, ids, heap, nxt, prv, out, o):
    """`merge_short` for long pieces: the pairs in a heap keyed ``(rank << 32) | position``,
    stale entries skipped when popped (``tokenizers``' ``Word::merge_all``)."""
    n = b - a
    for k in range(n):
        ids[k] = byte_id[data[a + k]]
        nxt[k] = k + 1
        prv[k] = k - 1
    h = np.int64(0)
    for k in range(n - 1):
        v = pair_value(mkeys, mvals, mmask, ids[k], ids[k + 1])
        if v >= 0:
            h = _heap_push(heap, h, ((v >> 32) << 32) | k)
    while h > 0:
        top, h = _heap_pop(heap, h)
        p = top & _LOW
        rank = top >> 32
        if ids[p] < 0 or nxt[p] >= n:
            continue
        q = nxt[p]
        v = pair_value(mkeys, mvals, mmask, ids[p], ids[q])
        if v < 0 or (v >> 32) != rank:
            continue
        ids[p] = np.int32(v & _LOW)
        ids[q] = -1
        r = nxt[q]
        nxt[p] = r
        if r < n:
            prv[r] = p
            w = pair_value(mkeys, mvals, mmask, ids[p], ids[r])
            if w >= 0:
                h = _heap_push(heap, h, ((w >> 32) << 32) | p)
        s = prv[p]
        if s >= 0:
            w = pair_value(mkeys, mvals, mmask, ids[s], ids[p])
            if w >= 0:
                h = _heap_push(heap, h, ((w >> 32) << 32) | s)
    k = 0
    while k < n:
        out[o] = ids[k]
        o += 1
        k = nxt[k]
    return o


# --------------------------------------------------------------------------- documents

@device
def next_special(data, i, end, sp_first, sp_bytes, sp_off):
    """(position, index) of the first added token at or after ``i``, the longest where several
    start there (``sp_*`` sorted longest first), or ``(end, -1)``."""
    for p in range(i, end):
        if not sp_first[data[p]]:
            continue
        for t in range(sp_off.shape[0] - 1):
            m = sp_off[t + 1] - sp_off[t]
            if p + m > end:
                continue
            same = True
            for u in range(m):
                if data[p + u] != sp_bytes[sp_off[t] + u]:
                    same = False
                    break
            if same:
                return p, t
    return end, -1


@device
def encode_doc(data, start, end, mode, classes, sp_first, sp_bytes, sp_off, sp_ids, byte_id,
               mkeys, mvals, mmask, ignore_merges, vkeys, vrows, vmask, vbytes, voff, vids,
               bos, eod, ids, heap, nxt, prv, out, o):
    """Token ids of ``data[start:end]`` written from ``out[o]`` (``bos`` before, ``eod`` after
    when >= 0); returns how many. Never more than the document's bytes plus two."""
    o0 = o
    if bos >= 0:
        out[o] = bos
        o += 1
    pos = start
    while pos < end:
        sp_at, t = next_special(data, pos, end, sp_first, sp_bytes, sp_off)
        while pos < sp_at:
            e = pretoken_end(data, pos, sp_at, mode, classes)
            if e - pos == 1:
                out[o] = byte_id[data[pos]]
                o += 1
            else:
                whole = -1
                if ignore_merges:
                    whole = vocab_id(data, pos, e, vkeys, vrows, vmask, vbytes, voff, vids)
                if whole >= 0:
                    out[o] = whole
                    o += 1
                elif e - pos <= SHORT:
                    o = merge_short(data, pos, e, byte_id, mkeys, mvals, mmask, ids, heap, out, o)
                else:
                    o = merge_long(data, pos, e, byte_id, mkeys, mvals, mmask, ids, heap, nxt,
                                   prv, out, o)
            pos = e
        if t >= 0:
            out[o] = sp_ids[t]
            o += 1
            pos = sp_at + sp_off[t + 1] - sp_off[t]
    if eod >= 0:
        out[o] = eod
        o += 1
    return o - o0


# --------------------------------------------------------------------------- CPU launcher

@entry
def _encode_cpu(offsets, data, mode, classes, sp_first, sp_bytes, sp_off, sp_ids, byte_id,
                mkeys, mvals, mmask, ignore_merges, vkeys, vrows, vmask, vbytes, voff, vids,
                bos, eod, ids, heap, nxt, prv, out, lens):
    o = np.int64(0)  # not a literal 0: numba would compile encode_doc for it as well
    for d in range(lens.shape[0]):
        n = encode_doc(data, offsets[d], offsets[d + 1], mode, classes, sp_first, sp_bytes,
                       sp_off, sp_ids, byte_id, mkeys, mvals, mmask, ignore_merges, vkeys, vrows,
                       vmask, vbytes, voff, vids, bos, eod, ids, heap, nxt, prv, out, o)
        lens[d] = n
        o += n
    return o


@entry
def _pretokens_cpu(offsets, data, mode, classes, out, counts):
    o = 0
    for d in range(counts.shape[0]):
        pos = offsets[d]
        while pos < offsets[d + 1]:
            pos = pretoken_end(data, pos, offsets[d + 1], mode, classes)
            out[o] = pos
            o += 1
        counts[d] = o
    return o


def pretokens(offsets, data, mode: int, classes) -> tuple[np.ndarray, np.ndarray]:
    """The pre-tokenizer alone (no added tokens): every piece's end as a byte offset into
    ``data``, flat, and the cumulative count per document."""
    offsets = np.asarray(offsets, np.int64)
    n = len(offsets) - 1
    out = np.empty(int(offsets[-1] - offsets[0]) + 1 if n else 1, np.int64)
    counts = np.zeros(n, np.int64)
    k = _pretokens_cpu(offsets, np.asarray(data), np.int64(mode), classes, out, counts) if n else 0
    return out[:k], counts


def scratch_len(offsets) -> int:
    """Scratch elements a launcher needs for its longest document."""
    return int(np.diff(offsets).max()) + 1 if len(offsets) > 1 else 1


def encode(offsets, data, tables, bos: int = -1, eod: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of every string of ``(offsets, data)``: (int32 ids flat in document order,
    int64 count per document), with ``bos`` / ``eod`` (>= 0) around each document.
    ``tables`` is a `gpupipe.kernels.bpe_tables.BpeTables`."""
    offsets, data = np.asarray(offsets, np.int64), np.asarray(data)
    n = len(offsets) - 1
    lens = np.zeros(n, np.int64)
    total = int(offsets[-1] - offsets[0]) if n else 0
    out = np.empty(total + 2 * n + 1, np.int32)
    m = scratch_len(offsets)
    count = _encode_cpu(offsets, data, *tables.kernel_args(), np.int64(bos), np.int64(eod),
                        np.empty(m, np.int32), np.empty(3 * m, np.int64),
                        np.empty(m, np.int64), np.empty(m, np.int64), out, lens) if n else 0
    return out[:count], lens
