"""Plain-Python reference of ``span_dedup``: units found with regular expressions, spaCy's
sentencizer rule written again over the word tokens, spans as tuples of normalised unit strings
in dicts and sets, one document at a time. Shared with the kernels: the normalisation table
(`norm_table`, the spec of what is hashed), the punctuation lists and the word tokenizer (tested
against spaCy's on its own); the splitting, hashing, counting and cutting are written again."""

from __future__ import annotations

import re
import unicodedata

from gpupipe.charsets import DATATROVE_TERMINAL
from gpupipe.kernels.spans import CJK_TERMINALS, CLOSERS, norm_table, reference_normalize
from gpupipe.kernels.words import token_spans

M64 = (1 << 64) - 1
NORMS = ("case", "digits", "punctuation", "whitespace")


TERMINAL = {chr(c) for lo, hi in DATATROVE_TERMINAL for c in range(lo, hi + 1)}


def sentencizer(text: str) -> list[int]:
    """spaCy's ``Sentencizer.predict`` over the word tokens: the end of each sentence's last
    token, but the last sentence's."""
    spans = token_spans([text])[0]
    out, seen, prev = [], False, None
    for j, (a, b) in enumerate([*spans, (len(text), len(text))]):
        # spaCy makes a token of whitespace between words unless it is one ' '
        if seen and prev is not None and text[prev:a] not in ("", " "):
            out.append(prev)
            seen = False
        if j == len(spans):
            break
        prev = b
        tok = text[a:b]
        in_chars = tok in TERMINAL
        is_punct = all(unicodedata.category(ch).startswith("P") for ch in tok)
        if seen and not is_punct and not in_chars:
            out.append(spans[j - 1][1])
            seen = False
        elif in_chars:
            seen = True
    return out


def boundaries(text: str, unit: str) -> list[int]:
    """Every place a unit may end (character positions), before the no-content rule."""
    if unit == "line":
        return [m.end() for m in re.finditer("\n", text)]
    if unit == "paragraph":
        return [m.end() for m in re.finditer(r"\n(?:[ \t\r]*\n)+", text)]
    out = sentencizer(text)
    out += [m.end() for m in re.finditer(f"[{CJK_TERMINALS}][{re.escape(CLOSERS)}]*", text)]
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
               normalize=NORMS, max_occurrences: int = 1, min_words: int = 50,
               within_document: bool = False):
    """``docs`` (id, text) in keep order -> (kept documents {id: text}, audit rows
    (id, start, end, count, kept_by, bytes, text) in document order, ids emptied)."""
    table = table_for(normalize)
    split = [units(t, unit, table) for _, t in docs]
    seen: dict[tuple, list[tuple[int, int]]] = {}   # span -> its (document, window)s in order
    for d, us in enumerate(split):
        for k in range(len(us) - span + 1):
            seen.setdefault(tuple(u[2] for u in us[k:k + span]), []).append((d, k))
    kept, audit, emptied = {}, [], []
    for d, ((doc_id, text), us) in enumerate(zip(docs, split)):
        cut, reach = set(), 0
        for k in range(len(us) - span + 1):
            where = seen[tuple(u[2] for u in us[k:k + span])]
            owner = where[0][0]
            docs_with = len({w for w, _ in where})
            found = len(where) if within_document else docs_with
            if found <= max_occurrences or (owner == d and (not within_document
                                                             or where[0][1] == k)):
                continue
            a, b = us[k][0], us[k + span - 1][1]
            removed = len(text[max(a, reach):b].encode()) if b > reach else 0
            reach = max(reach, b)
            audit.append((doc_id, a, b, docs_with, docs[owner][0], removed, text[a:b]))
            cut.update(range(k, k + span))
        if not cut:
            kept[doc_id] = text
            continue
        tail = us[-1][1] if us else 0
        new = "".join(text[u[0]:u[1]] for k, u in enumerate(us) if k not in cut) + text[tail:]
        new = new.lstrip()
        if len(new.split()) < min_words:
            emptied.append(doc_id)
        else:
            kept[doc_id] = new
    return kept, audit, emptied
