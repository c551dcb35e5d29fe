"""Hash functions (fmix64, MurmurHash3, XXH64) and MinHash signatures, bit-identical to cuDF's
``nvtext`` minhash and ``hash_values``.

Algorithm (cuDF's, pinned by cuDF's published outputs in tests/stages/dedup/test_minhash.py):

* ``minhash(width=w)``: every window of ``w`` characters (a string shorter than ``w`` is one
  window, an empty string gives all zeros) is hashed over its UTF-8 bytes with
  MurmurHash3_x86_32(seed) — or, in 64-bit mode, the first half of MurmurHash3_x64_128 with
  both states seeded by the 64-bit seed; a hash of 0 becomes 1; permutation ``j`` is
  ``(h * a[j] + b[j]) mod 2^32`` (32-bit) or ``((h * a[j] + b[j]) mod 2^64) mod (2^61 - 1)``
  (64-bit); the signature is the minimum over windows.
* ``minhash_ngrams(ngrams=n)``: the same over the concatenations (no separator) of ``n + 1``
  consecutive list elements — what cuDF's published outputs show.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from gpupipe.kernels.target import device, entry
from gpupipe.kernels.utf8 import utf8_buffers

__all__ = ["MERSENNE_61", "fmix64", "list_buffers", "minhash", "minhash_buffers", "minhash_ngrams",
           "minhash_ngrams_buffers", "murmur3_32", "murmur3_64", "xxh64",
           "xxh64_strings"]

_U64 = np.uint64


@device(inline=True)
def fmix64(k):
    """MurmurHash3's 64-bit finaliser: a bijective mix of all bits of ``k`` (uint64)."""
    k ^= k >> _U64(33)
    k *= _U64(0xFF51AFD7ED558CCD)
    k ^= k >> _U64(33)
    k *= _U64(0xC4CEB9FE1A85EC53)
    k ^= k >> _U64(33)
    return k


_M32 = np.uint32(0xFFFFFFFF)
MERSENNE_61 = np.uint64((1 << 61) - 1)


@device
def _rotl32(x, r):
    return ((x << np.uint32(r)) | (x >> np.uint32(32 - r))) & np.uint32(0xFFFFFFFF)


@device
def _rotl64(x, r):
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@device
def murmur3_32(data, start, end, seed):
    """MurmurHash3_x86_32 of ``data[start:end]`` (== ``mmh3.hash(bytes, seed, signed=False)``)."""
    c1 = np.uint32(0xCC9E2D51)
    c2 = np.uint32(0x1B873593)
    h = np.uint32(seed)
    n = end - start
    nblocks = n // 4
    for i in range(nblocks):
        p = start + 4 * i
        k = (np.uint32(data[p]) | (np.uint32(data[p + 1]) << np.uint32(8))
             | (np.uint32(data[p + 2]) << np.uint32(16)) | (np.uint32(data[p + 3]) << np.uint32(24)))
        k = np.uint32(k * c1)
        k = _rotl32(k, 15)
        k = np.uint32(k * c2)
        h ^= k
        h = _rotl32(h, 13)
        h = np.uint32(h * np.uint32(5) + np.uint32(0xE6546B64))
    tail = start + 4 * nblocks
    k = np.uint32(0)
    rem = n & 3
    if rem >= 3:
        k ^= np.uint32(data[tail + 2]) << np.uint32(16)
    if rem >= 2:
        k ^= np.uint32(data[tail + 1]) << np.uint32(8)
    if rem >= 1:
        k ^= np.uint32(data[tail])
        k = np.uint32(k * c1)
        k = _rotl32(k, 15)
        k = np.uint32(k * c2)
        h ^= k
    h ^= np.uint32(n)
    h ^= h >> np.uint32(16)
    h = np.uint32(h * np.uint32(0x85EBCA6B))
    h ^= h >> np.uint32(13)
    h = np.uint32(h * np.uint32(0xC2B2AE35))
    h ^= h >> np.uint32(16)
    return h


