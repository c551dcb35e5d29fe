"""Compiled per-document text measures for the quality filters (numba, one pass per document).

Every kernel takes the ``(offsets, data)`` UTF-8 view of an Arrow string array (`utf8_buffers`)
and the class table of `gpupipe.charsets.char_table`, decodes each document into code points once
and computes what the filter needs, so lengths are Python ``len`` (code points) and the character
predicates are Python's.

**Words** (`tokenize`) approximate spaCy's blank English tokenizer, which datatrove's filters
use: text is split on whitespace, then punctuation, quotes and brackets are split off both ends
of each piece one character at a time (a run of dots as one token), ``'s`` and contractions
(``n't``, ``'ll``, ``'re``, ``'ve``, ``'m``, ``'d``) are split off the end, a final period is split
off after a digit, a lowercase letter or punctuation unless the word already holds a period
(``e.g.``, ``U.S.``), and hyphens, slashes and ellipses between letters are tokens of their own.
Deliberate differences: spaCy's exception table (``can't`` -> ``ca n't``, ``Mr.``, emoticons) and
its URL matcher are not reproduced (a piece containing ``://`` or starting with ``www.`` is not
split inside). `benchmarks/bench_filters.py` measures the effect on decisions.
"""

from __future__ import annotations

import numba
import numpy as np

from gpupipe.charsets import (
    ALPHA,
    DIGIT,
    HYPHEN,
    LINEBREAK,
    LOWER,
    PREFIX,
    PUNCT,
    SPACE,
    SUFFIX,
    SYMBOL,
    TERMINAL,
    UPPER,
    char_table,
)
from gpupipe.kernels import _decode, fmix64, utf8_buffers

__all__ = ["char_table", "tokenize_texts", "utf8_buffers"]

_DOT = 46
_APOS = 39
_RSQUO = 0x2019
_ELLIPSIS = 0x2026
_U64 = np.uint64


@numba.njit(cache=True, nogil=True, inline="always")
def decode_doc(data, start, end, cp):
    """Code points of ``data[start:end]`` into ``cp``; returns their number."""
    n = 0
    i = start
    while i < end:
        c, step = _decode(data, i)
        cp[n] = c
        n += 1
        i += step
    return n


@numba.njit(cache=True, nogil=True, inline="always")
def _has(T, c, flag):
    return (T[c] & flag) != 0


@numba.njit(cache=True, nogil=True)
def _is_apos(c):
    return c == _APOS or c == _RSQUO


@numba.njit(cache=True, nogil=True)
def _lower_ascii(c):
    if 65 <= c <= 90:
        return c + 32
    if c == 0x212A:  # KELVIN SIGN lowercases to 'k'
        return 107
    return c


@numba.njit(cache=True, nogil=True)
def _contraction(cp, a, b):
    """Length of a contraction suffix of cp[a:b] (n't 'll 're 've 'm 'd 's), 0 if none."""
    m = b - a
    if m >= 4 and _is_apos(cp[b - 2]) and _lower_ascii(cp[b - 1]) == 116 and \
            _lower_ascii(cp[b - 3]) == 110:  # n't
        return 3
    if m >= 4 and _is_apos(cp[b - 3]):
        x, y = _lower_ascii(cp[b - 2]), _lower_ascii(cp[b - 1])
        if (x == 108 and y == 108) or (x == 114 and y == 101) or (x == 118 and y == 101):
            return 3
    if m >= 3 and _is_apos(cp[b - 2]):
        y = _lower_ascii(cp[b - 1])
        if y == 109 or y == 100 or y == 115:  # 'm 'd 's
            return 2
    return 0


@numba.njit(cache=True, nogil=True)
def _emoticon(cp, a, b):
    """Length (2 or 3) of an emoticon starting at cp[a] within cp[a:b], as spaCy's special cases
    keep whole: ``):`` ``(:`` ``:)`` ``:(`` ``;)`` ``=)`` ``:]`` ``[:`` ``8)`` ``''`` ``:-)``."""
    if b - a >= 3 and cp[a] == 58 and cp[a + 1] == 45 and (cp[a + 2] == 41 or cp[a + 2] == 40):
        return 3
    if b - a < 2:
        return 0
    x = cp[a]
    y = cp[a + 1]
    if (x == 41 or x == 40 or x == 91) and y == 58:
        return 2
    if (x == 58 or x == 59 or x == 61) and (y == 41 or y == 40 or y == 93):
        return 2
    if (x == 56 and y == 41) or (x == 39 and y == 39):
        return 2
    return 0


