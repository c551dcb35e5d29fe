"""Executing the steps of a global stage (`gpupipe.stages.steps`): tasks on the cluster, files
between steps, a marker per task and per step, counters merged for ``run.json``."""

from __future__ import annotations

import json
import os
import time

import pyarrow as pa

from gpupipe.backends import dispatch
from gpupipe.faults import failpoint
from gpupipe.frame import TEXT
from gpupipe.io import rundir
from gpupipe.io.writer import remove_partial, write_json, write_npy, write_parquet
from gpupipe.runner.stats import profile
from gpupipe.runner.tasks import marker_path, part_name, source_counts, touch
from gpupipe.stages.steps import (
    Map,
    OnClient,
    Output,
    Reduce,
    StepContext,
    bucket_of,
    write_buckets,
)


def add_counts(total: dict, more: dict) -> dict:
    for k, v in more.items():
        total[k] = total.get(k, 0) + v
    return total


def _write_outputs(step, ctx: StepContext, i: int, out: Output) -> None:
    d = ctx.step_dir(step.name)
    table = out.table
    if table is not None and not step.output:
        if not isinstance(table, pa.Table):
            table = dispatch.arrow_table(table)
        if step.shuffle_on:
            write_buckets(table, bucket_of(table, step.shuffle_on, ctx.buckets), ctx.buckets,
                          os.path.join(d, part_name(i) + ".arrow"))
        elif step.split_by:
            write_buckets(table, table.column(step.split_by).to_numpy().astype("int64"),
                          ctx.npartitions, os.path.join(d, part_name(i) + ".arrow"))
        else:
            write_parquet(table, os.path.join(d, part_name(i) + ".parquet"))
    for name, value in out.files.items():
        _write_value(value, ctx.side(step.name, name, i, _suffix(value)))


def _suffix(value) -> str:
    return "parquet" if hasattr(value, "schema") else "npy"


def _write_value(value, path: str) -> None:
    """An Arrow table as Parquet, a numpy array as ``.npy``."""
    (write_parquet if _suffix(value) == "parquet" else write_npy)(value, path)


def _write_side_outputs(ctx: StepContext, i: int, out: Output, index_of: str | None) -> None:
    """The output step's audit rows and index partition, where the run directory has them."""
    audits = out.audit if isinstance(out.audit, dict) else {"duplicates": out.audit}
    for name, table in audits.items():
        if table is not None and table.num_rows:
            write_parquet(table, rundir.audit_file(ctx.output_dir, ctx.label, i, name))
    if out.index and index_of is None:
        raise TypeError(f"{ctx.stage_name}: the drop step returns an index but the stage has "
                        f"no index_params()")
    for suffix, value in out.index.items():
        _write_value(value, rundir.index_file(ctx.output_dir, index_of, i, suffix))


def run_task(i: int, *, step, ctx: StepContext, out_dir: str | None = None,
             stats_dir: str | None = None, index_of: str | None = None) -> dict:
    """Task ``i`` of a `Map` or `Reduce`: call the step, write its files, then its marker."""
    t0 = time.perf_counter()
    if isinstance(step, Reduce):
        table = ctx.bucket(step.of, i)
        out = step.fn(ctx, table) if table is not None else Output()
    else:
        out = step.fn(ctx, i)
    _write_outputs(step, ctx, i, out)
    report = {"partition": i, "counters": out.counters, "drops": out.drops}
    if step.output:
        _write_side_outputs(ctx, i, out, index_of)
        frame = out.table.reset_index(drop=True)
        report.update(docs_out=len(frame), bytes_out=dispatch.byte_size(frame[TEXT]),
                      profile=profile(frame))
        by_source = source_counts(frame)
        if by_source is not None:
            report["docs_by_source"] = by_source
        write_parquet(dispatch.arrow_table(frame), os.path.join(out_dir, part_name(i) + ".parquet"))
        report["seconds"] = time.perf_counter() - t0
        write_json(report, os.path.join(stats_dir, part_name(i) + ".json"))
        touch(marker_path(out_dir, i))
    else:
        report["seconds"] = time.perf_counter() - t0
        write_json(report, os.path.join(ctx.step_dir(step.name), "_done", part_name(i) + ".json"))
    failpoint(f"step/{ctx.stage_name}/{step.name}/{i}")
    return report


def _task_count(step, ctx: StepContext) -> int:
    if isinstance(step, Reduce):
        return ctx.buckets
    if step.items is not None:
        return step.items(ctx) if callable(step.items) else step.items
    if step.over is not None:
        return len(ctx.files(step.over))
    return ctx.npartitions


