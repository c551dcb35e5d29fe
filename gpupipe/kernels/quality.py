"""Per-document measures of the Gopher quality, FineWeb and C4 filters, and C4's line rewriter
(datatrove 0.10's semantics; tests/stages/test_quality_filters.py holds a plain-Python reference).
The filters in `gpupipe.stages.filters.quality`
decide with vectorised numpy from these measures."""

from __future__ import annotations

import numpy as np

from gpupipe.charsets import ALPHA, SYMBOL, TERMINAL, char_table, chars_table
from gpupipe.kernels.repetition import dup_stats, hash_span
from gpupipe.kernels.target import device, entry, max_len, table_size
from gpupipe.kernels.utf8 import decode_doc, has, next_line, strip
from gpupipe.kernels.words import (
    DOT,
    ELLIPSIS,
    count_sentences,
    lower_ascii,
    next_piece,
    scratch,
    tokenize,
)

__all__ = [
    "C4_LINE_FEW_WORDS", "C4_LINE_JAVASCRIPT", "C4_LINE_KEPT", "C4_LINE_LONG_WORD",
    "C4_LINE_NO_PUNCT", "C4_LINE_POLICY", "C4_LINE_RULES", "GQ_ALPHA_WORDS", "GQ_BULLET_LINES",
    "GQ_ELLIPSES", "GQ_ELLIPSIS_LINES", "GQ_HASHES", "GQ_LINES", "GQ_NONSYM", "GQ_NONSYM_CHARS",
    "GQ_STOP_WORDS", "GQ_WORDS", "c4_rewrite", "fineweb_features", "gopher_quality_features",
    "pattern_table",
]

# --------------------------------------------------------------------------- gopher quality

GQ_WORDS, GQ_NONSYM, GQ_NONSYM_CHARS, GQ_ALPHA_WORDS, GQ_HASHES, GQ_ELLIPSES, GQ_LINES, \
    GQ_BULLET_LINES, GQ_ELLIPSIS_LINES, GQ_STOP_WORDS = range(10)
GQ_MEASURES = 10


def pattern_table(words) -> tuple[np.ndarray, np.ndarray]:
    """``(code points int32, offsets int64)`` of a list of strings, for the kernels."""
    cps = np.array([ord(c) for w in words for c in w], dtype=np.int32)
    off = np.zeros(len(words) + 1, np.int64)
    off[1:] = np.cumsum([len(w) for w in words])
    return cps, off


@device
def _ends_with_ellipsis(cp, a, b):
    if b - a >= 1 and cp[b - 1] == ELLIPSIS:
        return True
    return b - a >= 3 and cp[b - 1] == DOT and cp[b - 2] == DOT and cp[b - 3] == DOT


@device
def gopher_quality_doc(data, start, end, T, stop_cp, stop_off, cp, ts, te, ss, se, seen, o):
    """The `GQ_MEASURES` measures of ``data[start:end]`` into ``o``; ``seen`` holds one flag per
    stop word."""
    n = decode_doc(data, start, end, cp)
    k = tokenize(cp, 0, n, T, ts, te, ss, se)
    nstop = stop_off.shape[0] - 1
    for s in range(nstop):
        seen[s] = False
    nonsym = 0
    nonsym_chars = 0
    alpha_words = 0
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
        elif c == ELLIPSIS:
            ellipses += 1
        elif c == DOT and i + 2 < n and cp[i + 1] == DOT and cp[i + 2] == DOT:
            ellipses += 1
            i += 3
            continue
        i += 1
    lines = 0
    bullets = 0
    ell_lines = 0
    pos = 0
    while pos < n:
        e, nxt = next_line(cp, pos, n, T)
        lines += 1
        a, b = strip(cp, pos, e, T)
        if b > a and (cp[a] == 0x2022 or cp[a] == 45):
            bullets += 1
        if _ends_with_ellipsis(cp, a, b):
            ell_lines += 1
        pos = nxt
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


