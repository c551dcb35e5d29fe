"""Connecting to Dask: an embedded `LocalCluster`, or an existing scheduler (address / file)."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

from gpupipe.errors import ClusterError

log = logging.getLogger(__name__)


def worker_env(threads_per_worker: int) -> dict[str, str]:
    """Environment for worker processes: native thread pools sized to the worker's threads.

    Dask already limits OpenMP/BLAS; the tokenizers library (Rayon) would otherwise start one
    thread per core in every worker and the workers would fight over the cores (measured:
    0.69 -> 0.88 of raw encode_batch throughput on 2 cores, benchmarks/bench_shards.py).
    """
    return {"RAYON_NUM_THREADS": str(threads_per_worker)}


def default_workers() -> int:
    from dask.system import CPU_COUNT  # respects cgroup / affinity limits

    return max(1, CPU_COUNT)


@contextlib.contextmanager
def connect(spec, *, workers: int | None = None) -> Iterator:
    """Yield a `distributed.Client` for a cluster spec; an embedded cluster is closed after."""
    from distributed import Client, LocalCluster

    kind = spec.kind
    if kind == "local":
        n = workers or spec.workers or default_workers()
        log.info("starting a local Dask cluster: %d worker(s) x %d thread(s)", n,
                 spec.threads_per_worker)
        try:
            cluster = LocalCluster(
                n_workers=n,
                threads_per_worker=spec.threads_per_worker,
                processes=True,
                memory_limit=spec.memory_limit,
                dashboard_address=":0",
                env=worker_env(spec.threads_per_worker),
                # task failures are re-raised here with file/stage context; the workers' own
                # "Compute Failed" tracebacks would only repeat them (shown with -v)
                silence_logs=logging.WARNING if log.isEnabledFor(logging.DEBUG)
                else logging.CRITICAL,
            )
        except Exception as e:
            raise ClusterError(f"cannot start a local Dask cluster with {n} worker(s): {e}") from e
        with cluster, Client(cluster) as client:
            yield client
        return
    if workers is not None:
        log.warning("--workers is ignored when attaching to an existing scheduler")
    try:
        if kind == "address":
            client = Client(spec.address, timeout=spec.timeout)
            where = spec.address
        else:
            if not os.path.exists(spec.path):
                raise ClusterError(
                    f"scheduler file {spec.path!r} does not exist — start the scheduler with "
                    f"`dask scheduler --scheduler-file {spec.path}` first (cluster.path)")
            client = Client(scheduler_file=spec.path, timeout=spec.timeout)
            where = spec.path
    except ClusterError:
        raise
    except (OSError, TimeoutError) as e:
        target = getattr(spec, "address", None) or getattr(spec, "path", None)
        raise ClusterError(
            f"cannot reach the Dask scheduler at {target}: {e} — is `dask scheduler` running "
            f"and reachable from here?") from e
    with client:
        n = len(client.scheduler_info().get("workers", {}))
        log.info("attached to Dask scheduler %s (%d worker(s))", where, n)
        if n == 0:
            log.info("waiting for at least one worker to join ...")
            try:
                client.wait_for_workers(1, timeout=spec.timeout)
            except TimeoutError as e:
                raise ClusterError(f"the scheduler at {where} has no workers after "
                                   f"{spec.timeout:.0f}s — start `dask worker` processes") from e
        yield client


def describe(client) -> dict:
    info = client.scheduler_info()
    workers = info.get("workers", {})
    return {
        "scheduler": info.get("address"),
        "workers": len(workers),
        "threads": sum(w.get("nthreads", 0) for w in workers.values()),
    }
