"""An example third-party stage: drop documents in which most lines look like code."""

from __future__ import annotations

from typing import Annotated, ClassVar

import numpy as np
from pydantic import Field

from gpupipe.stages import Filter, stage

_PROMPTS = (">>> ", "... ", "$ ", "# ")


def code_line_ratio(text: str) -> float:
    """Share of the non-blank lines that are indented by 4+ spaces or a tab, or start with an
    interactive prompt (``>>>``, ``...``, ``$``, ``#``)."""
    lines = [line for line in text.split("\n") if line.strip()]
    if not lines:
        return 0.0
    code = sum(1 for line in lines
               if line.startswith(("    ", "\t")) or line.lstrip().startswith(_PROMPTS))
    return code / len(lines)


@stage("code_lines_filter")
class CodeLinesFilter(Filter):
    """Drop documents whose share of code-like lines exceeds ``max_ratio``, or that have fewer
    than ``min_lines`` non-blank lines.

    A line is code-like when it is indented by four or more spaces (or a tab) or starts with a
    shell or Python prompt.
    """

    reasons: ClassVar[tuple[str, ...]] = ("too_few_lines", "too_much_code")
    # the measure behind each check and the parameter that bounds it (shown by
    # Pipeline.preview and gpupipe.explain_document)
    bounds: ClassVar[dict] = {"code_line_ratio": (("max_ratio", "max"),),
                              "lines": (("min_lines", "min"),)}

    max_ratio: Annotated[float, Field(ge=0, le=1)] = 0.5
    min_lines: Annotated[int, Field(ge=0)] = 1

    def measures(self, df):
        texts = df["text"]
        return {"code_line_ratio": np.array([code_line_ratio(t) for t in texts]),
                "lines": np.array([sum(1 for line in t.split("\n") if line.strip())
                                   for t in texts])}

    def reason_codes(self, df):
        m = self.measures(df)
        codes = np.zeros(len(df), dtype=np.uint8)
        codes[m["code_line_ratio"] > self.max_ratio] = 2
        codes[m["lines"] < self.min_lines] = 1    # the first reason wins, as in every filter
        return codes