@entry
def _gopher_quality_cpu(offsets, data, T, stop_cp, stop_off, maxlen):
    nd = offsets.shape[0] - 1
    out = np.zeros((nd, GQ_MEASURES), np.int64)
    cp, ts, te, ss, se = scratch(maxlen)
    seen = np.zeros(max(stop_off.shape[0] - 1, 1), np.bool_)
    for d in range(nd):
        gopher_quality_doc(data, offsets[d], offsets[d + 1], T, stop_cp, stop_off, cp, ts, te,
                           ss, se, seen, out[d])
    return out


def gopher_quality_features(offsets, data, stop_words: list[str]) -> np.ndarray:
    """int64[n, 10] per document: words, non-symbol words, their characters, words with a
    letter, ``#`` count, ellipsis count, lines, bullet lines, ellipsis lines, distinct stop words."""
    stop_cp, stop_off = pattern_table(stop_words)
    return _gopher_quality_cpu(offsets, data, char_table(), stop_cp, stop_off, max_len(offsets))


# --------------------------------------------------------------------------- fineweb quality

FW_MEASURES = 7


@device
def fineweb_doc(data, start, end, T, stop_table, use_table, short_len, cp, ts, te, ss, se,
                seg_h, seg_l, keys, used, o):
    """Into ``o``: non-empty lines, those ending in a stop char, short lines, duplicate line
    characters, characters without newlines, newlines, words."""
    n = decode_doc(data, start, end, cp)
    m = 0
    term = 0
    short = 0
    newlines = 0
    s = 0
    for i in range(n + 1):
        if i == n or cp[i] == 10:
            if i < n:
                newlines += 1
            a, b = strip(cp, s, i, T)
            if b > a:
                seg_h[m] = hash_span(cp, s, i)
                seg_l[m] = i - s
                m += 1
                last = cp[i - 1]
                if use_table:
                    if stop_table[last]:
                        term += 1
                elif has(T, last, TERMINAL):
                    term += 1
                if i - s <= short_len:
                    short += 1
            s = i + 1
    o[0] = m
    o[1] = term
    o[2] = short
    o[3] = 0
    if m:
        o[3] = dup_stats(seg_h, seg_l, m, keys, used)[1]
    o[4] = n - newlines
    o[5] = newlines
    o[6] = tokenize(cp, 0, n, T, ts, te, ss, se)


@entry
def _fineweb_cpu(offsets, data, T, stop_table, use_table, short_len, maxlen, tsize):
    nd = offsets.shape[0] - 1
    out = np.zeros((nd, FW_MEASURES), np.int64)
    cp, ts, te, ss, se = scratch(maxlen)
    seg_h = np.empty(maxlen, np.uint64)
    seg_l = np.empty(maxlen, np.int64)
    keys = np.zeros(tsize, np.uint64)
    used = np.empty(tsize, np.int64)
    for d in range(nd):
        fineweb_doc(data, offsets[d], offsets[d + 1], T, stop_table, use_table, short_len, cp,
                    ts, te, ss, se, seg_h, seg_l, keys, used, out[d])
    return out


def fineweb_stop_table(stop_chars: str | None) -> np.ndarray:
    return chars_table(stop_chars) if stop_chars is not None else np.zeros(1, np.uint8)


def fineweb_features(offsets, data, stop_chars: str | None, short_len: int) -> np.ndarray:
    """int64[n, 7]: non-empty lines, those ending in a stop char, those of <= short_len chars,
    duplicate line characters, characters without newlines, newlines, words."""
    maxlen = max_len(offsets)
    return _fineweb_cpu(offsets, data, char_table(), fineweb_stop_table(stop_chars),
                        stop_chars is not None, short_len, maxlen, table_size(maxlen))


# --------------------------------------------------------------------------- c4 quality

C4_KEEP, C4_LOREM, C4_CURLY, C4_FEW_SENTENCES = 0, 1, 2, 3
C4_LINE_LONG_WORD, C4_LINE_NO_PUNCT, C4_LINE_FEW_WORDS, C4_LINE_JAVASCRIPT, C4_LINE_POLICY, \
    C4_LINE_KEPT = range(6)
C4_LINE_RULES = 6

