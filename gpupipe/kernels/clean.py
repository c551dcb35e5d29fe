"""`normalize_text`'s clean-up as one pass per document: line endings, control characters,
Unicode spaces, runs of spaces, trailing spaces of lines, blank lines and the ends of the text.

Each step is the regular expression the stage documents, applied in the same order, but
written as a scan over the UTF-8 bytes that both numba targets compile (one source for the CPU
and CUDA). Unicode normalisation sits between the first two steps and the rest; it stays on the
host (Arrow), for the few documents the quick check cannot clear, so a document that needs it is
cleaned in two calls: ``pre_only`` (line endings and controls), then the remaining steps.

Every step only removes characters or replaces one with an ASCII space or newline, so a
document is changed exactly when its length changed or a one-byte character was replaced: no
comparison of the texts is needed.
"""

from __future__ import annotations

import numpy as np

from gpupipe.kernels.target import device, entry
from gpupipe.kernels.utf8 import decode

#: `pyarrow.compute.utf8_trim_whitespace`'s whitespace (tested against Arrow on every code point)
TRIM_WHITESPACE = (0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x1C, 0x1D, 0x1E, 0x1F, 0x20, 0x85, 0xA0,
                   0x1680, *range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F, 0x205F, 0x3000)


@device(inline=True)
def is_trim_whitespace(c):
    if c < 0x80:
        return (0x09 <= c <= 0x0D) or (0x1C <= c <= 0x20)
    return (c == 0x85 or c == 0xA0 or c == 0x1680 or (0x2000 <= c <= 0x200A) or c == 0x2028
            or c == 0x2029 or c == 0x202F or c == 0x205F or c == 0x3000)


@device(inline=True)
def _blank(b):
    return b == 32 or b == 9


@device
def collapse_spaces(out, a, e):
    """``[ \\t]{2,}`` -> one space, in place on ``out[a:e]``; returns the new end."""
    w = a
    r = a
    while r < e:
        c = out[r]
        if _blank(c):
            s = r
            while r < e and _blank(out[r]):
                r += 1
            out[w] = 32 if r - s >= 2 else c
            w += 1
        else:
            out[w] = c
            w += 1
            r += 1
    return w


@device
def strip_lines(out, a, e):
    """``[ \\t]+\\n`` -> ``\\n``, then ``[ \\t]+$`` -> nothing, in place; returns the new end."""
    w = a
    r = a
    while r < e:
        c = out[r]
        if _blank(c):
            s = r
            while r < e and _blank(out[r]):
                r += 1
            if r == e or out[r] == 10:
                continue  # trailing blanks of a line, or of the text: dropped
            for k in range(s, r):
                out[w] = out[k]
                w += 1
        else:
            out[w] = c
            w += 1
            r += 1
    return w


@device
def limit_blank_lines(out, a, e, keep):
    """``\\n(?:[ \\t]*\\n){keep+1,}`` -> ``keep + 1`` newlines, in place; returns the new end.

    Greedy and leftmost, like the regular expression: from a newline, take as many
    ``[ \\t]*\\n`` groups as follow; a shorter run is left as it is."""
    w = a
    r = a
    while r < e:
        c = out[r]
        if c != 10:
            out[w] = c
            w += 1
            r += 1
            continue
        j = r + 1
        groups = 0
        while True:
            q = j
            while q < e and _blank(out[q]):
                q += 1
            if q < e and out[q] == 10:
                groups += 1
                j = q + 1
            else:
                break
        if groups >= keep + 1:
            for _ in range(keep + 1):
                out[w] = 10
                w += 1
            r = j
        else:
            out[w] = 10
            w += 1
            r += 1
    return w


@device
def trim(out, a, e):
    """Arrow's ``utf8_trim_whitespace`` in place; returns the new end (text moved to ``a``)."""
    s = a
    while s < e:
        c, step = decode(out, s)
        if not is_trim_whitespace(c):
            break
        s += step
    t = e
    while t > s:
        k = t - 1
        while k > s and (out[k] & 0xC0) == 0x80:
            k -= 1
        c, step = decode(out, k)
        if not is_trim_whitespace(c):
            break
        t = k
    if s > a:
        for x in range(t - s):
            out[a + x] = out[s + x]
    return a + (t - s)


