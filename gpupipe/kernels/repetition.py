"""Gopher's repetition measures: duplicate paragraphs and lines, the most frequent 2-4-gram and
repeated 5-10-grams (datatrove's ``find_duplicates``, ``find_top_duplicate`` and
``find_all_duplicate``), with open-addressing hash tables in caller-provided scratch.

Hash tables: ``keys`` (uint64, 0 = empty slot) and parallel value arrays. A routine sizes its
table for the keys it will insert (a power of two, at most half full), so the scratch must hold
`table_size` of the document's length; each use clears the slots it filled through ``used``.
"""

from __future__ import annotations

import numpy as np

from gpupipe.charsets import char_table
from gpupipe.kernels.hashing import fmix64
from gpupipe.kernels.target import device, entry, max_len, table_mask, table_size
from gpupipe.kernels.utf8 import decode_doc, strip
from gpupipe.kernels.words import scratch, tokenize

__all__ = ["gopher_repetition_features", "hash_span", "dup_stats", "rolling_powers"]

_U64 = np.uint64
GOLDEN = 0x9E3779B97F4A7C15
ROLL = 0x100000001B3  # base of the rolling hash over the concatenated words


# A span's hash is a polynomial in ROLL over its elements (mod 2**64), which a prefix array gives
# for any span in O(1) (`span_hash`), finalised with its length by `mix`. Keys are `mix` outputs:
# well mixed and never 0 (0 marks an empty slot).

@device(inline=True)
def mix(h, n):
    """The final hash of a polynomial hash ``h`` of ``n`` elements: well mixed, never 0."""
    return fmix64(h ^ (_U64(n) * _U64(GOLDEN))) | _U64(1)


@device(inline=True)
def span_hash(prefix, power, a, b):
    """Polynomial hash of elements a..b-1 from ``prefix[i + 1] = prefix[i] * ROLL + x[i]``."""
    return prefix[b] - prefix[a] * power[b - a]


@device
def hash_span(cp, a, b):
    """Hash of the code points cp[a:b] (equals `mix` of their `span_hash`)."""
    h = _U64(0)
    for i in range(a, b):
        h = h * _U64(ROLL) + _U64(cp[i] + 1)
    return mix(h, b - a)


@device(inline=True)
def find(keys, mask, key):
    """Slot of ``key`` (or the empty slot where it belongs); keys are `mix` outputs, so their
    bits above the forced low one index the table directly."""
    i = np.int64((key >> _U64(11)) & _U64(mask))
    while keys[i] != 0 and keys[i] != key:
        i = (i + 1) & mask
    return i


@device
def clear(keys, used, nused):
    for j in range(nused):
        keys[used[j]] = 0


@device
def dup_stats(hashes, lengths, m, keys, used):
    """(duplicate elements, their characters): an element already seen counts (datatrove's
    ``find_duplicates``)."""
    mask = table_mask(m)
    nused = 0
    dups = 0
    chars = 0
    for j in range(m):
        key = hashes[j] ^ (_U64(lengths[j]) * _U64(GOLDEN)) | _U64(1)
        s = find(keys, mask, key)
        if keys[s] == key:
            dups += 1
            chars += lengths[j]
        else:
            keys[s] = key
            used[nused] = s
            nused += 1
    clear(keys, used, nused)
    return dups, chars


@device
def segments_dups(cp, cprefix, power, lo, hi, sep_min, seg_h, seg_l, keys, used):
    """Split cp[lo:hi] on runs of >= sep_min newlines; (segments, duplicates, duplicate chars).
    ``cprefix``: the prefix hashes of ``cp``."""
    m = 0
    s = lo
    i = lo
    while i < hi:
        if cp[i] == 10:
            e = i
            while e < hi and cp[e] == 10:
                e += 1
            if e - i >= sep_min:
                seg_h[m] = mix(span_hash(cprefix, power, s, i), i - s)
                seg_l[m] = i - s
                m += 1
                s = e
            i = e
        else:
            i += 1
    seg_h[m] = mix(span_hash(cprefix, power, s, hi), hi - s)
    seg_l[m] = hi - s
    m += 1
    dups, chars = dup_stats(seg_h, seg_l, m, keys, used)
    return m, dups, chars