@numba.njit(cache=True, nogil=True)
def _abbreviation(cp, a, b):
    """cp[a:b] is letters separated by single periods: e.g, U.S, i.e (a final period stays)."""
    if b - a < 3 or (b - a) % 2 == 0:
        return False
    for x in range(a, b):
        if (x - a) % 2 == 1:
            if cp[x] != _DOT:
                return False
        elif not (65 <= cp[x] <= 90 or 97 <= cp[x] <= 122):
            return False
    return True


@numba.njit(cache=True, nogil=True)
def _url_like(cp, a, b, T):
    at = False
    for i in range(a, b):
        if cp[i] == 64:
            at = True
        elif at and cp[i] == _DOT:
            return True  # an e-mail address
    # a host or file name: a period after a letter or digit, then 2+ lowercase letters to the end
    x = b - 1
    while x > a and _has(T, cp[x], LOWER):
        x -= 1
    if x > a and cp[x] == _DOT and b - x > 2 and _has(T, cp[x - 1], ALPHA | DIGIT):
        slash = False
        for y in range(a, b):
            if cp[y] == 47:
                slash = True
                break
        if not slash:
            return True
    if b - a >= 4 and _lower_ascii(cp[a]) == 119 and _lower_ascii(cp[a + 1]) == 119 and \
            _lower_ascii(cp[a + 2]) == 119 and cp[a + 3] == _DOT:
        return True
    for i in range(a, b - 2):
        if cp[i] == 58 and cp[i + 1] == 47 and cp[i + 2] == 47:
            return True
    return False


@numba.njit(cache=True, nogil=True)
def _split_piece(cp, a, b, T, ts, te, k, ss, se):
    """Tokens of the whitespace-free piece cp[a:b], appended at ts/te[k:]; returns the new k."""
    # prefixes
    while a < b:
        e = _emoticon(cp, a, b)
        if e:
            if a + e == b:
                break
            if cp[a] != 58 and cp[a] != 59 and cp[a] != 61 and cp[a] != 56:
                ts[k] = a
                te[k] = a + e
                k += 1
                a += e
                continue
        c = cp[a]
        if c == _DOT and a + 1 < b and cp[a + 1] == _DOT:
            e = a
            while e < b and cp[e] == _DOT:
                e += 1
            ts[k] = a
            te[k] = e
            k += 1
            a = e
            continue
        if _has(T, c, PREFIX) and not (c == 43 and a + 1 < b and _has(T, cp[a + 1], DIGIT)):
            ts[k] = a
            te[k] = a + 1
            k += 1
            a += 1
            continue
        break
    # suffixes, collected from the end
    ns = 0
    while b > a:
        e = 0
        if b - a >= 3 and _emoticon(cp, b - 3, b) == 3:  # :-) ending the piece
            e = 3
        elif b - a >= 2 and _emoticon(cp, b - 2, b) == 2:
            e = 2
        if e:
            if b - e == a:
                break
            ss[ns] = b - e
            se[ns] = b
            ns += 1
            b -= e
            continue
        c = cp[b - 1]
        if c == _DOT and b - 2 >= a and cp[b - 2] == _DOT:
            e = b
            while e > a and cp[e - 1] == _DOT:
                e -= 1
            ss[ns] = e
            se[ns] = b
            ns += 1
            b = e
            continue
        if _has(T, c, SUFFIX):
            ss[ns] = b - 1
            se[ns] = b
            ns += 1
            b -= 1
            continue
        if c == _DOT and b - 1 > a:
            p = cp[b - 2]
            inner = _abbreviation(cp, a, b - 1)  # e.g. U.S. keep their period
            lower_like = _has(T, p, LOWER) or (_has(T, p, ALPHA) and not _has(T, p, UPPER))
            if not inner and (_has(T, p, DIGIT | PUNCT | SUFFIX) or lower_like or (
                    b - 3 >= a and _has(T, p, UPPER) and _has(T, cp[b - 3], UPPER))):
                ss[ns] = b - 1
                se[ns] = b
                ns += 1
                b -= 1
                continue
            break
        if b - a == 6 and _lower_ascii(cp[a]) == 99 and _lower_ascii(cp[a + 1]) == 97 and \
                _lower_ascii(cp[a + 2]) == 110 and _lower_ascii(cp[a + 3]) == 110 and \
                _lower_ascii(cp[a + 4]) == 111 and _lower_ascii(cp[a + 5]) == 116:  # cannot
            ss[ns] = a + 3
            se[ns] = b
            ns += 1
            b = a + 3
            break
        m = _contraction(cp, a, b)
        if m and b - m > a and _has(T, cp[b - m - 1], ALPHA):
            ss[ns] = b - m
            se[ns] = b
            ns += 1
            b -= m
            continue
        break
    # infixes
    if b > a:
        s = a
        if not _url_like(cp, a, b, T):
            x = a + 1
            while x < b - 1:
                c = cp[x]
                left = cp[x - 1]
                right = cp[x + 1]
                width = 0
                if c == _DOT and right == _DOT:
                    e = x
                    while e < b and cp[e] == _DOT:
                        e += 1
                    width = e - x
                elif c == _ELLIPSIS:
                    width = 1
                elif _has(T, c, HYPHEN) and _has(T, left, ALPHA | DIGIT) and _has(T, right, ALPHA):
                    width = 1
                elif (c == 47 or c == 58 or c == 60 or c == 61 or c == 62) and \
                        _has(T, left, ALPHA | DIGIT) and _has(T, right, ALPHA):
                    width = 1
                elif c == 44 and _has(T, left, ALPHA) and _has(T, right, ALPHA):
                    width = 1
                elif c == _DOT and _has(T, left, LOWER) and _has(T, right, UPPER):
                    width = 1
                elif (c == 43 or c == 45 or c == 42 or c == 94) and _has(T, left, DIGIT) and \
                        (_has(T, right, DIGIT) or right == 45):
                    width = 1
                if width:
                    if x > s:
                        ts[k] = s
                        te[k] = x
                        k += 1
                    ts[k] = x
                    te[k] = x + width
                    k += 1
                    s = x + width
                    x = s + 1
                else:
                    x += 1
        if b > s:
            ts[k] = s
            te[k] = b
            k += 1
    for j in range(ns - 1, -1, -1):
        ts[k] = ss[j]
        te[k] = se[j]
        k += 1
    return k


