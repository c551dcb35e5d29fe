"""The user-facing `Pipeline`: build it from YAML or Python, explain it, run it."""

from __future__ import annotations

import logging
import os
from typing import Any

import yaml

from gpupipe import views
from gpupipe.spec import PipelineSpec, apply_overrides, load_yaml, parse_pipeline

log = logging.getLogger(__name__)


class Pipeline(PipelineSpec):
    """A validated pipeline.

    >>> import gpupipe as gp
    >>> p = gp.Pipeline(input="data/sample/*.jsonl.gz", output="out/doc",
    ...                 stages=[gp.stages.NormalizeText(), gp.stages.LengthFilter(min_words=20)])
    >>> [s.stage_name for s in p.stages]
    ['normalize_text', 'length_filter']
    """

    @classmethod
    def from_yaml(cls, path: str | os.PathLike, overrides: list[str] | None = None) -> Pipeline:
        """Load and validate a pipeline file; ``overrides`` are ``key.path=value`` strings."""
        path = os.fspath(path)
        data, lines = load_yaml(path)
        if overrides:
            data = apply_overrides(data, overrides)
        return parse_pipeline(data, source=path, lines=lines, cls=cls)

    def _repr_html_(self) -> str:
        return views.html(self)

    def preview(self, n: int = 200, seed: int = 0, path: str | None = None):
        """Run the row-local stages in this process on ``n`` sampled documents, dropping none:
        a pandas DataFrame with a column per filter (``keep`` or the reason it would drop the
        document), ``verdict`` (what the run would do), and the stages' rewrites and
        annotations. See `gpupipe.preview.preview`."""
        from gpupipe.preview import preview

        return preview(self, n=n, seed=seed, path=path)

    @classmethod
    def from_dict(cls, data: dict[str, Any], overrides: list[str] | None = None) -> Pipeline:
        if overrides:
            data = apply_overrides(data, overrides)
        return parse_pipeline(data, source="<dict>", cls=cls)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True)

    def plan(self):
        from gpupipe.runner.plan import plan

        return plan(self.all_stages())

    def explain(self) -> str:
        """Stages in order, how they fuse into tasks, global boundaries and the backend."""
        from gpupipe.errors import GpupipeError
        from gpupipe.runner.cluster import resolve_backend
        from gpupipe.runner.plan import conversions, stage_backends

        try:
            backend = resolve_backend(self.backend)
            backend_line = f"{backend.name}  ({backend.reason})"
            run_backend = backend.name
        except GpupipeError as e:
            # show the plan a GPU machine would run, so it can be checked before going there
            backend_line = f"{self.backend} — not usable on this machine: {e}"
            run_backend = self.backend
        stages = self.all_stages()
        per_stage = dict(zip(map(id, stages), stage_backends(stages, run_backend)))
        copies = conversions(self.plan(), run_backend)
        lines = [f"pipeline {self.name!r}"]
        for name, inp in self.sources().items():
            label = "input   " if self.inputs is None else f"input {name}:"
            fmt = inp.resolved_format()
            columns = ("text=HTTP body, id=WARC-Record-ID, responses of HTML/text types"
                       if fmt == "warc" else f"text_column={inp.text_column}, "
                       f"id_column={inp.id_column or '<file>:<line>'}")
            lines.append(f"  {label} {fmt}: {', '.join(inp.paths())}  ({columns}, "
                         f"on_error={inp.on_error})")
            for st in getattr(inp, "stages", []):
                lines.append(f"      its own stage: {st.describe()}")
        if self.mixture is not None:
            m = self.mixture
            shares = ", ".join(f"{k} {v:.1%}" for k, v in m.shares().items())
            what = (f"one set of shards, {m.total_tokens:,} train tokens" if m.total_tokens
                    else "one set of shards, the most tokens no source needs repeating for")
            lines.append(f"  mixture  token shares {shares}; " + (
                what if m.mode == "materialize" else
                "shards per source and Megatron blend weights (data_args.txt)") +
                f"; draw seed {m.seed}")
        lines += [
            f"  backend  {backend_line}",
            f"  cluster  {_cluster_line(self.cluster)}",
            f"  output   {self.output.path}",
            *([f"  io       KvikIO on every worker: {self.io.kvikio.env()} (GPU I/O; the "
               f"pandas path reads and writes with pyarrow)"] if self.io.kvikio.env() else []),
            "",
            "plan (each segment materialises its result; row-local stages in a segment run fused "
            "in one task per partition):",
        ]
        for seg in self.plan():
            where = os.path.relpath(seg.directory(self.output.path), self.output.path)
            if seg.kind == "row":
                read = ("read " + self.input.resolved_format() if self.inputs is None else
                        "read " + ", ".join(self.inputs))
                steps = ([read] if seg.reads_input else
                         ["read checkpoint"]) + [s.describe() for s in seg.stages]
                lines.append(f"  [{seg.index}] row-local, fused: " + "  →  ".join(steps))
            else:
                st0 = seg.stages[0]
                lines.append(f"  [{seg.index}] global: {st0.describe()}")
                lines.extend(_step_lines(st0, seg.positions[0], self.output.path))
            for pos, st in zip(seg.positions, seg.stages):
                on, converted = per_stage[id(st)]
                if run_backend != "pandas":
                    note = (f" (no {run_backend} path)" if converted else
                            f" ({st.host_steps})" if st.host_steps and on != "pandas" else "")
                    lines.append(f"        {st.stage_name} runs on {on}{note}")
                if pos in copies:
                    a, b = ("GPU", "host") if copies[pos] == "device->host" else ("host", "GPU")
                    lines.append(f"        WARNING conversion before {st.stage_name}: every "
                                 f"partition is copied from the {a} to the {b}")
                if seg.kind == "row":
                    lines.extend(f"        {st.stage_name}: {note}" for note in st.explain_notes())
                if st.reasons:
                    lines.append(f"        {st.stage_name} drop reasons: {', '.join(st.reasons)}")
            lines.append(f"        └─ writes {where}/")
        shards = self.output.shards
        if shards is not None:
            size = (f"{shards.num_shards} train shard(s)" if shards.num_shards else
                    f"~{shards.target_shard_tokens or 2**30:,} tokens per shard")
            splits = ", ".join(f"{k} {v:g}" for k, v in shards.splits.items())
            lines.append(f"  [shards] global shuffle by xxh64(seed={shards.seed}, id): route every "
                         f"partition, then one task per shard ({size}; {splits}; "
                         f"{shards.format}, packing {shards.packing})")
            if run_backend != "pandas":
                lines.append("        routing and shard writing run on the host (they read the "
                             "tokenized Parquet checkpoint)")
            lines.append("        └─ writes shards/ (manifest.json last)")
        return "\n".join(lines)

    def run(self, *, client=None, workers: int | None = None, progress: bool | str | None = None,
            output: str | None = None, overwrite: bool | None = None):
        """Run on a Dask cluster and return a `RunResult` (stats as in ``run.json``).

        ``client``: an existing `distributed.Client` to use; otherwise the pipeline's ``cluster``
        section decides (default: a local cluster sized to the machine, ``workers`` overrides).
        ``progress``: True for a live bar, False for none, "log" for log lines, None for a bar
        on a terminal or notebook and log lines otherwise.
        """
        from gpupipe.result import RunResult
        from gpupipe.runner.run import execute

        pipeline = self
        if output is not None or overwrite is not None:
            new_out = self.output.model_copy(update={
                k: v for k, v in (("path", output), ("overwrite", overwrite)) if v is not None})
            pipeline = self.model_copy(update={"output": new_out})
        summary = execute(pipeline, client=client, workers=workers, progress=progress)
        # a run on object storage: the result is its staging directory, a local copy
        result = RunResult(summary["output"]["path"], summary)
        try:
            views.report(result)
        except Exception as e:  # the report is a view: never the reason a finished run fails
            log.warning("report.html could not be written: %s: %s", type(e).__name__, e)
        if summary["output"].get("remote"):
            from gpupipe.io.mirror import RunMirror

            out = pipeline.output
            RunMirror(out.path, result.output, out.storage_options).push()   # report.html
        return result


