"""Where a run executes: choosing the backend (the GPU probe), and connecting to Dask: an
embedded `LocalCluster`, a `dask_cuda.LocalCUDACluster`, or an existing scheduler (address or
scheduler file), with KvikIO settings applied on the workers."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.util
import logging
import os
import time
from collections.abc import Iterator

from gpupipe.errors import BackendUnavailableError, ClusterError, GpupipeError, StageError
from gpupipe.runner.forkserver import children_ignore_sigint, local_pre_spawn, malloc_set_aside

log = logging.getLogger(__name__)

GPU_INSTALL = "pip install 'gpupipe[gpu]'  (RAPIDS 26.10, CUDA 12, an NVIDIA GPU and driver)"
#: preloaded by forked local workers: the driver's umask and output (`worker_inherit`)
INHERIT_PRELOAD = "gpupipe.runner.worker_inherit"
UCX_INSTALL = "pip install 'gpupipe[gpu]' (distributed-ucxx-cu12 provides protocol: ucx)"


# --------------------------------------------------------------------------- the backend

@dataclasses.dataclass(frozen=True)
class BackendChoice:
    name: str  # "pandas" | "cudf"
    reason: str


@functools.lru_cache(maxsize=1)
def probe_gpu() -> tuple[bool, str]:
    """(usable, why): runs a tiny cuDF computation, cached for the process. ``import cudf``
    succeeding proves nothing (it imports without a GPU and fails at first use)."""
    if importlib.util.find_spec("cudf") is None:
        return False, "cuDF is not installed"
    try:
        from gpupipe.backends.cudf import probe_computation

        if probe_computation() != 6:
            return False, "cuDF returned a wrong result on a test computation"
    except Exception as e:  # any failure at first use means no usable GPU
        return False, f"cuDF is installed but cannot run ({type(e).__name__}: {e})"
    return True, "a GPU ran a cuDF test computation"


def resolve_backend(requested: str) -> BackendChoice:
    """Turn ``backend: auto | pandas | cudf`` into the backend this run uses."""
    if requested == "pandas":
        return BackendChoice("pandas", "requested")
    usable, why = probe_gpu()
    if requested == "cudf":
        if not usable:
            raise BackendUnavailableError(
                f"backend: cudf cannot be used here: {why}. Install the GPU extra with "
                f"{GPU_INSTALL}, or set backend: pandas (or auto) to run on CPU."
            )
        return BackendChoice("cudf", "requested")
    if usable:
        return BackendChoice("cudf", f"auto: {why}")
    return BackendChoice("pandas", f"auto: no usable GPU ({why})")


# --------------------------------------------------------------------------- GPU clusters

def device_memory_bytes() -> int | None:
    """Total memory of the first visible GPU (NVML), or None when there is none."""
    try:
        import pynvml  # nvidia-ml-py, a dask-cuda dependency

        pynvml.nvmlInit()
        try:
            if pynvml.nvmlDeviceGetCount() == 0:
                return None
            return int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).total)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML library, no driver, no device
        return None


def local_cuda_cluster(**kwargs):
    """A `dask_cuda.LocalCUDACluster`, or a `ClusterError` saying what is missing."""
    if importlib.util.find_spec("dask_cuda") is None:
        raise ClusterError(f"cluster.kind: cuda needs dask-cuda, which is not installed: "
                           f"{GPU_INSTALL}; or use cluster.kind: local (CPU)")
    if kwargs.get("protocol") == "ucx" and importlib.util.find_spec("distributed_ucxx") is None:
        raise ClusterError(f"cluster.protocol: ucx needs the UCX communication backend "
                           f"(distributed-ucxx), which is not installed: {UCX_INSTALL}; "
                           f"or set protocol: tcp")
    if device_memory_bytes() is None:
        raise ClusterError("cluster.kind: cuda, but no NVIDIA GPU is visible here (NVML found "
                           "no device; check `nvidia-smi`, CUDA_VISIBLE_DEVICES and, in a "
                           "container, --gpus all); or use cluster.kind: local")
    from dask_cuda import LocalCUDACluster

    try:
        return LocalCUDACluster(**kwargs)
    except Exception as e:
        raise ClusterError(f"cannot start a LocalCUDACluster: {type(e).__name__}: {e}") from e


def apply_kvikio_settings(env: dict[str, str]) -> dict[str, str]:
    """Run on a worker: export KVIKIO_* settings (read when KvikIO starts) and, if KvikIO is
    already loaded in this process, apply them to it too. Returns what the worker now has."""
    import sys

    os.environ.update(env)
    names = {"KVIKIO_COMPAT_MODE": "compat_mode", "KVIKIO_NTHREADS": "num_threads",
             "KVIKIO_TASK_SIZE": "task_size"}
    # connect() passes the whole extra worker environment: only KVIKIO_* keys concern KvikIO
    values = {names[k]: (v if k == "KVIKIO_COMPAT_MODE" else int(v))
              for k, v in env.items() if k in names}
    kvikio = sys.modules.get("kvikio")
    if kvikio is not None and values:
        try:
            defaults = importlib.import_module("kvikio.defaults")  # a submodule: import it
            if "compat_mode" in values:  # KvikIO 26.10 takes its enum, not the string
                values["compat_mode"] = kvikio.CompatMode[values["compat_mode"]]
            defaults.set(values)
        except Exception as e:  # an older KvikIO: the variables apply to new processes only
            log.warning("KvikIO is already loaded and did not accept %s (%s); the settings "
                        "apply to worker processes started from now on", values, e)
    return {k: os.environ[k] for k in env}


# --------------------------------------------------------------------------- connecting

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


def cuda_cluster_kwargs(spec, *, workers: int | None = None,
                        env: dict[str, str] | None = None) -> dict:
    """`dask_cuda.LocalCUDACluster` arguments for a ``cluster: {kind: cuda}`` spec."""
    kwargs = {
        "protocol": spec.protocol,
        "threads_per_worker": spec.threads_per_worker,
        "memory_limit": spec.memory_limit,
        "dashboard_address": spec.dashboard_address,
        "rmm_async": spec.rmm_async,
        "enable_cudf_spill": spec.enable_cudf_spill,
        "env": dict(env or {}),
    }
    if spec.visible_devices() is not None:
        kwargs["CUDA_VISIBLE_DEVICES"] = spec.visible_devices()
    if spec.interface is not None:
        kwargs["interface"] = spec.interface
    if spec.protocol == "ucx":  # null switches: UCX selects the transports (dask-cuda's default)
        kwargs.update({k: getattr(spec, k) for k in
                       ("enable_infiniband", "enable_nvlink", "enable_rdmacm")
                       if getattr(spec, k) is not None})
    if spec.rmm_pool_size is not None:
        kwargs["rmm_pool_size"] = spec.rmm_pool_size
    if spec.device_memory_limit is not None:
        kwargs["device_memory_limit"] = spec.device_memory_limit
    if workers is not None:
        kwargs["n_workers"] = workers
    return kwargs


def start_method(spec) -> str:
    """How the local cluster of ``spec`` starts its workers: ``forkserver`` when asked (the
    default) and `gpupipe.runner.forkserver` can serve it, else ``spawn``."""
    from gpupipe.runner import forkserver

    if getattr(spec, "start_method", "spawn") != "forkserver":
        return "spawn"
    why = forkserver.usable() if forkserver.start() else "another forkserver runs here"
    if why is not None:
        log.debug("local workers are spawned: %s", why)
        return "spawn"
    return "forkserver"


@contextlib.contextmanager
def connect(spec, *, workers: int | None = None, env: dict[str, str] | None = None) -> Iterator:
    """Yield a `distributed.Client` for a cluster spec; an embedded cluster is closed after.

    ``env``: extra environment for the workers (set at start for embedded clusters, applied
    with `Client.run` on an existing cluster)."""
    from distributed import Client, LocalCluster

    kind = spec.kind
    env = dict(env or {})
    if kind == "cuda":
        kwargs = cuda_cluster_kwargs(spec, workers=workers,
                                     env={**worker_env(spec.threads_per_worker), **env})
        log.info("starting a local CUDA cluster (%s, protocol %s)",
                 f"GPUs {kwargs['CUDA_VISIBLE_DEVICES']}" if "CUDA_VISIBLE_DEVICES" in kwargs
                 else "all GPUs", spec.protocol)
        with children_ignore_sigint():
            cluster = local_cuda_cluster(**kwargs)
        with cluster, Client(cluster) as client:
            yield client
        return
    if kind == "local":
        import dask

        n = workers or spec.workers or default_workers()
        method = start_method(spec)
        inherited = {}
        if method == "forkserver":  # what a spawned worker would inherit from this process
            from gpupipe.runner import forkserver

            inherited = forkserver.worker_env()
        log.info("starting a local Dask cluster: %d worker(s) x %d thread(s), %s", n,
                 spec.threads_per_worker, method)
        try:
            config = {"distributed.worker.multiprocessing-method": method,
                      "distributed.nanny.pre-spawn-environ": local_pre_spawn(
                          dask.config.get("distributed.nanny.pre-spawn-environ") or {})}
            if method == "forkserver":   # a driver in the warm server: its umask and output
                config["distributed.worker.preload"] = [
                    *(dask.config.get("distributed.worker.preload", None) or []),
                    INHERIT_PRELOAD]
            with children_ignore_sigint(), dask.config.set(config), malloc_set_aside():
                cluster = LocalCluster(
                    n_workers=n,
                    threads_per_worker=spec.threads_per_worker,
                    processes=True,
                    memory_limit=spec.memory_limit,
                    host=spec.host,
                    dashboard_address=spec.dashboard_address,
                    env={**inherited, **worker_env(spec.threads_per_worker), **env},
                    # task failures are re-raised here with file/stage context; the workers' own
                    # "Compute Failed" tracebacks would only repeat them (shown with -v)
                    silence_logs=logging.WARNING if log.isEnabledFor(logging.DEBUG)
                    else logging.CRITICAL,
                )
        except Exception as e:
            missing = _main_file_missing()
            if missing is not None:   # what multiprocessing's workers fail on, said plainly
                raise ClusterError(
                    f"cannot start a local Dask cluster: its worker processes start by running "
                    f"this program's main file, and there is none ({missing!r}: a script read "
                    f"from standard input). Save the script to a file and run that, or attach "
                    f"to a running cluster (--address, cluster.kind: address)") from e
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
    except Exception as e:   # refused, timed out, or a peer that does not speak Dask's protocol
        target = spec.address if kind == "address" else \
            f"{_file_address(spec.path)} (from {spec.path})"
        raise ClusterError(
            f"cannot reach the Dask scheduler at {target}: {type(e).__name__}: {e} — is "
            f"`dask scheduler` running, and can this host reach that address? A scheduler "
            f"advertises the address of the interface it listens on: on a node with several "
            f"networks start it (and the workers) with --interface, e.g. ib0 or eth0 "
            f"(`gpupipe slurm --interface`)") from e
    with client:
        n = len(client.scheduler_info().get("workers", {}))
        want = getattr(spec, "min_workers", 1)
        log.info("attached to Dask scheduler %s (%d worker(s))", where, n)
        if n < want:
            log.info("waiting for %d worker(s) to join ...", want)
            try:
                client.wait_for_workers(want, timeout=spec.timeout)
            except TimeoutError as e:
                have = len(client.scheduler_info().get("workers", {}))
                raise ClusterError(
                    f"the scheduler at {where} has {have} of the {want} worker(s) needed after "
                    f"{spec.timeout:.0f}s — start `dask worker` / `dask cuda worker` "
                    f"processes (cluster.min_workers, cluster.timeout)") from e
        try:
            elsewhere = sorted({d for d in client.run(os.getcwd).values() if d != os.getcwd()})
        except Exception as e:   # a worker that cannot answer fails the run's tasks, not this
            log.debug("the workers' directories are unknown (%s: %s)", type(e).__name__, e)
            elsewhere = []
        if elsewhere:
            log.warning("the workers run in %s, this driver in %s: relative paths of the "
                        "pipeline (input.path, output.path, the files stages read) are found "
                        "from the workers' directory; give absolute paths, or start the "
                        "workers in %s", ", ".join(elsewhere), os.getcwd(), os.getcwd())
        if env:
            client.run(apply_kvikio_settings, env)
        yield client


def _main_file_missing() -> str | None:
    """The main module's file when it names none there is (``<stdin>``), as multiprocessing's
    spawned and forkserver children would look for it; None when it is a file or unnamed."""
    import sys
    from multiprocessing import process

    main = sys.modules.get("__main__")
    if getattr(main, "__spec__", None) is not None:   # run with -m: imported by name
        return None
    path = getattr(main, "__file__", None)
    if path is None:   # -c, or an interactive session: nothing to run
        return None
    full = os.path.join(process.ORIGINAL_DIR or os.getcwd(), path)
    return None if os.path.exists(full) else path


def _file_address(path: str) -> str:
    """The scheduler address a scheduler file holds, or a word on why it has none."""
    import json

    try:
        with open(path, encoding="utf-8") as f:
            return str(json.load(f)["address"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"<no address: {type(e).__name__}>"


class PendingCluster:
    """The cluster a run computes on, connected to while the driver plans and checks the run.

    A local cluster whose workers fork from the preloaded server (`start_method`) starts in a
    thread at once, and compiles or loads the run's kernels there (`prewarm`); any other
    cluster is connected to in the calling thread when `result` is first asked for (starting
    spawned workers sets signal dispositions, which only the main thread may do). `close`
    (also on failure, before `result` was asked for) waits for a start under way and closes
    what was started."""

    def __init__(self, spec, *, workers: int | None, env: dict[str, str], stage_names,
                 backend: str):
        import concurrent.futures

        self._stack = contextlib.ExitStack()
        self._args = (spec, workers, env, list(stage_names), backend)
        self._future = self._pool = None
        if spec.kind == "local" and start_method(spec) == "forkserver":
            self._pool = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="gpupipe-cluster")
            self._future = self._pool.submit(self._open)

    def _open(self):
        spec, workers, env, stage_names, backend = self._args
        client = self._stack.enter_context(connect(spec, workers=workers, env=env))
        return client, prewarm(client, stage_names, backend)

    def result(self):
        """``(client, what prewarm compiled)``."""
        if self._future is None:
            self._future = _done(self._open)
        return self._future.result()

    def close(self) -> None:
        if self._future is None:
            return
        try:
            self._future.result()
        except BaseException:  # noqa: S110 - raised to the run by result(), if asked
            pass
        if self._pool is None:
            self._stack.close()
            return
        # in the thread that entered the client: it set a context variable there
        try:
            self._pool.submit(self._stack.close).result()
        finally:
            self._pool.shutdown()


def _done(fn):
    """A finished `concurrent.futures.Future` holding what ``fn()`` returned or raised."""
    import concurrent.futures

    future = concurrent.futures.Future()
    try:
        future.set_result(fn())
    except BaseException as e:
        future.set_exception(e)
    return future


def describe(client) -> dict:
    info = client.scheduler_info()
    workers = info.get("workers", {})
    return {
        "scheduler": info.get("address"),
        "workers": len(workers),
        "threads": sum(w.get("nthreads", 0) for w in workers.values()),
    }


def _scheduler_lost(client, e: BaseException) -> bool:
    """Whether ``e``, raised by a future's result, means the client lost its scheduler: the
    futures cancelled for that reason, or the connection to the scheduler itself closed while
    the result was fetched (which of the two comes first is a race)."""
    if "scheduler-connection-lost" in str(e):   # FutureCancelledError's reason
        return True
    from distributed.comm.core import CommClosedError

    address = getattr(getattr(client, "scheduler", None), "address", None)
    return isinstance(e, (CommClosedError, OSError)) and (
        (address is not None and address in str(e)) or getattr(client, "status", "") != "running")


def gather(futures, bar, label: str) -> list[dict]:
    """The results of ``futures`` (in the order they finish), advancing ``bar``. Each is
    released once read: a finished task whose result stayed on a worker would be computed again
    when that worker dies (and write its files again)."""
    from distributed import as_completed

    results = []
    try:
        for fut in as_completed(futures):
            try:
                results.append(fut.result())
                fut.release()
            except GpupipeError:
                raise
            except Exception as e:
                if _scheduler_lost(fut.client, e):
                    address = getattr(getattr(fut.client, "scheduler", None), "address", "?")
                    raise ClusterError(
                        f"{label}: lost the Dask scheduler at {address} (its process or its "
                        f"host is gone). What the run committed is kept: start a scheduler and "
                        f"workers again and run the same command again to resume") from e
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


def prewarm(client, stage_names, backend: str) -> dict:
    """Compile the CPU kernels the stages use before any data task (`gpupipe.kernels.warm`): on
    each host every kernel once, spread over its workers. What it cost goes into run.json
    (``compile``, with ``code``: the ahead-of-time module or numba's compiled code, and why):
    with the ahead-of-time module, or on a warm machine, the kernels load in milliseconds."""
    from gpupipe.kernels.warm import kernels_for, plan, warm_here

    names = kernels_for(stage_names) if backend == "pandas" else []
    if not names:
        return {}
    try:
        info = client.scheduler_info(n_workers=-1)["workers"]
    except TypeError:   # distributed before n_workers
        info = client.scheduler_info()["workers"]
    import uuid

    todo = plan(names, {a: w.get("host", a) for a, w in info.items()})
    t0 = time.perf_counter()
    run = uuid.uuid4().hex[:12]
    futures = [client.submit(warm_here, ks, workers=[a], allow_other_workers=False, pure=False,
                             key=f"gpupipe-warm-{run}-{k}")
               for k, (a, ks) in enumerate(todo.items())]
    try:
        done = client.gather(futures)
    except Exception as e:   # a lost worker: the data tasks compile what they need, as before
        log.warning("compiling the kernels ahead failed (%s: %s); the tasks compile them",
                    type(e).__name__, e)
        return {"error": f"{type(e).__name__}: {e}"}
    wall = time.perf_counter() - t0
    kernels: dict[str, float] = {}
    for got in done:
        for name, s in got["seconds"].items():
            kernels[name] = max(kernels.get(name, 0.0), s)
    cpu = sum(sum(got["seconds"].values()) for got in done)
    if cpu > 2:
        log.info("compiled %d kernels in %.1f s on %d worker(s) (%.1f CPU-s); later runs on this "
                 "machine load them from numba's cache (`gpupipe warmup --aot` compiles them "
                 "once for every process)", len(names), wall, len(todo), cpu)
    return {"wall_seconds": round(wall, 3), "cpu_seconds": round(cpu, 3), "workers": len(todo),
            "code": sorted({got["code"] for got in done}),
            "kernels": dict(sorted(kernels.items()))}