@device
def gopher_repetition_doc(data, start, end, T, top_ns, dup_ns, power, cp, ts, te, ss, se,
                          seg_h, seg_l, cprefix, tprefix, prefix, wstart, keys, cnt, used, slot,
                          base, top, dup):
    """Measures of ``data[start:end]`` into ``base`` (characters, paragraphs, duplicate
    paragraphs, their characters, lines, duplicate lines, their characters), ``top`` (most
    frequent n-gram's characters per ``top_ns``) and ``dup`` (repeated n-gram characters per
    ``dup_ns``). ``power[i]`` = ROLL ** i; scratch as long as the document (+1), tables of
    `table_size` of it.

    One pass of prefix hashes (over the code points, over the token hashes, over the
    concatenated tokens) makes every line, paragraph, token and n-gram hash O(1)."""
    n = decode_doc(data, start, end, cp)
    base[0] = n
    if n == 0:
        return
    B = _U64(ROLL)
    cprefix[0] = _U64(0)
    for i in range(n):
        cprefix[i + 1] = cprefix[i] * B + _U64(cp[i] + 1)
    a, b = strip(cp, 0, n, T)
    m, dd, dc = segments_dups(cp, cprefix, power, a, b, 2, seg_h, seg_l, keys, used)
    base[1] = m
    base[2] = dd
    base[3] = dc
    m, dd, dc = segments_dups(cp, cprefix, power, 0, n, 1, seg_h, seg_l, keys, used)
    base[4] = m
    base[5] = dd
    base[6] = dc
    k = tokenize(cp, 0, n, T, ts, te, ss, se)
    pos = 0
    prefix[0] = _U64(0)
    tprefix[0] = _U64(0)
    for j in range(k):
        s0 = ts[j]
        e0 = te[j]
        tprefix[j + 1] = tprefix[j] * B + mix(span_hash(cprefix, power, s0, e0), e0 - s0)
        wstart[j] = pos
        for x in range(s0, e0):
            prefix[pos + 1] = prefix[pos] * B + _U64(cp[x] + 1)
            pos += 1
    wstart[k] = pos
    mask = table_mask(k)
    # most frequent n-gram (words joined by a space): length x count, first one on ties
    for q in range(top_ns.shape[0]):
        nn = top_ns[q]
        g = k - nn + 1
        if g <= 0:
            continue
        nused = 0
        for i in range(g):
            h = mix(span_hash(tprefix, power, i, i + nn), nn)
            s = find(keys, mask, h)
            if keys[s] != h:
                keys[s] = h
                cnt[s] = 0
                used[nused] = s
                nused += 1
            cnt[s] += 1
            slot[i] = s  # slots never move: no deletion or resizing during a document
        best = 0
        best_len = 0
        for i in range(g):
            c = cnt[slot[i]]
            if c > best:
                best = c
                best_len = wstart[i + nn] - wstart[i] + nn - 1
        top[q] = best * best_len
        clear(keys, used, nused)
    # greedy scan of repeated n-grams (words concatenated without a separator)
    for q in range(dup_ns.shape[0]):
        nn = dup_ns[q]
        nused = 0
        total = 0
        i = 0
        while i < k - nn + 1:
            lo = wstart[i]
            hi = wstart[i + nn]
            h = mix(span_hash(prefix, power, lo, hi), hi - lo)
            s = find(keys, mask, h)
            if keys[s] == h:
                total += hi - lo
                i += nn
            else:
                keys[s] = h
                used[nused] = s
                nused += 1
                i += 1
        dup[q] = total
        clear(keys, used, nused)


def rolling_powers(maxlen: int) -> np.ndarray:
    """``ROLL ** i`` mod 2**64 for i in 0..maxlen (what the n-gram scan needs)."""
    p = np.full(maxlen + 1, ROLL, dtype=np.uint64)
    p[0] = 1
    return np.cumprod(p, dtype=np.uint64)


@entry
def _gopher_repetition_cpu(offsets, data, T, top_ns, dup_ns, power, maxlen, tsize):
    nd = offsets.shape[0] - 1
    base = np.zeros((nd, 7), np.int64)
    top = np.zeros((nd, top_ns.shape[0]), np.int64)
    dup = np.zeros((nd, dup_ns.shape[0]), np.int64)
    cp, ts, te, ss, se = scratch(maxlen)
    seg_h = np.empty(maxlen, np.uint64)
    seg_l = np.empty(maxlen, np.int64)
    cprefix = np.empty(maxlen + 1, np.uint64)
    tprefix = np.empty(maxlen + 1, np.uint64)
    prefix = np.empty(maxlen + 1, np.uint64)
    wstart = np.empty(maxlen + 1, np.int64)
    keys = np.zeros(tsize, np.uint64)
    cnt = np.zeros(tsize, np.int64)
    used = np.empty(tsize, np.int64)
    slot = np.empty(maxlen, np.int64)
    for d in range(nd):
        gopher_repetition_doc(data, offsets[d], offsets[d + 1], T, top_ns, dup_ns, power, cp,
                              ts, te, ss, se, seg_h, seg_l, cprefix, tprefix, prefix, wstart,
                              keys, cnt, used, slot, base[d], top[d], dup[d])
    return base, top, dup


def gopher_repetition_features(offsets, data, top_ns, dup_ns):
    """Per document: (int64[n, 7] = characters, paragraphs, duplicate paragraphs, their
    characters, lines, duplicate lines, their characters; top n-gram characters [n, len(top_ns)];
    repeated n-gram characters [n, len(dup_ns)])."""
    maxlen = max_len(offsets)
    return _gopher_repetition_cpu(offsets, data, char_table(), np.asarray(top_ns, np.int64),
                                  np.asarray(dup_ns, np.int64), rolling_powers(maxlen), maxlen,
                                  table_size(maxlen))
