"""What the cluster tests compare against: a pipeline's run on a local 2-worker cluster, and
the files of a run directory; and a Dask scheduler with a worker as separate processes."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import gpupipe as gp
from tests.conftest import REPO


def local_run(pipeline: str, directory: Path) -> Path:
    """``pipeline`` run on the embedded 2-worker cluster into ``directory/run``."""
    out = directory / "run"
    os.chdir(REPO)
    gp.Pipeline.from_yaml(pipeline, overrides=[f"output.path={out}"]).run(workers=2,
                                                                         progress=False)
    return out


def run_files(root: Path, subdirs: tuple[str, ...]) -> dict[str, bytes]:
    """Every file under ``root``'s ``subdirs`` (manifest.json aside), with the run directory's
    path replaced (the Megatron argument files name it)."""
    return {str(p.relative_to(root)): p.read_bytes().replace(str(root).encode(), b"<run>")
            for sub in subdirs for p in sorted((root / sub).rglob("*"))
            if p.is_file() and p.name != "manifest.json"}


@contextlib.contextmanager
def scheduler_and_worker(directory: Path, worker_log: Path | None = None,
                         cwd: Path | None = None) -> Iterator[Path]:
    """``dask scheduler --scheduler-file`` and ``dask worker --scheduler-file`` (one process of
    one thread, under its nanny), as a Slurm job starts them: the scheduler file, while they
    run; both stopped by pid after. ``worker_log``: where the worker's output goes; ``cwd``:
    the worker's working directory (default: this process's)."""
    bindir = os.path.dirname(sys.executable)
    sched_file = directory / "scheduler.json"
    env = {**os.environ, "DASK_DISTRIBUTED__LOGGING__DISTRIBUTED": "error"}
    procs = [subprocess.Popen([os.path.join(bindir, "dask"), "scheduler", "--scheduler-file",
                               str(sched_file), "--port", "0", "--dashboard-address", ":0"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        deadline = time.monotonic() + 60
        while not sched_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sched_file.exists(), "dask scheduler did not start"
        with open(worker_log or os.devnull, "wb") as out:
            procs.append(subprocess.Popen(
                [os.path.join(bindir, "dask"), "worker", "--scheduler-file", str(sched_file),
                 "--nworkers", "1", "--nthreads", "1", "--no-dashboard"],
                env=env, stdout=out, stderr=subprocess.STDOUT, cwd=cwd))
        yield sched_file
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            p.wait(timeout=30)
