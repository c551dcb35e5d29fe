"""Attaching to schedulers that are already running (how gpupipe runs on Slurm allocations)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

import gpupipe as gp
from gpupipe.spec import AddressClusterSpec, SchedulerFileClusterSpec
from gpupipe.stages import LengthFilter, NormalizeText
from tests.cluster.common import scheduler_and_worker


def make(inp, out, cluster):
    return gp.Pipeline(input=str(inp), output=str(out), cluster=cluster,
                       stages=[NormalizeText(), LengthFilter(min_words=30)])


def test_attach_by_address(client, tmp_path, small_corpus):
    address = client.scheduler.address
    res = make(small_corpus, tmp_path / "o", {"kind": "address", "address": address}).run(
        progress=False)
    assert res.summary["cluster"]["kind"] == "address"
    assert res.summary["cluster"]["workers"] == 2
    assert res.summary["output"]["docs"] > 0


def test_attach_by_scheduler_file_to_separate_processes(tmp_path, small_corpus):
    """`dask scheduler --scheduler-file` + `dask worker --scheduler-file`, as on a Slurm job."""
    bindir = os.path.dirname(sys.executable)
    with scheduler_and_worker(tmp_path) as sched_file:
        res = make(small_corpus, tmp_path / "o",
                   SchedulerFileClusterSpec(kind="scheduler_file", path=str(sched_file),
                                            timeout=60)).run(progress=False)
        assert res.summary["cluster"]["kind"] == "scheduler_file"
        assert res.summary["cluster"]["workers"] == 1
        assert res.summary["accounting"]["balanced"] and res.summary["output"]["docs"] > 0
        # the same from the command line, as the driver of a Slurm job runs it
        cli = subprocess.run(
            [os.path.join(bindir, "gpupipe"), "run", "pipelines/quickstart.yaml",
             "--scheduler-file", str(sched_file), "-o", str(tmp_path / "cli"), "--no-progress",
             "--set", f"input.path={small_corpus}", "--set", "input.id_column=null"],
            capture_output=True, text=True, timeout=300)
        assert cli.returncode == 0, cli.stderr
        summary = json.loads((tmp_path / "cli" / "run.json").read_text())
        assert summary["cluster"] == {**summary["cluster"], "kind": "scheduler_file",
                                      "workers": 1}
        assert (tmp_path / "cli" / "shards" / "manifest.json").exists()


def test_workers_in_another_directory_are_said_to_be(tmp_path, small_corpus):
    """Workers started in another directory than the driver's find the pipeline's relative
    paths from theirs: the run says so, once, before it starts (with absolute paths it runs)."""
    (tmp_path / "elsewhere").mkdir()
    with scheduler_and_worker(tmp_path, cwd=tmp_path / "elsewhere") as sched_file:
        cli = subprocess.run(
            [os.path.join(os.path.dirname(sys.executable), "gpupipe"), "run",
             "pipelines/quickstart.yaml", "--scheduler-file", str(sched_file), "--timeout",
             "60", "-o", str(tmp_path / "out"), "--no-progress",
             "--set", f"input.path={small_corpus}", "--set", "input.id_column=null",
             "--set", f"tokenize.tokenizer={os.path.abspath('data/tokenizer.json')}"],
            capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0, cli.stderr
    said = [ln for ln in cli.stderr.splitlines() if "the workers run in" in ln]
    assert len(said) == 1, cli.stderr
    assert said[0].endswith(
        f"WARNING the workers run in {tmp_path / 'elsewhere'}, this driver in {os.getcwd()}: "
        f"relative paths of the pipeline (input.path, output.path, the files stages read) are "
        f"found from the workers' directory; give absolute paths, or start the workers in "
        f"{os.getcwd()}")
    assert json.loads((tmp_path / "out" / "run.json").read_text())["status"] == "complete"


def test_unreachable_scheduler_is_a_clear_error(tmp_path, small_corpus):
    spec = AddressClusterSpec(kind="address", address="tcp://127.0.0.1:9", timeout=2)
    with pytest.raises(gp.ClusterError, match="cannot reach the Dask scheduler at tcp://127.0.0.1:9"):
        make(small_corpus, tmp_path / "o", spec).run(progress=False)


def test_a_scheduler_file_naming_something_else_is_a_clear_error(tmp_path, small_corpus):
    """The file's address answers, but not as a Dask scheduler (a stale file, a port reused by
    another service): the CLI names the address, the file and --interface, without a
    traceback."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]

    def answer():   # what an HTTP server says to bytes it does not understand
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n" * 4)

    threading.Thread(target=answer, daemon=True).start()
    path = tmp_path / "sched.json"
    path.write_text(json.dumps({"type": "Scheduler", "address": f"tcp://127.0.0.1:{port}"}))
    pipe = tmp_path / "p.yaml"
    pipe.write_text(f"input: {{path: {small_corpus}}}\nstages: [{{stage: length_filter}}]\n"
                    f"output: {{path: {tmp_path / 'o'}}}\n")
    try:
        r = subprocess.run([sys.executable, "-m", "gpupipe.cli", "run", str(pipe),
                            "--scheduler-file", str(path), "--timeout", "3", "--no-progress"],
                           capture_output=True, text=True, timeout=120)
    finally:
        server.close()
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert (f"error: cannot reach the Dask scheduler at tcp://127.0.0.1:{port} (from {path}): "
            in r.stderr), r.stderr[-2000:]
    assert "--interface, e.g. ib0 or eth0" in r.stderr


