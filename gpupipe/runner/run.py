"""Running a pipeline: checks before any work, the run directory, the cluster, then the
segments (`gpupipe.runner.segments`) and the shards (`gpupipe.runner.sharding`), and run.json."""

from __future__ import annotations

import contextlib
import datetime as dt
import inspect
import logging
import os
import platform
import shutil
import time

from gpupipe.errors import OutputError, SpecError
from gpupipe.io.files import redact_options
from gpupipe.io.writer import write_json
from gpupipe.runner.plan import fingerprints, plan
from gpupipe.runner.progress import make_progress
from gpupipe.runner.resume import describe_changes, input_identity
from gpupipe.runner.segments import run_segments
from gpupipe.runner.sharding import run_shards
from gpupipe.runner.sources import count_block_lines, make_pipeline_source

log = logging.getLogger(__name__)

#: version of run.json's layout (docs/formats.md lists the changes)
SCHEMA_VERSION = 2


def versions() -> dict:
    import dask
    import distributed
    import numpy
    import pandas
    import pyarrow
    import pydantic

    from gpupipe._version import __version__

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


def check_output_apart(pipeline, source) -> None:
    """The run directory must not hold an input file (``overwrite`` deletes it, and a rerun
    would read the run's own output), nor lie inside a directory read as input."""
    import glob as globmod

    from gpupipe.io.files import is_url

    remote = is_url(pipeline.output.path)

    def where(path: str) -> str:
        if remote:
            return path.rstrip("/") if is_url(path) else ""
        return "" if is_url(path) else os.path.realpath(os.path.expanduser(path or "."))

    def inside(path: str, d: str) -> bool:
        return bool(path and d) and (path == d or path.startswith(d.rstrip("/") + "/"))

    out = where(pipeline.output.path)
    for f in source.files:
        if inside(where(f), out):
            raise SpecError(f"output.path {pipeline.output.path!r} contains the input file {f}; "
                            f"write the run somewhere else")
    for spec in pipeline.sources().values():
        for pattern in spec.paths():
            base = pattern
            if globmod.has_magic(pattern):
                if "**" not in pattern:
                    continue
                base = pattern[:pattern.index("**")]
            base = where(base)
            if (remote or os.path.isdir(base)) and inside(out, base):
                raise SpecError(f"output.path {pipeline.output.path!r} is inside the input "
                                f"directory {pattern!r}: a rerun would read its own output; "
                                f"write the run somewhere else")


def _check_stages(pipeline) -> None:
    """Each stage's `Stage.check`, before any data is read: a model that does not fit its
    parameters stops the run here, not after hours of earlier stages."""
    from gpupipe.stages.base import CheckContext

    stages = pipeline.all_stages()
    columns = frozenset(c for spec in pipeline.sources().values()
                        for c in spec.carried_columns())
    for pos, st in enumerate(stages):
        ctx = CheckContext(output_dir=pipeline.output.path, position=pos,
                           earlier=tuple(stages[:pos]), input_columns=columns)
        try:
            # a plugin written before check took its context overrides check(self)
            takes_ctx = len(inspect.signature(st.check).parameters) > 0
            note = st.check(ctx) if takes_ctx else st.check()
        except ValueError as e:
            raise SpecError(f"stage {pos} ({st.stage_name}): {e}") from None
        if note:
            log.info("%d: %s: %s", pos, st.stage_name, note)


def execute(pipeline, *, client=None, workers: int | None = None,
            progress: bool | str | None = None) -> dict:
    """Run ``pipeline`` and return its summary (what run.json holds); see `Pipeline.run`."""
    from gpupipe.runner.cluster import PendingCluster, resolve_backend

    t_start = time.perf_counter()
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    backend = resolve_backend(pipeline.backend)
    env = pipeline.io.kvikio.env()
    with contextlib.ExitStack() as stack:
        pending = None
        if client is None:
            # a local cluster starts (and loads its kernels) while this thread plans and checks
            pending = PendingCluster(pipeline.cluster, workers=workers, env=env,
                                     stage_names=[s.stage_name for s in pipeline.all_stages()],
                                     backend=backend.name)
            stack.callback(pending.close)
        return _execute(pipeline, client, pending, backend, env, progress, t_start, started)