@numba.njit(cache=True, nogil=True, inline="always")
def _next_piece(cp, i, hi, T):
    """(start, end) of the next whitespace-free piece at or after i (start == hi: none left)."""
    while i < hi and _has(T, cp[i], SPACE):
        i += 1
    j = i
    while j < hi and not _has(T, cp[j], SPACE):
        j += 1
    return i, j


@numba.njit(cache=True, nogil=True)
def tokenize(cp, lo, hi, T, ts, te, ss, se):
    """Word tokens of cp[lo:hi] as (start, end) code point spans in ts/te; returns their number."""
    k = 0
    i, j = _next_piece(cp, lo, hi, T)
    while i < hi:
        k = _split_piece(cp, i, j, T, ts, te, k, ss, se)
        i, j = _next_piece(cp, j, hi, T)
    return k


@numba.njit(cache=True, nogil=True)
def _scratch(maxlen):
    """Per-call buffers sized for the longest document: code points, token spans, suffix stack."""
    return (np.empty(maxlen, np.int32), np.empty(maxlen, np.int64), np.empty(maxlen, np.int64),
            np.empty(maxlen, np.int64), np.empty(maxlen, np.int64))


def _max_len(offsets) -> int:
    return int(np.diff(offsets).max()) + 1 if len(offsets) > 1 else 1


@numba.njit(cache=True, nogil=True)
def _tokenize_all(offsets, data, T, maxlen):
    nd = offsets.shape[0] - 1
    cp, ts, te, ss, se = _scratch(maxlen)
    counts = np.zeros(nd, np.int64)
    spans = []
    for d in range(nd):
        n = decode_doc(data, offsets[d], offsets[d + 1], cp)
        k = tokenize(cp, 0, n, T, ts, te, ss, se)
        counts[d] = k
        for j in range(k):
            spans.append((ts[j], te[j]))
    return counts, spans


def tokenize_texts(texts: list[str]) -> list[list[str]]:
    """The word tokens of each text (for tests, notebooks and comparing with other tokenizers)."""
    import pyarrow as pa

    arr = pa.array(texts, type=pa.large_string())
    offsets, data = utf8_buffers(arr)
    counts, spans = _tokenize_all(offsets, data, char_table(), _max_len(offsets))
    out, j = [], 0
    for text, c in zip(texts, counts):
        out.append([text[a:b] for a, b in spans[j: j + c]])
        j += c
    return out


# --------------------------------------------------------------------------- hashing helpers

