"""Decontamination: word n-grams of normalised text, looked up in a hashed index of evaluation
samples.

**Words** are maximal runs of letters, digits and combining marks (Unicode categories L, N, M);
everything else (punctuation, symbols, spaces, controls) separates words. Each character is
folded through `fold_table`: lower case with accents stripped (NFKD, combining marks removed),
so ``Café,`` and ``cafe`` are the same word. Scripts written without spaces make a run one word.

**Keys.** A word hashes to ``fmix64(FNV-1a of its folded code points)``. The key of the words
``w_1 .. w_l`` is ``fmix64(sum_k w_k * B^(l-k) ^ l)`` (uint64 arithmetic), which a scan gets in
O(1) per word and length from prefix sums of the document (`scan_doc`). The index holds the keys
of every ``ngram``-word window of every evaluation sample, or of the whole sample when it is
shorter (the ``lengths`` present), sorted, each with a bit set of the evaluation sets it came
from, and a bitmap that answers most misses without a search.

`scan_doc` is one routine for both targets (`gpupipe.kernels.target`): the CPU launcher here
and the CUDA kernel of `gpupipe.kernels.gpu` call it.
"""

from __future__ import annotations

import functools
import unicodedata

import numpy as np

from gpupipe.kernels.catalog import MAX_NGRAM
from gpupipe.kernels.hashing import fmix64
from gpupipe.kernels.target import device, entry
from gpupipe.kernels.utf8 import decode

__all__ = ["BLOOM_BITS", "MAX_NGRAM", "build_index", "contamination_scan", "fold_table",
           "sample_keys"]

_U64 = np.uint64
_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)
_BASE = np.uint64(0x9E3779B97F4A7C15)
#: log2 of the bitmap's size in bits (2 MiB: about 6% false hits for 10^6 keys)
BLOOM_BITS = 24


@functools.cache
def fold_table() -> np.ndarray:
    """int32[0x110000]: per code point -1 (separates words), 0 (ignored: a combining mark), or
    the folded code point (lower case, accents stripped)."""
    table = np.full(0x110000, -1, dtype=np.int32)
    for cp in range(0x40000):  # planes 4-16 hold no letters or digits
        ch = chr(cp)
        cat = unicodedata.category(ch)
        if cat[0] == "M":
            table[cp] = 0
        elif cat[0] in "LN":
            base = "".join(c for c in unicodedata.normalize("NFKD", ch)
                           if not unicodedata.combining(c)).lower()
            table[cp] = ord(base) if len(base) == 1 else (
                ord(ch.lower()) if len(ch.lower()) == 1 else cp)
    return table


