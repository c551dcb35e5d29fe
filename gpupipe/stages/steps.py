"""Steps: how a global stage declares its work, so that the runner can execute, checkpoint and
resume it and collect its counters.

A global stage returns a list of steps from ``steps(ctx)``; the runner executes them in order on
the cluster. The vocabulary:

* `Map` — one task per input partition (or per file of an earlier step): ``fn(ctx, i)``
  returns an `Output`. Its table is written to files, optionally **shuffled by key**
  (``shuffle_on``): then every task writes one file holding one Arrow record batch per bucket,
  rows routed by a hash of the key columns, and a `Reduce` reads bucket ``j`` of every file.
* `Reduce` — one task per bucket of a shuffled step: ``fn(ctx, table)`` gets every row whose key
  falls in that bucket (so every group whole) and returns an `Output`, itself optionally
  shuffled again.
* `OnClient` — ``fn(ctx)`` runs once in the client process, for work that needs everything at
  once and is small (a graph of candidate pairs); its table can be split by a partition column
  for the next `Map`.

The last step of a stage is a `Map` with ``output=True``: its frame (pandas or cuDF) is partition
``i`` of the stage's result (one per input partition, or ``items`` of them), and its audit and
index rows are side outputs the runner places in the run directory.

Every task writes its files, then a marker with its counters; an interrupted stage resumes at
the first task without a marker. The counters every task returns are summed into the stage's
entry in ``run.json`` (with the seconds of each step). Steps never see Dask: the runner moves
the data between them through files in the stage's work directory.
"""

from __future__ import annotations

import dataclasses
import glob
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa


@dataclasses.dataclass
class Output:
    """What a step's task returns."""

    #: rows for the step's output files (``pyarrow.Table``; for the output step, a frame)
    table: Any = None
    #: side files: name -> numpy array (``<step>/<name>/part-i.npy``) or Arrow table (``.parquet``)
    files: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: added up over tasks and steps into the stage's counters
    counters: dict[str, int | float] = dataclasses.field(default_factory=dict)
    #: rows removed, by reason (output step)
    drops: dict[str, int] = dataclasses.field(default_factory=dict)
    #: output step: audit rows of the removed documents (``AUDIT_SCHEMA`` of the dedup stages),
    #: which the runner writes to ``dedup/duplicates.parquet/<position>-<stage>-part-i.parquet``;
    #: or ``{name: table}`` for ``dedup/<name>.parquet/`` (`gpupipe.io.rundir.AUDITS`)
    audit: Any = None
    #: output step: partition ``i`` of the index this run leaves for later runs, suffix -> Arrow
    #: table or numpy array; the runner writes ``dedup/index/<stage>/part-i.<suffix>`` and,
    #: when every partition is written, the index's manifest (`GlobalStage.index_params`)
    index: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Map:
    """One task per partition of the stage input (``over=None``) or per file of step ``over``."""

    name: str
    fn: Callable
    over: str | None = None
    #: columns whose hash routes each row to a bucket (integer columns)
    shuffle_on: tuple[str, ...] = ()
    #: an integer column in ``[0, ctx.npartitions)``: bucket ``i`` holds the rows with value ``i``
    split_by: str | None = None
    #: tasks when ``over`` is neither the input nor a step (``fn(ctx, i)`` for i < items): a
    #: number, or ``items(ctx)`` when an earlier step decides it (repartition's output)
    items: int | Callable[[Any], int] | None = None
    #: the task's frame is partition ``i`` of the stage's result
    output: bool = False
    kind = "map"


@dataclasses.dataclass(frozen=True)
class Reduce:
    """One task per bucket of the shuffled step ``of`` (several steps shuffled on the same key:
    their bucket ``j`` together)."""

    name: str
    fn: Callable
    of: str | tuple[str, ...]
    shuffle_on: tuple[str, ...] = ()
    split_by: str | None = None
    output = False
    kind = "reduce"


@dataclasses.dataclass(frozen=True)
class OnClient:
    """``fn(ctx)`` once, in the client process. ``split_by``: an integer column in
    ``[0, ctx.npartitions)``; bucket ``i`` of the output then holds the rows with value ``i``
    (read by a later `Map` with ``ctx.bucket(name, i)``)."""

    name: str
    fn: Callable
    split_by: str | None = None
    output = False
    shuffle_on = ()
    kind = "client"


Step = Map | Reduce | OnClient