@numba.njit(cache=True, nogil=True)
def _hash_span(cp, a, b):
    """64-bit hash of the code points cp[a:b] and their number."""
    h = _U64(0x9E3779B97F4A7C15) ^ _U64(b - a)
    for i in range(a, b):
        h = fmix64(h ^ _U64(cp[i] + 1))
    return h | _U64(1)


# Open-addressing hash sets: ``keys`` (uint64, 0 = empty slot) and parallel value arrays, sized
# for the longest document once per call and cleared after each use through the list of used slots.

@numba.njit(cache=True, nogil=True)
def _find(keys, mask, key):
    """Slot of ``key`` (or the empty slot where it belongs)."""
    i = np.int64(fmix64(key) & _U64(mask))
    while keys[i] != 0 and keys[i] != key:
        i = (i + 1) & mask
    return i


@numba.njit(cache=True, nogil=True)
def _clear(keys, used, nused):
    for j in range(nused):
        keys[used[j]] = 0


def _table_size(maxlen: int) -> int:
    return 1 << max(4, int(2 * maxlen).bit_length())


@numba.njit(cache=True, nogil=True)
def _dup_stats(hashes, lengths, m, keys, used):
    """(duplicate elements, their characters): an element already seen counts (datatrove's
    ``find_duplicates``)."""
    size = 16
    while size < 2 * m:
        size <<= 1
    mask = size - 1
    nused = 0
    dups = 0
    chars = 0
    for j in range(m):
        key = hashes[j] ^ (_U64(lengths[j]) * _U64(0x9E3779B97F4A7C15)) | _U64(1)
        s = _find(keys, mask, key)
        if keys[s] == key:
            dups += 1
            chars += lengths[j]
        else:
            keys[s] = key
            used[nused] = s
            nused += 1
    _clear(keys, used, nused)
    return dups, chars


# --------------------------------------------------------------------------- lines

@numba.njit(cache=True, nogil=True)
def _next_line(cp, pos, n, T):
    """(end of the line starting at pos, start of the next) with str.splitlines semantics."""
    e = pos
    while e < n and not _has(T, cp[e], LINEBREAK):
        e += 1
    if e >= n:
        return n, n
    if cp[e] == 13 and e + 1 < n and cp[e + 1] == 10:
        return e, e + 2
    return e, e + 1


@numba.njit(cache=True, nogil=True)
def _strip(cp, a, b, T):
    while a < b and _has(T, cp[a], SPACE):
        a += 1
    while b > a and _has(T, cp[b - 1], SPACE):
        b -= 1
    return a, b


@numba.njit(cache=True, nogil=True)
def _ends_with_ellipsis(cp, a, b):
    if b - a >= 1 and cp[b - 1] == _ELLIPSIS:
        return True
    return b - a >= 3 and cp[b - 1] == _DOT and cp[b - 2] == _DOT and cp[b - 3] == _DOT


# --------------------------------------------------------------------------- gopher quality

GQ_WORDS, GQ_NONSYM, GQ_NONSYM_CHARS, GQ_ALPHA_WORDS, GQ_HASHES, GQ_ELLIPSES, GQ_LINES, \
    GQ_BULLET_LINES, GQ_ELLIPSIS_LINES, GQ_STOP_WORDS = range(10)