def test_missing_scheduler_file_is_a_clear_error(tmp_path, small_corpus):
    spec = SchedulerFileClusterSpec(kind="scheduler_file", path=str(tmp_path / "none.json"))
    with pytest.raises(gp.ClusterError, match="does not exist.*dask scheduler --scheduler-file"):
        make(small_corpus, tmp_path / "o", spec).run(progress=False)


def test_embedded_local_cluster(tmp_path, small_corpus):
    res = make(small_corpus, tmp_path / "o", {"kind": "local", "workers": 1}).run(progress=False)
    assert res.summary["cluster"] == {"kind": "local", "scheduler": res.summary["cluster"][
        "scheduler"], "workers": 1, "threads": 1}


def test_a_script_from_standard_input_is_told_why_the_workers_cannot_start(tmp_path,
                                                                          small_corpus):
    """Worker processes run the main file again, and ``python -`` has none: said plainly, not
    as "Nanny failed to start"."""
    script = (f"import gpupipe as gp\n"
              f"from gpupipe.stages import LengthFilter\n"
              f"gp.Pipeline(name='stdin', input={{'path': {str(small_corpus)!r}}}, "
              f"stages=[LengthFilter(min_words=1)], output={str(tmp_path / 'o')!r})"
              f".run(workers=1, progress=False)\n")
    done = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env={**os.environ, "GPUPIPE_SERVER": "off"})
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        "gpupipe.errors.ClusterError: cannot start a local Dask cluster: its worker processes "
        "start by running this program's main file, and there is none ('<stdin>': a script "
        "read from standard input). Save the script to a file and run that, or attach to a "
        "running cluster (--address, cluster.kind: address)")


def _worker_view():
    import sys

    return {"cwd": os.getcwd(), "preloaded": "gpupipe.runner.preload" in sys.modules,
            "seed": os.environ.get("PYTHONHASHSEED"), "omp": os.environ.get("OMP_NUM_THREADS"),
            "rayon": os.environ.get("RAYON_NUM_THREADS"),
            "marker": os.environ.get("GPUPIPE_TEST_MARKER")}


def test_local_workers_are_forked_from_the_preloaded_server(tmp_path, monkeypatch):
    """The default start: workers forked from gpupipe's forkserver, with gpupipe already
    imported, in the driver's working directory, with the environment a spawned worker gets."""
    from gpupipe.runner.cluster import connect, start_method
    from gpupipe.spec import LocalClusterSpec

    monkeypatch.chdir(tmp_path)
    spec = LocalClusterSpec(workers=2)
    assert start_method(spec) == "forkserver"
    with connect(spec) as c:
        views = list(c.run(_worker_view).values())
    assert views == [{"cwd": str(tmp_path), "preloaded": True,
                      "seed": os.environ.get("PYTHONHASHSEED", "6640"), "omp": "1",
                      "rayon": "1", "marker": None}] * 2


def test_changed_environment_or_spawn_asked_spawns(monkeypatch):
    """A variable set after the server started reaches forked workers through the nanny; one
    that a preloaded library reads at import (``NUMBA_*``, ``OMP_*``, ...) makes the run spawn
    its workers, which then see it; so does ``start_method: spawn``."""
    from gpupipe.runner.cluster import connect, start_method
    from gpupipe.spec import LocalClusterSpec

    assert start_method(LocalClusterSpec(start_method="spawn")) == "spawn"
    spec = LocalClusterSpec(workers=1)
    monkeypatch.setenv("GPUPIPE_TEST_MARKER", "set later")
    assert start_method(spec) == "forkserver"
    with connect(spec) as c:
        [view] = c.run(_worker_view).values()
    assert (view["preloaded"], view["marker"]) == (True, "set later")
    monkeypatch.setenv("OMP_DISPLAY_ENV", "FALSE")
    assert start_method(spec) == "spawn"
    with connect(spec) as c:
        [view] = c.run(_worker_view).values()
    assert (view["preloaded"], view["marker"]) == (False, "set later")
    monkeypatch.delenv("OMP_DISPLAY_ENV")
    assert start_method(spec) == "forkserver"


