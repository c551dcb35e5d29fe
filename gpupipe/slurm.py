"""``gpupipe slurm``: an sbatch script that runs a pipeline on a Slurm allocation.

The script starts ``dask scheduler --scheduler-file`` on the first node, one ``dask cuda worker``
(one process per GPU) or ``dask worker`` per node with ``srun``, waits for every worker, runs
``gpupipe run PIPELINE --scheduler-file ...`` as the driver, then shuts the cluster down (each
worker's nanny, then the scheduler) so that every step ends by itself, and exits with the driver's
exit code. The scheduler file lives in a directory every node
can read (``--workdir``, shared storage). Every ``srun`` option is written ``--name=value``.

Every step runs with one Python (``python -m dask ...``, ``python -m gpupipe.cli ...``): the one
given by ``--python``, else the interpreter of the ``--gpupipe`` console script named, else the one
running ``gpupipe slurm``. The scheduler and workers then come from gpupipe's own environment,
whatever ``PATH`` the job inherits, and the script checks that Python before the first ``srun``.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import sys

from gpupipe.errors import SpecError
from gpupipe.runner.forkserver import MALLOC

#: Seconds the job's end waits for the workers' step (their nannies close with a 10 s timeout)
#: and then the scheduler's to end after the scheduler was told to shut down; then SIGTERM,
#: and SIGKILL 5 s later.
WORKER_STOP_S = 30
SCHEDULER_STOP_S = 10
#: Seconds the shutdown waits for workers still connecting, so that it closes them too
SHUTDOWN_WAIT_S = 15
#: ``distributed.scheduler.worker-ttl`` of the job's scheduler, per protocol: a worker silent
#: this long (a host down, its link cut) is dropped (`LOST_WORKERS`), and its tasks run
#: elsewhere. distributed's default is 5 minutes; UCX never notices a silent
#: peer by itself, so there the TTL is all there is.
WORKER_TTL = {"tcp": "20s", "ucx": "15s"}
#: the scheduler's preload that removes a worker silent for the TTL without first waiting 30 s
#: for its nanny to answer a restart (`gpupipe.runner.lost_workers`)
LOST_WORKERS = "gpupipe.runner.lost_workers"


def cpu_network_env(protocol: str) -> dict[str, str]:
    """The environment of a CPU job's processes for ``protocol``: over UCX, its TCP, shared
    memory and loopback transports only, and no CUDA context (distributed-ucxx 0.52 creates
    one when ``distributed-ucxx.create-cuda-context`` is true or ``UCX_TLS`` names a ``cuda``
    transport, and that stops the scheduler at start on a host without a GPU). A GPU job
    leaves both to dask-cuda."""
    if protocol != "ucx":
        return {}
    return {"UCX_TLS": "tcp,self,sm",
            "DASK_DISTRIBUTED_UCXX__CREATE_CUDA_CONTEXT": "False"}


@dataclasses.dataclass(frozen=True)
class SlurmOptions:
    pipeline: str
    nodes: int = 1
    gpus_per_node: int = 1
    cpu: bool = False  #: CPU workers (``dask worker``) instead of ``dask cuda worker``
    cpus_per_node: int | None = None
    workers_per_node: int | None = None  #: CPU variant: worker processes per node
    partition: str | None = None
    time: str | None = None
    account: str | None = None
    job_name: str | None = None
    container_image: str | None = None
    container_mounts: str | None = None
    protocol: str = "tcp"
    interface: str | None = None
    rmm_pool_size: str | None = None
    workdir: str | None = None
    overrides: tuple[str, ...] = ()
    worker_timeout: int = 600
    #: the scheduler's worker-ttl (``None``: `WORKER_TTL` of the protocol)
    worker_ttl: str | None = None
    #: the Python every step runs (`python_for`); in a container, the image's ``python3``
    python: str = "python3"
    #: more ``dask cuda worker`` flags (`from_cluster`: the pipeline file's cluster section)
    worker_flags: tuple[str, ...] = ()

    def __post_init__(self):
        if self.nodes < 1:
            raise SpecError("--nodes must be at least 1")
        if not self.cpu and self.gpus_per_node < 1:
            raise SpecError("--gpus-per-node must be at least 1 (or use --cpu)")
        if self.protocol not in ("tcp", "ucx"):
            raise SpecError(f"--protocol must be tcp or ucx (got {self.protocol!r})")
        if self.cpu and self.rmm_pool_size:
            raise SpecError("--rmm-pool-size is for GPU workers; drop --cpu")


def from_cluster(cluster, *, protocol: str | None = None, interface: str | None = None,
                 rmm_pool_size: str | None = None) -> dict:
    """The job's network and GPU-worker settings: each flag given on the command line, else
    what the pipeline file's ``cluster: {kind: cuda, ...}`` section says (so that a job runs
    with the settings a local CUDA cluster of the same file gets), else the defaults. Returns
    `SlurmOptions` fields: ``protocol``, ``interface``, ``rmm_pool_size``, ``worker_flags``."""
    cuda = getattr(cluster, "kind", None) == "cuda"
    chosen = protocol or (cluster.protocol if cuda else None) or "tcp"
    out = {"protocol": chosen,
           "interface": interface or (cluster.interface if cuda else None),
           "rmm_pool_size": rmm_pool_size or (
               str(cluster.rmm_pool_size) if cuda and cluster.rmm_pool_size is not None
               else None),
           "worker_flags": ()}
    if not cuda:
        return out
    flags = []
    for key in ("enable_infiniband", "enable_nvlink", "enable_rdmacm"):
        value = getattr(cluster, key)
        if value is not None:
            if chosen != "ucx":
                raise SpecError(f"--protocol {chosen}: the pipeline's cluster section sets "
                                f"{key}, which needs protocol ucx")
            word = key.split("_", 1)[1]
            flags.append(f"--enable-{word}" if value else f"--disable-{word}")
    if cluster.rmm_async:
        flags.append("--rmm-async")
    if cluster.device_memory_limit is not None:
        flags.append(f"--device-memory-limit={cluster.device_memory_limit}")
    if not cluster.enable_cudf_spill:
        flags.append("--disable-cudf-spill")
    out["worker_flags"] = tuple(flags)
    return out


def python_for(python: str | None = None, gpupipe: str | None = None,
               container: bool = False) -> str:
    """The Python the job's steps run: ``python``; else the interpreter of the ``gpupipe``
    console script (its ``#!`` line); else ``python3`` in a container, or this process's
    interpreter (the environment ``gpupipe slurm`` runs from)."""
    if python:
        return python
    if gpupipe:
        path = shutil.which(gpupipe) or gpupipe
        try:
            with open(path, "rb") as f:
                first = f.readline(4096).decode("utf-8", "replace")
        except OSError as e:
            raise SpecError(f"--gpupipe {gpupipe!r}: {e.strerror or e}; give the gpupipe "
                            f"installed on the nodes, or --python") from None
        words = first[2:].split() if first.startswith("#!") else []
        if words and os.path.basename(words[0]) == "env":
            words = [w for w in words[1:] if not w.startswith("-")]
        if not words:
            raise SpecError(f"--gpupipe {path!r} is not a console script with a #! line; "
                            f"give --python (the Python of gpupipe's environment)")
        return words[0]
    return "python3" if container else sys.executable


def _q(value: str) -> str:
    return shlex.quote(str(value))


def render(opts: SlurmOptions, name: str) -> str:
    """The sbatch script for ``opts`` (``name``: the pipeline's name, for the job name)."""
    job = opts.job_name or f"gpupipe-{name}"
    per_node = (opts.workers_per_node or opts.cpus_per_node or 1) if opts.cpu else \
        opts.gpus_per_node
    sbatch = [f"--job-name={job}", f"--nodes={opts.nodes}", "--ntasks-per-node=1",
              f"--output={job}-%j.out"]
    if opts.cpu:
        if opts.cpus_per_node:
            sbatch.append(f"--cpus-per-task={opts.cpus_per_node}")
    else:
        sbatch.append(f"--gpus-per-node={opts.gpus_per_node}")
        sbatch.append("--exclusive")
    for key in ("partition", "time", "account"):
        value = getattr(opts, key)
        if value:
            sbatch.append(f"--{key}={value}")

    srun = ["srun", "--overlap", "--ntasks-per-node=1"]
    if opts.container_image:
        srun.append(f"--container-image={_q(opts.container_image)}")
        mounts = _q(opts.container_mounts) if opts.container_mounts else '"$PWD:$PWD"'
        srun.append(f"--container-mounts={mounts}")
        srun.append('--container-workdir="$PWD"')
    net = [f"--protocol={opts.protocol}"] + ([f"--interface={opts.interface}"]
                                            if opts.interface else [])
    dask = ['"$PYTHON"', "-m", "dask"]
    if opts.cpu:
        worker = [*dask, "worker", '--scheduler-file="$SCHEDULER_FILE"',
                  f"--nworkers={per_node}", "--nthreads=1", "--memory-limit=auto", *net]
        worker_res = [f"--cpus-per-task={opts.cpus_per_node}"] if opts.cpus_per_node else []
    else:
        spill = [] if "--disable-cudf-spill" in opts.worker_flags else ["--enable-cudf-spill"]
        worker = [*dask, "cuda", "worker", '--scheduler-file="$SCHEDULER_FILE"', *net[1:],
                  *spill,
                  *([f"--rmm-pool-size={opts.rmm_pool_size}"] if opts.rmm_pool_size else []),
                  *opts.worker_flags]
        worker_res = [f"--gpus-per-node={opts.gpus_per_node}"]
    # the job's CPU workers run its pipeline only: extract_html may end one past its timeout
    driver = ['"$PYTHON"', "-m", "gpupipe.cli", "run", _q(os.path.abspath(opts.pipeline)),
              '--scheduler-file="$SCHEDULER_FILE"', '--min-workers="$EXPECTED_WORKERS"',
              f"--timeout={opts.worker_timeout}", "--no-progress",
              *(["--dedicated"] if opts.cpu else []),
              *(f"--set={_q(o)}" for o in opts.overrides)]
    in_container = bool(opts.container_image)
    needs = ("gpupipe", "distributed", *(() if opts.cpu else ("dask_cuda",)),
             *(("distributed_ucxx",) if opts.protocol == "ucx" else ()))
    # UCX on CPU nodes: its TCP / shared-memory transports and no CUDA context (the user's
    # UCX_TLS wins); on GPU nodes dask-cuda sets both
    ucx_cpu = [f'export {k}="${{{k}:-{v}}}"' for k, v in cpu_network_env(opts.protocol).items()
               ] if opts.cpu else []
    # glibc's allocator in CPU workers as in gpupipe's local ones (the user's setting wins)
    malloc_cpu = ["# glibc keeps blocks under 4 MiB on its heap, as in gpupipe's local workers",
                  *(f'export {k}="${{{k}:-{v}}}"' for k, v in MALLOC.items())] if opts.cpu else []
    workdir = opts.workdir or "$PWD/.gpupipe-slurm/$SLURM_JOB_ID"
    kind = "dask worker (CPU)" if opts.cpu else "dask cuda worker (one process per GPU)"

    lines = [
        "#!/usr/bin/env bash",
        f"# Generated by `gpupipe slurm` for {os.path.basename(opts.pipeline)}.",
        "# Dask scheduler on the first node; " + kind + " on every node;",
        "# the driver `gpupipe run --scheduler-file` on the first node. Submit: sbatch THIS_FILE",
        *(f"#SBATCH {s}" for s in sbatch),
        "",
        "set -euo pipefail",
        "",
        "# the scheduler file must be on storage every node of the job can read",
        f'WORKDIR="${{GPUPIPE_WORKDIR:-{workdir}}}"',
        'SCHEDULER_FILE="$WORKDIR/scheduler.json"',
        f"EXPECTED_WORKERS=$(( SLURM_JOB_NUM_NODES * {per_node} ))",
        'HEAD_NODE="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"',
        'mkdir -p "$WORKDIR"',
        'rm -f "$SCHEDULER_FILE"',
        "",
        "# every step runs this Python: gpupipe, dask and the workers from its environment,",
        "# whatever PATH the job inherits",
        f"PYTHON={_q(opts.python)}",
        *([] if in_container else _python_check(needs)),
        "",
        "SCHEDULER_PID=",
        "WORKERS_PID=",
        "# finish PID SECONDS: wait up to SECONDS for PID to end; then SIGTERM, SIGKILL 5 s later",
        "finish() {",
        '  [[ -n "$1" ]] || return 0',
        '  for _ in $(seq 1 $(( $2 * 10 ))); do',
        '    kill -0 "$1" 2>/dev/null || break',
        "    sleep 0.1",
        "  done",
        '  if kill -0 "$1" 2>/dev/null; then',
        '    kill "$1" 2>/dev/null || true',
        "    for _ in $(seq 1 50); do",
        '      kill -0 "$1" 2>/dev/null || break',
        "      sleep 0.1",
        "    done",
        '    kill -KILL "$1" 2>/dev/null || true',
        "  fi",
        '  wait "$1" 2>/dev/null || true',
        "}",
        "# each worker's nanny (those still connecting too, once they are in) and then the",
        "# scheduler are told to close, so every step ends by itself; what does not end in time",
        "# is stopped, the workers first while the scheduler still answers them",
        "cleanup() {",
        "  trap - EXIT INT TERM",
        '  if [[ -s "$SCHEDULER_FILE" ]]; then',
        f'    timeout {SHUTDOWN_WAIT_S + 20} "$PYTHON" -m gpupipe.slurm shutdown '
        f'"$SCHEDULER_FILE" "$EXPECTED_WORKERS" {SHUTDOWN_WAIT_S} || true',
        "  fi",
        f'  finish "$WORKERS_PID" {WORKER_STOP_S}',
        f'  finish "$SCHEDULER_PID" {SCHEDULER_STOP_S}',
        '  rm -f "$SCHEDULER_FILE"',
        "}",
        "trap cleanup EXIT",
        "trap 'exit 143' INT TERM",
        "",
        f'echo "gpupipe: job $SLURM_JOB_ID, {opts.nodes} node(s), scheduler on $HEAD_NODE, '
        f'$EXPECTED_WORKERS worker(s) expected"',
        *ucx_cpu,
        *malloc_cpu,
        "# a worker silent this long (its host down, its link cut) is dropped and its tasks",
        "# run elsewhere (distributed's default: 5 minutes)",
        "export DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL="
        f"{_q(opts.worker_ttl or WORKER_TTL[opts.protocol])}",
        "# any free ports (two jobs can share a node): the scheduler file has the address",
        " ".join(srun + ["--nodes=1", "--ntasks=1", '--nodelist="$HEAD_NODE"', *dask,
                         "scheduler", '--scheduler-file="$SCHEDULER_FILE"', *net, "--port=0",
                         "--dashboard-address=:0", f"--preload={LOST_WORKERS}"]) + " &",
        "SCHEDULER_PID=$!",
        "for _ in $(seq 1 120); do",
        '  [[ -s "$SCHEDULER_FILE" ]] && break',
        '  kill -0 "$SCHEDULER_PID" 2>/dev/null || break',
        "  sleep 1",
        "done",
        'if [[ ! -s "$SCHEDULER_FILE" ]]; then',
        '  echo "gpupipe: the Dask scheduler did not start (no $SCHEDULER_FILE)" >&2',
        "  exit 1",
        "fi",
        "",
        " ".join(srun + ['--nodes="$SLURM_JOB_NUM_NODES"', *worker_res, *worker]) + " &",
        "WORKERS_PID=$!",
        "",
        "# the driver waits for every worker, runs the pipeline, and its exit code is the job's",
        "set +e",
        " ".join((srun + ["--nodes=1", "--ntasks=1", '--nodelist="$HEAD_NODE"'] if in_container
                  else []) + driver),
        "status=$?",
        "set -e",
        'echo "gpupipe: driver exited with $status"',
        'exit "$status"',
        "",
    ]
    return "\n".join(lines)


def _python_check(modules: tuple[str, ...]) -> list[str]:
    """Script lines that stop the job, before any srun, when ``$PYTHON`` is not there or cannot
    import ``modules``."""
    names = ", ".join(modules)
    return [
        f'if ! "$PYTHON" -c {_q("import " + names)} 2>/dev/null; then',
        f'  echo "gpupipe: $PYTHON cannot import {names} on $(hostname): give gpupipe slurm '
        f'--python (or --gpupipe) naming the environment where gpupipe is installed, on '
        f'every node" >&2',
        "  exit 2",
        "fi",
    ]


def shutdown(scheduler_file: str, expected: int, wait_s: float) -> None:
    """The job's end (``python -m gpupipe.slurm shutdown FILE N SECONDS``): the scheduler
    closes every worker and its nanny, then itself, so each srun step ends with exit 0
    instead of being killed. Workers still connecting (the driver can fail before they are
    all in) are waited for up to ``wait_s`` first, so that they are closed too."""
    from distributed import Client

    client = Client(scheduler_file=scheduler_file, timeout="10s")
    try:
        client.wait_for_workers(expected, timeout=wait_s)
    except TimeoutError:
        pass   # the script stops what does not end by itself
    # each nanny first, while the scheduler answers: it stops its worker through its own stop
    # queue, and the `dask worker` process ends. (A worker closed by the scheduler instead
    # leaves its nanny to log "Worker process died unexpectedly" with a traceback; a nanny
    # can still race its worker's exit that way on a loaded machine.)
    client.sync(client.scheduler.broadcast, msg={"op": "terminate"}, nanny=True,
                on_error="ignore")
    client.shutdown()   # the scheduler, and this client


if __name__ == "__main__":
    if sys.argv[1:2] != ["shutdown"] or len(sys.argv) != 5:
        sys.exit("usage: python -m gpupipe.slurm shutdown SCHEDULER_FILE WORKERS SECONDS")
    shutdown(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