@numba.njit(cache=True, nogil=True)
def _gopher_quality(offsets, data, T, stop_cp, stop_off, maxlen):
    nd = offsets.shape[0] - 1
    out = np.zeros((nd, 10), np.int64)
    cp, ts, te, ss, se = _scratch(maxlen)
    nstop = stop_off.shape[0] - 1
    for d in range(nd):
        n = decode_doc(data, offsets[d], offsets[d + 1], cp)
        k = tokenize(cp, 0, n, T, ts, te, ss, se)
        nonsym = 0
        nonsym_chars = 0
        alpha_words = 0
        seen = np.zeros(max(nstop, 1), np.bool_)
        for j in range(k):
            a = ts[j]
            b = te[j]
            sym = True
            alpha = False
            for x in range(a, b):
                t = T[cp[x]]
                if (t & SYMBOL) == 0:
                    sym = False
                if (t & ALPHA) != 0:
                    alpha = True
            if not sym:
                nonsym += 1
                nonsym_chars += b - a
            if alpha:
                alpha_words += 1
            for s in range(nstop):
                lo = stop_off[s]
                hi = stop_off[s + 1]
                if hi - lo == b - a and not seen[s]:
                    same = True
                    for x in range(hi - lo):
                        if stop_cp[lo + x] != cp[a + x]:
                            same = False
                            break
                    if same:
                        seen[s] = True
        stops = 0
        for s in range(nstop):
            if seen[s]:
                stops += 1
        hashes = 0
        ellipses = 0
        i = 0
        while i < n:
            c = cp[i]
            if c == 35:
                hashes += 1
            elif c == _ELLIPSIS:
                ellipses += 1
            elif c == _DOT and i + 2 < n and cp[i + 1] == _DOT and cp[i + 2] == _DOT:
                ellipses += 1
                i += 3
                continue
            i += 1
        lines = 0
        bullets = 0
        ell_lines = 0
        pos = 0
        while pos < n:
            e, nxt = _next_line(cp, pos, n, T)
            lines += 1
            a, b = _strip(cp, pos, e, T)
            if b > a and (cp[a] == 0x2022 or cp[a] == 45):
                bullets += 1
            if _ends_with_ellipsis(cp, a, b):
                ell_lines += 1
            pos = nxt
        o = out[d]
        o[GQ_WORDS] = k
        o[GQ_NONSYM] = nonsym
        o[GQ_NONSYM_CHARS] = nonsym_chars
        o[GQ_ALPHA_WORDS] = alpha_words
        o[GQ_HASHES] = hashes
        o[GQ_ELLIPSES] = ellipses
        o[GQ_LINES] = lines
        o[GQ_BULLET_LINES] = bullets
        o[GQ_ELLIPSIS_LINES] = ell_lines
        o[GQ_STOP_WORDS] = stops
    return out


def gopher_quality_features(offsets, data, stop_words: list[str]) -> np.ndarray:
    """int64[n, 10] per document: words, non-symbol words, their characters, words with a
    letter, ``#`` count, ellipsis count, lines, bullet lines, ellipsis lines, distinct stop words."""
    stop_cp = np.array([ord(c) for w in stop_words for c in w], dtype=np.int32)
    stop_off = np.zeros(len(stop_words) + 1, np.int64)
    stop_off[1:] = np.cumsum([len(w) for w in stop_words])
    return _gopher_quality(offsets, data, char_table(), stop_cp, stop_off, _max_len(offsets))


# --------------------------------------------------------------------------- gopher repetition

@numba.njit(cache=True, nogil=True)
def _segments_dups(cp, lo, hi, sep_min, seg_h, seg_l, keys, used):
    """Split cp[lo:hi] on runs of >= sep_min newlines; (segments, duplicates, duplicate chars)."""
    m = 0
    s = lo
    i = lo
    while i < hi:
        if cp[i] == 10:
            e = i
            while e < hi and cp[e] == 10:
                e += 1
            if e - i >= sep_min:
                seg_h[m] = _hash_span(cp, s, i)
                seg_l[m] = i - s
                m += 1
                s = e
            i = e
        else:
            i += 1
    seg_h[m] = _hash_span(cp, s, hi)
    seg_l[m] = hi - s
    m += 1
    dups, chars = _dup_stats(seg_h, seg_l, m, keys, used)
    return m, dups, chars


