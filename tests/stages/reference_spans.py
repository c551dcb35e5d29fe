"""Plain-Python reference of ``span_dedup``: units found with regular expressions and ``str``
methods, spans as tuples of normalised unit strings in dicts and sets, one document at a time.
Only the normalisation table (`norm_table`, the spec of what is hashed) and the punctuation lists
are shared with the kernels; the splitting, hashing, counting and cutting are written again."""

from __future__ import annotations

import re
import unicodedata

from gpupipe.kernels.spans import (
    CJK_TERMINALS,
    CLOSERS,
    TERMINALS,
    norm_table,
    reference_normalize,
)

M64 = (1 << 64) - 1
NORMS = ("case", "digits", "punctuation", "whitespace")
ASCII_SPACE = " \t\n\r\x0b\x0c"


def _letters(s: str) -> int:
    return sum(1 for ch in s if ord(ch) < 0x10000 and unicodedata.category(ch)[0] == "L")


def boundaries(text: str, unit: str) -> list[int]:
    """Every place a unit may end (character positions), before the no-content rule."""
    if unit == "line":
        return [m.end() for m in re.finditer("\n", text)]
    if unit == "paragraph":
        return [m.end() for m in re.finditer(r"\n(?:[ \t\r]*\n)+", text)]
    out = []
    for m in re.finditer(r"\S+", text):            # chunks between Python whitespace
        body = m.group().rstrip(CLOSERS)
        stem = body.rstrip(TERMINALS)
        run, before = body[len(stem):], stem
        if not run:
            continue
        if any(ch != "." for ch in run) or (run == "." and "." not in before
                                            and _letters(before) != 1):
            out.append(m.end())
    for m in re.finditer(f"[{CJK_TERMINALS}][{re.escape(CLOSERS)}]*", text):
        out.append(m.end())
    return sorted({b for b in out if b < len(text)})


def units(text: str, unit: str, table) -> list[tuple[int, int, str]]:
    """(start, end, normalised text) of each unit; text that normalises to nothing joins the
    unit after it, and what is left at the end without content is in no unit."""
    out, start = [], 0
    for b in [*boundaries(text, unit), len(text)]:
        norm = reference_normalize(text[start:b], table)
        if norm:
            out.append((start, b, norm))
            start = b
    return out


def fmix64(k: int) -> int:
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & M64
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & M64
    return k ^ (k >> 33)


def unit_hash(norm: str) -> int:
    h = 0xCBF29CE484222325
    for ch in norm:
        h = ((h ^ ord(ch)) * 0x100000001B3) & M64
    return fmix64(h)


def window_hash(norms: tuple[str, ...]) -> int:
    g = len(norms)
    for n in norms:
        g = fmix64((g * 0x9E3779B97F4A7C15 + unit_hash(n)) & M64)
    return g


def table_for(normalize=NORMS):
    return norm_table(*(n in normalize for n in NORMS))


def span_dedup(docs: list[tuple[str, str]], unit: str = "sentence", span: int = 3,
               normalize=NORMS, max_occurrences: int = 1, min_words: int = 50):
    """``docs`` (id, text) in keep order -> (kept documents {id: text}, audit rows
    (id, start, end, count, kept_by, bytes, text) in document order, ids emptied)."""
    table = table_for(normalize)
    split = [units(t, unit, table) for _, t in docs]
    owners: dict[tuple, list[int]] = {}
    for d, us in enumerate(split):
        for k in range(len(us) - span + 1):
            key = tuple(u[2] for u in us[k:k + span])
            who = owners.setdefault(key, [])
            if d not in who:
                who.append(d)
    kept, audit, emptied = {}, [], []
    for d, ((doc_id, text), us) in enumerate(zip(docs, split)):
        cut, reach = set(), 0
        for k in range(len(us) - span + 1):
            key = tuple(u[2] for u in us[k:k + span])
            who = owners[key]
            if len(who) <= max_occurrences or who[0] == d:
                continue
            a, b = us[k][0], us[k + span - 1][1]
            removed = len(text[max(a, reach):b].encode()) if b > reach else 0
            reach = max(reach, b)
            audit.append((doc_id, a, b, len(who), docs[who[0]][0], removed, text[a:b]))
            cut.update(range(k, k + span))
        if not cut:
            kept[doc_id] = text
            continue
        tail = us[-1][1] if us else 0
        new = "".join(text[u[0]:u[1]] for k, u in enumerate(us) if k not in cut) + text[tail:]
        new = new.lstrip(ASCII_SPACE)
        if len(new.split()) < min_words:
            emptied.append(doc_id)
        else:
            kept[doc_id] = new
    return kept, audit, emptied
