"""A scheduler-file cluster across three hosts (network namespaces, `tests/cluster/hosts.py`):
the scheduler on h1, a worker on h2 and on h3, the driver on h2, all started as `gpupipe slurm`'s
script starts them (``python -m dask``, ``--interface eth0``, the script's worker-ttl). The
``web_dedup`` pipeline (exact + fuzzy dedup + tokenize) must give the bytes of a local run when
a host dies during fuzzy dedup and when a host's link goes down."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

import pytest

from gpupipe.slurm import LOST_WORKERS, WORKER_TTL, cpu_network_env
from tests.cluster import common
from tests.cluster.hosts import Hosts, why_not
from tests.conftest import REPO

pytestmark = [pytest.mark.skipif(why_not() is not None, reason=str(why_not())),
              pytest.mark.xdist_group("hosts")]

PIPELINE = "pipelines/web_dedup.yaml"
SIGNATURES = "checkpoints/02-fuzzy_dedup.work/00-signatures/_done"


@pytest.fixture(scope="module")
def local_run(tmp_path_factory) -> Path:
    return common.local_run(PIPELINE, tmp_path_factory.mktemp("local"))


def _files(root: Path) -> dict[str, bytes]:
    return common.run_files(root, ("data", "shards", "dedup"))


#: the UCX packages (distributed-ucxx 0.52) live in a venv of their own over the suite's
#: (`make test` builds it): its Python runs the scheduler, workers and driver of the UCX test
UCX_PYTHON = REPO / ".venv-ucx" / "bin" / "python"


def _env(protocol: str) -> dict:
    """What `gpupipe slurm`'s script sets for ``protocol`` on CPU nodes."""
    return {**os.environ, **cpu_network_env(protocol),
            "DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL": WORKER_TTL[protocol]}


def _cluster(hosts: Hosts, sched: Path, protocol: str = "tcp",
             python: str = sys.executable) -> None:
    """The scheduler on h1 and one worker on h2 and h3, as the Slurm script starts them."""
    env = _env(protocol)
    dask = [python, "-m", "dask"]
    hosts.run(0, [*dask, "scheduler", f"--scheduler-file={sched}", f"--protocol={protocol}",
                  "--interface=eth0", "--port=0", "--dashboard-address=:0",
                  f"--preload={LOST_WORKERS}"], "scheduler", env)
    end = time.monotonic() + 30
    while not sched.exists() or not sched.stat().st_size:
        assert time.monotonic() < end, "the scheduler did not write its file"
        time.sleep(0.1)
    for h in (1, 2):
        hosts.run(h, [*dask, "worker", f"--scheduler-file={sched}", f"--protocol={protocol}",
                      "--interface=eth0", "--nworkers=1", "--nthreads=1"], f"worker-h{h + 1}",
                  env)


def _driver(hosts: Hosts, sched: Path, out: Path, protocol: str = "tcp",
            python: str = sys.executable):
    return hosts.run(1, [python, "-m", "gpupipe.cli", "run", str(REPO / PIPELINE),
                         f"--scheduler-file={sched}", "--min-workers=2", "--timeout=60",
                         "--no-progress", f"--set=output.path={out}"], "driver",
                     _env(protocol))


def _wait_for(path: Path, proc, timeout: float) -> None:
    end = time.monotonic() + timeout
    while not (path.exists() and any(path.iterdir())):
        assert proc.poll() is None, f"the driver exited with {proc.returncode} first"
        assert time.monotonic() < end, f"nothing in {path} after {timeout} s"
        time.sleep(0.05)