@device
def murmur3_64(data, start, end, seed):
    """First 64 bits of MurmurHash3_x64_128 with both states seeded by the 64-bit ``seed``."""
    c1 = np.uint64(0x87C37B91114253D5)
    c2 = np.uint64(0x4CF5AD432745937F)
    h1 = np.uint64(seed)
    h2 = np.uint64(seed)
    n = end - start
    nblocks = n // 16
    for i in range(nblocks):
        p = start + 16 * i
        k1 = np.uint64(0)
        k2 = np.uint64(0)
        for b in range(8):
            k1 |= np.uint64(data[p + b]) << np.uint64(8 * b)
            k2 |= np.uint64(data[p + 8 + b]) << np.uint64(8 * b)
        k1 *= c1
        k1 = _rotl64(k1, 31)
        k1 *= c2
        h1 ^= k1
        h1 = _rotl64(h1, 27)
        h1 += h2
        h1 = h1 * np.uint64(5) + np.uint64(0x52DCE729)
        k2 *= c2
        k2 = _rotl64(k2, 33)
        k2 *= c1
        h2 ^= k2
        h2 = _rotl64(h2, 31)
        h2 += h1
        h2 = h2 * np.uint64(5) + np.uint64(0x38495AB5)
    tail = start + 16 * nblocks
    rem = n & 15
    k1 = np.uint64(0)
    k2 = np.uint64(0)
    for b in range(rem - 1, 7, -1):
        k2 ^= np.uint64(data[tail + b]) << np.uint64(8 * (b - 8))
    if rem > 8:
        k2 *= c2
        k2 = _rotl64(k2, 33)
        k2 *= c1
        h2 ^= k2
    for b in range(min(rem, 8) - 1, -1, -1):
        k1 ^= np.uint64(data[tail + b]) << np.uint64(8 * b)
    if rem > 0:
        k1 *= c1
        k1 = _rotl64(k1, 31)
        k1 *= c2
        h1 ^= k1
    h1 ^= np.uint64(n)
    h2 ^= np.uint64(n)
    h1 += h2
    h2 += h1
    h1 = fmix64(h1)
    h2 = fmix64(h2)
    h1 += h2
    return h1


# --------------------------------------------------------------------------- xxHash64

_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)


@device(inline=True)
def _read64(data, p):
    v = np.uint64(0)
    for b in range(8):
        v |= np.uint64(data[p + b]) << np.uint64(8 * b)
    return v


@device(inline=True)
def _xxround(acc, lane):
    acc += lane * _P2
    acc = _rotl64(acc, 31)
    return acc * _P1


@device(inline=True)
def _xxmerge(h, v):
    h ^= _xxround(np.uint64(0), v)
    return h * _P1 + _P4


@device
def xxh64(data, start, end, seed):
    """XXH64 of ``data[start:end]`` (== ``xxhash.xxh64_intdigest(bytes, seed)``; what cuDF's
    ``hash_values(method="xxhash64")`` gives with seed 0)."""
    n = end - start
    p = start
    seed = np.uint64(seed)
    if n >= 32:
        v1 = seed + _P1 + _P2
        v2 = seed + _P2
        v3 = seed
        v4 = seed - _P1
        limit = end - 32
        while p <= limit:
            v1 = _xxround(v1, _read64(data, p))
            v2 = _xxround(v2, _read64(data, p + 8))
            v3 = _xxround(v3, _read64(data, p + 16))
            v4 = _xxround(v4, _read64(data, p + 24))
            p += 32
        h = _rotl64(v1, 1) + _rotl64(v2, 7) + _rotl64(v3, 12) + _rotl64(v4, 18)
        h = _xxmerge(h, v1)
        h = _xxmerge(h, v2)
        h = _xxmerge(h, v3)
        h = _xxmerge(h, v4)
    else:
        h = seed + _P5
    h += np.uint64(n)
    while p + 8 <= end:
        h ^= _xxround(np.uint64(0), _read64(data, p))
        h = _rotl64(h, 27) * _P1 + _P4
        p += 8
    if p + 4 <= end:
        k = np.uint64(0)
        for b in range(4):
            k |= np.uint64(data[p + b]) << np.uint64(8 * b)
        h ^= k * _P1
        h = _rotl64(h, 23) * _P2 + _P3
        p += 4
    while p < end:
        h ^= np.uint64(data[p]) * _P5
        h = _rotl64(h, 11) * _P1
        p += 1
    h ^= h >> np.uint64(33)
    h *= _P2
    h ^= h >> np.uint64(29)
    h *= _P3
    h ^= h >> np.uint64(32)
    return h


