"""Stage base classes.

A stage is a frozen, keyword-only dataclass whose fields are its pipeline-file parameters,
validated at construction (pydantic) and registered under a snake_case name with `@stage`.

* `Transform`: partition -> partition (may rewrite text or add columns), never drops rows.
* `Filter`: computes one reason code per row (0 = keep); the base class drops and counts.
* `GlobalStage`: needs the whole dataset (shuffle, dedup, repartition); gets the Dask collection
  and the runner materialises its result as a checkpoint.

Row-local stages between two global stages are fused by the runner into one task per partition.
Stages never import Dask or the runner.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Literal

import numpy as np
import pandas as pd
from pydantic import ConfigDict
from pydantic.dataclasses import dataclass as pydantic_dataclass

from gpupipe.registry import register

STAGE_CONFIG = ConfigDict(extra="forbid", validate_default=True)


def stage(name: str):
    """Class decorator: turn ``cls`` into a validated frozen dataclass registered as ``name``.

    >>> from gpupipe.stages.base import Transform, stage
    >>> @stage("upper_case")
    ... class UpperCase(Transform):
    ...     '''Upper-case the text.'''
    ...     def transform(self, df):
    ...         return df.assign(text=df["text"].str.upper())
    >>> UpperCase().stage_name
    'upper_case'
    """

    def wrap(cls: type[Stage]) -> type[Stage]:
        cls.stage_name = name
        cls = pydantic_dataclass(frozen=True, kw_only=True, config=STAGE_CONFIG)(cls)
        return register(cls)

    return wrap


@dataclasses.dataclass(frozen=True)
class StageResult:
    frame: pd.DataFrame
    drops: dict[str, int] = dataclasses.field(default_factory=dict)
    counters: dict[str, int] = dataclasses.field(default_factory=dict)


class Stage:
    """Base of every stage. Subclasses declare parameters as dataclass fields."""

    stage_name: ClassVar[str] = ""
    kind: ClassVar[Literal["row", "global"]] = "row"
    #: reason codes a filter can drop a row for, in the order the checks run
    reasons: ClassVar[tuple[str, ...]] = ()
    #: dataframe backends the stage runs on natively
    backends: ClassVar[tuple[str, ...]] = ("pandas",)

    def params(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def to_dict(self) -> dict[str, Any]:
        """The pipeline-file form: ``{"stage": name, **params}``."""
        return {"stage": self.stage_name, **self.params()}

    def describe(self) -> str:
        """``name(param=value, ...)`` listing parameters that differ from their defaults."""
        changed = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            default = f.default if f.default is not dataclasses.MISSING else None
            if value != default:
                changed.append(f"{f.name}={value!r}")
        return f"{self.stage_name}({', '.join(changed)})"

    @classmethod
    def summary(cls) -> str:
        return (cls.__doc__ or "").strip().split("\n")[0]

    def added_columns(self) -> dict[str, str]:
        """Columns this stage adds, name -> dtype (used to build Dask ``meta``)."""
        return {}


class RowStage(Stage):
    kind: ClassVar[Literal["row", "global"]] = "row"

    def process(self, df: pd.DataFrame) -> StageResult:
        raise NotImplementedError


class Transform(RowStage):
    """A row-local stage that rewrites or annotates rows and never drops them."""

    def transform(self, df: pd.DataFrame) -> pd.DataFrame | StageResult:
        raise NotImplementedError

    def process(self, df: pd.DataFrame) -> StageResult:
        out = self.transform(df)
        return out if isinstance(out, StageResult) else StageResult(out)


class Filter(RowStage):
    """A row-local stage that keeps or drops rows, with a reason code for every drop."""

    def reason_codes(self, df: pd.DataFrame) -> np.ndarray:
        """Per row: 0 to keep, ``k`` to drop for ``self.reasons[k - 1]``."""
        raise NotImplementedError

    def process(self, df: pd.DataFrame) -> StageResult:
        codes = np.asarray(self.reason_codes(df))
        if len(codes) != len(df):
            raise ValueError(f"{self.stage_name}: {len(codes)} reason codes for {len(df)} rows")
        counts = np.bincount(codes, minlength=len(self.reasons) + 1)
        drops = {r: int(counts[k]) for k, r in enumerate(self.reasons, 1) if counts[k]}
        if not drops:
            return StageResult(df)
        return StageResult(df[codes == 0].reset_index(drop=True), drops)


def first_failure(checks: list[np.ndarray | None], n: int) -> np.ndarray:
    """Combine per-check failure masks into reason codes: the first failing check wins.

    ``checks[k]`` is the boolean failure mask of reason ``k + 1`` (``None`` = check disabled).

    >>> first_failure([np.array([True, False, False]), np.array([True, True, False])], 3)
    array([1, 2, 0], dtype=uint8)
    """
    codes = np.zeros(n, dtype=np.uint8)
    for k in range(len(checks), 0, -1):
        mask = checks[k - 1]
        if mask is not None:
            codes[np.asarray(mask, dtype=bool)] = k
    return codes


@dataclasses.dataclass
class GlobalContext:
    """What the runner gives a global stage besides the data."""

    #: reads partition ``i`` of the stage's input: ``source.read(i).frame``
    source: Any
    #: scratch directory for this stage's intermediate files (inside its checkpoint)
    work_dir: str
    #: the run directory (``dedup/`` and ``rejected/`` live there)
    output_dir: str
    #: position of the stage in the pipeline
    position: int
    #: the `distributed.Client` the run uses
    client: Any = None


class GlobalStage(Stage):
    """A stage that needs the whole dataset; it receives and returns a Dask DataFrame."""

    kind: ClassVar[Literal["row", "global"]] = "global"
    #: the stage keeps intermediate checkpoints in ``ctx.work_dir`` (resumed while unchanged)
    uses_work_dir: ClassVar[bool] = False

    def apply(self, ddf, ctx: GlobalContext | None = None):
        """``ddf``: a dask.dataframe.DataFrame (not imported: stages stay Dask-free)."""
        raise NotImplementedError