def _faults_of_a_reused_block() -> int:
    """Page faults while a 1 MiB block is allocated, filled and freed 64 times."""
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(64):
        block = b"\x01" * (1 << 20)
        del block
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def test_local_workers_reuse_freed_blocks_unless_the_allocator_is_set_otherwise(monkeypatch):
    """glibc in gpupipe's local workers keeps blocks under 4 MiB on its heap (`MALLOC`):
    a block freed and allocated again is not mapped anew, its 256 pages faulted in each time,
    as under distributed's own ``MALLOC_TRIM_THRESHOLD_=65536``. That holds after a plain
    distributed cluster left its setting in this process's environment, and gpupipe's leaves
    the environment as it found it. A setting of the user's wins: in the environment (the
    workers are then spawned with it), or in distributed's configuration."""
    import dask
    from distributed import Client, LocalCluster

    from gpupipe.runner.cluster import connect, start_method
    from gpupipe.spec import LocalClusterSpec

    for k in [k for k in os.environ if k.startswith("MALLOC_")]:
        monkeypatch.delenv(k)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as plain, Client(plain) as c:
        [faults] = c.run(_faults_of_a_reused_block).values()
    assert faults >= 64 * 256 // 2
    left = {k: v for k, v in os.environ.items() if k.startswith("MALLOC_")}
    assert left == {"MALLOC_TRIM_THRESHOLD_": "65536"}   # distributed's nanny left it
    spec = LocalClusterSpec(workers=1)
    assert start_method(spec) == "forkserver"
    with connect(spec) as c:
        [faults] = c.run(_faults_of_a_reused_block).values()
    assert faults < 64 * 256 // 8
    assert {k: v for k, v in os.environ.items() if k.startswith("MALLOC_")} == left
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "65537")
    assert start_method(spec) == "spawn"
    with connect(spec) as c:
        [faults] = c.run(_faults_of_a_reused_block).values()
    assert faults >= 64 * 256 // 2
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_")
    assert start_method(spec) == "forkserver"
    with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}):
        assert start_method(spec) == "spawn"   # unset: glibc adjusts by itself
        with connect(spec) as c:
            [faults] = c.run(_faults_of_a_reused_block).values()
        assert faults < 64 * 256 // 8


def test_a_check_failing_while_the_cluster_starts_leaves_no_worker(tmp_path, small_corpus):
    """The cluster starts while the run is checked: a check that fails stops the run with its
    own error, and the workers started meanwhile are closed."""
    import multiprocessing.forkserver

    import psutil

    from gpupipe.errors import OutputError

    (tmp_path / "taken").write_text("a file, not a directory")
    with pytest.raises(OutputError, match="is a file"):
        make(small_corpus, tmp_path / "taken", {"kind": "local", "workers": 2}).run(
            progress=False)
    server = psutil.Process(multiprocessing.forkserver._forkserver._forkserver_pid)
    deadline = time.monotonic() + 10
    while server.children() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert server.children() == []


def test_forked_and_spawned_workers_write_the_same_bytes(tmp_path, small_corpus):
    """Determinism does not depend on how the workers started: exact dedup (hash-partitioned
    steps) and tokenized shards, byte for byte."""
    import hashlib

    from gpupipe.stages import ExactDedup, Tokenize

    digests = {}
    for method in ("forkserver", "spawn"):
        out = tmp_path / method
        gp.Pipeline(input=str(small_corpus), output=str(out),
                    cluster={"kind": "local", "workers": 2, "start_method": method},
                    stages=[NormalizeText(), ExactDedup(),
                            Tokenize(tokenizer="data/tokenizer.json")]).run(progress=False)
        files = sorted(p for sub in ("data", "shards") for p in (out / sub).rglob("*")
                       if p.suffix in (".parquet", ".bin", ".idx"))
        digests[method] = {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
                           for p in files}
    assert len(digests["spawn"]) >= 5
    assert digests["forkserver"] == digests["spawn"]