@device
def clean_doc(data, start, end, out, o, pre_only, newlines, remove_control, unicode_spaces,
              collapse, lines, max_blank, strip):
    """Clean ``data[start:end]`` into ``out[o:]``; returns (end in ``out``, changed).

    ``pre_only``: only the steps before Unicode normalisation (line endings, controls).
    ``max_blank`` < 0: blank lines are not limited.

    The first scan maps characters and notes whether a later step has anything to do (two
    blanks in a row, a blank before a newline or at the end, ``max_blank + 2`` newlines with
    only blanks between them); a step with nothing to do is skipped, which most documents
    allow."""
    i = start
    w = o
    replaced = False
    spaces = unicode_spaces and not pre_only
    prev_blank = False
    newline_run = 0
    need_collapse = False
    need_lines = False
    need_blank = False
    while i < end:
        b = data[i]
        if b > 32 and b < 127:  # printable ASCII other than space: the common case
            out[w] = b
            w += 1
            i += 1
            prev_blank = False
            newline_run = 0
            continue
        e = -1  # the byte emitted for an ASCII space, control or any non-ASCII character
        if b < 0x80:
            if newlines and b == 13:
                e = 10
                if i + 1 < end and data[i + 1] == 10:
                    i += 1  # CR LF -> LF
                else:
                    replaced = True
            elif newlines and (b == 11 or b == 12):
                e = 10
                replaced = True
            elif not (remove_control and (b <= 8 or 14 <= b <= 31 or b == 127)):
                e = b
            i += 1
        else:
            c, step = decode(data, i)
            if newlines and (c == 0x85 or c == 0x2028 or c == 0x2029):
                e = 10
            elif remove_control and (c <= 0x9F or c == 0xFEFF or c == 0x200B):
                pass  # C1 controls (0x80-0x9f), BOM, zero-width space
            elif spaces and (c == 0xA0 or c == 0x1680 or 0x2000 <= c <= 0x200A or c == 0x202F
                             or c == 0x205F or c == 0x3000):
                e = 32
            else:
                for k in range(step):
                    out[w + k] = data[i + k]
                w += step
                prev_blank = False
                newline_run = 0
            i += step
        if e < 0:
            continue
        out[w] = e
        w += 1
        if e == 10:
            need_lines = need_lines or prev_blank
            newline_run += 1
            need_blank = need_blank or newline_run >= max_blank + 2
            prev_blank = False
        elif e == 32 or e == 9:
            need_collapse = need_collapse or prev_blank
            prev_blank = True
        else:
            prev_blank = False
            newline_run = 0
    need_lines = need_lines or prev_blank
    if not pre_only:
        if collapse and need_collapse:
            w = collapse_spaces(out, o, w)
        if lines and need_lines:
            w = strip_lines(out, o, w)
        if max_blank >= 0 and need_blank:
            w = limit_blank_lines(out, o, w, max_blank)
        if strip:
            w = trim(out, o, w)
    return w, replaced or (w - o) != (end - start)


@entry
def _clean_cpu(offsets, data, pre_only, newlines, remove_control, unicode_spaces, collapse,
               lines, max_blank, strip):
    nd = offsets.shape[0] - 1
    out = np.empty(max(data.shape[0], 1), np.uint8)
    out_off = np.zeros(nd + 1, np.int64)
    changed = np.zeros(nd, np.bool_)
    o = 0
    for d in range(nd):
        o, changed[d] = clean_doc(data, offsets[d], offsets[d + 1], out, o, pre_only[d],
                                  newlines, remove_control, unicode_spaces, collapse, lines,
                                  max_blank, strip)
        out_off[d + 1] = o
    return out_off, out[:o].copy(), changed


def clean_text(offsets, data, pre_only, *, newlines: bool, remove_control: bool,
               unicode_spaces: bool, collapse_spaces: bool, strip_lines: bool,
               max_blank_lines: int | None, strip: bool):
    """(offsets int64[n + 1], UTF-8 data, changed bool[n]) of the cleaned strings.
    ``pre_only`` (bool[n]): documents that get only the steps before Unicode normalisation."""
    return _clean_cpu(offsets, data, np.asarray(pre_only, dtype=np.bool_), newlines,
                      remove_control, unicode_spaces, collapse_spaces, strip_lines,
                      -1 if max_blank_lines is None else int(max_blank_lines), strip)