@entry
def _xxh64_cpu(offsets, data, seed, out):
    for d in range(out.shape[0]):
        out[d] = xxh64(data, offsets[d], offsets[d + 1], seed)
    return out


def xxh64_strings(offsets, data, seed: int = 0) -> np.ndarray:
    """uint64 XXH64 of every string of the ``(offsets, data)`` UTF-8 view."""
    return _xxh64_cpu(offsets, data, np.uint64(seed), np.empty(len(offsets) - 1, np.uint64))


@device
def _update32(h, a, b, out_row):
    if h == 0:
        h = np.uint32(1)
    for j in range(a.shape[0]):
        v = np.uint32(np.uint32(h * a[j]) + b[j])
        if v < out_row[j]:
            out_row[j] = v


@device
def _update64(h, a, b, out_row):
    if h == 0:
        h = np.uint64(1)
    for j in range(a.shape[0]):
        x = h * a[j] + b[j]  # mod 2^64 (wraps)
        # x mod (2^61 - 1) without a division: fold the high bits onto the low ones
        v = (x & MERSENNE_61) + (x >> np.uint64(61))
        if v >= MERSENNE_61:
            v -= MERSENNE_61
        if v < out_row[j]:
            out_row[j] = v


@device
def _fill(row, ones):
    """Every element of ``row`` to 0, or to all one bits (the type's maximum)."""
    for j in range(row.shape[0]):
        row[j] = 0
        if ones:
            row[j] = ~row[j]


@device
def minhash_doc(data, start, end, width, seed, a, b, row, bits64):
    """Signature of the string ``data[start:end]`` into ``row``: the minimum over its windows of
    ``width`` characters (one window if shorter; all zeros if empty)."""
    if end == start:
        _fill(row, False)
        return
    _fill(row, True)
    i = start
    while i < end:
        # window of `width` characters starting at byte i (a character start)
        j = i
        chars = 0
        while j < end and chars < width:
            j += 1
            while j < end and (data[j] & 0xC0) == 0x80:
                j += 1
            chars += 1
        if chars < width and i != start:
            break  # past the end: only a string shorter than width has a short window
        if bits64:
            _update64(murmur3_64(data, i, j, seed), a, b, row)
        else:
            _update32(murmur3_32(data, i, j, seed), a, b, row)
        if j == end:
            break
        i += 1
        while i < end and (data[i] & 0xC0) == 0x80:
            i += 1


@entry
def _minhash_cpu(offsets, data, width, seed, a, b, out, bits64):
    for d in range(out.shape[0]):
        minhash_doc(data, offsets[d], offsets[d + 1], width, seed, a, b, out[d], bits64)


def minhash_params(seed: int, a, b, bits: int):
    """(seed, a, b) as the unsigned type of ``bits`` (32 or 64)."""
    dt = np.uint64 if bits == 64 else np.uint32
    return dt(seed), np.asarray(a, dtype=dt), np.asarray(b, dtype=dt)


