"""The small filters users reach for: word counts, symbol ratios, regular expressions, sampling."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from gpupipe.backends.dispatch import kernels_for, text_buffers
from gpupipe.frame import ID, TEXT, text_array
from gpupipe.stages.base import Filter, first_failure, stage

Count = Annotated[int | None, Field(ge=0)]


@stage("word_count_filter")
class WordCountFilter(Filter):
    """Keep documents with a number of words within bounds (inclusive; ``null`` = no bound).

    ``words`` counts the word tokens of the quality filters that hold a letter, digit or other
    non-punctuation character (``Hello, world!`` has 2); ``tokens`` counts punctuation marks too
    (4); ``whitespace`` counts ``text.split()`` pieces (2), as `length_filter` does.
    """

    reasons: ClassVar[tuple[str, ...]] = ("too_few_words", "too_many_words")
    kernels: ClassVar[tuple[str, ...]] = ("count_tokens", "count_words")

    min_words: Count = None
    max_words: Count = None
    count: Literal["words", "tokens", "whitespace"] = "words"

    def __post_init__(self):
        if self.min_words is not None and self.max_words is not None and \
                self.min_words > self.max_words:
            raise ValueError(f"min_words ({self.min_words}) is greater than max_words "
                             f"({self.max_words})")

    bounds: ClassVar[dict] = {"words": (("min_words", "min"), ("max_words", "max"))}

    def measures(self, df):
        kernels, buffers = kernels_for(df), text_buffers(df[TEXT])
        if self.count == "whitespace":
            return {"words": kernels.count_words(*buffers)}
        return {"words": kernels.count_tokens(*buffers, self.count == "words")}

    def reason_codes(self, df):
        kernels, buffers = kernels_for(df), text_buffers(df[TEXT])
        if self.count == "whitespace":
            words = kernels.count_words(*buffers)
        else:
            words = kernels.count_tokens(*buffers, self.count == "words")
        return first_failure([
            words < self.min_words if self.min_words is not None else None,
            words > self.max_words if self.max_words is not None else None,
        ], len(df))


@stage("symbol_ratio_filter")
class SymbolRatioFilter(Filter):
    """Drop documents where occurrences of the given symbols per word token exceed ``max_ratio``
    (Gopher's hash / ellipsis rule with a symbol list of your own; occurrences are counted like
    ``str.count``, without overlaps)."""

    reasons: ClassVar[tuple[str, ...]] = ("too_many_symbols",)
    kernels: ClassVar[tuple[str, ...]] = ("count_substrings", "count_tokens")

    symbols: tuple[Annotated[str, Field(min_length=1)], ...] = ("#", "...", "…")
    max_ratio: Annotated[float, Field(ge=0)] = 0.1

    def reason_codes(self, df):
        kernels, buffers = kernels_for(df), text_buffers(df[TEXT])
        hits = np.asarray(kernels.count_substrings(*buffers, self.symbols), dtype=np.int64)
        words = kernels.count_tokens(*buffers, False)
        ratio = np.divide(hits, words, out=np.where(hits > 0, np.inf, 0.0), where=words > 0)
        return first_failure([ratio > self.max_ratio], len(df))


def _check_pattern(pattern: str, ignore_case: bool) -> None:
    try:
        pc.match_substring_regex(pa.array([""]), pattern, ignore_case=ignore_case)
    except pa.ArrowInvalid as e:
        raise ValueError(f"invalid regular expression {pattern!r} (RE2 syntax): {e}") from None


@stage("regex_filter")
class RegexFilter(Filter):
    """Drop documents whose text matches ``pattern`` (``action: drop``), or keep only those that
    match (``action: keep``). RE2 syntax (no look-around or back-references), evaluated by
    Arrow over the whole partition."""

    reasons: ClassVar[tuple[str, ...]] = ("matches_pattern", "does_not_match_pattern")

    pattern: Annotated[str, Field(min_length=1)]
    action: Literal["drop", "keep"] = "drop"
    ignore_case: bool = False

    def __post_init__(self):
        _check_pattern(self.pattern, self.ignore_case)

    def reason_codes(self, df):
        hit = pc.match_substring_regex(text_array(df[TEXT]), self.pattern,
                                       ignore_case=self.ignore_case).fill_null(False)
        hit = hit.to_numpy(zero_copy_only=False)
        codes = np.zeros(len(df), dtype=np.uint8)
        if self.action == "drop":
            codes[hit] = 1
        else:
            codes[~hit] = 2
        return codes


_SALT = 0x73616D706C65  # "sample"


@stage("sample")
class Sample(Filter):
    """Keep a random ``rate`` of the documents. The draw is a hash of the document id and the
    seed, so the same documents are kept whatever the partitioning or worker count."""

    reasons: ClassVar[tuple[str, ...]] = ("not_sampled",)
    kernels: ClassVar[tuple[str, ...]] = ("xxh64_strings",)

    rate: Annotated[float, Field(ge=0, le=1)]
    seed: int = 0

    def reason_codes(self, df):
        # xxHash64 of the id with the seed (`gpupipe.shards.routing.doc_keys`), salted, so a
        # sample is independent of the shard split drawn with the same seed
        keys = kernels_for(df).xxh64_strings(*text_buffers(df[ID]), (self.seed ^ _SALT) % 2**64)
        # the top 53 bits as a uniform number in [0, 1)
        u = (keys >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
        return first_failure([u >= self.rate], len(df))