def _execute(pipeline, client, pending, backend, env, progress, t_start, started) -> dict:
    from gpupipe.io.files import is_url

    source = make_pipeline_source(pipeline)
    check_output_apart(pipeline, source)
    _check_stages(pipeline)   # before a run on object storage downloads anything
    if not is_url(pipeline.output.path):
        return _run(pipeline, source, client, pending, backend, env, progress, t_start, started,
                    None)
    from gpupipe.io.mirror import RunMirror

    spec = pipeline.output
    mirror = RunMirror(spec.path, spec.staging, spec.storage_options, spec.sync_seconds)
    staged = pipeline.model_copy(update={"output": spec.model_copy(
        update={"path": mirror.staging, "overwrite": False})})
    if spec.overwrite:
        log.info("overwrite: deleting the previous run in %s", spec.path)
        mirror.clear()
        held: dict = {}
    elif (held := mirror.listing()) and "run.json" not in held:
        raise OutputError(f"output.path {spec.path!r} is not empty and holds no gpupipe run "
                          f"(no run.json); choose another output.path (nothing was deleted)")
    mirror.pull(listed=held)
    mirror.start()
    try:
        summary = _run(staged, source, client, pending, backend, env, progress, t_start,
                       started, mirror)
    except BaseException:
        mirror.stop()
        try:   # what was committed, and run.json's error, for a rerun anywhere
            mirror.push()
        except Exception as e:   # the run's own error is the one to see
            log.warning("%s: the upload after the failure failed too: %s", spec.path, e)
        raise
    mirror.stop()
    mirror.push()
    return summary


def _run(pipeline, source, client, pending, backend, env, progress, t_start, started,
         mirror) -> dict:
    from gpupipe.runner.cluster import describe

    segments = plan(pipeline.all_stages())
    _warn_conversions(pipeline, segments, backend.name)
    if backend.name == "cudf" and pipeline.cluster.kind == "local":
        log.warning("backend: cudf on a local CPU cluster: every worker process shares the first "
                    "GPU; cluster: {kind: cuda} starts one worker per GPU")
    vers = versions()
    identity = input_identity(pipeline, source)
    fps = fingerprints(segments, identity, vers["gpupipe"])
    out = pipeline.output.path
    if mirror is None:   # a staging directory was prepared by its pull
        prepare_output(out, pipeline.output.overwrite)
    inputs = {f: [size, mtime] for f, size, mtime in identity["files"]}
    recorded = redact_options(pipeline.to_dict())   # no secret in run.json
    if mirror is not None:   # the run's address is the URL; where it works is a detail
        recorded["output"] = {**recorded["output"], "path": mirror.url}
    for line in describe_changes(os.path.join(out, "run.json"), recorded, inputs, fps[-1]):
        log.warning("resuming %s: %s; the stages from there on are recomputed",
                    mirror.url if mirror else out, line)
    base = {"schema_version": SCHEMA_VERSION, "status": "running", "started": started,
            "gpupipe_version": vers["gpupipe"], "pipeline": recorded,
            "fingerprint": fps[-1], "input_files": inputs}
    write_json(base, os.path.join(out, "run.json"))

    bar = make_progress(progress)
    try:
        if client is not None:
            if env:
                from gpupipe.runner.cluster import apply_kvikio_settings

                client.run(apply_kvikio_settings, env)
            from gpupipe.runner.cluster import prewarm

            compiled = prewarm(client, [s.stage_name for s in pipeline.all_stages()],
                               backend.name)
        else:
            client, compiled = pending.result()
        summary = run_segments(pipeline, client, count_block_lines(client, source, bar),
                               segments, fps, out, bar, backend.name,
                               committed=mirror.push if mirror else None,
                               own_workers=pending is not None and (
                                   pipeline.cluster.kind == "local"
                                   or getattr(pipeline.cluster, "dedicated", False)))
        if pipeline.sink_stage() is not None:
            summary["shards"] = run_shards(client, pipeline, out, fps[-1],
                                           summary["output"]["partitions"], bar, vers)
        if compiled:
            summary["compile"] = compiled
        if mirror is not None:
            summary["output"] = {**summary["output"], "remote": mirror.url}
        cluster_info = describe(client)
    except BaseException as e:
        bar.close()
        write_json({**base, "status": "failed", "error": f"{type(e).__name__}: {e}"},
                   os.path.join(out, "run.json"))
        raise
    bar.close()
    summary = {
        "schema_version": SCHEMA_VERSION,
        "status": "complete",
        "started": started,
        "finished": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "seconds": round(time.perf_counter() - t_start, 3),
        "gpupipe_version": vers["gpupipe"],
        "fingerprint": fps[-1],
        "input_files": inputs,
        "pipeline": recorded,
        "versions": vers,
        "backend": {"requested": pipeline.backend, "used": backend.name, "reason": backend.reason},
        "cluster": {"kind": pipeline.cluster.kind, **cluster_info},
        **summary,
    }
    summary = redact_options(summary)
    write_json(summary, os.path.join(out, "run.json"))
    return summary


def _warn_conversions(pipeline, segments, backend: str) -> None:
    """One warning per stage before which partitions are copied between the GPU and the host
    (what `explain` shows)."""
    from gpupipe.runner.plan import conversions

    stages = pipeline.all_stages()
    for pos, direction in sorted(conversions(segments, backend).items()):
        a, b = ("GPU", "host") if direction == "device->host" else ("host", "GPU")
        log.warning("stages[%d] %s: every partition is copied from the %s to the %s before it "
                    "(it runs on %s)", pos, stages[pos].stage_name, a, b,
                    stages[pos].runs_on(backend))