@pytest.mark.parametrize("loss", ["host-killed", "link-down"])
def test_the_run_survives_a_lost_host_with_the_same_bytes(loss, local_run, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    sched, out = tmp_path / "scheduler.json", tmp_path / "run"
    with Hosts(3, logs) as hosts:
        _cluster(hosts, sched)
        assert json.loads(sched.read_text())["address"].startswith(
            f"tcp://{hosts.addresses[0]}:")   # advertised on eth0, not 127.0.0.1
        driver = _driver(hosts, sched, out)
        _wait_for(out / SIGNATURES, driver, timeout=120)   # fuzzy dedup is under way
        t0 = time.monotonic()
        if loss == "host-killed":
            assert hosts.kill(2)
        else:
            hosts.link_down(2)
        rc = driver.wait(180)
        after = time.monotonic() - t0
        text = (logs / "driver.log").read_text()
        assert rc == 0, text[-3000:]
        scheduler_log = (logs / "scheduler.log").read_text()
        assert "Remove worker" in scheduler_log, scheduler_log[-2000:]
    print(f"\n{loss}: the run finished {after:.1f} s after the loss")
    if loss == "link-down":   # noticed through the worker-ttl the Slurm script sets
        assert after < 20 + 25, after
        assert "longer than the worker-ttl of 20 s: removing it" in scheduler_log
        assert "attempting restart" not in scheduler_log   # no 30 s wait for the nanny
    summary = json.loads((out / "run.json").read_text())
    assert summary["status"] == "complete"
    assert _files(out) == _files(local_run)


def test_the_scheduler_host_lost_stops_the_driver_and_a_new_cluster_resumes(local_run,
                                                                             tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    sched, out = tmp_path / "scheduler.json", tmp_path / "run"
    with Hosts(3, logs) as hosts:
        _cluster(hosts, sched)
        driver = _driver(hosts, sched, out)
        _wait_for(out / SIGNATURES, driver, timeout=120)
        t0 = time.monotonic()
        assert hosts.kill(0)   # the scheduler's host
        rc = driver.wait(120)
        after = time.monotonic() - t0
        text = (logs / "driver.log").read_text()
        assert rc == 1, text[-3000:]
        # the last word is gpupipe's (distributed's client logs its reconnection attempt)
        last = text.strip().splitlines()[-1]
        assert re.match(rf"error: \[2\] fuzzy_dedup/\w+: lost the Dask scheduler at "
                        rf"tcp://{re.escape(hosts.addresses[0])}:\d+ \(its process or its host "
                        rf"is gone\)", last), text[-3000:]
        assert last.endswith("run the same command again to resume"), last
    print(f"\nscheduler host killed: the driver stopped {after:.1f} s later")
    assert not (out / "shards" / "manifest.json").exists()
    (logs / "driver.log").rename(logs / "first-driver.log")
    sched.unlink()
    with Hosts(3, logs) as hosts:   # a fresh cluster, the same run directory
        _cluster(hosts, sched)
        driver = _driver(hosts, sched, out)
        assert driver.wait(180) == 0, (logs / "driver.log").read_text()[-3000:]
    summary = json.loads((out / "run.json").read_text())
    assert summary["status"] == "complete"
    assert sum(seg["reused"] for seg in summary["segments"]) > 0
    assert _files(out) == _files(local_run)


@pytest.mark.skipif(not UCX_PYTHON.exists(), reason=f"no {UCX_PYTHON} (`make test` builds it: "
                    f"distributed-ucxx-cu12 0.52 over the suite's venv)")
def test_over_ucx_a_lost_link_does_not_hang(local_run, tmp_path):
    """The same cluster over UCX (its TCP transport: no GPU here), as `gpupipe slurm --cpu
    --protocol ucx` starts it. UCX never notices a silent peer: the worker-ttl drops it."""
    logs = tmp_path / "logs"
    logs.mkdir()
    sched, out = tmp_path / "scheduler.json", tmp_path / "run"
    with Hosts(3, logs) as hosts:
        _cluster(hosts, sched, "ucx", str(UCX_PYTHON))
        assert json.loads(sched.read_text())["address"].startswith(
            f"ucx://{hosts.addresses[0]}:")
        driver = _driver(hosts, sched, out, "ucx", str(UCX_PYTHON))
        _wait_for(out / SIGNATURES, driver, timeout=120)
        t0 = time.monotonic()
        hosts.link_down(2)
        rc = driver.wait(180)
        after = time.monotonic() - t0
        assert rc == 0, (logs / "driver.log").read_text()[-3000:]
        scheduler_log = (logs / "scheduler.log").read_text()
    print(f"\nucx link-down: the run finished {after:.1f} s after the loss")
    # the worker-ttl, then the work left (without the preload: 30 s more, for the nanny)
    assert after < 15 + 25, after
    assert "longer than the worker-ttl of 15 s: removing it" in scheduler_log
    summary = json.loads((out / "run.json").read_text())
    assert summary["status"] == "complete"
    assert _files(out) == _files(local_run)
