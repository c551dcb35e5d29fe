"""What runs on the workers: one fused task per partition, and the writer of global outputs."""

from __future__ import annotations

import os
import pickle
import sys
import threading
import time

from gpupipe.backends import dispatch
from gpupipe.faults import failpoint
from gpupipe.frame import TEXT
from gpupipe.io.writer import write_json, write_parquet
from gpupipe.runner.stats import ReadStats, StageStats, profile
from gpupipe.stages.base import TASK, TaskPlace


def part_name(i: int) -> str:
    return f"part-{i:05d}"


def marker_path(directory: str, i: int) -> str:
    return os.path.join(directory, "_done", part_name(i))


def run_stages(df, stages, where: str, rejected_files: dict[int, str] | None = None,
               backend: str = "pandas", on_error: str = "fail",
               error_files: dict[int, str] | None = None):
    """Apply row-local stages in order (`gpupipe.runner.walk`); per-stage stats. Errors name
    the stage and partition.

    ``rejected_files``: stage position -> Parquet file for the rows that stage drops (filters
    with ``keep_rejected``); ``error_files``: the same for the documents a stage fails on under
    ``on_error: skip``. ``backend``: the run's backend; before each stage the partition is
    moved to the backend that stage runs on (a no-op when it is there already)."""
    from gpupipe.runner.walk import walk
    from gpupipe.stages.sources import ForSource

    stats = []
    nbytes = dispatch.byte_size(df[TEXT])
    per_source = source_counts(df)
    for v in walk(stages, df, backend=backend, on_error=on_error, where=where):
        st, result = v.stage, v.result
        if v.failed is not None and error_files and v.position in error_files:
            write_parquet(dispatch.arrow_table(v.failed), error_files[v.position])
        if result.rejected is not None and rejected_files and v.position in rejected_files:
            write_parquet(dispatch.arrow_table(result.rejected), rejected_files[v.position])
        docs_in, bytes_in = len(v.frame_in), nbytes
        df = v.frame_out
        nbytes = dispatch.byte_size(df[TEXT])
        if isinstance(st, ForSource) and per_source is not None and \
                st.source not in per_source:   # a source's own stage, another source's documents
            stats.append(StageStats(v.position, st.stage_name, seconds=v.seconds,
                                    backend=v.backend, by_source={}))
            continue
        stats.append(StageStats(v.position, st.stage_name, docs_in=docs_in, docs_out=len(df),
                                bytes_in=bytes_in, bytes_out=nbytes, drops=dict(result.drops),
                                counters=dict(result.counters), seconds=v.seconds,
                                backend=v.backend))
        if per_source is not None:
            out = source_counts(df)
            stats[-1].by_source = {k: {"docs_in": per_source.get(k, 0), "docs_out": out.get(k, 0)}
                                   for k in sorted(set(per_source) | set(out))}
            per_source = out
    return df, stats


def source_counts(df) -> dict[str, int] | None:
    """Documents per source (the ``source`` column of named inputs), or None without one."""
    if "source" not in df.columns:
        return None
    names = dispatch.to_host(df[["source"]])["source"]
    return {str(k): int(v) for k, v in names.value_counts().items()}


def worker_may_end() -> bool:
    """Whether this thread runs a task of a Dask worker that runs one task at a time and has a
    nanny (which starts a new worker when this one ends), and is not dask-cuda's (a new one is
    slow to start, and its GPU memory may not be free yet)."""
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):   # not in a Dask worker's task
        return False
    return worker.nanny is not None and worker.state.nthreads == 1 and \
        "dask_cuda" not in sys.modules


#: the hidden directory of a row segment where its tasks' stages leave marks for the next
#: attempts (`TaskPlace.path`; hidden: a mirror of the run directory leaves it out); the driver
#: empties it when it starts the segment's tasks and when they end
ATTEMPTS = ".attempts"


def attempt_path(out_dir: str, i: int) -> str:
    """`TaskPlace.path` of partition ``i``'s row task."""
    return os.path.join(out_dir, ATTEMPTS, part_name(i))