@dataclasses.dataclass
class StepContext:
    """What the runner gives a global stage's steps (picklable: it travels to the workers)."""

    #: the stage's input: ``source.read(i)``; read partitions with `read`
    source: Any
    #: the stage's work directory (each step writes under ``<work_dir>/<step>/``)
    work_dir: str
    #: the run directory (``dedup/`` and ``rejected/`` live there)
    output_dir: str
    #: position of the stage in the pipeline
    position: int
    #: the backend the stage runs on ("pandas" or "cudf")
    backend: str = "pandas"
    #: buckets of every shuffle
    buckets: int = 1
    #: the stage's name (failpoints, messages)
    stage_name: str = ""
    #: step name -> its directory name (``<k>-<name>``), filled in by the runner
    step_dirs: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def npartitions(self) -> int:
        return self.source.npartitions

    @property
    def label(self) -> str:
        """``<position>:<stage>``, how the audit names the stage."""
        return f"{self.position}:{self.stage_name}"

    def read(self, i: int):
        """Partition ``i`` of the stage's input as a frame of `backend`."""
        from gpupipe.io.source import read_partition

        return read_partition(self.source, i, self.backend).frame

    def step_dir(self, step: str) -> str:
        return os.path.join(self.work_dir, self.step_dirs.get(step, step))

    def files(self, step: str) -> list[str]:
        """The output files of ``step``, in task order."""
        d = self.step_dir(step)
        return sorted(glob.glob(os.path.join(d, "part-*.parquet")) +
                      glob.glob(os.path.join(d, "part-*.arrow")))

    def side(self, step: str, name: str, i: int, suffix: str) -> str:
        """Path of side file ``name`` of task ``i`` of ``step`` (``suffix``: npy or parquet)."""
        return os.path.join(self.step_dir(step), name, f"part-{i:05d}.{suffix}")

    def table(self, step: str) -> pa.Table | None:
        """Every row ``step`` wrote (unshuffled or shuffled), or None when it wrote none."""
        tables = [read_file(f) for f in self.files(step)]
        tables = [t for t in tables if t.num_rows]
        return pa.concat_tables(tables) if tables else None

    def bucket(self, step: str | tuple[str, ...], j: int) -> pa.Table | None:
        """Bucket ``j`` of the shuffled (or split) output of ``step`` (of several steps), or
        None when empty."""
        steps = (step,) if isinstance(step, str) else step
        batches = []
        for f in [f for s in steps for f in self.files(s)]:
            reader = pa.ipc.open_file(pa.memory_map(f))
            if j < reader.num_record_batches:
                b = reader.get_batch(j)
                if b.num_rows:
                    batches.append(b)
        return pa.Table.from_batches(batches) if batches else None


def read_file(path: str) -> pa.Table:
    if path.endswith(".arrow"):
        return pa.ipc.open_file(pa.memory_map(path)).read_all()
    import pyarrow.parquet as pq

    return pq.read_table(path)


_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser (uint64 -> uint64, wraps)."""
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def bucket_of(table: pa.Table, columns: tuple[str, ...], n: int) -> np.ndarray:
    """Bucket in ``[0, n)`` of every row: a hash of the integer key columns, so that equal keys
    meet in one bucket whatever task wrote them."""
    h = np.zeros(table.num_rows, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for c in columns:
            v = np.asarray(table.column(c).to_numpy()).astype(np.int64).view(np.uint64)
            h = _mix(h ^ _mix(v + np.uint64(0x9E3779B97F4A7C15)))
    return (h % np.uint64(n)).astype(np.int64)


def write_buckets(table: pa.Table, buckets: np.ndarray, n: int, path: str) -> None:
    """``table`` as an Arrow IPC file of ``n`` record batches, batch ``j`` = rows in bucket
    ``j`` (written to a temporary name, then renamed: a reader never sees half a file)."""
    order = np.argsort(buckets, kind="stable")
    counts = np.bincount(buckets, minlength=n)
    table = table.take(pa.array(order)).combine_chunks()
    whole = (table.to_batches() or [pa.RecordBatch.from_pylist([], schema=table.schema)])[0]
    from gpupipe.io.writer import atomic_path

    with atomic_path(path) as tmp, pa.OSFile(tmp, "wb") as sink, \
            pa.ipc.new_file(sink, table.schema) as w:
        start = 0
        for c in counts:
            w.write_batch(whole.slice(start, int(c)))
            start += int(c)
