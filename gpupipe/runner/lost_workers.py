"""A preload for the Dask scheduler of a cluster across hosts (``dask scheduler --preload
gpupipe.runner.lost_workers``; `gpupipe slurm`'s script starts it so): a worker that has been
silent for ``distributed.scheduler.worker-ttl`` is removed at once, and its tasks run on the
other workers.

distributed 2026.7's own check first asks a silent worker's nanny to restart it, and waits for
the answer for 30 s (`Scheduler.restart_workers`' fixed timeout) before it removes the worker.
From a host that is down, or whose link is cut, no answer comes: the run waits those 30 s on
top of the TTL (over UCX, which never notices a silent peer by itself, that is all there is).
This preload replaces that check with one that runs every second and removes the worker
first; then it asks the nanny, in the background, to restart the worker (a worker hung on a
live host comes back as a new one; a host that is down never answers, and nothing waits for
it). A worker whose host comes back registers again.
"""

from __future__ import annotations

import asyncio
import functools
import logging

# under distributed's logger: the scheduler's log shows it, at distributed's level and format
log = logging.getLogger("distributed.gpupipe.lost_workers")

#: seconds between two checks (at most; a quarter of the TTL when that is shorter)
EVERY_S = 1.0
#: seconds the background restart of a removed worker waits for its nanny
RESTART_S = 60
_background: set = set()


def dask_setup(scheduler) -> None:
    """Replace the scheduler's ``worker-ttl`` check (before its periodic callbacks start)."""
    from tornado.ioloop import PeriodicCallback

    ttl = scheduler.worker_ttl
    if not ttl:
        log.info("gpupipe.runner.lost_workers: distributed.scheduler.worker-ttl is off; "
                 "nothing to do")
        return
    old = scheduler.periodic_callbacks.pop("worker-ttl", None)
    if old is not None:
        old.stop()
    scheduler.periodic_callbacks["worker-ttl"] = PeriodicCallback(
        functools.partial(remove_silent, scheduler), 1000 * min(EVERY_S, ttl / 4))
    log.info("gpupipe.runner.lost_workers: a worker silent for %g s is removed without "
             "waiting for its nanny", ttl)


async def remove_silent(scheduler) -> list[str]:
    """Remove every worker silent for longer than the TTL (as distributed reckons it: at
    least 10 heartbeat intervals); the addresses removed."""
    from distributed.metrics import time
    from distributed.scheduler import heartbeat_interval

    now = time()
    ttl = max(scheduler.worker_ttl, 10 * heartbeat_interval(len(scheduler.workers)))
    gone = [ws for ws in list(scheduler.workers.values()) if now - ws.last_seen > ttl]
    for ws in gone:
        log.warning("worker %s (host %s) silent for %.0f s, longer than the worker-ttl of "
                    "%g s: removing it, its tasks run on the other workers", ws.address,
                    ws.host, now - ws.last_seen, ttl)
        scheduler.log_event("scheduler", {"action": "worker-ttl-timed-out",
                                          "workers": [ws.address], "ttl": ttl})
        nanny = ws.nanny
        await scheduler.remove_worker(ws.address, stimulus_id=f"gpupipe-worker-ttl-{now}",
                                      close=False)
        if nanny:
            _background.add(task := asyncio.ensure_future(_restart(scheduler, nanny, ws.address)))
            task.add_done_callback(_background.discard)
    return [ws.address for ws in gone]


async def _restart(scheduler, nanny: str, address: str) -> None:
    try:
        await asyncio.wait_for(scheduler.rpc(nanny).restart(reason="gpupipe-worker-ttl"),
                               RESTART_S)
        log.info("the nanny %s restarted its silent worker %s", nanny, address)
    except Exception as e:   # a host that is down or cut off: nothing to restart there
        log.info("the nanny %s of the silent worker %s did not restart it (%s)", nanny, address,
                 type(e).__name__)
