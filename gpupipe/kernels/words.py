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
import pyarrow as pa

from gpupipe.charsets import (
    ALPHA,
    DIGIT,
    HYPHEN,
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
from gpupipe.kernels.target import device, entry, max_len
from gpupipe.kernels.utf8 import decode_doc, has, utf8_buffers

__all__ = ["count_sentences", "count_tokens", "lower_ascii", "next_piece", "scratch",
           "sentence_breaks", "token_spans", "tokenize", "tokenize_texts"]

DOT = 46
APOS = 39
RSQUO = 0x2019
ELLIPSIS = 0x2026

@device
def _is_apos(c):
    return c == APOS or c == RSQUO


@device
def lower_ascii(c):
    if 65 <= c <= 90:
        return c + 32
    if c == 0x212A:  # KELVIN SIGN lowercases to 'k'
        return 107
    return c


@device
def _contraction(cp, a, b):
    """Length of a contraction suffix of cp[a:b] (n't 'll 're 've 'm 'd 's), 0 if none."""
    m = b - a
    if m >= 4 and _is_apos(cp[b - 2]) and lower_ascii(cp[b - 1]) == 116 and \
            lower_ascii(cp[b - 3]) == 110:  # n't
        return 3
    if m >= 4 and _is_apos(cp[b - 3]):
        x, y = lower_ascii(cp[b - 2]), lower_ascii(cp[b - 1])
        if (x == 108 and y == 108) or (x == 114 and y == 101) or (x == 118 and y == 101):
            return 3
    if m >= 3 and _is_apos(cp[b - 2]):
        y = lower_ascii(cp[b - 1])
        if y == 109 or y == 100 or y == 115:  # 'm 'd 's
            return 2
    return 0


@device
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


@device
def _abbreviation(cp, a, b):
    """cp[a:b] is letters separated by single periods: e.g, U.S, i.e (a final period stays)."""
    if b - a < 3 or (b - a) % 2 == 0:
        return False
    for x in range(a, b):
        if (x - a) % 2 == 1:
            if cp[x] != DOT:
                return False
        elif not (65 <= cp[x] <= 90 or 97 <= cp[x] <= 122):
            return False
    return True


@device
def _url_like(cp, a, b, T):
    at = False
    for i in range(a, b):
        if cp[i] == 64:
            at = True
        elif at and cp[i] == DOT:
            return True  # an e-mail address
    # a host or file name: a period after a letter or digit, then 2+ lowercase letters to the end
    x = b - 1
    while x > a and has(T, cp[x], LOWER):
        x -= 1
    if x > a and cp[x] == DOT and b - x > 2 and has(T, cp[x - 1], ALPHA | DIGIT):
        slash = False
        for y in range(a, b):
            if cp[y] == 47:
                slash = True
                break
        if not slash:
            return True
    if b - a >= 4 and lower_ascii(cp[a]) == 119 and lower_ascii(cp[a + 1]) == 119 and \
            lower_ascii(cp[a + 2]) == 119 and cp[a + 3] == DOT:
        return True
    for i in range(a, b - 2):
        if cp[i] == 58 and cp[i + 1] == 47 and cp[i + 2] == 47:
            return True
    return False


@device
def _is_cannot(cp, a, b):
    return b - a == 6 and lower_ascii(cp[a]) == 99 and lower_ascii(cp[a + 1]) == 97 and \
        lower_ascii(cp[a + 2]) == 110 and lower_ascii(cp[a + 3]) == 110 and \
        lower_ascii(cp[a + 4]) == 111 and lower_ascii(cp[a + 5]) == 116


@device
def _split_piece(cp, a, b, T, ts, te, k, ss, se):
    """Tokens of the whitespace-free piece cp[a:b], appended at ts/te[k:]; returns the new k."""
    # most pieces are letters and digits only: no rule below splits those, but for "cannot"
    plain = True
    for x in range(a, b):
        t = T[cp[x]]
        if (t & (ALPHA | DIGIT)) == 0 or (t & (PREFIX | SUFFIX | HYPHEN)) != 0:
            plain = False
            break
    if plain and not _is_cannot(cp, a, b):
        ts[k] = a
        te[k] = b
        return k + 1
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
        if c == DOT and a + 1 < b and cp[a + 1] == DOT:
            e = a
            while e < b and cp[e] == DOT:
                e += 1
            ts[k] = a
            te[k] = e
            k += 1
            a = e
            continue
        if has(T, c, PREFIX) and not (c == 43 and a + 1 < b and has(T, cp[a + 1], DIGIT)):
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
        if c == DOT and b - 2 >= a and cp[b - 2] == DOT:
            e = b
            while e > a and cp[e - 1] == DOT:
                e -= 1
            ss[ns] = e
            se[ns] = b
            ns += 1
            b = e
            continue
        if has(T, c, SUFFIX):
            ss[ns] = b - 1
            se[ns] = b
            ns += 1
            b -= 1
            continue
        if c == DOT and b - 1 > a:
            p = cp[b - 2]
            inner = _abbreviation(cp, a, b - 1)  # e.g. U.S. keep their period
            lower_like = has(T, p, LOWER) or (has(T, p, ALPHA) and not has(T, p, UPPER))
            if not inner and (has(T, p, DIGIT | PUNCT | SUFFIX) or lower_like or (
                    b - 3 >= a and has(T, p, UPPER) and has(T, cp[b - 3], UPPER))):
                ss[ns] = b - 1
                se[ns] = b
                ns += 1
                b -= 1
                continue
            break
        if _is_cannot(cp, a, b):
            ss[ns] = a + 3
            se[ns] = b
            ns += 1
            b = a + 3
            break
        m = _contraction(cp, a, b)
        if m and b - m > a and has(T, cp[b - m - 1], ALPHA):
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
                if c == DOT and right == DOT:
                    e = x
                    while e < b and cp[e] == DOT:
                        e += 1
                    width = e - x
                elif c == ELLIPSIS:
                    width = 1
                elif has(T, c, HYPHEN) and has(T, left, ALPHA | DIGIT) and has(T, right, ALPHA):
                    width = 1
                elif (c == 47 or c == 58 or c == 60 or c == 61 or c == 62) and \
                        has(T, left, ALPHA | DIGIT) and has(T, right, ALPHA):
                    width = 1
                elif c == 44 and has(T, left, ALPHA) and has(T, right, ALPHA):
                    width = 1
                elif c == DOT and has(T, left, LOWER) and has(T, right, UPPER):
                    width = 1
                elif (c == 43 or c == 45 or c == 42 or c == 94) and has(T, left, DIGIT) and \
                        (has(T, right, DIGIT) or right == 45):
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


@device
def next_piece(cp, i, hi, T):
    """(start, end) of the next whitespace-free piece at or after i (start == hi: none left)."""
    while i < hi and has(T, cp[i], SPACE):
        i += 1
    j = i
    while j < hi and not has(T, cp[j], SPACE):
        j += 1
    return i, j


@device
def tokenize(cp, lo, hi, T, ts, te, ss, se):
    """Word tokens of cp[lo:hi] as (start, end) code point spans in ts/te; returns their number."""
    k = 0
    i, j = next_piece(cp, lo, hi, T)
    while i < hi:
        k = _split_piece(cp, i, j, T, ts, te, k, ss, se)
        i, j = next_piece(cp, j, hi, T)
    return k



@numba.njit(cache=True, nogil=True)
def scratch(maxlen):
    """A CPU launcher's buffers for one document of up to ``maxlen`` code points: code points,
    token spans, suffix stack."""
    return (np.empty(maxlen, np.int32), np.empty(maxlen, np.int64), np.empty(maxlen, np.int64),
            np.empty(maxlen, np.int64), np.empty(maxlen, np.int64))

@entry
def _tokenize_all(offsets, data, T, maxlen):
    nd = offsets.shape[0] - 1
    cp, ts, te, ss, se = scratch(maxlen)
    counts = np.zeros(nd, np.int64)
    spans = []
    for d in range(nd):
        n = decode_doc(data, offsets[d], offsets[d + 1], cp)
        k = tokenize(cp, 0, n, T, ts, te, ss, se)
        counts[d] = k
        for j in range(k):
            spans.append((ts[j], te[j]))
    return counts, spans


def token_spans(texts: list[str]) -> list[list[tuple[int, int]]]:
    """The (start, end) character spans of each text's word tokens."""
    arr = pa.array(texts, type=pa.large_string())
    offsets, data = utf8_buffers(arr)
    counts, spans = _tokenize_all(offsets, data, char_table(), max_len(offsets))
    out, j = [], 0
    for c in counts:
        out.append([(int(a), int(b)) for a, b in spans[j: j + c]])
        j += c
    return out


def tokenize_texts(texts: list[str]) -> list[list[str]]:
    """The word tokens of each text (for tests, notebooks and comparing with other tokenizers)."""
    return [[text[a:b] for a, b in spans] for text, spans in zip(texts, token_spans(texts))]


@device
def sentence_breaks(buf, n, k, T, ts, te, spaces, out):
    """Where spaCy's sentencizer ends sentences among the ``k`` tokens ``ts``/``te`` of
    ``buf[:n]``: a sentence-final punctuation token, then the punctuation after it, end one; the
    next token starts the next. Writes the end of each sentence but the last (the end of its last
    token, a code point position) into ``out``; returns how many.

    With ``spaces``, whitespace is tokenized as spaCy does: a run of whitespace other than one
    ``' '`` between words is a token of its own (not punctuation), so it starts a sentence after
    a full stop; counting sentences does not need it (datatrove drops blank sentences)."""
    m = 0
    seen = False
    for j in range(k + 1 if spaces else k):
        if spaces and seen:
            g0 = te[j - 1]
            g1 = ts[j] if j < k else n
            if g1 - g0 > 1 or (g1 - g0 == 1 and buf[g0] != 32):
                out[m] = g0
                m += 1
                seen = False
        if j == k:
            break
        a = ts[j]
        b = te[j]
        in_chars = b - a == 1 and has(T, buf[a], TERMINAL)
        is_punct = True
        for x in range(a, b):
            if not has(T, buf[x], PUNCT):
                is_punct = False
                break
        if seen and not is_punct and not in_chars:
            out[m] = te[j - 1]
            m += 1
            seen = False
        elif in_chars:
            seen = True
    return m


@device
def count_sentences(buf, lo, hi, T, ts, te, ss, se):
    """Sentences of buf[lo:hi] as spaCy's sentencizer splits the tokens (1 for a non-empty
    text, +1 at each non-punctuation token after a sentence-final punctuation token)."""
    k = tokenize(buf, lo, hi, T, ts, te, ss, se)
    if k == 0:
        return 0
    return 1 + sentence_breaks(buf, hi, k, T, ts, te, False, ss)   # (the stack is free again)


# --------------------------------------------------------------------------- word counts

@device
def count_tokens_doc(data, start, end, T, nonsymbol_only, cp, ts, te, ss, se):
    """Word tokens of ``data[start:end]`` (only those with a non-punctuation character if
    ``nonsymbol_only``)."""
    n = decode_doc(data, start, end, cp)
    k = tokenize(cp, 0, n, T, ts, te, ss, se)
    if not nonsymbol_only:
        return k
    words = 0
    for j in range(k):
        for x in range(ts[j], te[j]):
            if (T[cp[x]] & SYMBOL) == 0:
                words += 1
                break
    return words


@entry
def _count_tokens_cpu(offsets, data, T, nonsymbol_only, maxlen):
    nd = offsets.shape[0] - 1
    out = np.zeros(nd, np.int64)
    cp, ts, te, ss, se = scratch(maxlen)
    for d in range(nd):
        out[d] = count_tokens_doc(data, offsets[d], offsets[d + 1], T, nonsymbol_only,
                                  cp, ts, te, ss, se)
    return out


def count_tokens(offsets, data, nonsymbol_only: bool) -> np.ndarray:
    """Word tokens per document (only those with a non-punctuation character if asked)."""
    return _count_tokens_cpu(offsets, data, char_table(), nonsymbol_only, max_len(offsets))
