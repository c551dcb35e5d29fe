"""Executing the segments of a plan in order: fused row-local tasks and global stages, each
checkpointed and resumed, with their statistics merged for run.json."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pickle
import shutil
import time
import uuid

from gpupipe.io.parquet import ParquetSource
from gpupipe.io.writer import remove_partial, write_json
from gpupipe.runner.cluster import gather
from gpupipe.runner.plan import Segment, rejected_directory
from gpupipe.runner.resume import load_state, reset, work_dir
from gpupipe.runner.stats import ReadStats, StageStats, merge_profiles, merge_stages
from gpupipe.runner.tasks import (
    ATTEMPTS,
    forget_shipped,
    marker_path,
    part_name,
    run_row_partition,
)

log = logging.getLogger(__name__)


def run_segments(pipeline, client, source, segments: list[Segment], fps, out, bar,
                  backend: str = "pandas", committed=None, own_workers: bool = False) -> dict:
    """``committed()`` is called when each segment is (a run on object storage uploads it).
    ``own_workers``: the cluster is the local one the run started, or one said to be
    ``dedicated`` to it (`expendable_for`)."""
    source_in = source
    upstream_changed = False
    seg_info = []
    stage_stats: list[StageStats] = []
    read_reports: list[dict] = []
    reports: list[dict] = []
    docs_prev = bytes_prev = 0
    rejected_dir = os.path.join(out, "rejected", "read")
    for seg, fp in zip(segments, fps):
        directory, stats_dir = seg.directory(out), seg.stats_directory(out)
        state = load_state(directory)
        if upstream_changed or state is None or state.get("fingerprint") != fp:
            if state is not None:
                log.info("%s: pipeline or input changed since the last run; recomputing", seg.name)
            stale = [seg.work_directory(out)] if upstream_changed else []
            kept = [rejected_directory(out, pipeline.all_stages(), p) for p in seg.positions]
            reset(directory, stats_dir, *stale, *kept,
                   *([rejected_dir] if seg.reads_input else []))
            state = None
        for d in (directory, stats_dir):   # what killed tasks were writing when they died
            remove_partial(d)
        t0 = time.perf_counter()
        if seg.kind == "row":
            filter_rejected = {p: rejected_directory(out, pipeline.all_stages(), p)
                               for p, st in zip(seg.positions, seg.stages)
                               if getattr(st, "keep_rejected", False)}
            error_dirs = {p: rejected_directory(out, pipeline.all_stages(), p)
                          for p in seg.positions}
            reports, computed = _run_row_segment(client, seg, fp, source, directory, stats_dir,
                                                 rejected_dir if seg.reads_input else None, bar,
                                                 filter_rejected, backend, error_dirs,
                                                 own_workers)
            stage_stats.extend(merge_stages(reports, list(seg.stages), seg.positions, backend))
            if seg.reads_input:
                read_reports = reports
        else:
            reports, computed, info = _run_global_segment(client, seg, fp, source, directory,
                                                          stats_dir, state, bar, out, backend)
            st = seg.stages[0]
            seconds = (time.perf_counter() - t0 if computed else
                       (state or {}).get("seconds", 0.0))
            entry = StageStats(seg.positions[0], st.stage_name, kind="global",
                               params=st.params(), docs_in=docs_prev,
                               docs_out=sum(r["docs_out"] for r in reports), bytes_in=bytes_prev,
                               bytes_out=sum(r["bytes_out"] for r in reports),
                               drops=info["drops"], counters=info["counters"], seconds=seconds,
                               backend=st.runs_on(backend), steps=info["steps"])
            if pipeline.inputs:   # documents per source: in from the stage before, out counted
                outs: dict[str, int] = {}
                for r in reports:
                    # (stats files written before 2026-12 call it by_source)
                    for k, v in r.get("docs_by_source", r.get("by_source", {})).items():
                        outs[k] = outs.get(k, 0) + v
                before = (stage_stats[-1].by_source if stage_stats else None) or {}
                entry.by_source = {
                    k: {"docs_in": before.get(k, {}).get("docs_out", 0),
                        "docs_out": outs.get(k, 0)} for k in sorted(set(before) | set(outs))}
            stage_stats.append(entry)
        upstream_changed = upstream_changed or computed > 0
        docs_prev = sum(r["docs_out"] for r in reports)
        bytes_prev = sum(r["bytes_out"] for r in reports)
        seg_info.append({"name": seg.name, "kind": seg.kind,
                         "stages": [s.stage_name for s in seg.stages],
                         "directory": os.path.relpath(directory, out), "partitions": len(reports),
                         "computed": computed, "reused": len(reports) - computed,
                         "seconds": round(time.perf_counter() - t0, 3)})
        if committed is not None and computed:
            committed()
        extra = sorted({c for st in pipeline.all_stages()[: (seg.positions[-1] + 1
                                                             if seg.positions else 0)]
                        for c in st.added_columns()} | ({"source"} if pipeline.inputs else set())
                       | {c for spec in pipeline.sources().values()
                          for c in spec.carried_columns()})
        files = tuple(os.path.join(directory, part_name(i) + ".parquet") for i in range(len(reports)))
        source = ParquetSource(files=files, root=directory, text_column="text", id_column="id",
                               columns=tuple(extra))
    read_stats = sum((ReadStats.from_json(r.get("read", {})) for r in read_reports), ReadStats())
    read = read_stats.to_json()
    read.update(merge_profiles(read_reports, "read_profile"))
    if getattr(source_in, "left_out", ()):
        read["left_out"] = [{"path": p, "why": why} for p, why in source_in.left_out]
    stage_stats.sort(key=lambda s: s.position)
    dropped = sum(sum(s.drops.values()) for s in stage_stats)
    rejected_records = read_stats.records_rejected
    records_in = read_stats.docs + rejected_records
    # documents a stage split in pieces (decontaminate's cut): the pieces beyond the first
    added = sum(s.counters.get("documents_added", 0) for s in stage_stats)
    by_source = _source_accounting(read_reports, stage_stats) if pipeline.inputs else None
    return {
        **({"sources": by_source} if by_source else {}),
        "input": {"format": pipeline.input.resolved_format() if pipeline.input else {
                      k: v.resolved_format() for k, v in pipeline.inputs.items()},
                  "files": read["files"], "partitions": len(read_reports)},
        "read": read,
        "stages": [s.to_json() for s in stage_stats],
        "segments": seg_info,
        "output": {"path": out, "data": os.path.join(out, "data"), "partitions": len(reports),
                   "docs": docs_prev, "bytes": bytes_prev, **merge_profiles(reports)},
        "accounting": {"records_in": records_in, "added": added, "docs_out": docs_prev,
                       "dropped": dropped, "rejected": rejected_records,
                       "balanced": records_in + added == docs_prev + dropped + rejected_records},
    }


def _source_accounting(read_reports: list[dict], stage_stats: list[StageStats]) -> dict:
    """Per named input: records read, set aside, kept, and whether every stage's documents in
    equal the documents out of the stage before it (the first: the documents read)."""
    out: dict[str, dict] = {}
    for r in read_reports:
        got = out.setdefault(r.get("source_name", "?"), {"records_in": 0, "rejected": 0})
        read = ReadStats.from_json(r["read"])
        got["records_in"] += read.docs + read.records_rejected
        got["rejected"] += read.records_rejected
    for name, got in out.items():
        prev = got["records_in"] - got["rejected"]
        chain = True
        for st in stage_stats:
            s = (st.by_source or {}).get(name, {"docs_in": prev, "docs_out": prev})
            chain &= s["docs_in"] == prev
            prev = s["docs_out"]
        got.update(docs_out=prev, removed_by_stages=got["records_in"] - got["rejected"] - prev,
                   balanced=chain)
    return dict(sorted(out.items()))


def ship(stages: list, directory: str) -> str:
    """Write a row segment's ``(position, stage)`` pairs to a hidden file of its ``directory``
    (where its tasks write), which each worker process reads once and keeps while the segment
    runs (`tasks.shipped`), instead of sending them with each task (a stage may carry an
    index). A file rather than Dask data: scattered data is lost when every worker holding it
    ended (the only one, that a page of extract_html ended), and a task's result would pass
    through the scheduler and draw the segment's tasks to the worker holding it. Named as a
    temporary file (``.stages.tmp-<id>``): `remove_partial`, at the segment's start, removes
    those a killed run left."""
    import cloudpickle

    path = os.path.join(directory, f".stages.tmp-{uuid.uuid4().hex}")
    with open(path, "wb") as f:
        cloudpickle.dump(stages, f, protocol=pickle.HIGHEST_PROTOCOL)
    return path


def expendable_for(client, backend: str, own_workers: bool) -> float:
    """`TaskPlace.expendable_for` of the tasks of a run: half the scheduler's worker-ttl (a
    page of extract_html may hold a worker silent that long), unlimited without one. 0 unless
    the workers are the CPU cluster the run started, or one the pipeline says is ``dedicated``
    to it (``own_workers``): another cluster the user gave or attached to may hold other work,
    and a new CUDA worker is slow to start (and its GPU memory may not be free yet)."""
    if backend != "pandas" or not own_workers:
        return 0.0
    try:   # by value (a lambda): the scheduler need not import gpupipe
        ttl = client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.worker_ttl)
    except Exception as e:   # the extraction's helper process then guards the pages
        log.debug("the scheduler's worker-ttl is unknown (%s: %s)", type(e).__name__, e)
        return 0.0
    return float("inf") if ttl is None else ttl / 2


def _run_row_segment(client, seg, fp, source, directory, stats_dir, rejected_dir, bar,
                     filter_rejected=None, backend: str = "pandas", error_dirs=None,
                     own_workers: bool = False):
    n = source.npartitions
    os.makedirs(directory, exist_ok=True)
    write_json({"fingerprint": fp, "kind": "row", "partitions": n},
               os.path.join(directory, "_segment.json"))
    done = [i for i in range(n) if os.path.exists(marker_path(directory, i))
            and os.path.exists(os.path.join(stats_dir, part_name(i) + ".json"))]
    todo = sorted(set(range(n)) - set(done))
    label = " → ".join(["read"] * seg.reads_input + [s.stage_name for s in seg.stages]) or "copy"
    bar.start(f"[{seg.index}] {label}", n, len(done))
    reports = []
    for i in done:
        with open(os.path.join(stats_dir, part_name(i) + ".json"), encoding="utf-8") as f:
            reports.append(json.load(f))
    if todo:
        for st in seg.stages:
            note = st.prepare()
            if note:
                log.info("[%s] %s: %s", seg.index, st.stage_name, note)
        attempts = os.path.join(directory, ATTEMPTS)
        shutil.rmtree(attempts, ignore_errors=True)   # a killed run's: its driver ran no finally
        stages = ship(list(zip(seg.positions, seg.stages)), directory)
        try:
            futures = client.map(run_row_partition, todo, source=source, stages=stages,
                                 out_dir=directory, stats_dir=stats_dir,
                                 rejected_dir=rejected_dir, filter_rejected=filter_rejected,
                                 backend=backend, error_dirs=error_dirs,
                                 expendable_for=expendable_for(client, backend, own_workers),
                                 key=[f"gpupipe-{seg.name}-{fp}-{i}" for i in todo], pure=False)
            reports.extend(gather(futures, bar, seg.name))
        finally:
            shutil.rmtree(attempts, ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                os.remove(stages)
            with contextlib.suppress(Exception):   # the workers' copies, on a cluster that stays
                client.run(forget_shipped, stages, wait=False)
    reports.sort(key=lambda r: r["partition"])
    return reports, len(todo)


def _run_global_segment(client, seg, fp, source, directory, stats_dir, state, bar, out,
                        backend: str = "pandas"):
    """Run a global stage. Returns (per-partition reports, partitions computed, stage info:
    counters, drops and steps when the stage declares steps, else None)."""
    st = seg.stages[0]
    if state is not None and state.get("complete"):
        n = state["partitions"]
        if all(os.path.exists(marker_path(directory, i)) for i in range(n)):
            bar.start(f"[{seg.index}] {st.stage_name}", n, n)
            reports = []
            for i in range(n):
                with open(os.path.join(stats_dir, part_name(i) + ".json"), encoding="utf-8") as f:
                    reports.append(json.load(f))
            return reports, 0, state.get("stage")
    t0 = time.perf_counter()
    on = st.runs_on(backend)
    from gpupipe.runner.steps import run_steps
    from gpupipe.stages.steps import StepContext

    os.makedirs(directory, exist_ok=True)
    os.makedirs(stats_dir, exist_ok=True)
    # the output step's finished partitions are kept while the fingerprint holds
    write_json({"fingerprint": fp, "kind": "global", "complete": False},
               os.path.join(directory, "_segment.json"))
    buckets = max(1, source.npartitions)
    ctx = StepContext(source=source, output_dir=out, position=seg.positions[0], backend=on,
                      stage_name=st.stage_name,
                      work_dir=work_dir(seg.work_directory(out),
                                         f"{fp} partitions={source.npartitions} "
                                         f"buckets={buckets}"),
                      buckets=buckets)
    reports, info = run_steps(client, st, ctx, out_dir=directory, stats_dir=stats_dir,
                              bar=bar, label=f"[{seg.index}] {st.stage_name}",
                              key=f"{seg.name}-{fp}")
    # partitions of the stage's output computed now (the other steps' tasks are in
    # info["steps"]): what the segment's computed / reused counts mean
    computed = sum(s["computed"] for s in info["steps"] if s.get("output"))
    write_json({"fingerprint": fp, "kind": "global", "partitions": len(reports),
                "complete": True, "seconds": round(time.perf_counter() - t0, 4), "stage": info},
               os.path.join(directory, "_segment.json"))
    return reports, computed, info