_CITATION_EDIT = np.array([ord(c) for c in "[edit]"], np.int32)
_CITATION_NEEDED = np.array([ord(c) for c in "[citation needed]"], np.int32)
_LOREM = np.array([ord(c) for c in "lorem ipsum"], np.int32)
_JAVASCRIPT = np.array([ord(c) for c in "javascript"], np.int32)


@device
def _match_at(buf, i, n, pat):
    if i + pat.shape[0] > n:
        return False
    for x in range(pat.shape[0]):
        if buf[i + x] != pat[x]:
            return False
    return True


@device
def _contains_lower(buf, n, pat, lo, hi):
    """``pat[lo:hi]`` occurs in buf[:n] ignoring ASCII case."""
    m = hi - lo
    for i in range(n - m + 1):
        ok = True
        for x in range(m):
            if lower_ascii(buf[i + x]) != pat[lo + x]:
                ok = False
                break
        if ok:
            return True
    return False


@device
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


@device
def c4_doc(data, start, end, T, max_word_length, remove_citations, terminal_punct, min_words,
           lorem, javascript, curly, policy, policy_cp, policy_off, min_sentences, cp, ts, te,
           ss, se, buf, out, o, counts):
    """C4's rules on ``data[start:end]``: the kept lines are written as UTF-8 from ``out[o]``
    (never more bytes than the input), lines removed per rule are added to ``counts``. Returns
    (reason code, end of the written text); a dropped document writes nothing."""
    n = decode_doc(data, start, end, cp)
    doc_start = o
    sentences = 0
    code = 0
    kept_any = False
    npol = policy_off.shape[0] - 1
    pos = 0
    while pos < n:
        e, nxt = next_line(cp, pos, n, T)
        a, b = strip(cp, pos, e, T)
        pos = nxt
        # words (whitespace split of the stripped line) and the longest one
        words = 0
        longest = 0
        i, j = next_piece(cp, a, b, T)
        while i < b:
            words += 1
            longest = max(longest, j - i)
            i, j = next_piece(cp, j, b, T)
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
        if lorem and _contains_lower(buf, m, _LOREM, 0, _LOREM.shape[0]):
            code = C4_LOREM
            break
        if javascript and _contains_lower(buf, m, _JAVASCRIPT, 0, _JAVASCRIPT.shape[0]):
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
                if _contains_lower(buf, m, policy_cp, policy_off[p], policy_off[p + 1]):
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
        return code, doc_start
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
    return code, doc_start + (b - a)


@entry
def _c4_cpu(offsets, data, T, max_word_length, remove_citations, terminal_punct, min_words,
            lorem, javascript, curly, policy, policy_cp, policy_off, min_sentences, maxlen):
    nd = offsets.shape[0] - 1
    codes = np.zeros(nd, np.uint8)
    counts = np.zeros((nd, C4_LINE_RULES), np.int64)
    out = np.empty(data.shape[0], np.uint8)
    out_off = np.zeros(nd + 1, np.int64)
    cp, ts, te, ss, se = scratch(maxlen)
    buf = np.empty(maxlen, np.int32)
    o = 0
    for d in range(nd):
        code, o = c4_doc(data, offsets[d], offsets[d + 1], T, max_word_length, remove_citations,
                         terminal_punct, min_words, lorem, javascript, curly, policy, policy_cp,
                         policy_off, min_sentences, cp, ts, te, ss, se, buf, out, o, counts[d])
        codes[d] = code
        out_off[d + 1] = o
    return codes, out[:o].copy(), out_off, counts


def c4_rewrite(offsets, data, *, max_word_length: int, remove_citations: bool,
               terminal_punct: bool, min_words: int, lorem: bool, javascript: bool, curly: bool,
               policy: bool, policy_substrings, min_sentences: int):
    """(reason codes uint8[n], rewritten UTF-8 data, its offsets int64[n + 1], lines removed per
    rule and kept int64[n, 6]); a dropped document's rewritten text is empty."""
    pol_cp, pol_off = pattern_table([p.lower() for p in policy_substrings])
    return _c4_cpu(offsets, data, char_table(), max_word_length, remove_citations,
                   terminal_punct, min_words, lorem, javascript, curly, policy, pol_cp, pol_off,
                   min_sentences, max_len(offsets))
