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

import contextvars
import dataclasses
from typing import Any, ClassVar, Literal

import numpy as np
import pandas as pd
from pydantic import ConfigDict
from pydantic.dataclasses import dataclass as pydantic_dataclass

from gpupipe import views
from gpupipe.backends import dispatch
from gpupipe.stages.registry import register

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
        if cls.kernels:
            cls.backends = _backends_of(name, cls.kernels)
        cls = pydantic_dataclass(frozen=True, kw_only=True, config=STAGE_CONFIG)(cls)
        return register(cls)

    return wrap


def _backends_of(name: str, kernels: tuple[str, ...],
                 on_gpu: frozenset[str] | None = None) -> tuple[str, ...]:
    """A stage that computes only with kernel launchers and `gpupipe.backends.dispatch`
    operations runs on every backend its kernels run on: on cuDF too when each of them has a
    GPU launcher (``on_gpu``, by default `gpupipe.kernels.catalog.ON_GPU`), else on pandas only.

    >>> _backends_of("demo", ("count_chars", "xxh64_strings"))
    ('pandas', 'cudf')
    >>> _backends_of("demo", ("count_chars",), on_gpu=frozenset())
    ('pandas',)
    """
    from gpupipe.kernels import catalog

    unknown = [k for k in kernels if k not in catalog.LAUNCHERS]
    if unknown:
        raise TypeError(f"stage {name!r} declares unknown kernels {unknown}; known: "
                        f"{', '.join(catalog.LAUNCHERS)}")
    gpu = catalog.ON_GPU if on_gpu is None else on_gpu
    return ("pandas", "cudf") if set(kernels) <= gpu else ("pandas",)


def field_default(f: dataclasses.Field):
    """A parameter's default value (``dataclasses.MISSING`` when required), also when the field
    is declared with pydantic's ``Field(...)``."""
    from pydantic.fields import FieldInfo

    default, factory = f.default, f.default_factory
    if isinstance(default, FieldInfo):
        if default.default_factory is not None:
            return default.default_factory()
        return dataclasses.MISSING if default.is_required() else default.default
    if default is not dataclasses.MISSING:
        return default
    return factory() if factory is not dataclasses.MISSING else dataclasses.MISSING


@dataclasses.dataclass(frozen=True)
class CheckContext:
    """What `Stage.check` is told about the run before any data is read."""

    #: the run directory
    output_dir: str | None = None
    #: position of the stage in the pipeline
    position: int = 0
    #: the stages before it
    earlier: tuple = ()
    #: columns the input carries besides id and text (``input.columns``)
    input_columns: frozenset = frozenset()


@dataclasses.dataclass(frozen=True)
class TaskPlace:
    """The row task a stage runs in, as the runner tells it (`TASK`)."""

    #: a path of the task's own in the run directory (``<segment>/.attempts/part-NNNNN``), to
    #: which a stage adds a suffix of its own: a file it leaves there (making the directory) is
    #: found by the next attempt at the same partition, on any worker, after the process of
    #: this one died
    path: str
    #: seconds the task may hold its process unresponsive and may then end it: the process is
    #: a Dask worker running one task at a time, which its nanny replaces when it dies (the
    #: scheduler gives the task to a worker again), and the scheduler drops a worker silent for
    #: at least twice this; 0 when ending the process could lose work (more threads, no nanny,
    #: a cluster the run did not start)
    expendable_for: float = 0.0


#: the row task in progress in this thread, set by the runner around it; None elsewhere
#: (preview, explain, a stage called from Python)
TASK: contextvars.ContextVar[TaskPlace | None] = contextvars.ContextVar("gpupipe_task",
                                                                        default=None)


@dataclasses.dataclass(frozen=True)
class StageResult:
    frame: pd.DataFrame
    drops: dict[str, int] = dataclasses.field(default_factory=dict)
    counters: dict[str, int] = dataclasses.field(default_factory=dict)
    #: the dropped rows with a ``reason`` column (filters with ``keep_rejected: true``)
    rejected: pd.DataFrame | None = None


