"""Local worker processes forked from one prepared process, not spawned from nothing.

distributed starts each worker of a `LocalCluster` as a new interpreter (``spawn``) that imports
distributed, pandas, pyarrow, numba and the stages on its own: on 2 cores that is 2-3 s before a
worker runs its first task, and a cluster of N workers pays it N times over. Here the
worker processes are forked from Python's forkserver instead, which imports all of that once
(`gpupipe.runner.preload`), in the background, while the driver is still reading the pipeline.
A worker then starts in a fraction of a second, and a second run in the same process (a
notebook, the test suite) starts its workers at once.

What a worker sees is what a spawned one would: the driver's working directory and
``sys.path`` (multiprocessing hands them to every child), and the same environment. The
server's environment is the driver's as it was when the server started, plus distributed's
``pre-spawn-environ`` (thread pools of one, ``PYTHONHASHSEED``) with glibc's allocator set as
`MALLOC` says, set before numpy is imported as distributed's nanny would (`local_pre_spawn`: a
spawned worker gets the same). A variable the driver sets later reaches the workers through the
nanny (`worker_env`), unless a preloaded library reads it at import (`AT_IMPORT`: ``NUMBA_*``,
``OMP_*``, ...) or it was removed, or distributed is configured otherwise: then `usable` says
no and the cluster spawns its workers as before (``cluster.start_method: spawn`` asks for that
always).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import multiprocessing.forkserver
import os
import signal
import threading

log = logging.getLogger(__name__)

#: the module the server imports before it forks any worker
PRELOAD = "gpupipe.runner.preload"

#: variables that change while a process runs and do not concern its workers
VOLATILE = frozenset({"PYTEST_CURRENT_TEST", "COLUMNS", "LINES", "OLDPWD",
                      "__DASK_PARENT_PID"})  # the last set by distributed in the driver

#: distributed.nanny.pre-spawn-environ as distributed 2026.7 ships it
DISTRIBUTED_PRE_SPAWN = {"MALLOC_TRIM_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1",
                         "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}

#: glibc's allocator in gpupipe's local workers, instead of distributed's
#: ``MALLOC_TRIM_THRESHOLD_=65536``. Setting any of these turns off glibc's own adjustment, and
#: that one alone leaves blocks from 128 kB up mapped and unmapped at each malloc and free: a
#: page fault per 4 kB touched, every time (Resiliparse parses each page into such blocks:
#: extraction ran 5-7% slower for it). Here blocks under 4 MiB come from the heap, and free
#: memory past 4 MiB at its top still goes back to the system.
MALLOC = {"MALLOC_TRIM_THRESHOLD_": "4194304", "MALLOC_MMAP_THRESHOLD_": "4194304"}
_DISTRIBUTED_MALLOC = {k: v for k, v in DISTRIBUTED_PRE_SPAWN.items() if k.startswith("MALLOC_")}

#: the variables of the local workers' pre-spawn environment (`local_pre_spawn`)
PRE_SPAWN = {**DISTRIBUTED_PRE_SPAWN, **MALLOC}


def allocator(config: dict) -> dict[str, str]:
    """glibc's allocator variables for gpupipe's local workers, given distributed's configured
    pre-spawn environment ``config``: the user's where there are any, else `MALLOC`. The user's
    are the ``MALLOC_*`` entries of the configuration when they are not distributed's default
    (each overridden by the environment, as distributed's nanny does; None unsets one), else
    the ``MALLOC_*`` variables of the environment when they are neither distributed's default
    (which its nanny leaves in the driver's environment) nor `MALLOC`."""
    conf = {k: v for k, v in config.items() if k.startswith("MALLOC_")}
    if {k: None if v is None else str(v) for k, v in conf.items()} != _DISTRIBUTED_MALLOC:
        return {k: os.environ.get(k, str(v)) for k, v in conf.items() if v is not None}
    env = {k: v for k, v in os.environ.items() if k.startswith("MALLOC_")}
    return env if env and env not in (_DISTRIBUTED_MALLOC, MALLOC) else dict(MALLOC)


def local_pre_spawn(config: dict) -> dict:
    """The pre-spawn environment of gpupipe's local workers for distributed's configured one
    (``distributed.nanny.pre-spawn-environ``): its own, with `allocator`'s variables in place of
    its ``MALLOC_*`` entries. Start the workers with `malloc_set_aside`."""
    return {**{k: v for k, v in config.items() if not k.startswith("MALLOC_")},
            **allocator(config)}


def _given(config: dict) -> dict[str, str]:
    """What a local worker is given for distributed's configured pre-spawn environment
    ``config``: `local_pre_spawn`'s variables, each overridden by the driver's environment as
    distributed's nanny does (`allocator` has resolved the ``MALLOC_*`` ones); None unsets.
    ``PYTHONHASHSEED`` is the nanny's fixed seed unless the environment sets one."""
    given = {k: v if k.startswith("MALLOC_") else os.environ.get(k, str(v))
             for k, v in local_pre_spawn(config).items() if v is not None}
    seed = os.environ.get("PYTHONHASHSEED")
    given["PYTHONHASHSEED"] = "6640" if seed in (None, "0") else seed
    return given


@contextlib.contextmanager
def malloc_set_aside():
    """This process's ``MALLOC_*`` variables out of its environment while a local cluster
    starts, and back as they were after. distributed's nanny would let them override the
    configuration (`local_pre_spawn` has resolved them), and it writes the workers' values into
    this environment, where whatever this process starts later would inherit them."""
    saved = {k: os.environ.pop(k) for k in [k for k in os.environ if k.startswith("MALLOC_")]}
    try:
        yield
    finally:
        for k in [k for k in os.environ if k.startswith("MALLOC_")]:
            del os.environ[k]
        os.environ.update(saved)


#: prefixes of variables that the libraries the server preloads (numba, numpy's BLAS, OpenMP,
#: pyarrow, the allocator, the interpreter, the time zone, the ahead-of-time kernels) read when
#: they are imported: a change made after the server started would be lost on a forked worker
AT_IMPORT = ("NUMBA_", "OMP_", "MKL_", "OPENBLAS_", "BLIS_", "VECLIB_", "NUMEXPR_", "ARROW_",
             "PYTHON", "MALLOC_", "LD_", "TZ", "GPUPIPE_AOT")

_lock = threading.Lock()
#: the driver's environment when this module started the server (None: not started by us)
_started_env: dict[str, str] | None = None
_server_env: dict[str, str] = {}


def _environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in VOLATILE}


def _server_running() -> bool:
    return getattr(multiprocessing.forkserver._forkserver, "_forkserver_pid", None) is not None


def start() -> bool:
    """Start the forkserver if this process has not (it returns at once; the server imports in
    the background). False when another library already started one, without our preload."""
    global _started_env, _server_env
    if multiprocessing.current_process().name != "MainProcess":
        return False  # a worker running a pipeline starts no cluster of its own
    with _lock:
        if _started_env is not None:
            return True
        if _server_running():
            return False
        env = _given(DISTRIBUTED_PRE_SPAWN)
        before = _environment()
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            multiprocessing.get_context("forkserver").set_forkserver_preload([PRELOAD])
            with children_ignore_sigint():   # the server, and every worker forked from it
                multiprocessing.forkserver.ensure_running()
        except (OSError, ValueError) as e:  # ValueError: a platform without forkserver
            log.debug("no forkserver (%s); local workers are spawned", e)
            return False
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        _started_env, _server_env = before, {**before, **env}
        return True


def _changes() -> tuple[dict[str, str], list[str], list[str]]:
    """The driver's environment against the one the server started with: (variables set or
    changed since, outside distributed's pre-spawn set; those of them that libraries the server
    preloaded read when imported, `AT_IMPORT`; variables removed since)."""
    import dask

    skip = set(dask.config.get("distributed.nanny.pre-spawn-environ") or {}) | set(PRE_SPAWN)
    skip.add("PYTHONHASHSEED")
    now = _environment()
    changed = {k: v for k, v in now.items() if k not in skip and _started_env.get(k) != v}
    removed = sorted(k for k in _started_env if k not in now and k not in skip)
    return changed, sorted(k for k in changed if k.startswith(AT_IMPORT)), removed


def usable() -> str | None:
    """Why local workers cannot be forked from our server now, or None when they can."""
    if _started_env is None:
        return "the forkserver was not started by gpupipe"
    import dask
    import distributed  # noqa: F401  (its configuration defaults)

    _, at_import, removed = _changes()
    if at_import or removed:
        names = ", ".join((at_import + removed)[:5])
        return f"the environment changed since the forkserver started ({names})"
    # distributed's nanny exports these into this process when it starts a worker: they are
    # compared with what the server was given, not with the driver's environment at start
    want = _given(dask.config.get("distributed.nanny.pre-spawn-environ") or {})
    differ = sorted({k for k, v in want.items() if _server_env.get(k) != v}
                    # an allocator variable the workers would not get, or one of distributed's
                    # that the configuration unsets (None), which a spawned worker would then
                    # inherit from the driver
                    | {k for k in _server_env if k.startswith("MALLOC_") and k not in want}
                    | {k for k in DISTRIBUTED_PRE_SPAWN if k not in want and
                       not k.startswith("MALLOC_") and _server_env.get(k) != os.environ.get(k)})
    if differ:
        return f"the workers' pre-spawn environment differs ({', '.join(differ)})"
    return None


def worker_env() -> dict[str, str]:
    """Variables the driver set or changed since the server started, none read at import (see
    `usable`): the nanny sets them in each forked worker before it starts, as a spawned worker
    would have inherited them."""
    return _changes()[0] if _started_env is not None else {}


@contextlib.contextmanager
def children_ignore_sigint():
    """Start child processes with SIGINT ignored (they inherit it; Python then installs no
    KeyboardInterrupt handler in them): Ctrl-C reaches the whole process group, and only the
    driver should act on it, by closing the cluster, not every worker with a traceback. Only
    the main thread may set signal dispositions; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
