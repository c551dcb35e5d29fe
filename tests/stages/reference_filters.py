"""Plain-Python reference implementations of the quality filters, written the way datatrove 0.10
writes them (one document at a time, Python strings, ``Counter``/``set``), with the word
tokenizer replaced by gpupipe's so the compiled kernels can be checked decision for decision.

Where datatrove would divide by zero, the reference does what gpupipe documents (a zero ratio;
newlines without words count as a list page)."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

from gpupipe.charsets import DATATROVE_PUNCTUATION, DATATROVE_TERMINAL
from gpupipe.kernels.words import tokenize_texts

PUNCTUATION_SET = {chr(c) for lo, hi in DATATROVE_PUNCTUATION for c in range(lo, hi + 1)}
TERMINAL_PUNCTUATION = tuple(chr(c) for lo, hi in DATATROVE_TERMINAL for c in range(lo, hi + 1))
STOP_WORDS = {"the", "be", "to", "of", "and", "that", "have", "with"}


def words(text: str) -> list[str]:
    return tokenize_texts([text])[0]


def gopher_quality(text: str, min_doc_words: int = 50) -> str | None:
    ws = words(text)
    n = len(ws)
    non_symbol = [w for w in ws if any(ch not in PUNCTUATION_SET for ch in w)]
    if len(non_symbol) < min_doc_words:
        return "too_few_words"
    if len(non_symbol) > 100000:
        return "too_many_words"
    mean = np.mean([len(w) for w in non_symbol])
    if mean < 3:
        return "short_mean_word_length"
    if mean > 10:
        return "long_mean_word_length"
    if text.count("#") / n > 0.1:
        return "too_many_hashes"
    if (text.count("...") + text.count("…")) / n > 0.1:
        return "too_many_ellipses"
    lines = text.splitlines()
    if lines and sum(s.lstrip().startswith(("•", "-")) for s in lines) / len(lines) > 0.9:
        return "too_many_bullet_lines"
    if lines and sum(s.rstrip().endswith(("...", "…")) for s in lines) / len(lines) > 0.3:
        return "too_many_ellipsis_lines"
    if sum(any(c.isalpha() for c in w) for w in ws) / n < 0.8:
        return "too_few_alpha_words"
    if len(STOP_WORDS & set(ws)) < 2:
        return "too_few_stop_words"
    return None


def _find_duplicates(xs):
    seen, dup, chars = set(), 0, 0
    for x in xs:
        if x in seen:
            dup += 1
            chars += len(x)
        else:
            seen.add(x)
    return dup, chars


def gopher_repetition(text: str) -> str | None:
    if not text:
        return "empty"
    paragraphs = re.split(r"\n{2,}", text.strip())
    dup, chars = _find_duplicates(paragraphs)
    if dup / len(paragraphs) > 0.3:
        return "dup_para_frac"
    if chars / len(text) > 0.2:
        return "dup_para_char_frac"
    lines = re.split("\n+", text)
    dup, chars = _find_duplicates(lines)
    if dup / len(lines) > 0.3:
        return "dup_line_frac"
    if chars / len(text) > 0.2:
        return "dup_line_char_frac"
    ws = words(text)
    for n, frac in ((2, 0.2), (3, 0.18), (4, 0.16)):
        grams = [" ".join(ws[i: i + n]) for i in range(len(ws) - n + 1)]
        if not grams:
            continue
        top, count = Counter(grams).most_common(1)[0]
        if len(top) * count / len(text) > frac:
            return f"top_{n}_gram"
    for n, frac in ((5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10)):
        seen, total, i = set(), 0, 0
        while i < len(ws) - n + 1:
            gram = "".join(ws[i: i + n])
            if gram in seen:
                total += len(gram)
                i += n
            else:
                seen.add(gram)
                i += 1
        if total / len(text) > frac:
            return f"duplicated_{n}_n_grams"
    return None


def fineweb_quality(text: str) -> str | None:
    lines = [line for line in text.split("\n") if line.strip() != ""]
    if not lines:
        return "empty"
    if sum(line.endswith(TERMINAL_PUNCTUATION) for line in lines) / len(lines) < 0.12:
        return "line_punct_ratio"
    if sum(len(line) <= 30 for line in lines) / len(lines) > 0.67:
        return "short_line_ratio"
    if _find_duplicates(lines)[1] / len(text.replace("\n", "")) > 0.01:
        return "char_dup_ratio"
    ws = words(text)
    newlines = text.count("\n")
    if (newlines / len(ws) > 0.3) if ws else newlines > 0:
        return "list_ratio"
    return None


CITATION = re.compile(r"\[[0-9]*]|\[edit]|\[citation needed]")  # ASCII digits (gpupipe)
POLICY = ["terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies",
          "use cookies"]


def sentences(line: str) -> int:
    """spaCy's sentencizer over gpupipe's tokens."""
    toks = words(line)
    if not toks:
        return 0
    count, seen = 1, False
    for tok in toks:
        in_chars = len(tok) == 1 and tok in TERMINAL_PUNCTUATION
        is_punct = all(__import__("unicodedata").category(c).startswith("P") for c in tok)
        if seen and not is_punct and not in_chars:
            count += 1
            seen = False
        elif in_chars:
            seen = True
    return count


def c4_quality(text: str) -> tuple[str | None, str]:
    kept, num = [], 0
    for line in text.splitlines():
        line = line.strip()
        ws = line.split()
        if any(len(w) > 1000 for w in ws):
            continue
        line = CITATION.sub("", line)
        if not line.endswith((".", "?", "!", '"', "'")) or line.endswith("..."):
            continue
        if len(ws) < 3:
            continue
        low = line.lower()
        if "lorem ipsum" in low:
            return "lorem_ipsum", text
        if "javascript" in low:
            continue
        if "{" in line:
            return "curly_bracket", text
        if any(p in low for p in POLICY):
            continue
        num += sentences(line)
        kept.append(line)
    if num < 5:
        return "too_few_sentences", text
    return None, "\n".join(kept).strip()