def _step_lines(st, position: int, output: str) -> list[str]:
    """``steps: a (map, shuffled) → b (reduce) → ...`` for a stage of steps."""
    from gpupipe.errors import GpupipeError
    from gpupipe.stages.steps import StepContext

    ctx = StepContext(source=None, work_dir="", output_dir=output, position=position)
    try:
        steps = st.steps(ctx)
    except GpupipeError as e:
        return [f"        steps cannot be planned: {e}"]
    if steps is None:
        return []
    names = [f"{s.name} ({'client' if s.kind == 'client' else s.kind}"
             f"{', shuffled' if s.shuffle_on else ''})" for s in steps]
    notes = [f"        {line}" for line in st.explain_notes()]
    return notes + ["        steps (each checkpointed): " + " → ".join(names)]


def _cluster_line(c) -> str:
    if c.kind == "local":
        from gpupipe.runner.cluster import default_workers

        n = c.workers or default_workers()
        return f"local Dask cluster, {n} worker(s) x {c.threads_per_worker} thread(s)"
    if c.kind == "cuda":
        gpus = f"GPUs {c.visible_devices()}" if c.devices is not None else "one worker per GPU"
        extras = [f"protocol {c.protocol}"] + [f"interface {c.interface}"] * bool(c.interface)
        extras += [k for k in ("enable_infiniband", "enable_nvlink", "enable_rdmacm", "rmm_async",
                               "enable_cudf_spill") if getattr(c, k)]
        if c.rmm_pool_size is not None:
            extras.append(f"rmm_pool_size {c.rmm_pool_size}")
        return f"local CUDA cluster (dask-cuda), {gpus}; {', '.join(extras)}"
    if c.kind == "address":
        return f"existing scheduler at {c.address}"
    return f"existing scheduler via scheduler file {c.path}"