@numba.njit(cache=True, nogil=True)
def _gopher_repetition(offsets, data, T, top_ns, dup_ns, maxlen, tsize):
    nd = offsets.shape[0] - 1
    nt = top_ns.shape[0]
    ndup = dup_ns.shape[0]
    # L, paragraphs, dup paragraphs, dup paragraph chars, lines, dup lines, dup line chars
    base = np.zeros((nd, 7), np.int64)
    top = np.zeros((nd, nt), np.int64)
    dup = np.zeros((nd, ndup), np.int64)
    cp, ts, te, ss, se = _scratch(maxlen)
    seg_h = np.empty(maxlen, np.uint64)
    seg_l = np.empty(maxlen, np.int64)
    tok_h = np.empty(maxlen, np.uint64)
    tok_l = np.empty(maxlen, np.int64)
    prefix = np.empty(maxlen + 1, np.uint64)  # rolling hash over the concatenated words
    power = np.empty(maxlen + 1, np.uint64)
    start = np.empty(maxlen + 1, np.int64)
    keys = np.zeros(tsize, np.uint64)
    cnt = np.zeros(tsize, np.int64)
    used = np.empty(tsize, np.int64)
    slot = np.empty(maxlen, np.int64)  # hash-table slot of each n-gram
    B = _U64(0x100000001B3)
    power[0] = _U64(1)
    for i in range(1, maxlen + 1):
        power[i] = power[i - 1] * B
    for d in range(nd):
        n = decode_doc(data, offsets[d], offsets[d + 1], cp)
        base[d, 0] = n
        if n == 0:
            continue
        a, b = _strip(cp, 0, n, T)
        m, dd, dc = _segments_dups(cp, a, b, 2, seg_h, seg_l, keys, used)
        base[d, 1] = m
        base[d, 2] = dd
        base[d, 3] = dc
        m, dd, dc = _segments_dups(cp, 0, n, 1, seg_h, seg_l, keys, used)
        base[d, 4] = m
        base[d, 5] = dd
        base[d, 6] = dc
        k = tokenize(cp, 0, n, T, ts, te, ss, se)
        pos = 0
        prefix[0] = _U64(0)
        for j in range(k):
            tok_h[j] = _hash_span(cp, ts[j], te[j])
            tok_l[j] = te[j] - ts[j]
            start[j] = pos
            for x in range(ts[j], te[j]):
                prefix[pos + 1] = prefix[pos] * B + _U64(cp[x] + 1)
                pos += 1
        start[k] = pos
        size = 16
        while size < 2 * k:
            size <<= 1
        mask = size - 1
        # most frequent n-gram (words joined by a space): length x count, first one on ties
        for q in range(nt):
            nn = top_ns[q]
            g = k - nn + 1
            if g <= 0:
                continue
            nused = 0
            for i in range(g):
                h = _U64(nn)
                for x in range(i, i + nn):
                    h = fmix64(h ^ tok_h[x])
                h |= _U64(1)
                s = _find(keys, mask, h)
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
                    best_len = start[i + nn] - start[i] + nn - 1
            top[d, q] = best * best_len
            _clear(keys, used, nused)
        # greedy scan of repeated n-grams (words concatenated without a separator)
        for q in range(ndup):
            nn = dup_ns[q]
            nused = 0
            total = 0
            i = 0
            while i < k - nn + 1:
                lo = start[i]
                hi = start[i + nn]
                ln = hi - lo
                h = prefix[hi] - prefix[lo] * power[ln]
                h = fmix64(h ^ (_U64(ln) * _U64(0x9E3779B97F4A7C15))) | _U64(1)
                s = _find(keys, mask, h)
                if keys[s] == h:
                    total += ln
                    i += nn
                else:
                    keys[s] = h
                    used[nused] = s
                    nused += 1
                    i += 1
            dup[d, q] = total
            _clear(keys, used, nused)
    return base, top, dup


def gopher_repetition_features(offsets, data, top_ns, dup_ns):
    """Per document: (int64[n, 7] = characters, paragraphs, duplicate paragraphs, their
    characters, lines, duplicate lines, their characters; top n-gram characters [n, len(top_ns)];
    repeated n-gram characters [n, len(dup_ns)])."""
    maxlen = _max_len(offsets)
    return _gopher_repetition(offsets, data, char_table(), np.asarray(top_ns, np.int64),
                              np.asarray(dup_ns, np.int64), maxlen, _table_size(maxlen))


# --------------------------------------------------------------------------- fineweb quality

@numba.njit(cache=True, nogil=True)
def _fineweb(offsets, data, T, stop_table, use_table, short_len, maxlen, tsize):
    nd = offsets.shape[0] - 1
    # lines, lines ending in stop chars, short lines, dup line chars, chars w/o \n, newlines, words
    out = np.zeros((nd, 7), np.int64)
    cp, ts, te, ss, se = _scratch(maxlen)
    seg_h = np.empty(maxlen, np.uint64)
    seg_l = np.empty(maxlen, np.int64)
    keys = np.zeros(tsize, np.uint64)
    used = np.empty(tsize, np.int64)
    for d in range(nd):
        n = decode_doc(data, offsets[d], offsets[d + 1], cp)
        m = 0
        term = 0
        short = 0
        newlines = 0
        s = 0
        for i in range(n + 1):
            if i == n or cp[i] == 10:
                if i < n:
                    newlines += 1
                a, b = _strip(cp, s, i, T)
                if b > a:
                    seg_h[m] = _hash_span(cp, s, i)
                    seg_l[m] = i - s
                    m += 1
                    last = cp[i - 1]
                    if use_table:
                        if stop_table[last]:
                            term += 1
                    elif _has(T, last, TERMINAL):
                        term += 1
                    if i - s <= short_len:
                        short += 1
                s = i + 1
        out[d, 0] = m
        out[d, 1] = term
        out[d, 2] = short
        if m:
            out[d, 3] = _dup_stats(seg_h, seg_l, m, keys, used)[1]
        out[d, 4] = n - newlines
        out[d, 5] = newlines
        out[d, 6] = tokenize(cp, 0, n, T, ts, te, ss, se)
    return out