#: the stages this worker process loaded (`shipped`), by file: those of the segments running
_shipped: dict[str, list] = {}
_shipping = threading.Lock()


def shipped(path: str) -> list:
    """The stages `gpupipe.runner.segments.ship` wrote to ``path``: read by the first task of
    this process that needs them (its other threads wait), kept until `forget_shipped`."""
    with _shipping:
        got = _shipped.get(path)
        if got is None:
            with open(path, "rb") as f:
                got = _shipped[path] = pickle.load(f)
    return got


async def forget_shipped(path: str) -> None:
    """Drop the stages of ``path`` (the segment is over), on every worker: `Client.run` with
    ``wait=False``, which only a coroutine function may be (one pop, atomic: no lock)."""
    _shipped.pop(path, None)


def run_row_partition(i: int, *, source, stages, out_dir: str, stats_dir: str,
                      rejected_dir: str | None, filter_rejected: dict[int, str] | None = None,
                      backend: str = "pandas", error_dirs: dict[int, str] | None = None,
                      expendable_for: float = 0.0) -> dict:
    """Read partition ``i``, run the fused stages (``(position, stage)`` pairs, or the file
    `shipped` reads them from), write the result, then the stats and marker. The stages are told
    where they run (`TASK`): ``expendable_for`` is `TaskPlace.expendable_for` where the worker
    may end (`worker_may_end`), as the driver found it from the scheduler's worker-ttl.

    On the cuDF backend the partition is read into GPU memory when the first stage runs there
    (on the host otherwise), and written from whichever side the last stage left it on: both
    write the same canonical Arrow table, so the Parquet bytes do not depend on the backend."""
    from gpupipe.io.source import read_partition

    start = time.perf_counter()
    if isinstance(stages, str):   # the worker's first task loads them (and their imports)
        stages = shipped(stages)
    t0 = time.perf_counter()   # the read's own seconds
    where = f"partition {i} ({source.describe(i)})"
    first = stages[0][1].runs_on(backend) if stages else "pandas"
    result = read_partition(source, i, first)
    report = {"partition": i, "source": source.describe(i)}
    if hasattr(source, "source_of"):
        report["source_name"] = source.source_of(i)
    if rejected_dir is not None:
        report["read"] = ReadStats(**result.stats, rejected=dict(result.rejected_counts),
                                   seconds=time.perf_counter() - t0).to_json()
        report["read_profile"] = profile(result.frame)
        if result.rejected is not None:
            write_parquet(result.rejected, os.path.join(rejected_dir, part_name(i) + ".parquet"))
    files = {pos: os.path.join(d, part_name(i) + ".parquet")
             for pos, d in (filter_rejected or {}).items()}
    policy = source.on_error_of(i) if hasattr(source, "on_error_of") else getattr(
        source, "on_error", "fail")
    errors = {pos: os.path.join(d, "errors", part_name(i) + ".parquet")
              for pos, d in (error_dirs or {}).items()}
    token = TASK.set(TaskPlace(attempt_path(out_dir, i),
                               expendable_for if worker_may_end() else 0.0))
    try:
        df, stats = run_stages(result.frame, stages, where, files, backend, policy, errors)
    finally:
        TASK.reset(token)
    report["stages"] = [s.to_json() for s in stats]
    write_parquet(dispatch.arrow_table(df), os.path.join(out_dir, part_name(i) + ".parquet"))
    report["docs_out"] = len(df)
    report["bytes_out"] = dispatch.byte_size(df[TEXT])
    report["profile"] = profile(df)
    report["seconds"] = time.perf_counter() - start
    write_json(report, os.path.join(stats_dir, part_name(i) + ".json"))
    touch(marker_path(out_dir, i))
    failpoint(f"row/{os.path.basename(out_dir)}/{i}")
    return report


def touch(path: str) -> None:
    """Create the empty file ``path`` (a completion marker), and its directory."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w"):
        pass
