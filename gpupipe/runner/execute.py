"""Executing a pipeline on a Dask cluster: segments in order, resumable, with stats."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import os
import platform
import shutil
import time

from gpupipe.errors import GpupipeError, OutputError, SpecError, StageError
from gpupipe.io.parquet import ParquetSource
from gpupipe.io.writer import write_json
from gpupipe.runner.plan import Segment, fingerprints, plan, rejected_directory
from gpupipe.runner.progress import make_progress
from gpupipe.runner.stats import format_table, merge_profiles, merge_read, merge_stages
from gpupipe.runner.tasks import (
    FrameReader,
    marker_path,
    part_name,
    run_row_partition,
    write_global_partition,
)

log = logging.getLogger(__name__)


@dataclasses.dataclass
class RunResult:
    """What `Pipeline.run` returns: the run directory and its summary (the content of run.json)."""

    output: str
    summary: dict

    @property
    def data_path(self) -> str:
        return self.summary["output"]["data"]

    @property
    def shards_path(self) -> str | None:
        return (self.summary.get("shards") or {}).get("directory")

    @property
    def stats(self) -> dict:
        return self.summary

    @property
    def report_path(self) -> str:
        """``<output>/report.html``, the run report (`gpupipe.report`)."""
        return os.path.join(self.output, "report.html")

    def report(self):
        """The run report; in a notebook it renders inline (an isolated frame), elsewhere its
        repr is the path to open in a browser."""
        from gpupipe.notebook import ReportView

        return ReportView(self.report_path)

    def stage(self, name_or_position: str | int) -> dict:
        for st in self.summary["stages"]:
            if name_or_position in (st["stage"], st["position"]):
                return st
        raise KeyError(name_or_position)

    def table(self) -> str:
        return format_table(self.summary)

    def to_dask(self):
        """The output as a Dask DataFrame (lazy)."""
        import dask.dataframe as dd

        return dd.read_parquet(self.data_path)

    def to_pandas(self):
        """The output as one pandas DataFrame, rows in partition order."""
        import pandas as pd
        import pyarrow.parquet as pq

        from gpupipe.frame import from_arrow

        files = sorted(f for f in os.listdir(self.data_path) if f.endswith(".parquet"))
        frames = [from_arrow(pq.read_table(os.path.join(self.data_path, f))) for f in files]
        return pd.concat(frames, ignore_index=True) if frames else None

    def _repr_html_(self) -> str:
        from gpupipe.notebook import result_html

        return result_html(self)

    def __repr__(self) -> str:
        out = self.summary["output"]
        return (f"RunResult(output={self.output!r}, docs={out['docs']:,}, "
                f"partitions={out['partitions']}, seconds={self.summary['seconds']:.2f})")


def versions() -> dict:
    import dask
    import distributed
    import numpy
    import pandas
    import pyarrow
    import pydantic

    from gpupipe import __version__

    return {"gpupipe": __version__, "python": platform.python_version(), "dask": dask.__version__,
            "distributed": distributed.__version__, "pandas": pandas.__version__,
            "pyarrow": pyarrow.__version__, "numpy": numpy.__version__,
            "pydantic": pydantic.__version__}


def _is_run_dir(path: str) -> bool:
    return os.path.exists(os.path.join(path, "run.json"))


def prepare_output(path: str, overwrite: bool) -> None:
    if os.path.isfile(path):
        raise OutputError(f"output.path {path!r} is a file; give a directory")
    if os.path.isdir(path) and os.listdir(path):
        if not _is_run_dir(path):
            raise OutputError(
                f"output directory {path!r} is not empty and holds no gpupipe run (no run.json); "
                f"choose another output.path (nothing was deleted)")
        if overwrite:
            log.info("overwrite: deleting the previous run in %s", path)
            shutil.rmtree(path)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise OutputError(f"cannot create output directory {path!r}: {e.strerror}") from None


def _input_identity(pipeline, source) -> dict:
    files = []
    for f in source.files:
        st = os.stat(f)
        files.append([os.path.abspath(f), st.st_size, st.st_mtime_ns])
    if pipeline.inputs is None:
        spec = pipeline.input.model_dump(mode="json", exclude={"path"})
    else:
        spec = {k: v.model_dump(mode="json", exclude={"path", "stages"})
                for k, v in pipeline.inputs.items()}
    return {"input": spec, "files": files}


def effective_blocksize(input_spec, cluster=None, device_memory: int | None = None) -> int | None:
    """``input.blocksize``; on a CUDA cluster, when not set, a fraction of one GPU's memory
    (``cluster.partition_fraction``, 1/32 by default: room for a shuffle's copies)."""
    if getattr(cluster, "kind", None) == "cuda" and "blocksize" not in input_spec.model_fields_set:
        if device_memory is None:
            from gpupipe.backend import device_memory_bytes

            device_memory = device_memory_bytes()
        if device_memory:
            return int(device_memory * cluster.partition_fraction)
    return int(input_spec.blocksize) if input_spec.blocksize is not None else None


def describe_changes(run_json: str, pipeline: dict, inputs: dict, fingerprint: str) -> list[str]:
    """What differs from the run recorded in ``run_json`` (none when there is none, or it had
    the same fingerprint): input files added, removed or modified, and changed settings."""
    try:
        with open(run_json, encoding="utf-8") as f:
            old = json.load(f)
    except (OSError, ValueError):
        return []
    if old.get("fingerprint") == fingerprint:
        return []
    lines = []
    before = {k: tuple(v) for k, v in (old.get("input_files") or {}).items()}
    now = {k: tuple(v) for k, v in inputs.items()}
    if before or "input_files" in old:
        added = sorted(set(now) - set(before))
        removed = sorted(set(before) - set(now))
        changed = sorted(f for f in set(now) & set(before) if now[f] != before[f])
        for what, files in (("added", added), ("removed", removed), ("modified", changed)):
            if files:
                lines.append(f"input files {what}: {', '.join(files[:3])}"
                             + (f" and {len(files) - 3} more" if len(files) > 3 else ""))
    old_p = old.get("pipeline") or {}
    for key in sorted(set(old_p) | set(pipeline)):
        if key in ("output",) or old_p.get(key) == pipeline.get(key):
            continue
        if key == "stages":
            a, b = old_p.get(key) or [], pipeline.get(key) or []
            for k in range(max(len(a), len(b))):
                x, y = (a[k] if k < len(a) else None), (b[k] if k < len(b) else None)
                if x == y:
                    continue
                if x is None or y is None or x.get("stage") != y.get("stage"):
                    lines.append(f"stages[{k}] is now {(y or {}).get('stage', 'gone')} (was "
                                 f"{(x or {}).get('stage', 'absent')})")
                else:
                    diffs = [f"{p}: {x.get(p)!r} -> {y.get(p)!r}" for p in sorted(set(x) | set(y))
                             if x.get(p) != y.get(p)]
                    lines.append(f"stages[{k}] {y['stage']}: {'; '.join(diffs)}")
        else:
            lines.append(f"{key} changed")
    return lines or ["the fingerprint differs, though the recorded settings and input files "
                     "do not (another gpupipe version, an earlier run a dedup stage reads, an "
                     "edited eval set, or a run directory from before input files were "
                     "recorded)"]


def check_output_apart(pipeline, source) -> None:
    """The run directory must not hold an input file (``overwrite`` deletes it, and a rerun
    would read the run's own output), nor lie inside a directory read as input."""
    import glob as globmod

    out = os.path.realpath(pipeline.output.path)

    def inside(path: str, d: str) -> bool:
        return os.path.commonpath([path, d]) == d

    for f in source.files:
        if inside(os.path.realpath(f), out):
            raise SpecError(f"output.path {pipeline.output.path!r} contains the input file {f}; "
                            f"write the run somewhere else")
    for spec in pipeline.sources().values():
        for pattern in spec.paths():
            base = pattern
            if globmod.has_magic(pattern):
                if "**" not in pattern:
                    continue
                base = pattern[:pattern.index("**")]
            base = os.path.realpath(os.path.expanduser(base or "."))
            if os.path.isdir(base) and inside(out, base):
                raise SpecError(f"output.path {pipeline.output.path!r} is inside the input "
                                f"directory {pattern!r}: a rerun would read its own output; "
                                f"write the run somewhere else")


def make_pipeline_source(pipeline):
    """The source of a pipeline: its input, or its named inputs read as one."""
    if pipeline.inputs is None:
        return make_source(pipeline.input, pipeline.cluster)
    from gpupipe.errors import InputError
    from gpupipe.io.multi import MultiSource

    sources = []
    for name, spec in pipeline.inputs.items():
        if spec.columns:
            from gpupipe.errors import SpecError

            raise SpecError(f"inputs.{name}.columns: carrying input columns is supported for a "
                            f"single input only (input.columns)")
        try:
            sources.append(make_source(spec, pipeline.cluster))
        except InputError as e:
            raise InputError(f"inputs.{name}: {str(e).replace('input.', f'inputs.{name}.')}") \
                from None
    return MultiSource(tuple(pipeline.inputs), tuple(sources))


def make_source(input_spec, cluster=None):
    from gpupipe.io.files import common_root, expand_paths
    from gpupipe.io.jsonl import JSONL_SUFFIXES, JsonlSource
    from gpupipe.io.parquet import PARQUET_SUFFIXES

    fmt = input_spec.resolved_format()
    suffixes = JSONL_SUFFIXES if fmt == "jsonl" else PARQUET_SUFFIXES
    odd: list[tuple[str, str]] = []
    files = tuple(expand_paths(input_spec.paths(), suffixes=suffixes, not_files=odd))
    if odd:
        from gpupipe.errors import InputError

        listing = "; ".join(f"{p}: {why}" for p, why in odd[:5]) + (
            f" (and {len(odd) - 5} more)" if len(odd) > 5 else "")
        if input_spec.on_error == "fail" or not files:
            raise InputError(f"input.path matches {len(odd)} path(s) that cannot be read as "
                             f"files: {listing}" + (
                                 "; fix or remove them, or set `input.on_error: skip` to leave "
                                 "them out" if files else ""))
        log.warning("input: %d path(s) left out, not readable as files: %s", len(odd), listing)
    common = dict(files=files, root=common_root(list(files)), text_column=input_spec.text_column,
                  id_column=input_spec.id_column, on_error=input_spec.on_error,
                  left_out=tuple(odd))
    if fmt == "parquet":
        _check_parquet_columns(files[0], input_spec)
        return ParquetSource(**common, columns=tuple(input_spec.columns))
    if input_spec.columns:
        from gpupipe.errors import SpecError

        raise SpecError(f"input.columns {input_spec.columns} is for Parquet input (JSON Lines "
                        f"input reads id and text)")
    from gpupipe.io.jsonl import split_blocks

    blocksize = effective_blocksize(input_spec, cluster)
    return JsonlSource(**common, blocks=split_blocks(files, blocksize))


def _check_parquet_columns(path: str, input_spec) -> None:
    """Fail before any cluster starts when the first file lacks the configured columns."""
    import pyarrow.parquet as pq

    from gpupipe.errors import InputError
    from gpupipe.registry import did_you_mean

    try:
        names = pq.read_schema(path).names
    except Exception as e:
        raise InputError(f"{path}: cannot read the Parquet schema ({e})") from None
    for key in ("text_column", "id_column"):
        col = getattr(input_spec, key)
        if col is not None and col not in names:
            raise InputError(f"{path}: no column {col!r}{did_you_mean(col, names)} "
                             f"(columns: {', '.join(names[:12])}); set input.{key}")
    for col in input_spec.columns:
        if col not in names:
            raise InputError(f"{path}: no column {col!r}{did_you_mean(col, names)} "
                             f"(columns: {', '.join(names[:12])}); see input.columns")


def count_block_lines(client, source, bar):
    """Line numbers before every block of split files (needed for derived ids), in parallel."""
    from gpupipe.io.jsonl import count_newlines
    from gpupipe.io.multi import MultiSource

    if isinstance(source, MultiSource):
        return dataclasses.replace(source, sources=tuple(
            count_block_lines(client, s, bar) for s in source.sources))
    if not getattr(source, "needs_line_bases", lambda: False)():
        return source
    paths = [source.files[fi] for fi, _, _ in source.blocks]
    starts = [start for _, start, _ in source.blocks]
    ends = [end if end != -1 else os.path.getsize(p) for p, (_, _, end) in
            zip(paths, source.blocks)]
    bar.start("[input] count lines (ids of split files)", len(paths))
    futures = client.map(count_newlines, paths, starts, ends, pure=False)
    counts = [f.result() for f in futures]
    bar.advance(len(paths))
    return source.with_line_bases(counts)


def _check_stages(pipeline) -> None:
    """Each stage's `Stage.check`, before any data is read: a model that does not fit its
    parameters stops the run here, not after hours of earlier stages."""
    stages = pipeline.all_stages()
    for pos, st in enumerate(stages):
        try:
            note = st.check()
            if hasattr(st, "check_inputs"):
                st.check_inputs(stages[:pos], _input_columns(pipeline))
        except ValueError as e:
            raise SpecError(f"stage {pos} ({st.stage_name}): {e}") from None
        if note:
            log.info("%d: %s: %s", pos, st.stage_name, note)


def _input_columns(pipeline) -> set[str]:
    """Columns the input carries besides id and text (``input.columns``, Parquet)."""
    return {c for spec in pipeline.sources().values() for c in spec.columns}


def execute(pipeline, *, client=None, workers: int | None = None,
            progress: bool | str | None = None) -> RunResult:
    from gpupipe.backend import resolve_backend
    from gpupipe.cluster import connect, describe

    t_start = time.perf_counter()
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    backend = resolve_backend(pipeline.backend)
    source = make_pipeline_source(pipeline)
    segments = plan(pipeline.all_stages())
    _warn_conversions(pipeline, backend.name)
    if backend.name == "cudf" and pipeline.cluster.kind == "local":
        log.warning("backend: cudf on a local CPU cluster: every worker process shares the first "
                    "GPU; cluster: {kind: cuda} starts one worker per GPU")
    vers = versions()
    identity = _input_identity(pipeline, source)
    fps = fingerprints(segments, identity, vers["gpupipe"])
    out = pipeline.output.path
    _check_global_stages(pipeline, out)
    _check_stages(pipeline)
    check_output_apart(pipeline, source)
    prepare_output(out, pipeline.output.overwrite)
    inputs = {f: [size, mtime] for f, size, mtime in identity["files"]}
    for line in describe_changes(os.path.join(out, "run.json"), pipeline.to_dict(), inputs,
                                 fps[-1]):
        log.warning("resuming %s: %s; the stages from there on are recomputed", out, line)
    base = {"status": "running", "started": started, "gpupipe_version": vers["gpupipe"],
            "pipeline": pipeline.to_dict(), "fingerprint": fps[-1], "input_files": inputs}
    write_json(base, os.path.join(out, "run.json"))

    bar = make_progress(progress)
    try:
        def run_all(c):
            result = _run_segments(pipeline, c, count_block_lines(c, source, bar), segments, fps,
                                   out, bar, backend.name)
            if pipeline.tokenizer_stage() is not None:
                result["shards"] = _run_shards(c, pipeline, out, fps[-1],
                                               result["output"]["partitions"], bar, vers)
            return result, describe(c)

        env = pipeline.io.kvikio.env()
        if client is not None:
            if env:
                from gpupipe.backend import apply_kvikio_settings

                client.run(apply_kvikio_settings, env)
            summary, cluster_info = run_all(client)
        else:
            with connect(pipeline.cluster, workers=workers, env=env) as own:
                summary, cluster_info = run_all(own)
    except BaseException as e:
        bar.close()
        write_json({**base, "status": "failed", "error": f"{type(e).__name__}: {e}"},
                   os.path.join(out, "run.json"))
        raise
    bar.close()
    summary = {
        "status": "complete",
        "started": started,
        "finished": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "seconds": round(time.perf_counter() - t_start, 3),
        "gpupipe_version": vers["gpupipe"],
        "fingerprint": fps[-1],
        "input_files": inputs,
        "pipeline": pipeline.to_dict(),
        "versions": vers,
        "backend": {"requested": pipeline.backend, "used": backend.name, "reason": backend.reason},
        "cluster": {"kind": pipeline.cluster.kind, **cluster_info},
        **summary,
    }
    write_json(summary, os.path.join(out, "run.json"))
    try:
        from gpupipe.report import write_report

        write_report(out)
    except Exception as e:  # the report is a view: never the reason a finished run fails
        log.warning("report.html could not be written: %s: %s", type(e).__name__, e)
    return RunResult(out, summary)


def _check_global_stages(pipeline, out: str) -> None:
    """Plan every global stage's steps before any work, so that what they refuse (an earlier
    run's index built with other parameters) stops the run before the first stage runs."""
    from gpupipe.stages.steps import StepContext

    for pos, st in enumerate(pipeline.all_stages()):
        if st.kind == "global":
            st.steps(StepContext(source=None, work_dir="", output_dir=out, position=pos))


def _warn_conversions(pipeline, backend: str) -> None:
    """One warning per stage before which partitions are copied between the GPU and the host
    (what `explain` shows)."""
    from gpupipe.runner.plan import conversions

    stages = pipeline.all_stages()
    for pos, direction in sorted(conversions(plan(stages), backend).items()):
        a, b = ("GPU", "host") if direction == "device->host" else ("host", "GPU")
        log.warning("stages[%d] %s: every partition is copied from the %s to the %s before it "
                    "(it runs on %s)", pos, stages[pos].stage_name, a, b,
                    stages[pos].runs_on(backend))


def _load_state(directory: str) -> dict | None:
    try:
        with open(os.path.join(directory, "_segment.json"), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _reset(*dirs: str) -> None:
    for d in dirs:
        if os.path.isdir(d):
            shutil.rmtree(d)


def _run_segments(pipeline, client, source, segments: list[Segment], fps, out, bar,
                  backend: str = "pandas") -> dict:
    source_in = source
    upstream_changed = False
    seg_info = []
    stage_stats: list[dict] = []
    read_reports: list[dict] = []
    reports: list[dict] = []
    docs_prev = bytes_prev = 0
    rejected_dir = os.path.join(out, "rejected", "read")
    for seg, fp in zip(segments, fps):
        directory, stats_dir = seg.directory(out), seg.stats_directory(out)
        state = _load_state(directory)
        if upstream_changed or state is None or state.get("fingerprint") != fp:
            if state is not None:
                log.info("%s: pipeline or input changed since the last run; recomputing", seg.name)
            stale = [seg.work_directory(out)] if upstream_changed else []
            kept = [rejected_directory(out, pipeline.all_stages(), p) for p in seg.positions]
            _reset(directory, stats_dir, *stale, *kept,
                   *([rejected_dir] if seg.reads_input else []))
            state = None
        t0 = time.perf_counter()
        if seg.kind == "row":
            filter_rejected = {p: rejected_directory(out, pipeline.all_stages(), p)
                               for p, st in zip(seg.positions, seg.stages)
                               if getattr(st, "keep_rejected", False)}
            error_dirs = {p: rejected_directory(out, pipeline.all_stages(), p)
                          for p in seg.positions}
            reports, computed = _run_row_segment(client, seg, fp, source, directory, stats_dir,
                                                 rejected_dir if seg.reads_input else None, bar,
                                                 filter_rejected, backend, error_dirs)
            stage_stats.extend(merge_stages(reports, list(seg.stages), seg.positions, backend))
            if seg.reads_input:
                read_reports = reports
        else:
            reports, computed, info = _run_global_segment(client, seg, fp, source, directory,
                                                          stats_dir, state, bar, out, backend)
            st = seg.stages[0]
            seconds = (round(time.perf_counter() - t0, 4) if computed else
                       (state or {}).get("seconds", 0.0))
            docs_out = sum(r["docs_out"] for r in reports)
            stage_stats.append({
                "position": seg.positions[0], "stage": st.stage_name, "kind": "global",
                "params": st.params(), "docs_in": docs_prev, "docs_out": docs_out,
                "bytes_in": bytes_prev, "bytes_out": sum(r["bytes_out"] for r in reports),
                "drops": {(st.reasons[0] if st.reasons else "removed"): docs_prev - docs_out}
                if docs_prev > docs_out else {},
                "counters": {}, "seconds": seconds, "backend": st.runs_on(backend),
                "device_seconds": seconds if st.runs_on(backend) != "pandas" else 0.0,
            })
            if info is not None:  # a stage of steps reports its own drops and counters
                stage_stats[-1].update(drops=info["drops"], counters=info["counters"],
                                       steps=info["steps"])
            if any("by_source" in r for r in reports):
                outs: dict[str, int] = {}
                for r in reports:
                    for k, v in r.get("by_source", {}).items():
                        outs[k] = outs.get(k, 0) + v
                before = stage_stats[-2]["by_source"] if len(stage_stats) > 1 and \
                    "by_source" in stage_stats[-2] else {}
                stage_stats[-1]["by_source"] = {
                    k: {"docs_in": before.get(k, {}).get("docs_out", 0),
                        "docs_out": outs.get(k, 0)} for k in sorted(set(before) | set(outs))}
        upstream_changed = upstream_changed or computed > 0
        docs_prev = sum(r["docs_out"] for r in reports)
        bytes_prev = sum(r["bytes_out"] for r in reports)
        seg_info.append({"name": seg.name, "kind": seg.kind,
                         "stages": [s.stage_name for s in seg.stages],
                         "directory": os.path.relpath(directory, out), "partitions": len(reports),
                         "computed": computed, "reused": len(reports) - computed,
                         "seconds": round(time.perf_counter() - t0, 3)})
        extra = sorted({c for st in pipeline.all_stages()[: (seg.positions[-1] + 1
                                                             if seg.positions else 0)]
                        for c in st.added_columns()} | ({"source"} if pipeline.inputs else set())
                       | {c for spec in pipeline.sources().values() for c in spec.columns})
        files = tuple(os.path.join(directory, part_name(i) + ".parquet") for i in range(len(reports)))
        source = ParquetSource(files=files, root=directory, text_column="text", id_column="id",
                               columns=tuple(extra))
    read = merge_read(read_reports)
    read.update(merge_profiles(read_reports, "read_profile"))
    if getattr(source_in, "left_out", ()):
        read["left_out"] = [{"path": p, "why": why} for p, why in source_in.left_out]
    stage_stats.sort(key=lambda s: s["position"])
    dropped = sum(sum(s["drops"].values()) for s in stage_stats)
    rejected_records = sum(v for k, v in read["rejected"].items() if k != "corrupt_file")
    records_in = read["docs"] + rejected_records
    # documents a stage split in pieces (decontaminate's cut): the pieces beyond the first
    added = sum(s.get("counters", {}).get("documents_added", 0) for s in stage_stats)
    by_source = _source_accounting(read_reports, stage_stats) if pipeline.inputs else None
    return {
        **({"sources": by_source} if by_source else {}),
        "input": {"format": pipeline.input.resolved_format() if pipeline.input else {
                      k: v.resolved_format() for k, v in pipeline.inputs.items()},
                  "files": read["files"], "partitions": len(read_reports)},
        "read": read,
        "stages": stage_stats,
        "segments": seg_info,
        "output": {"path": out, "data": os.path.join(out, "data"), "partitions": len(reports),
                   "docs": docs_prev, "bytes": bytes_prev, **merge_profiles(reports)},
        "accounting": {"records_in": records_in, "added": added, "docs_out": docs_prev,
                       "dropped": dropped, "rejected": rejected_records,
                       "balanced": records_in + added == docs_prev + dropped + rejected_records},
    }


def _source_accounting(read_reports: list[dict], stage_stats: list[dict]) -> dict:
    """Per named input: records read, set aside, kept, and whether every stage's documents in
    equal the documents out of the stage before it (the first: the documents read)."""
    out: dict[str, dict] = {}
    for r in read_reports:
        got = out.setdefault(r.get("source_name", "?"), {"records_in": 0, "rejected": 0})
        got["records_in"] += r["read"]["docs"] + sum(
            v for k, v in r["read"].get("rejected", {}).items() if k != "corrupt_file")
        got["rejected"] += sum(v for k, v in r["read"].get("rejected", {}).items()
                               if k != "corrupt_file")
    for name, got in out.items():
        prev = got["records_in"] - got["rejected"]
        chain = True
        for st in stage_stats:
            s = st.get("by_source", {}).get(name, {"docs_in": prev, "docs_out": prev})
            chain &= s["docs_in"] == prev
            prev = s["docs_out"]
        got.update(docs_out=prev, removed_by_stages=got["records_in"] - got["rejected"] - prev,
                   balanced=chain)
    return dict(sorted(out.items()))


def _wait(futures, bar, label: str) -> list[dict]:
    from distributed import as_completed

    results = []
    try:
        for fut in as_completed(futures):
            try:
                results.append(fut.result())
            except GpupipeError:
                raise
            except Exception as e:
                hint = ""
                if type(e).__name__ == "KilledWorker":
                    hint = (" — a worker died, most often out of memory: use fewer/larger workers "
                            "(cluster.workers, cluster.memory_limit) or smaller input files")
                raise StageError(f"{label}: a task failed: {type(e).__name__}: {e}{hint}") from e
            bar.advance()
    except BaseException:
        for f in futures:
            f.cancel()
        raise
    return results


def _run_shards(client, pipeline, out, fingerprint, partitions, bar, vers) -> dict:
    """Route the tokenized partitions and write the shards (skipped when already complete)."""
    import hashlib

    from gpupipe.shards import writer
    from gpupipe.shards.megatron import token_dtype
    from gpupipe.shards.routing import SPLIT_ORDER, shards_per_split

    spec = pipeline.output.shards
    spec_dict = spec.model_dump(mode="json")
    tok_stage = pipeline.tokenizer_stage()
    info = tok_stage.info()
    mix = pipeline.mixture
    mix_dict = mix.model_dump(mode="json") if mix is not None else None
    fp = hashlib.sha256(json.dumps([fingerprint, spec_dict, mix_dict],
                                   sort_keys=True).encode()).hexdigest()
    shards_dir = os.path.join(out, "shards")
    t0 = time.perf_counter()
    try:
        manifest = writer.read_manifest(shards_dir)
    except (OSError, ValueError):
        manifest = None
    if manifest is not None and manifest.get("fingerprint") == fp[:16]:
        log.info("shards: %s is complete for this pipeline; nothing to write", shards_dir)
        return _shard_summary(shards_dir, manifest, computed=False, seconds=0.0)
    writer.clean(shards_dir)
    route_dir = os.path.join(shards_dir, "_route")
    dtype = token_dtype(info.vocab_size).name
    data = os.path.join(out, "data")
    files = [os.path.join(data, part_name(i) + ".parquet") for i in range(partitions)]
    bar.start("[shards] route", partitions)
    futures = client.map(writer.route_partition, list(range(partitions)), files,
                         route_dir=route_dir, seed=spec.seed, fractions=dict(spec.splits),
                         dtype=dtype, vocab_size=info.vocab_size, pure=False,
                         sources=tuple(pipeline.inputs) if mix is not None else (),
                         mix_seed=mix.seed if mix is not None else 0,
                         key=[f"gpupipe-route-{fp[:16]}-{i}" for i in range(partitions)])
    routes = _wait(futures, bar, "shards/route")
    tokens = {s: sum(r["tokens"][s] for r in routes) for s in SPLIT_ORDER}
    plan_, mixture = None, None
    if mix is not None:
        from gpupipe.shards import mixture as mixing

        names = tuple(pipeline.inputs)
        docs = mixing.load_docs(route_dir, partitions)
        if mix.mode == "materialize":
            plan_, report = mixing.plan_materialize(docs, names, mix.shares(), mix.total_tokens)
            tokens = {s: sum(r["tokens"] for r in report.get(s, {}).values())
                      for s in SPLIT_ORDER}
            mixture = {**mix_dict, "shares": mix.shares(), "splits": report}
    if mix is not None and mix.mode == "weights":
        have = mixing.source_tokens(docs, len(names))
        tasks = [(s, j, n, (k, name)) for s in SPLIT_ORDER
                 for k, name in enumerate(names)
                 for n in [shards_per_split(spec, {s: int(have[s][k])})[s]]
                 for j in range(n)]
    else:
        counts = shards_per_split(spec, tokens)
        tasks = [(s, j, counts[s], None) for s in SPLIT_ORDER for j in range(counts[s])]
    bar.start("[shards] write", len(tasks))
    futures = client.map(writer.write_shard, [t[0] for t in tasks], [t[1] for t in tasks],
                         [t[2] for t in tasks], [t[3] for t in tasks],
                         route_dir=route_dir, partitions=partitions, plan=plan_,
                         shards_dir=shards_dir, spec=spec_dict, eod_id=info.eod_id,
                         tokenizer_name=os.path.basename(info.path), pure=False,
                         key=[f"gpupipe-shard-{fp[:16]}-{s}-{'' if t is None else t[1]}-{j}"
                              for s, j, _, t in tasks])
    written = [r for r in _wait(futures, bar, "shards/write") if r is not None]
    if not written:
        log.warning("shards: no document reached the shards; the manifest lists none")
    weights = None
    if mix is not None and mix.mode == "weights":
        weights, report = mixing.weights_report(written, names, mix.shares())
        mixture = {**mix_dict, "shares": mix.shares(), "splits": report}
    manifest = writer.write_manifest(shards_dir, shards=written, spec=spec_dict, tokenizer=info,
                                     dtype=dtype, version=vers["gpupipe"], fingerprint=fp[:16],
                                     append_eod=tok_stage.append_eod, mixture=mixture,
                                     weights=weights)
    shutil.rmtree(route_dir, ignore_errors=True)
    return _shard_summary(shards_dir, manifest, computed=True,
                          seconds=round(time.perf_counter() - t0, 3))


def _shard_summary(shards_dir, manifest, *, computed: bool, seconds: float) -> dict:
    return {"directory": shards_dir, "format": manifest["format"], "dtype": manifest["dtype"],
            "shards": len(manifest["shards"]), "totals": manifest["totals"],
            "computed": computed, "seconds": seconds,
            "data_args": os.path.join(shards_dir, "data_args.txt")}


def _run_row_segment(client, seg, fp, source, directory, stats_dir, rejected_dir, bar,
                     filter_rejected=None, backend: str = "pandas", error_dirs=None):
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
        stages = list(zip(seg.positions, seg.stages))
        # shipped to every worker once, not with each task (a stage may carry an index)
        [stages] = client.scatter([stages], broadcast=True, hash=False)
        futures = client.map(run_row_partition, todo, source=source, stages=stages,
                             out_dir=directory, stats_dir=stats_dir, rejected_dir=rejected_dir,
                             filter_rejected=filter_rejected, backend=backend,
                             error_dirs=error_dirs,
                             key=[f"gpupipe-{seg.name}-{fp}-{i}" for i in todo], pure=False)
        reports.extend(_wait(futures, bar, seg.name))
    reports.sort(key=lambda r: r["partition"])
    return reports, len(todo)


def _work_dir(work: str, fp: str) -> str:
    """A global stage's intermediate checkpoints (signatures, bucket edges, ...), kept across
    runs while the stage's fingerprint (``fp``, with the partition and bucket counts) is
    unchanged, so an interrupted stage resumes; otherwise cleared, so no file of another
    partitioning is ever read."""
    marker = os.path.join(work, "_fingerprint")
    try:
        with open(marker, encoding="utf-8") as f:
            same = f.read().strip() == fp
    except OSError:
        same = False
    if not same:
        _reset(work)
        os.makedirs(work)
        with open(marker, "w", encoding="utf-8") as f:
            f.write(fp + "\n")
    return work


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
    from gpupipe.stages.steps import StepContext

    probe = StepContext(source=source, work_dir="", output_dir=out, position=seg.positions[0],
                        backend=on)
    if st.steps(probe) is not None:
        from gpupipe.runner.steps import run_steps

        os.makedirs(directory, exist_ok=True)
        os.makedirs(stats_dir, exist_ok=True)
        # the output step's finished partitions are kept while the fingerprint holds
        write_json({"fingerprint": fp, "kind": "global", "complete": False},
                   os.path.join(directory, "_segment.json"))
        buckets = max(1, source.npartitions)
        ctx = StepContext(source=source, output_dir=out, position=seg.positions[0], backend=on,
                          stage_name=st.stage_name,
                          work_dir=_work_dir(seg.work_directory(out),
                                             f"{fp} partitions={source.npartitions} "
                                             f"buckets={buckets}"),
                          buckets=buckets)
        reports, info = run_steps(client, st, ctx, out_dir=directory, stats_dir=stats_dir,
                                  bar=bar, label=f"[{seg.index}] {st.stage_name}",
                                  key=f"{seg.name}-{fp}")
        # partitions of the stage's output computed now (the other steps' tasks are in
        # info["steps"]): what the segment's computed / reused counts mean
        computed = sum(s["computed"] for s in info["steps"] if s.get("output"))
    else:
        reports = _run_dask_global(client, seg, fp, source, directory, stats_dir, bar, out, on)
        computed, info = len(reports), None
    write_json({"fingerprint": fp, "kind": "global", "partitions": len(reports),
                "complete": True, "seconds": round(time.perf_counter() - t0, 4), "stage": info},
               os.path.join(directory, "_segment.json"))
    return reports, computed, info


def _run_dask_global(client, seg, fp, source, directory, stats_dir, bar, out, backend):
    """A global stage that implements ``apply`` on a Dask DataFrame (repartition)."""
    from dask import delayed

    from gpupipe.io import from_partitions
    from gpupipe.stages.base import GlobalContext

    _reset(directory, stats_dir)
    os.makedirs(directory)
    ctx = GlobalContext(source=source, work_dir=seg.work_directory(out), output_dir=out,
                        position=seg.positions[0], client=client, backend=backend)
    ddf = from_partitions(FrameReader(source, ctx.backend), source.npartitions, ctx.meta(),
                          f"gpupipe-read-{seg.name}")
    result = seg.stages[0].apply(ddf, ctx)
    parts = result.to_delayed()
    writes = [delayed(write_global_partition)(p, i, out_dir=directory, stats_dir=stats_dir,
                                              dask_key_name=f"gpupipe-write-{seg.name}-{fp}-{i}")
              for i, p in enumerate(parts)]
    bar.start(f"[{seg.index}] {seg.stages[0].stage_name}", len(parts))
    futures = client.compute(writes)
    return sorted(_wait(futures, bar, seg.name), key=lambda r: r["partition"])