class Stage:
    """Base of every stage. Subclasses declare parameters as dataclass fields."""

    stage_name: ClassVar[str] = ""
    kind: ClassVar[Literal["row", "global"]] = "row"
    #: reason codes a filter can drop a row for, in the order the checks run
    reasons: ClassVar[tuple[str, ...]] = ()
    #: dataframe backends the stage runs on natively (derived from `kernels` by `stage`)
    backends: ClassVar[tuple[str, ...]] = ("pandas",)
    #: the kernel launchers it computes with (`gpupipe.kernels.cpu` names); set only when the
    #: stage touches its partition through them and `gpupipe.backends.dispatch` alone
    kernels: ClassVar[tuple[str, ...]] = ()
    #: steps that stay on the host even when the stage runs on cuDF (shown by ``explain``)
    host_steps: ClassVar[str] = ""
    #: the stage ends the run (NeMo Curator's "sink stage"): it must be the last stage, at most
    #: one per pipeline, and the runner writes the training shards from its output (tokenize)
    is_sink: ClassVar[bool] = False

    def runs_on(self, backend: str) -> str:
        """The backend this stage runs on in a run on ``backend``: that one where the stage has
        a native path, pandas otherwise (the runner converts the partition before it)."""
        return backend if backend in self.backends else "pandas"

    def params(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def to_dict(self) -> dict[str, Any]:
        """The pipeline-file form: ``{"stage": name, **params}``."""
        return {"stage": self.stage_name, **self.params()}

    def describe(self) -> str:
        """``name(param=value, ...)`` listing parameters that differ from their defaults."""
        changed = []
        params = self.params()
        for f in dataclasses.fields(self):
            value = params[f.name]
            default = field_default(f)
            default = None if default is dataclasses.MISSING else default
            if value != default:
                changed.append(f"{f.name}={value!r}")
        return f"{self.stage_name}({', '.join(changed)})"

    def _repr_html_(self) -> str:
        return views.html(self)

    @classmethod
    def summary(cls) -> str:
        """The first paragraph of the docstring, on one line."""
        return " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())

    def added_columns(self) -> dict[str, str]:
        """Columns this stage adds, name -> dtype (used to build Dask ``meta``)."""
        return {}

    def identity(self) -> dict:
        """What besides the parameters the stage's result depends on (the earlier runs a dedup
        stage reads), part of the checkpoint fingerprint."""
        return {}

    def explain_notes(self) -> list[str]:
        """Lines ``explain`` shows under the stage (settings derived from the parameters)."""
        return []

    def check(self, ctx: CheckContext | None = None) -> str | None:
        """Called once on the client before any data is read: check what the parameters name
        (model files, their inputs and classes, earlier runs' indexes) and what comes before
        the stage (``ctx``), and raise ``ValueError`` (or `gpupipe.SpecError`) with a message
        for the user when something does not fit. Returns a line for the log, or None."""
        return None

    def prepare(self) -> str | None:
        """Called once on the client before the stage's partitions run: build what every task
        shares (an index, a table) and keep it on the stage, which the runner then ships to
        each worker once. Returns a line for the log, or None."""
        return None


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


@dataclasses.dataclass(frozen=True, kw_only=True)
class FilterOptions:
    """Parameters every filter has (inherited by the validated dataclass of each filter)."""

    #: ``drop`` removes failing rows; ``annotate`` keeps every row and adds ``<stage>_reason``
    mode: Literal["drop", "annotate"] = "drop"
    #: write dropped rows with their reason to ``<output>/rejected/<stage>/``
    keep_rejected: bool = False


class Filter(FilterOptions, RowStage):
    """A row-local stage that keeps or drops rows, with a reason code for every drop.

    Subclasses implement `reason_codes` (or `evaluate` when they also rewrite the text of the rows
    they keep). With ``mode: annotate`` nothing is dropped: a string column ``<stage>_reason``
    holds the reason a row would have been dropped for (null when it would be kept) and the
    stage's counters count ``flagged:<reason>``.
    """

    def reason_codes(self, df: pd.DataFrame) -> np.ndarray:
        """Per row: 0 to keep, ``k`` to drop for ``self.reasons[k - 1]``."""
        raise NotImplementedError

    #: measure -> the parameters that bound it, as ``(parameter, "min" | "max")`` (what
    #: `measures` computes; shown by ``preview`` and `gpupipe.explain_document`)
    bounds: ClassVar[dict[str, tuple[tuple[str, str], ...]]] = {}

    def measures(self, df: pd.DataFrame) -> dict[str, np.ndarray]:
        """The numbers behind the decision, per row (empty for filters that do not say)."""
        return {}

    def evaluate(self, df: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame, dict[str, int]]:
        """(reason codes, the frame with kept rows rewritten if the filter rewrites, counters)."""
        return np.asarray(self.reason_codes(df)), df, {}

    @property
    def reason_column(self) -> str:
        return f"{self.stage_name}_reason"

    def added_columns(self) -> dict[str, str]:
        return {self.reason_column: "string"} if self.mode == "annotate" else {}

    def reason_labels(self, codes: np.ndarray, like) -> pd.Series:
        """Reason names for codes (null for 0), a string column of ``like``'s backend."""
        return dispatch.label_column(like, codes, self.reasons)

    def process(self, df: pd.DataFrame) -> StageResult:
        codes, df, counters = self.evaluate(df)
        codes = np.asarray(codes)
        if len(codes) != len(df):
            raise ValueError(f"{self.stage_name}: {len(codes)} reason codes for {len(df)} rows")
        counts = np.bincount(codes, minlength=len(self.reasons) + 1)
        flagged = {r: int(counts[k]) for k, r in enumerate(self.reasons, 1) if counts[k]}
        if self.mode == "annotate":
            labels = self.reason_labels(codes, df)
            counters = {**counters, **{f"flagged:{r}": n for r, n in flagged.items()}}
            return StageResult(df.assign(**{self.reason_column: labels}), {}, counters)
        if not flagged:
            return StageResult(df, {}, counters)
        drop = codes != 0
        rejected = None
        if self.keep_rejected:
            rejected = dispatch.filter_rows(df, drop)
            rejected = rejected.assign(reason=self.reason_labels(codes[drop], rejected))
        return StageResult(dispatch.filter_rows(df, ~drop), flagged, counters, rejected)


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


class GlobalStage(Stage):
    """A stage that needs the whole dataset.

    It declares its work as `gpupipe.stages.steps` (``steps``), which the runner executes,
    checkpoints and resumes, merging their counters; the stage never sees Dask.
    """

    kind: ClassVar[Literal["row", "global"]] = "global"

    def steps(self, ctx) -> list:
        """The stage's steps (`gpupipe.stages.steps`), given a `StepContext`."""
        raise NotImplementedError

    def index_params(self) -> dict | None:
        """What the index this stage leaves for later runs depends on (written in its
        manifest, checked by a later run's ``against``), or None when it leaves none."""
        return None