def fineweb_features(offsets, data, stop_chars: str | None, short_len: int) -> np.ndarray:
    """int64[n, 7]: non-empty lines, those ending in a stop char, those of <= short_len chars,
    duplicate line characters, characters without newlines, newlines, words."""
    from gpupipe.charsets import chars_table

    maxlen = _max_len(offsets)
    table = chars_table(stop_chars) if stop_chars is not None else np.zeros(1, np.uint8)
    return _fineweb(offsets, data, char_table(), table, stop_chars is not None, short_len,
                    maxlen, _table_size(maxlen))


# --------------------------------------------------------------------------- c4 quality

C4_KEEP, C4_LOREM, C4_CURLY, C4_FEW_SENTENCES = 0, 1, 2, 3
C4_LINE_LONG_WORD, C4_LINE_NO_PUNCT, C4_LINE_FEW_WORDS, C4_LINE_JAVASCRIPT, C4_LINE_POLICY, \
    C4_LINE_KEPT = range(6)

_CITATION_EDIT = np.array([ord(c) for c in "[edit]"], np.int32)
_CITATION_NEEDED = np.array([ord(c) for c in "[citation needed]"], np.int32)


@numba.njit(cache=True, nogil=True)
def _match_at(buf, i, n, pat):
    if i + pat.shape[0] > n:
        return False
    for x in range(pat.shape[0]):
        if buf[i + x] != pat[x]:
            return False
    return True


@numba.njit(cache=True, nogil=True)
def _contains_lower(buf, n, pat):
    m = pat.shape[0]
    for i in range(n - m + 1):
        ok = True
        for x in range(m):
            if _lower_ascii(buf[i + x]) != pat[x]:
                ok = False
                break
        if ok:
            return True
    return False


@numba.njit(cache=True, nogil=True)
def count_sentences(buf, lo, hi, T, ts, te, ss, se):
    """Sentences of buf[lo:hi] as spaCy's sentencizer splits the tokens (1 for a non-empty
    text, +1 at each non-punctuation token after a sentence-final punctuation token)."""
    k = tokenize(buf, lo, hi, T, ts, te, ss, se)
    if k == 0:
        return 0
    sents = 1
    seen = False
    for j in range(k):
        a = ts[j]
        b = te[j]
        in_chars = b - a == 1 and _has(T, buf[a], TERMINAL)
        is_punct = True
        for x in range(a, b):
            if not _has(T, buf[x], PUNCT):
                is_punct = False
                break
        if seen and not is_punct and not in_chars:
            sents += 1
            seen = False
        elif in_chars:
            seen = True
    return sents


@numba.njit(cache=True, nogil=True)
def _encode(out, o, c):
    if c < 0x80:
        out[o] = c
        return o + 1
    if c < 0x800:
        out[o] = 0xC0 | (c >> 6)
        out[o + 1] = 0x80 | (c & 0x3F)
        return o + 2
    if c < 0x10000:
        out[o] = 0xE0 | (c >> 12)
        out[o + 1] = 0x80 | ((c >> 6) & 0x3F)
        out[o + 2] = 0x80 | (c & 0x3F)
        return o + 3
    out[o] = 0xF0 | (c >> 18)
    out[o + 1] = 0x80 | ((c >> 12) & 0x3F)
    out[o + 2] = 0x80 | ((c >> 6) & 0x3F)
    out[o + 3] = 0x80 | (c & 0x3F)
    return o + 4


