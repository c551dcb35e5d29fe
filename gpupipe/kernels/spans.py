"""Span dedup: documents cut into units (lines, paragraphs or sentences), each unit hashed after
normalisation, a hash per window of ``span`` consecutive units; and the cut that removes units.

**Units** tile a document: unit ``k`` covers the bytes ``[ends[k - 1], ends[k])`` (unit 0
from the document's start), so cutting units never leaves a hole or a seam. A unit ends

* ``line``: after its ``\\n``;
* ``paragraph``: after the run of blank lines that closes it (two or more ``\\n`` with only
  spaces, tabs and ``\\r`` between them);
* ``sentence``: where spaCy's sentencizer ends one, as datatrove's ``SentenceDedup`` splits
  English: over the document's word tokens (`gpupipe.kernels.words`, spaCy's blank English
  tokenizer approximated), a sentence ends after a token that is sentence-final punctuation
  (``. ! ?`` and their Unicode kin) and the punctuation tokens after it (closing quotes,
  brackets, more stops), at the end of that last token; so ``e.g.`` or ``U.S.``, kept as one
  token, ends nothing; whitespace other than one space between words is a token (spaCy's), so
  a full stop followed by a line break ends a sentence there. The whitespace after a sentence starts the
  next one, as in datatrove's filter. Besides, the full stops of scripts written without spaces
  (``。｡！？``) end a sentence right after them and their closing brackets, where the English
  tokenizer sees one long word.

The last unit ends at the end of the document. Text with nothing left after normalisation (a
``-----`` line, a blank line) is no unit of its own: it joins the unit after it.

**Normalisation** (`norm_table`) maps each code point to what is hashed: lower case with accents
stripped (``case``), every run of digits to ``0`` (``digits``), punctuation and symbols to a
separator (``punctuation``), runs of separators to one space and none at the ends
(``whitespace``, which also makes every whitespace character a separator). A unit's hash is
``fmix64`` of the FNV-1a of its normalised code points; a window's hash combines its units' in
order (`window_hash`). `reference_normalize` is the same mapping in plain Python.

`span_units` and `cut_units` are the CPU launchers; `gpupipe.kernels.gpu` has the CUDA ones,
over the same routines.
"""

from __future__ import annotations

import functools
import unicodedata

import numpy as np

from gpupipe.charsets import char_table
from gpupipe.kernels.hashing import fmix64
from gpupipe.kernels.target import device, entry, max_len
from gpupipe.kernels.utf8 import decode, decode_doc
from gpupipe.kernels.words import scratch, sentence_breaks, tokenize

__all__ = ["UNITS", "cut_units", "norm_table", "reference_normalize", "span_units"]

UNITS = {"line": 0, "paragraph": 1, "sentence": 2}

_U64 = np.uint64
_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)
_BASE = np.uint64(0x9E3779B97F4A7C15)

#: what the table says of a code point besides "hash this one"
SEPARATOR, IGNORED, DIGIT = -1, 0, -2

#: full stops of scripts written without spaces: a sentence ends right after them (and after
#: the closing brackets that follow), inside a run of text without spaces too
CJK_TERMINALS = "\u3002\uff61\uff01\uff1f"
#: closing quotes and brackets that stay with the sentence they close
CLOSERS = "\"')]}\u00bb\u2019\u201d\u203a\u300d\u300f\u3011\u3009\u300b\uff09\uff3d\uff5d"
#: whitespace that separates chunks (sentence unit), as Python's str.split
WHITESPACE = "".join(chr(c) for c in range(0x3001) if chr(c).isspace())


@functools.cache
def _categories() -> np.ndarray:
    """The first letter of each code point's Unicode category (planes 0-3; the rest are 'C')."""
    return np.array([ord(unicodedata.category(chr(c))[0]) for c in range(0x40000)], np.uint8)


@functools.cache
def norm_table(case: bool = True, digits: bool = True, punctuation: bool = True,
               whitespace: bool = True) -> np.ndarray:
    """int32[0x110000]: per code point `SEPARATOR`, `IGNORED`, `DIGIT` or the code point hashed.

    * letters, marks, digits: themselves; with ``case`` lower-cased and accents stripped (NFKD
      without its combining marks; a lone combining mark is ignored); with ``digits``, decimal
      digits are `DIGIT`;
    * punctuation and symbols: separators with ``punctuation``, else themselves;
    * whitespace: separators with ``whitespace``, else themselves;
    * controls, format characters, unassigned and private use: separators.
    """
    table = np.full(0x110000, SEPARATOR, dtype=np.int32)
    cat = _categories()
    for cp in np.flatnonzero(np.isin(cat, [ord("L"), ord("M"), ord("N")])):
        ch = chr(cp)
        if case:
            if unicodedata.combining(ch):
                table[cp] = IGNORED
                continue
            base = "".join(c for c in unicodedata.normalize("NFKD", ch)
                           if not unicodedata.combining(c)).lower()
            table[cp] = ord(base) if len(base) == 1 else (
                ord(ch.lower()) if len(ch.lower()) == 1 else cp)
        else:
            table[cp] = cp
        if digits and ch.isdecimal():
            table[cp] = DIGIT
    if not punctuation:
        ps = np.flatnonzero(np.isin(cat, [ord("P"), ord("S")]))
        table[ps] = ps
    space = np.array([ord(c) for c in WHITESPACE], np.int64)
    table[space] = SEPARATOR if whitespace else space
    return table


