"""Stages of one named source (``inputs: {web: {stages: [...]}}``): the runner wraps each in
`ForSource`, which applies it to the partitions of that source only. Every partition of a
multi-source read holds one source (`gpupipe.io.multi.MultiSource`), and a source's own stages
run right after the read, before any stage that could mix them."""

from __future__ import annotations

import dataclasses
from typing import Any

from gpupipe.stages.base import RowStage, StageResult

SOURCE = "source"


@dataclasses.dataclass(frozen=True)
class ForSource(RowStage):
    """``inner`` applied to the documents of ``source`` only."""

    source: str
    inner: RowStage

    def __post_init__(self):
        object.__setattr__(self, "stage_name", self.inner.stage_name)

    @property
    def reasons(self):  # type: ignore[override]
        return self.inner.reasons

    @property
    def backends(self):  # type: ignore[override]
        return self.inner.backends

    @property
    def host_steps(self):  # type: ignore[override]
        return self.inner.host_steps

    @property
    def keep_rejected(self) -> bool:
        return getattr(self.inner, "keep_rejected", False)

    def runs_on(self, backend: str) -> str:
        return self.inner.runs_on(backend)

    def params(self) -> dict[str, Any]:
        return {"source": self.source, **self.inner.params()}

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage_name, **self.params()}

    def describe(self) -> str:
        return f"{self.source}: {self.inner.describe()}"

    def added_columns(self) -> dict[str, str]:
        return self.inner.added_columns()

    def identity(self) -> dict:
        return self.inner.identity()

    def explain_notes(self) -> list[str]:
        return self.inner.explain_notes()

    def check(self, ctx=None):
        return self.inner.check(ctx)

    def prepare(self):
        return self.inner.prepare()

    def process(self, df) -> StageResult:
        from gpupipe.backends import dispatch

        if len(df) == 0:
            return self.inner.process(df)
        names = dispatch.to_host(df[[SOURCE]])[SOURCE]
        first = names.iloc[0]
        if (names != first).any():
            raise ValueError(f"a partition mixes sources ({', '.join(sorted(set(names)))}); a "
                             f"source's own stages must run before any stage that mixes them")
        if first != self.source:
            extra = self.inner.added_columns()
            if extra:  # the columns the stage adds exist for every source (null elsewhere)
                import numpy as np
                import pandas as pd

                from gpupipe.frame import STRING

                host = dispatch.to_host(df)
                for c, t in extra.items():
                    host[c] = (pd.Series([None] * len(host), dtype=STRING, index=host.index)
                               if t == "string" else np.full(len(host), np.nan, dtype=t))
                return StageResult(dispatch.like(df, host))
            return StageResult(df)
        return self.inner.process(df)
