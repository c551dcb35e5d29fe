"""length_filter: keep documents whose length in characters and words is within bounds."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field

from gpupipe.backends.dispatch import kernels_for, text_buffers
from gpupipe.frame import TEXT
from gpupipe.stages.base import Filter, first_failure, stage

NonNegative = Annotated[int | None, Field(ge=0)]


@stage("length_filter")
class LengthFilter(Filter):
    """Drop documents shorter or longer than the given numbers of characters or words.

    Characters are Unicode code points (``len(text)``); words are whitespace-separated tokens
    (``len(text.split())``). Bounds are inclusive; ``null`` disables a bound.
    """

    reasons: ClassVar[tuple[str, ...]] = (
        "too_few_chars",
        "too_many_chars",
        "too_few_words",
        "too_many_words",
    )
    kernels: ClassVar[tuple[str, ...]] = ("count_chars", "count_words")

    min_chars: NonNegative = None
    max_chars: NonNegative = None
    min_words: NonNegative = None
    max_words: NonNegative = None

    def __post_init__(self):
        for unit in ("chars", "words"):
            lo, hi = getattr(self, f"min_{unit}"), getattr(self, f"max_{unit}")
            if lo is not None and hi is not None and lo > hi:
                raise ValueError(f"min_{unit} ({lo}) is greater than max_{unit} ({hi})")

    bounds: ClassVar[dict] = {"chars": (("min_chars", "min"), ("max_chars", "max")),
                              "words": (("min_words", "min"), ("max_words", "max"))}

    def measures(self, df):
        kernels, buffers = kernels_for(df), text_buffers(df[TEXT])
        return {"chars": kernels.count_chars(*buffers), "words": kernels.count_words(*buffers)}

    def reason_codes(self, df):
        kernels, buffers = kernels_for(df), text_buffers(df[TEXT])
        checks = [None] * 4
        if self.min_chars is not None or self.max_chars is not None:
            chars = kernels.count_chars(*buffers)
            checks[0] = chars < self.min_chars if self.min_chars is not None else None
            checks[1] = chars > self.max_chars if self.max_chars is not None else None
        if self.min_words is not None or self.max_words is not None:
            words = kernels.count_words(*buffers)
            checks[2] = words < self.min_words if self.min_words is not None else None
            checks[3] = words > self.max_words if self.max_words is not None else None
        return first_failure(checks, len(df))
