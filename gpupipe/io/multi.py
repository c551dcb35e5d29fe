"""Several named inputs read as one source: the partitions of each, in the order of
``inputs:``, every document tagged with its source's name in a ``source`` column."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from gpupipe.frame import STRING, empty_frame
from gpupipe.io.source import ReadResult

SOURCE = "source"


@dataclasses.dataclass(frozen=True)
class MultiSource:
    names: tuple[str, ...]
    sources: tuple

    @property
    def npartitions(self) -> int:
        return sum(s.npartitions for s in self.sources)

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(f for s in self.sources for f in s.files)

    @property
    def left_out(self) -> tuple[tuple[str, str], ...]:
        return tuple(x for s in self.sources for x in getattr(s, "left_out", ()))

    def locate(self, i: int) -> tuple[int, int]:
        """(source number, its partition) of partition ``i``."""
        for k, s in enumerate(self.sources):
            if i < s.npartitions:
                return k, i
            i -= s.npartitions
        raise IndexError(i)

    def on_error_of(self, i: int) -> str:
        return self.sources[self.locate(i)[0]].on_error

    def source_of(self, i: int) -> str:
        return self.names[self.locate(i)[0]]

    def describe(self, i: int) -> str:
        k, j = self.locate(i)
        return f"{self.names[k]}: {self.sources[k].describe(j)}"

    def meta(self) -> pd.DataFrame:
        return empty_frame({SOURCE: "string"})

    def needs_line_bases(self) -> bool:
        return any(getattr(s, "needs_line_bases", lambda: False)() for s in self.sources)

    def read(self, i: int) -> ReadResult:
        k, j = self.locate(i)
        result = self.sources[k].read(j)
        frame = result.frame.assign(**{SOURCE: pd.Series(
            np.full(len(result.frame), self.names[k], dtype=object), dtype=STRING,
            index=result.frame.index)})
        return dataclasses.replace(result, frame=frame)
