"""One walk over row-local stages, used by the runner's row tasks, `Pipeline.preview` and
`gpupipe.explain_document`: each stage on the frame the previous one left, on the backend it
runs on, failures named by stage and partition (or bisected down to the documents that cause
them under ``on_error: skip``).

With ``look=True`` (preview) nothing is dropped: a filter runs in annotate mode, and the next
stage sees the rows it would have kept as well as those it would have dropped, without the
reason column. A source's own stage (`ForSource`) then applies to the documents of its source
only, on frames that mix sources.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from typing import Any

from gpupipe.backends import dispatch, to_backend
from gpupipe.errors import GpupipeError, StageError
from gpupipe.frame import ID, TEXT
from gpupipe.stages.base import Filter, Stage, StageResult
from gpupipe.stages.sources import SOURCE, ForSource


@dataclasses.dataclass
class Visit:
    """What one stage did on one frame."""

    position: int
    stage: Stage
    #: the backend it ran on
    backend: str
    #: the frame it got
    frame_in: Any
    result: StageResult
    #: the frame the next stage gets (``result.frame``, without a reason column in look mode)
    frame_out: Any
    seconds: float
    #: documents it failed on, set aside under ``on_error: skip`` (a host frame), or None
    failed: Any = None
    #: look mode: the filter that ran (in annotate mode), or None for a transform
    look: Filter | None = None


def walk(stages: list[tuple[int, Stage]], df, *, backend: str = "pandas",
         on_error: str = "fail", where: str = "", look: bool = False) -> Iterator[Visit]:
    """Run ``stages`` (``(position, stage)`` pairs) in order on ``df``, yielding a `Visit` per
    stage. ``backend``: the run's backend; before each stage the frame moves to the backend that
    stage runs on (a no-op when it is there already)."""
    for pos, st in stages:
        t0 = time.perf_counter()
        on = st.runs_on(backend)
        failed = probe = None
        try:
            df = to_backend(df, on)
            if look:
                result, probe = _look(st, df)
            else:
                result = st.process(df)
        except GpupipeError:
            raise
        except Exception as e:
            if on_error != "skip" or len(df) == 0 or look:
                raise StageError(
                    f"stage {st.stage_name!r} (stages[{pos}]) failed on {where or 'a frame'}: "
                    f"{type(e).__name__}: {e}") from e
            result, failed = isolate_failures(st, df)
        out = result.frame
        if probe is not None and probe is not _inner(st):   # a drop-mode filter looked at
            out = out.drop(columns=[probe.reason_column])
        yield Visit(pos, st, on, df, result, out, time.perf_counter() - t0, failed, probe)
        df = out


def _inner(st: Stage) -> Stage:
    return st.inner if isinstance(st, ForSource) else st


def _look(st: Stage, df) -> tuple[StageResult, Filter | None]:
    """``st`` on ``df`` dropping nothing: a filter in annotate mode (and which one ran)."""
    inner = _inner(st)
    if isinstance(inner, Filter):
        probe = dataclasses.replace(inner, mode="annotate") if inner.mode == "drop" else inner
        result = probe.process(df)
        if st is not inner and SOURCE in df.columns:   # verdicts for its own source only
            reason = result.frame[probe.reason_column]
            mine = (df[SOURCE] == st.source).to_numpy()
            result = dataclasses.replace(result, frame=result.frame.assign(
                **{probe.reason_column: reason.where(mine, None)}))
        return result, probe
    if st is inner or SOURCE not in df.columns:
        return inner.process(df), None
    mine = (df[SOURCE] == st.source).to_numpy()    # a source's transform on its rows only
    if mine.all() or not mine.any():
        return st.process(df), None
    import pandas as pd

    host = dispatch.to_host(df)
    done = inner.process(host[mine].reset_index(drop=True)).frame
    rest = host[~mine].reset_index(drop=True)
    for c in done.columns.difference(rest.columns):
        rest[c] = pd.Series([None] * len(rest), dtype=done[c].dtype)
    order = pd.concat([pd.Series(host.index[mine]), pd.Series(host.index[~mine])],
                      ignore_index=True)
    both = pd.concat([done, rest[done.columns]], ignore_index=True)
    return StageResult(dispatch.like(df, both.iloc[order.argsort()].reset_index(drop=True))), None


def isolate_failures(st: Stage, df):
    """``st`` on ``df`` when it fails on some documents: the partition is halved until the
    documents it fails on are alone; those are set aside (reason ``stage_error`` and the
    exception), the stage's results on the rest are joined in order. Row-local stages give
    the same result on parts as on the whole, so nothing else changes."""
    import numpy as np
    import pandas as pd

    parts: list = []
    failed: list = []

    def run(lo: int, hi: int) -> None:
        part = df.iloc[lo:hi].reset_index(drop=True)   # stages expect rows numbered from 0
        try:
            parts.append(st.process(part))
        except GpupipeError:
            raise
        except Exception as e:
            if hi - lo == 1:
                host = dispatch.to_host(part)[[ID, TEXT]]
                failed.append(host.assign(reason="stage_error",
                                          error=f"{type(e).__name__}: {e}"[:2000]))
                return
            mid = (lo + hi) // 2
            run(lo, mid)
            run(mid, hi)

    run(0, len(df))
    frames = [r.frame for r in parts]
    if frames:
        frame = dispatch.like(df, pd.concat([dispatch.to_host(f) for f in frames],
                                            ignore_index=True))
    else:
        frame = dispatch.filter_rows(df, np.zeros(len(df), dtype=bool))
    # a stage can fail on a whole partition and on neither half (a limit on the rows of a call):
    # then no document is set aside, and the halves' results stand
    drops: dict = {"stage_error": len(failed)} if failed else {}
    counters: dict = {}
    rejected = [r.rejected for r in parts if r.rejected is not None]
    for r in parts:
        for k, v in r.drops.items():
            drops[k] = drops.get(k, 0) + v
        for k, v in r.counters.items():
            counters[k] = counters.get(k, 0) + v
    rej = (pd.concat([dispatch.to_host(r) for r in rejected], ignore_index=True)
           if rejected else None)
    return (StageResult(frame, drops, counters, rej),
            pd.concat(failed, ignore_index=True) if failed else None)