def minhash_buffers(offsets, data, *, seed: int, a, b, width: int, bits: int = 32) -> np.ndarray:
    """`minhash` from the ``(offsets, data)`` UTF-8 view of the strings."""
    if width < 2:
        raise ValueError("width must be at least 2 (as in cuDF)")
    seed, a, b = minhash_params(seed, a, b, bits)
    out = np.empty((len(offsets) - 1, len(a)), dtype=a.dtype)
    _minhash_cpu(offsets, data, width, seed, a, b, out, bits == 64)
    return out


def minhash(strings, *, seed: int, a, b, width: int, bits: int = 32) -> np.ndarray:
    """Signatures ``uint32[n, len(a)]`` (or ``uint64`` with ``bits=64``) of a string array."""
    arr = pa.array(strings, pa.large_string()) if not isinstance(strings, pa.Array) else strings
    return minhash_buffers(*utf8_buffers(arr), seed=seed, a=a, b=b, width=width, bits=bits)


@device
def minhash_ngrams_doc(list_offsets, r, offsets, data, ngrams, seed, a, b, row, bits64, buf):
    """Signature of list row ``r`` into ``row``: windows are ``ngrams + 1`` consecutive elements
    concatenated in ``buf`` (cuDF's published outputs pin the ``+ 1``); a shorter row is one
    window, an empty row gives all zeros."""
    first = list_offsets[r]
    last = list_offsets[r + 1]
    if last == first:
        _fill(row, False)
        return
    _fill(row, True)
    span = ngrams + 1
    n_windows = max(1, last - first - span + 1)
    for w in range(n_windows):
        stop = min(first + w + span, last)
        size = 0
        for s in range(first + w, stop):
            for p in range(offsets[s], offsets[s + 1]):
                buf[size] = data[p]
                size += 1
        if bits64:
            _update64(murmur3_64(buf, 0, size, seed), a, b, row)
        else:
            _update32(murmur3_32(buf, 0, size, seed), a, b, row)


@entry
def _minhash_ngrams_cpu(list_offsets, offsets, data, ngrams, seed, a, b, out, bits64, buf):
    for r in range(out.shape[0]):
        minhash_ngrams_doc(list_offsets, r, offsets, data, ngrams, seed, a, b, out[r], bits64,
                           buf)


def list_buffers(lists) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(list offsets, element offsets, UTF-8 data)`` of a ``list<string>`` array."""
    arr = lists if isinstance(lists, pa.Array | pa.ChunkedArray) else pa.array(
        lists, pa.list_(pa.large_string()))
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    list_offsets = np.asarray(arr.offsets, dtype=np.int64)
    # .flatten() honours a sliced array's offset; the offsets then start at 0
    offsets, data = utf8_buffers(arr.flatten().cast(pa.large_string()))
    return list_offsets - list_offsets[0], offsets, data


def ngram_buffer_size(list_offsets, offsets, ngrams: int) -> int:
    """Bytes of the longest window of ``ngrams + 1`` elements (an upper bound)."""
    if len(offsets) <= 1:
        return 1
    return max(1, int(np.max(np.diff(offsets))) * (ngrams + 1))


def minhash_ngrams_buffers(list_offsets, offsets, data, *, ngrams: int, seed: int, a, b,
                           bits: int = 32) -> np.ndarray:
    """`minhash_ngrams` from a list<string> column's buffers (`list_buffers`)."""
    seed, a, b = minhash_params(seed, a, b, bits)
    out = np.empty((len(list_offsets) - 1, len(a)), dtype=a.dtype)
    buf = np.empty(ngram_buffer_size(list_offsets, offsets, ngrams), dtype=np.uint8)
    _minhash_ngrams_cpu(list_offsets, offsets, data, ngrams, seed, a, b, out, bits == 64, buf)
    return out


def minhash_ngrams(lists, *, ngrams: int, seed: int, a, b, bits: int = 32) -> np.ndarray:
    """Signatures over concatenated word n-grams of a list<string> array (``minhash_ngrams``)."""
    return minhash_ngrams_buffers(*list_buffers(lists), ngrams=ngrams, seed=seed, a=a, b=b,
                                  bits=bits)