def reference_normalize(text: str, table: np.ndarray, whitespace: bool = True) -> str:
    """The normalised text of ``text`` as the kernels hash it (plain Python: the reference of
    the tests)."""
    out: list[str] = []
    pending = in_digits = False
    for ch in text:
        v = int(table[ord(ch)])
        if v == SEPARATOR:
            pending, in_digits = bool(out), False
        elif v == IGNORED:
            continue
        elif v == DIGIT and in_digits:
            continue
        else:
            if pending:
                out.append(" ")
                pending = False
            out.append("0" if v == DIGIT else chr(v))
            in_digits = v == DIGIT
    return "".join(out)


def _class_table() -> np.ndarray:
    """uint8[0x10000]: 1 whitespace (``str.isspace``), 3 a CJK full stop, 4 a closing quote or
    bracket, 0 the rest."""
    t = np.zeros(0x10000, np.uint8)
    t[[ord(c) for c in WHITESPACE]] = 1
    t[[ord(c) for c in CLOSERS]] = 4
    t[[ord(c) for c in CJK_TERMINALS]] = 3
    return t


CLASS_TABLE = _class_table()


@device(inline=True)
def _hash_char(v, h, content, pending, in_digits):
    """One code point into a unit's running hash: (h, content, pending, in_digits)."""
    if v == SEPARATOR:
        return h, content, content, False
    if v == IGNORED or (v == DIGIT and in_digits):
        return h, content, pending, in_digits
    if pending:
        h = (h ^ _U64(32)) * _FNV_PRIME
    c = _U64(48) if v == DIGIT else _U64(v)
    return (h ^ c) * _FNV_PRIME, True, False, v == DIGIT


@device(inline=True)
def window_hash(uh, k, span):
    """Hash of the ``span`` units from ``k`` (their hashes ``uh``), in order."""
    g = _U64(span)
    for j in range(span):
        g = fmix64(g * _BASE + uh[k + j])
    return g


@device(inline=True)
def _close_unit(ends, uh, n, at, h):
    """Unit ``n`` ends at byte ``at`` with running hash ``h``: the next unit's fresh state
    (n, h, content, pending, in_digits)."""
    ends[n] = at
    uh[n] = fmix64(h)
    return n + 1, _FNV_OFFSET, False, False, False


@device
def split_doc(data, start, end, unit, table, classes, T, cp, ts, te, ss, se, ends, uh):
    """Cut ``data[start:end]`` into units: writes each unit's end (absolute byte offset) into
    ``ends`` and its hash into ``uh`` (both as long as the document); returns how many. The
    sentence unit tokenizes the document first (``T``: `gpupipe.charsets.char_table`; ``cp``,
    ``ts``, ``te``, ``ss``, ``se``: the tokenizer's scratch, as long as the document)."""
    n = 0
    h = _FNV_OFFSET
    content = False
    pending = False
    in_digits = False
    nb = 0      # sentence: the sentencizer's breaks (code point positions, in ss) and the next
    b = 0
    c = 0       # the code point position of byte i
    cjk = False  # a CJK full stop waits for its closing brackets
    if unit == 2:
        m = decode_doc(data, start, end, cp)
        nb = sentence_breaks(cp, m, tokenize(cp, 0, m, T, ts, te, ss, se), T, ts, te, True, ss)
    i = start
    while i < end:
        ch, step = decode(data, i)
        at = -1
        if unit == 2:
            if b < nb and ss[b] == c:
                at = i
                b += 1
            k = classes[ch] if ch < classes.shape[0] else 0
            if cjk and k != 4:
                at = i
                cjk = False
            if k == 3:
                cjk = True
        if at >= 0 and content:
            n, h, content, pending, in_digits = _close_unit(ends, uh, n, at, h)
        v = table[ch] if ch < table.shape[0] else -1
        h, content, pending, in_digits = _hash_char(v, h, content, pending, in_digits)
        i += step
        c += 1
        if unit != 2 and ch == 10:
            at = i
            if unit == 1:   # a paragraph ends only at a blank line, after all of them
                blank = False
                j = i
                while j < end:
                    x = data[j]
                    if x == 10:
                        blank = True
                        at = j + 1
                    elif x != 32 and x != 9 and x != 13:
                        break
                    j += 1
                if not blank:
                    continue
                while i < at:   # the blank lines (ASCII) belong to the paragraph they close
                    h, content, pending, in_digits = _hash_char(table[data[i]], h, content,
                                                                pending, in_digits)
                    i += 1
            if content:
                n, h, content, pending, in_digits = _close_unit(ends, uh, n, at, h)
    if content:
        n = _close_unit(ends, uh, n, end, h)[0]
    return n