def _done_report(step, ctx, i, out_dir, stats_dir) -> dict | None:
    if step.output:
        stats = os.path.join(stats_dir, part_name(i) + ".json")
        if not (os.path.exists(marker_path(out_dir, i)) and os.path.exists(stats)):
            return None
        path = stats
    else:
        path = os.path.join(ctx.step_dir(step.name), "_done", part_name(i) + ".json")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _start_side_outputs(ctx: StepContext, index_of: str | None, fresh: bool) -> None:
    """Before the output step: its index is uncommitted (no manifest) until every partition
    is written; a step starting afresh first clears what an earlier run of the stage left."""
    if index_of is not None:
        manifest = rundir.index_manifest(ctx.output_dir, index_of)
        if os.path.exists(manifest):
            os.remove(manifest)
    if fresh:
        rundir.clear_audit(ctx.output_dir, ctx.label)
        if index_of is not None:
            rundir.clear_index(ctx.output_dir, index_of)
    else:   # resumed: what a killed task was writing when it died
        for name in rundir.AUDITS:
            remove_partial(rundir.audit_dir(ctx.output_dir, name))
        if index_of is not None:
            remove_partial(rundir.index_dir(ctx.output_dir, index_of))


def run_steps(client, stage, ctx: StepContext, *, out_dir: str, stats_dir: str, bar,
              label: str, key: str) -> tuple[list[dict], dict]:
    """Run ``stage``'s steps. Returns (the output step's per-partition reports, stage info:
    counters, drops and one entry per step)."""
    from gpupipe.runner.cluster import gather

    steps = list(stage.steps(ctx))
    index_of = stage.stage_name if stage.index_params() is not None else None
    if not steps or not isinstance(steps[-1], Map) or not steps[-1].output:
        raise TypeError(f"{stage.stage_name}: the last step must be a Map with output=True")
    for k, step in enumerate(steps):
        ctx.step_dirs[step.name] = f"{k:02d}-{step.name}"
    counters: dict = {}
    drops: dict = {}
    info = []
    reports: list[dict] = []
    for step in steps:
        d = ctx.step_dir(step.name)
        complete = os.path.join(d, "_complete.json")
        t0 = time.perf_counter()
        if not step.output and os.path.exists(complete):
            with open(complete, encoding="utf-8") as f:
                done = json.load(f)
            bar.start(f"{label}: {step.name}", done["tasks"], done["tasks"])
            add_counts(counters, done["counters"])
            info.append({**done, "computed": 0})
            continue
        os.makedirs(d, exist_ok=True)
        if isinstance(step, OnClient):
            bar.start(f"{label}: {step.name}", 1)
            out = step.fn(ctx)
            _write_outputs(step, ctx, 0, out)
            bar.advance()
            failpoint(f"step/{stage.stage_name}/{step.name}/0")
            step_reports, n, computed = [{"counters": out.counters, "drops": {}}], 1, 1
        else:
            n = _task_count(step, ctx)
            found = {i: _done_report(step, ctx, i, out_dir, stats_dir) for i in range(n)}
            old = [r for r in found.values() if r is not None]
            todo = [i for i, r in found.items() if r is None]
            if step.output:
                _start_side_outputs(ctx, index_of, fresh=not old)
            bar.start(f"{label}: {step.name}", n, len(old))
            futures = client.map(run_task, todo, step=step, ctx=ctx, out_dir=out_dir,
                                 stats_dir=stats_dir, index_of=index_of, pure=False,
                                 key=[f"gpupipe-{key}-{step.name}-{i}" for i in todo])
            step_reports = old + gather(futures, bar, f"{label}/{step.name}")
            computed = len(todo)
        step_counters: dict = {}
        for r in step_reports:
            add_counts(step_counters, r.get("counters", {}))
            add_counts(drops, r.get("drops", {}))
        add_counts(counters, step_counters)
        entry = {"step": step.name, "kind": step.kind, "tasks": n,
                 "seconds": round(time.perf_counter() - t0, 4), "counters": step_counters}
        info.append({**entry, "computed": computed, **({"output": True} if step.output else {})})
        if step.output:
            reports = sorted(step_reports, key=lambda r: r["partition"])
            if index_of is not None:   # last, as the index's commit marker
                failpoint(f"index/{stage.stage_name}")
                rundir.commit_index(ctx.output_dir, index_of, stage.index_params(), n)
        else:
            write_json(entry, complete)
            failpoint(f"step-done/{stage.stage_name}/{step.name}")
    return reports, {"counters": counters, "drops": drops, "steps": info}
