"""The quality filters of Gopher, C4 and FineWeb, with the semantics of datatrove 0.10: same
defaults, same order of checks, ``null`` disables a check.

Each filter computes its per-document measures in one compiled pass (`gpupipe.kernels`) and
decides with vectorised numpy. Words are `gpupipe.kernels.words.tokenize` tokens (an
approximation of spaCy's English tokenizer that datatrove uses); `benchmarks/bench_filters.py`
measures the agreement.
"""

from __future__ import annotations

from typing import Annotated, ClassVar

import numpy as np
from pydantic import Field

from gpupipe.backends.dispatch import kernels_for, string_column, text_buffers
from gpupipe.frame import TEXT
from gpupipe.stages.base import Filter, first_failure, stage

Count = Annotated[int | None, Field(ge=0)]
Fraction = Annotated[float | None, Field(ge=0)]
STOP_WORDS = ("the", "be", "to", "of", "and", "that", "have", "with")


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den with 0 where den is 0."""
    num = num.astype(np.float64)
    out = np.zeros_like(num)
    np.divide(num, den, out=out, where=den != 0)
    return out


def _buffers(df):
    return text_buffers(df[TEXT])


@stage("gopher_quality")
class GopherQuality(Filter):
    """Gopher's quality rules (Rae et al. 2021, Table A1): word counts, mean word length, symbol
    ratios, bullet and ellipsis lines, alphabetic words and stop words.

    ``min/max_doc_words`` and the mean length count non-symbol words (words with a character
    outside datatrove's punctuation set); the ratios divide by all words.
    """

    kernels: ClassVar[tuple[str, ...]] = ("gopher_quality_features",)
    reasons: ClassVar[tuple[str, ...]] = (
        "too_few_words",
        "too_many_words",
        "short_mean_word_length",
        "long_mean_word_length",
        "too_many_hashes",
        "too_many_ellipses",
        "too_many_bullet_lines",
        "too_many_ellipsis_lines",
        "too_few_alpha_words",
        "too_few_stop_words",
    )

    min_doc_words: Count = 50
    max_doc_words: Count = 100_000
    min_avg_word_length: Fraction = 3
    max_avg_word_length: Fraction = 10
    max_symbol_word_ratio: Fraction = 0.1
    max_bullet_lines_ratio: Fraction = 0.9
    max_ellipsis_lines_ratio: Fraction = 0.3
    min_alpha_words_ratio: Fraction = 0.8
    min_stop_words: Count = 2
    #: case-sensitive, counted once each
    stop_words: tuple[str, ...] = STOP_WORDS

    bounds: ClassVar[dict] = {
        "words": (("min_doc_words", "min"), ("max_doc_words", "max")),
        "mean_word_length": (("min_avg_word_length", "min"), ("max_avg_word_length", "max")),
        "hash_ratio": (("max_symbol_word_ratio", "max"),),
        "ellipsis_ratio": (("max_symbol_word_ratio", "max"),),
        "bullet_lines_ratio": (("max_bullet_lines_ratio", "max"),),
        "ellipsis_lines_ratio": (("max_ellipsis_lines_ratio", "max"),),
        "alpha_words_ratio": (("min_alpha_words_ratio", "min"),),
        "stop_words": (("min_stop_words", "min"),),
    }

    def measures(self, df):
        from gpupipe.kernels import quality as kq

        f = kernels_for(df).gopher_quality_features(*_buffers(df), list(self.stop_words))
        words, nonsym = f[:, kq.GQ_WORDS], f[:, kq.GQ_NONSYM]
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = f[:, kq.GQ_NONSYM_CHARS] / nonsym
        return {"words": nonsym, "mean_word_length": mean,
                "hash_ratio": _ratio(f[:, kq.GQ_HASHES], words),
                "ellipsis_ratio": _ratio(f[:, kq.GQ_ELLIPSES], words),
                "bullet_lines_ratio": _ratio(f[:, kq.GQ_BULLET_LINES], f[:, kq.GQ_LINES]),
                "ellipsis_lines_ratio": _ratio(f[:, kq.GQ_ELLIPSIS_LINES], f[:, kq.GQ_LINES]),
                "alpha_words_ratio": _ratio(f[:, kq.GQ_ALPHA_WORDS], words),
                "stop_words": f[:, kq.GQ_STOP_WORDS]}

    def reason_codes(self, df):
        from gpupipe.kernels import quality as kq

        f = kernels_for(df).gopher_quality_features(*_buffers(df), list(self.stop_words))
        words, nonsym = f[:, kq.GQ_WORDS], f[:, kq.GQ_NONSYM]
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = f[:, kq.GQ_NONSYM_CHARS] / nonsym  # nan without words: no length check fails
        sym = self.max_symbol_word_ratio

        def check(value, bound, fails):
            return None if bound is None else fails(value, bound)

        return first_failure([
            check(nonsym, self.min_doc_words, np.less),
            check(nonsym, self.max_doc_words, np.greater),
            check(mean, self.min_avg_word_length, np.less),
            check(mean, self.max_avg_word_length, np.greater),
            check(_ratio(f[:, kq.GQ_HASHES], words), sym, np.greater),
            check(_ratio(f[:, kq.GQ_ELLIPSES], words), sym, np.greater),
            check(_ratio(f[:, kq.GQ_BULLET_LINES], f[:, kq.GQ_LINES]), self.max_bullet_lines_ratio,
                  np.greater),
            check(_ratio(f[:, kq.GQ_ELLIPSIS_LINES], f[:, kq.GQ_LINES]),
                  self.max_ellipsis_lines_ratio, np.greater),
            check(_ratio(f[:, kq.GQ_ALPHA_WORDS], words), self.min_alpha_words_ratio, np.less),
            check(f[:, kq.GQ_STOP_WORDS], self.min_stop_words, np.less),
        ], len(df))


def _ngram_reasons(top: dict[int, float | None], dup: dict[int, float | None]) -> tuple:
    return (*(f"top_{n}_gram" for n in sorted(top)),
            *(f"duplicated_{n}_n_grams" for n in sorted(dup)))


NGramBounds = dict[Annotated[int, Field(ge=1)], Fraction]
TOP_N_GRAMS = {2: 0.20, 3: 0.18, 4: 0.16}
DUP_N_GRAMS = {5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10}


@stage("gopher_repetition")
class GopherRepetition(Filter):
    """Gopher's repetition rules: duplicate paragraphs and lines (by count and by characters),
    the most frequent 2-4-gram's share of the characters, repeated 5-10-grams' share.

    ``top_n_grams`` / ``dup_n_grams`` map n to the largest allowed fraction of characters (a
    mapping replaces the defaults; ``null`` for an n disables it).
    """

    kernels: ClassVar[tuple[str, ...]] = ("gopher_repetition_features",)
    reasons: ClassVar[tuple[str, ...]] = (
        "empty", "dup_para_frac", "dup_para_char_frac", "dup_line_frac", "dup_line_char_frac",
        *_ngram_reasons(TOP_N_GRAMS, DUP_N_GRAMS),
    )

    dup_para_frac: Fraction = 0.30
    dup_para_char_frac: Fraction = 0.20
    dup_line_frac: Fraction = 0.30
    dup_line_char_frac: Fraction = 0.20
    top_n_grams: NGramBounds = Field(default_factory=lambda: dict(TOP_N_GRAMS))
    dup_n_grams: NGramBounds = Field(default_factory=lambda: dict(DUP_N_GRAMS))

    def __post_init__(self):
        # the reasons follow the configured n-grams (the class lists the defaults)
        object.__setattr__(self, "reasons", (*GopherRepetition.reasons[:5],
                                             *_ngram_reasons(self.top_n_grams, self.dup_n_grams)))

    def reason_codes(self, df):
        top_ns = sorted(self.top_n_grams)
        dup_ns = sorted(self.dup_n_grams)
        base, top, dup = kernels_for(df).gopher_repetition_features(*_buffers(df), top_ns,
                                                                   dup_ns)
        chars = base[:, 0]

        def frac(num, den, bound):
            return None if bound is None else _ratio(num, den) > bound

        checks = [
            chars == 0,
            frac(base[:, 2], base[:, 1], self.dup_para_frac),
            frac(base[:, 3], chars, self.dup_para_char_frac),
            frac(base[:, 5], base[:, 4], self.dup_line_frac),
            frac(base[:, 6], chars, self.dup_line_char_frac),
        ]
        checks += [frac(top[:, q], chars, self.top_n_grams[n]) for q, n in enumerate(top_ns)]
        checks += [frac(dup[:, q], chars, self.dup_n_grams[n]) for q, n in enumerate(dup_ns)]
        return first_failure(checks, len(df))


@stage("fineweb_quality")
class FineWebQuality(Filter):
    """FineWeb's line rules over non-empty lines: share of lines ending in terminal punctuation,
    share of short lines, duplicate-line characters, newlines per word."""

    kernels: ClassVar[tuple[str, ...]] = ("fineweb_features",)
    reasons: ClassVar[tuple[str, ...]] = (
        "empty", "line_punct_ratio", "short_line_ratio", "char_dup_ratio", "list_ratio")

    line_punct_thr: Fraction = 0.12
    #: do not drop documents where no line ends in punctuation (FineWeb-2 option)
    line_punct_exclude_zero: bool = False
    #: characters that end a sentence; null = datatrove's TERMINAL_PUNCTUATION (all scripts)
    stop_chars: str | None = None
    short_line_thr: Fraction = 0.67
    short_line_length: Annotated[int, Field(ge=0)] = 30
    char_duplicates_ratio: Fraction = 0.01
    new_line_ratio: Fraction = 0.3

    bounds: ClassVar[dict] = {
        "line_punct_ratio": (("line_punct_thr", "min"),),
        "short_line_ratio": (("short_line_thr", "max"),),
        "char_dup_ratio": (("char_duplicates_ratio", "max"),),
        "newlines_per_word": (("new_line_ratio", "max"),),
    }

    def measures(self, df):
        f = kernels_for(df).fineweb_features(*_buffers(df), self.stop_chars,
                                             self.short_line_length)
        lines = f[:, 0]
        return {"lines": lines, "line_punct_ratio": _ratio(f[:, 1], lines),
                "short_line_ratio": _ratio(f[:, 2], lines),
                "char_dup_ratio": _ratio(f[:, 3], f[:, 4]),
                "newlines_per_word": _ratio(f[:, 5], f[:, 6])}

    def reason_codes(self, df):
        f = kernels_for(df).fineweb_features(*_buffers(df), self.stop_chars,
                                             self.short_line_length)
        lines = f[:, 0]
        punct = _ratio(f[:, 1], lines)
        checks: list = [lines == 0]
        if self.line_punct_thr is None:
            checks.append(None)
        else:
            fail = punct < self.line_punct_thr
            if self.line_punct_exclude_zero:
                fail &= punct != 0
            checks.append(fail)
        checks.append(None if self.short_line_thr is None
                      else _ratio(f[:, 2], lines) > self.short_line_thr)
        checks.append(None if self.char_duplicates_ratio is None
                      else _ratio(f[:, 3], f[:, 4]) > self.char_duplicates_ratio)
        if self.new_line_ratio is None:
            checks.append(None)
        else:
            words = f[:, 6]
            # newlines without any word: datatrove divides by zero; count it as a list page
            checks.append(np.where(words > 0, _ratio(f[:, 5], words) > self.new_line_ratio,
                                   f[:, 5] > 0))
        return first_failure(checks, len(df))


POLICY_SUBSTRINGS = ("terms of use", "privacy policy", "cookie policy", "uses cookies",
                     "use of cookies", "use cookies")


@stage("c4_quality")
class C4Quality(Filter):
    """C4's line rules (Raffel et al.): keeps lines that end in terminal punctuation, have enough
    words, no over-long word, no "javascript" or cookie/privacy phrase; drops documents with
    "lorem ipsum", a curly bracket, or too few sentences left. Rewrites the text of kept
    documents to their kept lines (citation marks such as ``[1]``, ``[edit]`` removed).

    ``-1`` disables the numeric checks, as in datatrove. Matching of the phrases ignores ASCII
    case. In ``annotate`` mode the text of documents that would be dropped is left unchanged.
    Counters: lines removed per rule (``lines:<rule>``) and lines kept.
    """

    kernels: ClassVar[tuple[str, ...]] = ("c4_rewrite",)
    reasons: ClassVar[tuple[str, ...]] = ("lorem_ipsum", "curly_bracket", "too_few_sentences")

    remove_citations: bool = True
    filter_no_terminal_punct: bool = True
    min_num_sentences: Annotated[int, Field(ge=-1)] = 5
    min_words_per_line: Annotated[int, Field(ge=-1)] = 3
    max_word_length: Annotated[int, Field(ge=-1)] = 1000
    filter_lorem_ipsum: bool = True
    filter_javascript: bool = True
    filter_curly_bracket: bool = True
    filter_policy: bool = True
    policy_substrings: tuple[str, ...] = POLICY_SUBSTRINGS

    def evaluate(self, df):
        from gpupipe.kernels import quality as kq

        offsets, data = _buffers(df)
        codes, out, out_off, lines = kernels_for(df).c4_rewrite(
            offsets, data, max_word_length=self.max_word_length,
            remove_citations=self.remove_citations, terminal_punct=self.filter_no_terminal_punct,
            min_words=self.min_words_per_line, lorem=self.filter_lorem_ipsum,
            javascript=self.filter_javascript, curly=self.filter_curly_bracket,
            policy=self.filter_policy, policy_substrings=self.policy_substrings,
            min_sentences=self.min_num_sentences)
        lines = lines.sum(axis=0)
        # rows that are dropped (or only flagged) keep their text
        new = string_column(df[TEXT], out_off, out, keep=codes == 0)
        counters = {f"lines:{name}": int(lines[k]) for k, name in (
            (kq.C4_LINE_LONG_WORD, "too_long_word"), (kq.C4_LINE_NO_PUNCT, "no_terminal_punct"),
            (kq.C4_LINE_FEW_WORDS, "too_few_words"), (kq.C4_LINE_JAVASCRIPT, "javascript"),
            (kq.C4_LINE_POLICY, "policy"), (kq.C4_LINE_KEPT, "kept")) if lines[k]}
        out_df = df.assign(**{TEXT: new})
        return codes, out_df, counters
