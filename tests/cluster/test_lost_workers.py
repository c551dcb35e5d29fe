"""The scheduler preload `gpupipe.runner.lost_workers`, on one host (no namespaces needed): a
worker process frozen with SIGSTOP stops heartbeating but keeps its connections open, as a
worker whose host hangs does. The scheduler removes it once the TTL has passed, without the
30 s distributed waits for a nanny, and the nanny then restarts it as a new worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests.io.servers import stop_group

#: distributed reckons at least 10 heartbeat intervals (0.5 s with few workers): 5 s
TTL_S = 5


def _start(args, log, env):
    return subprocess.Popen([sys.executable, "-m", "dask", *args], stdout=log,
                            stderr=subprocess.STDOUT, env=env, start_new_session=True)


def test_a_frozen_worker_is_removed_after_the_ttl_and_restarted_by_its_nanny(tmp_path):
    from distributed import Client

    sched = tmp_path / "scheduler.json"
    env = {**os.environ, "DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL": "1s"}
    procs, frozen = [], None
    with open(tmp_path / "scheduler.log", "wb") as slog, open(tmp_path / "w.log", "wb") as wlog:
        try:
            procs.append(_start(["scheduler", f"--scheduler-file={sched}", "--port=0",
                                 "--host=127.0.0.1", "--dashboard-address=:0",
                                 "--preload=gpupipe.runner.lost_workers"], slog, env))
            end = time.monotonic() + 30
            while not (sched.exists() and sched.stat().st_size):
                assert time.monotonic() < end and procs[0].poll() is None, "no scheduler"
                time.sleep(0.1)
            for _ in range(2):
                procs.append(_start(["worker", f"--scheduler-file={sched}", "--nthreads=1",
                                     "--host=127.0.0.1"], wlog, env))
            with Client(scheduler_file=str(sched), timeout=30) as client:
                client.wait_for_workers(2, timeout=60)
                pids = client.run(os.getpid)
                address, frozen = sorted(pids.items())[0]
                os.kill(frozen, signal.SIGSTOP)
                t0 = time.monotonic()
                while address in client.scheduler_info()["workers"]:
                    assert time.monotonic() - t0 < TTL_S + 15, "the frozen worker stayed"
                    time.sleep(0.1)
                removed = time.monotonic() - t0
                # its nanny kills the frozen process and starts a new worker
                while len(client.scheduler_info()["workers"]) < 2:
                    assert time.monotonic() - t0 < 90, "no new worker"
                    time.sleep(0.2)
                assert address not in client.scheduler_info()["workers"]
                assert client.submit(sum, [1, 2, 3], pure=False).result(timeout=30) == 6
        finally:
            if frozen is not None:
                try:
                    os.kill(frozen, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            for p in reversed(procs):
                stop_group(p)
    log = (tmp_path / "scheduler.log").read_text()
    print(f"\nthe frozen worker was removed {removed:.1f} s after SIGSTOP")
    # counted from its last heartbeat, which came up to one interval (0.5 s) before SIGSTOP
    assert TTL_S - 0.6 <= removed < TTL_S + 5, removed
    assert f"longer than the worker-ttl of {TTL_S} s: removing it" in log, log[-3000:]
    assert "attempting restart" not in log and "did not shut down within" not in log
    assert f"restarted its silent worker {address}" in log, log[-3000:]
