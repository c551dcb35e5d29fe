"""A blocked Bloom filter of 64-bit hashes, for approximate "seen before" counting (dolma's
paragraph dedup): a fixed number of bits whatever the corpus, no false negatives, and false
positives at a rate the caller chooses.

The filter is ``nblocks`` blocks of 512 bits (a cache line: one memory access per key, which
keeps a filter far larger than the caches fast). A key picks its block from its high 32 bits
and ``k`` distinct bits in the block by double hashing on a remix of the key. `bloom_size`
chooses ``nblocks`` and ``k`` so that, with ``n`` keys inserted, the chance that a key never
inserted tests positive is at most the requested rate, computed for the blocked layout (its
blocks fill unevenly, so it needs a little more memory than a classic filter; `fp_rate`).

`bloom_scan` is the one routine: documents in order, each window hash queried and inserted,
``seen[j]`` set where window ``j`` was (probably) in the filter already.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from gpupipe.kernels.hashing import fmix64
from gpupipe.kernels.target import entry

__all__ = ["BLOCK_BITS", "bloom_scan", "bloom_size", "fill_fp_rate", "fp_rate"]

#: bits per block (one 64-byte cache line)
BLOCK_BITS = 512
_WORDS = BLOCK_BITS // 64
_U64 = np.uint64
_REMIX = np.uint64(0x9E3779B97F4A7C15)


def fp_rate(n: int, nblocks: int, k: int) -> float:
    """The false-positive rate of a filter of ``nblocks`` blocks and ``k`` bits per key once
    ``n`` distinct keys are in it: a block's load is Poisson, and a block holding ``j`` keys has
    each bit still clear with probability ``(1 - 1 / 512) ** (k * j)`` (a key's ``k`` positions are
independent: they may coincide)."""
    if n <= 0:
        return 0.0
    lam = n / nblocks
    top = int(lam + 12 * math.sqrt(lam) + 30)
    total = 0.0
    for j in range(top + 1):
        log_p = -lam + j * math.log(lam) - math.lgamma(j + 1)
        total += math.exp(log_p) * (1.0 - (1.0 - 1.0 / BLOCK_BITS) ** (k * j)) ** k
    return total


def bloom_size(n: int, rate: float) -> tuple[int, int]:
    """``(nblocks, k)``: the smallest blocked filter (over ``k`` near the classic optimum) whose
    false-positive rate with ``n`` keys is at most ``rate``."""
    if not 0.0 < rate < 1.0:
        raise ValueError(f"false-positive rate must be in (0, 1), not {rate}")
    n = max(int(n), 1)
    best = None
    k0 = max(1, round(-math.log2(rate)))
    for k in range(max(1, k0 - 3), min(k0 + 4, 32) + 1):
        # classic filter's bits per key, then grow by 1% until the blocked layout meets rate
        bits = n * -math.log(rate) / math.log(2) ** 2
        nblocks = max(1, math.ceil(bits / BLOCK_BITS))
        for _ in range(400):
            if fp_rate(n, nblocks, k) <= rate:
                break
            nblocks = math.ceil(nblocks * 1.01) + 1
        else:
            continue
        if best is None or nblocks < best[0]:
            best = (nblocks, k)
    if best is None:
        raise ValueError(f"no Bloom filter of up to 32 bits per key reaches rate {rate}")
    return best


def fill_fp_rate(bits: np.ndarray, k: int) -> float:
    """The false-positive rate of the filter as it is: the mean over blocks of the share of
    its bits set, to the power ``k`` (a fresh key's ``k`` bits all set)."""
    if not len(bits):
        return 0.0
    total, words = 0.0, bits.reshape(-1, _WORDS)
    for a in range(0, len(words), 1 << 20):   # a million blocks (64 MiB of filter) at a time
        ones = np.bitwise_count(words[a:a + (1 << 20)]).sum(axis=1, dtype=np.int64)
        total += float(np.sum((ones / BLOCK_BITS) ** k))
    return total / len(words)


@numba.njit(inline="always")
def _probe(bits, nblocks, k, h, insert):
    """Whether all ``k`` bits of ``h`` are set; sets them when ``insert``."""
    g = fmix64(h ^ _REMIX)
    block = ((g >> _U64(32)) * _U64(nblocks)) >> _U64(32)
    base = np.int64(block) * _WORDS
    present = True
    s = g
    for i in range(k):
        if i % 7 == 0:   # 7 positions of 9 bits from each fresh 64-bit mix
            s = fmix64(g + _U64(i + 1) * _REMIX)
        pos = s & _U64(BLOCK_BITS - 1)
        s >>= _U64(9)
        word = base + np.int64(pos >> _U64(6))
        mask = _U64(1) << (pos & _U64(63))
        if (bits[word] & mask) == _U64(0):
            present = False
            if insert:
                bits[word] |= mask
    return present


@entry
def bloom_scan(wh, nwin, bits, nblocks, k, within_document, seen):
    """Documents in order (``nwin[d]`` windows each, their hashes ``wh``): ``seen[j]`` = 1
    where window ``j``'s hash tests positive. Without ``within_document`` a document's windows
    are all tested before any is inserted (a document never sees itself); with it, each window
    is tested then inserted (a document's second occurrence of a span is seen)."""
    j = 0
    for d in range(len(nwin)):
        n = nwin[d]
        if within_document:
            for w in range(j, j + n):
                seen[w] = 1 if _probe(bits, nblocks, k, wh[w], True) else 0
        else:
            for w in range(j, j + n):
                seen[w] = 1 if _probe(bits, nblocks, k, wh[w], False) else 0
            for w in range(j, j + n):
                _probe(bits, nblocks, k, wh[w], True)
        j += n


@entry
def bloom_insert(keys, bits, nblocks, k):
    """Every key into the filter (earlier runs' spans)."""
    for w in range(len(keys)):
        _probe(bits, nblocks, k, keys[w], True)