@numba.njit(cache=True, nogil=True)
def _c4(offsets, data, T, max_word_length, remove_citations, terminal_punct, min_words,
        lorem, javascript, curly, policy, policy_cp, policy_off, min_sentences, maxlen):
    nd = offsets.shape[0] - 1
    codes = np.zeros(nd, np.uint8)
    line_counts = np.zeros(6, np.int64)
    out = np.empty(data.shape[0], np.uint8)
    out_off = np.zeros(nd + 1, np.int64)
    cp, ts, te, ss, se = _scratch(maxlen)
    buf = np.empty(maxlen, np.int32)
    lorem_pat = np.array([108, 111, 114, 101, 109, 32, 105, 112, 115, 117, 109], np.int32)
    js_pat = np.array([106, 97, 118, 97, 115, 99, 114, 105, 112, 116], np.int32)
    npol = policy_off.shape[0] - 1
    o = 0
    for d in range(nd):
        n = decode_doc(data, offsets[d], offsets[d + 1], cp)
        doc_start = o
        sentences = 0
        code = 0
        kept_any = False
        counts = np.zeros(6, np.int64)
        pos = 0
        while pos < n:
            e, nxt = _next_line(cp, pos, n, T)
            a, b = _strip(cp, pos, e, T)
            pos = nxt
            # words (whitespace split of the stripped line) and the longest one
            words = 0
            longest = 0
            i, j = _next_piece(cp, a, b, T)
            while i < b:
                words += 1
                longest = max(longest, j - i)
                i, j = _next_piece(cp, j, b, T)
            if max_word_length >= 0 and longest > max_word_length:
                counts[C4_LINE_LONG_WORD] += 1
                continue
            # the line without citation marks
            m = 0
            i = a
            while i < b:
                c = cp[i]
                if remove_citations and c == 91:
                    j = i + 1
                    while j < b and 48 <= cp[j] <= 57:
                        j += 1
                    if j < b and cp[j] == 93:
                        i = j + 1
                        continue
                    if _match_at(cp, i, b, _CITATION_EDIT):
                        i += _CITATION_EDIT.shape[0]
                        continue
                    if _match_at(cp, i, b, _CITATION_NEEDED):
                        i += _CITATION_NEEDED.shape[0]
                        continue
                buf[m] = c
                m += 1
                i += 1
            if terminal_punct:
                last = buf[m - 1] if m else 0
                if not (last == 46 or last == 63 or last == 33 or last == 34 or last == 39) or (
                        m >= 3 and buf[m - 1] == 46 and buf[m - 2] == 46 and buf[m - 3] == 46):
                    counts[C4_LINE_NO_PUNCT] += 1
                    continue
            if words < min_words:
                counts[C4_LINE_FEW_WORDS] += 1
                continue
            if lorem and _contains_lower(buf, m, lorem_pat):
                code = C4_LOREM
                break
            if javascript and _contains_lower(buf, m, js_pat):
                counts[C4_LINE_JAVASCRIPT] += 1
                continue
            if curly:
                has_curly = False
                for x in range(m):
                    if buf[x] == 123:
                        has_curly = True
                        break
                if has_curly:
                    code = C4_CURLY
                    break
            if policy:
                hit = False
                for p in range(npol):
                    if _contains_lower(buf, m, policy_cp[policy_off[p]: policy_off[p + 1]]):
                        hit = True
                        break
                if hit:
                    counts[C4_LINE_POLICY] += 1
                    continue
            if min_sentences >= 0:
                sentences += count_sentences(buf, 0, m, T, ts, te, ss, se)
            counts[C4_LINE_KEPT] += 1
            if kept_any:
                out[o] = 10
                o += 1
            kept_any = True
            for x in range(m):
                o = _encode(out, o, buf[x])
        if code == 0 and sentences < min_sentences:
            code = C4_FEW_SENTENCES
        if code != 0:
            o = doc_start
        else:
            # "\n".join(kept).strip(): only the ends can carry whitespace
            a = doc_start
            while a < o and (out[a] == 32 or 9 <= out[a] <= 13):
                a += 1
            b = o
            while b > a and (out[b - 1] == 32 or 9 <= out[b - 1] <= 13):
                b -= 1
            if a > doc_start:
                for x in range(b - a):
                    out[doc_start + x] = out[a + x]
            o = doc_start + (b - a)
        codes[d] = code
        out_off[d + 1] = o
        for x in range(6):
            line_counts[x] += counts[x]
    return codes, out[:o].copy(), out_off, line_counts


# --------------------------------------------------------------------------- word counts

@numba.njit(cache=True, nogil=True)
def _count_tokens(offsets, data, T, nonsymbol_only, maxlen):
    nd = offsets.shape[0] - 1
    out = np.zeros(nd, np.int64)
    cp, ts, te, ss, se = _scratch(maxlen)
    for d in range(nd):
        n = decode_doc(data, offsets[d], offsets[d + 1], cp)
        k = tokenize(cp, 0, n, T, ts, te, ss, se)
        if not nonsymbol_only:
            out[d] = k
            continue
        words = 0
        for j in range(k):
            for x in range(ts[j], te[j]):
                if (T[cp[x]] & SYMBOL) == 0:
                    words += 1
                    break
        out[d] = words
    return out


def count_tokens(offsets, data, nonsymbol_only: bool) -> np.ndarray:
    """Word tokens per document (only those with a non-punctuation character if asked)."""
    return _count_tokens(offsets, data, char_table(), nonsymbol_only, _max_len(offsets))