@device
def doc_windows(uh, n, span, wh):
    """The hash of every window of ``span`` units of a document's ``n`` units into ``wh``;
    returns how many (none when it has fewer than ``span`` units)."""
    if n < span:
        return 0
    for k in range(n - span + 1):
        wh[k] = window_hash(uh, k, span)
    return n - span + 1


@device
def cut_doc(data, start, end, ends, nunits, cut, classes, out, o):
    """Copy ``data[start:end]`` without the units flagged in ``cut`` to ``out[o:]``; after a
    cut, without the whitespace it would start with (``str.lstrip``, as datatrove's filter).
    Returns (bytes written, whether a unit was cut)."""
    w = o
    a = start
    any_cut = False
    for k in range(nunits + 1):
        b = ends[k] if k < nunits else end   # past the last unit: what has nothing to hash
        if k < nunits and cut[k]:
            any_cut = True
        else:
            for j in range(a, b):
                out[w] = data[j]
                w += 1
        a = b
    if not any_cut:
        return w - o, False
    s = o
    while s < w:
        c, step = decode(out, s)
        if c < classes.shape[0] and classes[c] == 1:
            s += step
        else:
            break
    if s > o:
        for j in range(s, w):
            out[o + j - s] = out[j]
        w -= s - o
    return w - o, True


# --------------------------------------------------------------------------- CPU launchers

@entry
def _span_units_cpu(offsets, data, unit, span, table, classes, T, ends_tmp, uh_tmp, wh_tmp,
                    nunits, nwin, ends, wh):
    cp, ts, te, ss, se = scratch(ends_tmp.shape[0] if unit == 2 else 1)
    u = 0
    w = 0
    for d in range(nunits.shape[0]):
        n = split_doc(data, offsets[d], offsets[d + 1], unit, table, classes, T, cp, ts, te, ss,
                      se, ends_tmp, uh_tmp)
        m = doc_windows(uh_tmp, n, span, wh_tmp)
        if u + n > ends.shape[0]:
            bigger = np.empty(max(2 * ends.shape[0], u + n), np.int64)
            bigger[:u] = ends[:u]
            ends = bigger
        if w + m > wh.shape[0]:
            more = np.empty(max(2 * wh.shape[0], w + m), np.uint64)
            more[:w] = wh[:w]
            wh = more
        ends[u:u + n] = ends_tmp[:n]
        wh[w:w + m] = wh_tmp[:m]
        nunits[d] = n
        nwin[d] = m
        u += n
        w += m
    return ends[:u], wh[:w]


def span_units(offsets, data, unit: str, span: int, table: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per document its units and windows: (units per document, every unit's end as an absolute
    byte offset into ``data``, windows per document, every window's hash), flat in document
    order. A document with fewer than ``span`` units has no window."""
    offsets, data = np.asarray(offsets, np.int64), np.asarray(data)
    n = len(offsets) - 1
    nunits, nwin = np.zeros(n, np.int64), np.zeros(n, np.int64)
    if n == 0:
        return nunits, np.zeros(0, np.int64), nwin, np.zeros(0, np.uint64)
    m = max_len(offsets)
    guess = max(16, int(offsets[-1] - offsets[0]) // 32)
    ends, wh = _span_units_cpu(offsets, data, UNITS[unit], span, table, CLASS_TABLE,
                               char_table(), np.empty(m, np.int64), np.empty(m, np.uint64),
                               np.empty(m, np.uint64), nunits, nwin,
                               np.empty(guess, np.int64), np.empty(guess, np.uint64))
    return nunits, ends, nwin, wh


@entry
def _cut_units_cpu(offsets, data, unit_off, ends, cut, classes, out, lens, changed):
    w = 0
    for d in range(lens.shape[0]):
        u = unit_off[d]
        n = unit_off[d + 1] - u
        length, ch = cut_doc(data, offsets[d], offsets[d + 1], ends[u:u + n], n,
                             cut[u:u + n], classes, out, w)
        lens[d] = length
        changed[d] = ch
        w += length
    return w


def cut_units(offsets, data, nunits, ends, cut) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Documents without their units flagged in ``cut`` (one flag per unit of `span_units`):
    (new int64 offsets, new UTF-8 data, changed per document)."""
    offsets, data = np.asarray(offsets, np.int64), np.asarray(data)
    n = len(offsets) - 1
    unit_off = np.zeros(n + 1, np.int64)
    np.cumsum(nunits, out=unit_off[1:])
    out = np.empty(max(int(offsets[-1] - offsets[0]) if n else 0, 1), np.uint8)
    lens, changed = np.zeros(n, np.int64), np.zeros(n, np.bool_)
    if n:
        _cut_units_cpu(offsets, data, unit_off, np.asarray(ends, np.int64),
                       np.asarray(cut, np.bool_), CLASS_TABLE, out, lens, changed)
    new_off = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=new_off[1:])
    return new_off, out[:new_off[-1]], changed