def powers(maxlen: int) -> np.ndarray:
    """B^l for l = 0 .. maxlen (uint64, wrapping)."""
    out = np.ones(maxlen + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for k in range(1, maxlen + 1):
            out[k] = out[k - 1] * _BASE
    return out


@device(inline=True)
def next_word(data, i, end, fold):
    """The first word at or after byte ``i`` of ``data[:end]``: (start, end, hash), start -1
    when there is none."""
    start = -1
    h = _FNV_OFFSET
    while i < end:
        c, step = decode(data, i)
        f = fold[c] if c < fold.shape[0] else -1
        if f > 0:
            if start < 0:
                start = i
            h = (h ^ _U64(f)) * _FNV_PRIME
        elif f < 0 and start >= 0:
            return start, i, fmix64(h)
        i += step
    if start >= 0:
        return start, end, fmix64(h)
    return -1, end, _U64(0)


@device(inline=True)
def _key(p_end, p_start, bpow, length):
    return fmix64((p_end - p_start * bpow[length]) ^ _U64(length))


@device(inline=True)
def _lookup(key, keys, bloom, shift):
    """Position of ``key`` in the sorted ``keys``, -1 when absent."""
    bit = key >> _U64(shift)
    if (bloom[np.int64(bit >> _U64(6))] >> (bit & _U64(63))) & _U64(1) == _U64(0):
        return -1
    lo = 0
    hi = keys.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        if keys[mid] < key:
            lo = mid + 1
        else:
            hi = mid
    if lo < keys.shape[0] and keys[lo] == key:
        return lo
    return -1


@device
def scan_doc(data, start, end, fold, keys, masks, bloom, shift, lengths, bpow, ring_p, ring_s,
             set_hits, regions, region_masks):
    """Look up every window of ``lengths`` words of ``data[start:end]``. Writes per evaluation
    set the n-grams matched (``set_hits``) and the byte spans of the first ``len(regions)``
    matched regions (runs of overlapping matches; bytes from ``start``) with their sets;
    returns (n-grams matched,
    sets hit, regions)."""
    r = ring_p.shape[0]
    nsets = set_hits.shape[0]
    cap = regions.shape[0]
    for s in range(nsets):
        set_hits[s] = 0
    hits = 0
    hit_sets = _U64(0)
    nreg = 0
    last_start = -1
    last_end = -1
    p = _U64(0)
    ring_p[0] = p
    words = 0
    i = start
    while i < end:
        ws, we, wh = next_word(data, i, end, fold)
        if ws < 0:
            break
        i = we
        ring_s[words % r] = ws
        words += 1
        p = p * _BASE + wh
        ring_p[words % r] = p
        for li in range(lengths.shape[0]):
            length = lengths[li]
            if length > words:
                break
            at = _lookup(_key(p, ring_p[(words - length) % r], bpow, length), keys, bloom,
                         shift)
            if at < 0:
                continue
            m = masks[at]
            hits += 1
            hit_sets |= m
            for s in range(nsets):
                if (m >> _U64(s)) & _U64(1):
                    set_hits[s] += 1
            ms = ring_s[(words - length) % r]
            if nreg > 0 and ms <= last_end:
                if ms < last_start:
                    last_start = ms
                last_end = we
                if nreg <= cap:
                    regions[nreg - 1, 0] = last_start - start
                    regions[nreg - 1, 1] = last_end - start
                    region_masks[nreg - 1] |= m
            else:
                nreg += 1
                last_start = ms
                last_end = we
                if nreg <= cap:
                    regions[nreg - 1, 0] = ms - start
                    regions[nreg - 1, 1] = we - start
                    region_masks[nreg - 1] = m
    return hits, hit_sets, nreg


@entry
def _scan_cpu(offsets, data, fold, keys, masks, bloom, shift, lengths, bpow, ring_p, ring_s,
              set_hits, regions, region_masks, hits, hit_sets, nreg):
    for d in range(hits.shape[0]):
        hits[d], hit_sets[d], nreg[d] = scan_doc(
            data, offsets[d], offsets[d + 1], fold, keys, masks, bloom, shift, lengths, bpow,
            ring_p, ring_s, set_hits[d], regions[d], region_masks[d])


def _outputs(n: int, nsets: int, max_regions: int):
    return (np.zeros((n, nsets), np.int64), np.zeros((n, max_regions, 2), np.int64),
            np.zeros((n, max_regions), np.uint64), np.zeros(n, np.int64),
            np.zeros(n, np.uint64), np.zeros(n, np.int64))


def contamination_scan(offsets, data, keys, masks, bloom, lengths, nsets: int,
                       max_regions: int) -> tuple[np.ndarray, ...]:
    """Per document: (n-grams matched, bit set of the evaluation sets hit, matched regions,
    n-grams matched per set [n, nsets], region byte spans [n, max_regions, 2] from the start
    of the document, their sets [n, max_regions]). Regions past ``max_regions`` are counted only."""
    lengths = np.asarray(lengths, dtype=np.int64)
    n = len(offsets) - 1
    set_hits, regions, region_masks, hits, hit_sets, nreg = _outputs(n, nsets, max_regions)
    r = int(lengths.max()) + 1 if len(lengths) else 1
    if n and len(keys):
        _scan_cpu(np.asarray(offsets), np.asarray(data), fold_table(), keys, masks, bloom,
                  64 - BLOOM_BITS, lengths, powers(r), np.zeros(r, np.uint64),
                  np.zeros(r, np.int64), set_hits, regions, region_masks, hits, hit_sets, nreg)
    return hits, hit_sets, nreg, set_hits, regions, region_masks


# --------------------------------------------------------------------------- the index

@entry
def _sample_keys(offsets, data, fold, ngram, min_words, bpow, prefix, out, out_row):
    """Keys of every sample into ``out`` (each sample's row in ``out_row``); returns (how many,
    the word count of each sample)."""
    k = 0
    words = np.zeros(offsets.shape[0] - 1, np.int64)
    for d in range(offsets.shape[0] - 1):
        i = offsets[d]
        end = offsets[d + 1]
        m = 0
        prefix[0] = 0
        while i < end:
            ws, we, wh = next_word(data, i, end, fold)
            if ws < 0:
                break
            i = we
            m += 1
            prefix[m] = prefix[m - 1] * _BASE + wh
        words[d] = m
        if m >= ngram:
            for a in range(m - ngram + 1):
                out[k] = _key(prefix[a + ngram], prefix[a], bpow, ngram)
                out_row[k] = d
                k += 1
        elif m >= min_words and m > 0:
            out[k] = _key(prefix[m], prefix[0], bpow, m)
            out_row[k] = d
            k += 1
    return k, words


def sample_keys(offsets, data, ngram: int, min_words: int) -> tuple[np.ndarray, np.ndarray,
                                                                     np.ndarray]:
    """(keys, the sample of each key, words per sample) of UTF-8 samples."""
    offsets, data = np.asarray(offsets, np.int64), np.asarray(data)
    n = len(offsets) - 1
    if n == 0:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    room = int(offsets[-1] - offsets[0]) + n  # a key per word at most, one per sample at least
    longest = int(np.diff(offsets).max()) + 2
    out, out_row = np.empty(room, np.uint64), np.empty(room, np.int64)
    k, words = _sample_keys(offsets, data, fold_table(), ngram, min_words,
                            powers(max(ngram, longest)), np.zeros(longest, np.uint64), out,
                            out_row)
    return out[:k], out_row[:k], words


def build_index(keys: np.ndarray, sets: np.ndarray) -> dict[str, np.ndarray]:
    """The lookup structure of keys and the evaluation set (0..63) of each: ``keys`` sorted and
    unique, ``masks`` (bit set of their sets) and ``bloom`` (2^BLOOM_BITS bits)."""
    keys = np.asarray(keys, np.uint64)
    bits = np.left_shift(np.uint64(1), np.asarray(sets, np.uint64))
    order = np.argsort(keys, kind="stable")
    keys, bits = keys[order], bits[order]
    first = np.ones(len(keys), dtype=bool)
    first[1:] = keys[1:] != keys[:-1]
    starts = np.flatnonzero(first)
    masks = np.bitwise_or.reduceat(bits, starts) if len(keys) else bits
    keys = keys[starts]
    bloom = np.zeros(1 << (BLOOM_BITS - 6), dtype=np.uint64)
    pos = keys >> np.uint64(64 - BLOOM_BITS)
    np.bitwise_or.at(bloom, (pos >> np.uint64(6)).astype(np.int64),
                     np.left_shift(np.uint64(1), pos & np.uint64(63)))
    return {"keys": keys, "masks": masks.astype(np.uint64), "bloom": bloom}
