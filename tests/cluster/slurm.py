"""A real Slurm on the test host: munged, slurmctld and one slurmd per node (Debian's build
allows several slurmd on one host: each node its own name, port and spool), started from a
generated slurm.conf and stopped by their recorded pids.

Needs root and the Debian packages ``slurm-wlm`` and ``munge`` (``make test`` installs them
with apt-get where it can); `why_not` says why a host cannot run it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sinfo")
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
         "PREEMPTED", "BOOT_FAIL", "DEADLINE")


def why_not() -> str | None:
    """Why a Slurm cannot be started here, or None."""
    missing = [d for d in DAEMONS if shutil.which(d) is None]
    if missing:
        return (f"the Slurm and munge Debian packages are not installed (no {', '.join(missing)}"
                f"); `make test` installs slurm-wlm and munge with apt-get where it can")
    if os.geteuid() != 0:
        return "slurmd and munged run jobs as root here; the suite runs as another user"
    return None


def _free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


class Slurm:
    """``nodes`` Slurm nodes on this host (``n1``, ``n2``, ...), each with ``cpus`` CPUs."""

    def __init__(self, root: Path, nodes: int = 2, cpus: int = 2):
        self.root, self.nodes = root, [f"n{i + 1}" for i in range(nodes)]
        self.procs: list[subprocess.Popen] = []
        for d in ("munge", "state", "log", *(f"spool/{n}" for n in self.nodes)):
            (root / d).mkdir(parents=True, exist_ok=True)
        (root / "munge").chmod(0o711)
        key = root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self.socket = root / "munge" / "munge.socket"
        ctld, slurmd, *node_ports = _free_ports(2 + nodes)
        host = socket.gethostname()
        conf = [
            "ClusterName=gpupipe-test",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={ctld}",
            f"SlurmdPort={slurmd}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.socket}",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={root / 'spool'}/%n",
            f"SlurmctldPidFile={root / 'slurmctld.pid'}",
            f"SlurmdPidFile={root / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={root / 'log' / 'slurmd-%n.log'}",
            # no cgroups in a container: processes tracked by their parent ids
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "SchedulerType=sched/builtin",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "ReturnToService=2",
            "MpiDefault=none",
            "SwitchType=switch/none",
            "KillWait=5",
            "MinJobAge=600",
            *(f"NodeName={n} NodeHostname={host} NodeAddr=127.0.0.1 Port={p} CPUs={cpus} "
              f"RealMemory=4000 State=UNKNOWN" for n, p in zip(self.nodes, node_ports,
                                                               strict=True)),
            f"PartitionName=test Nodes={','.join(self.nodes)} Default=YES MaxTime=INFINITE "
            f"State=UP OverSubscribe=FORCE:4",
        ]
        self.conf = root / "slurm.conf"
        self.conf.write_text("\n".join(conf) + "\n")
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    # ------------------------------------------------------------------ lifecycle

    def _start(self, name: str, argv: list[str]) -> None:
        log = open(self.root / "log" / f"{name}.out", "wb")
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                           env=self.env, start_new_session=True))
        log.close()

    def start(self, timeout: float = 30) -> Slurm:
        m = self.root / "munge"
        self._start("munged", ["munged", "--foreground", "--force", f"--key-file={m / 'munge.key'}",
                               f"--socket={self.socket}", f"--log-file={m / 'munged.log'}",
                               f"--pid-file={m / 'munged.pid'}", f"--seed-file={m / 'seed'}"])
        self._wait(lambda: self.socket.exists(), timeout, "munged's socket")
        self._start("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
        for n in self.nodes:
            self._start(f"slurmd-{n}", ["slurmd", "-D", "-N", n, "-f", str(self.conf)])
        self._wait(self._all_idle, timeout, f"nodes {self.nodes} idle in sinfo")
        return self

    def _all_idle(self) -> bool:
        for p in self.procs:
            if p.poll() is not None:
                raise RuntimeError(f"{p.args[0]} exited with {p.returncode}; logs in "
                                   f"{self.root / 'log'}")
        r = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], env=self.env,
                           capture_output=True, text=True)
        states = dict(line.split() for line in r.stdout.splitlines() if line.strip())
        return all(states.get(n) == "idle" for n in self.nodes)

    def _wait(self, ready, timeout: float, what: str) -> None:
        end = time.monotonic() + timeout
        while not ready():
            if time.monotonic() > end:
                raise RuntimeError(f"Slurm: timed out waiting for {what}; logs in "
                                   f"{self.root / 'log'}")
            time.sleep(0.1)

    def stop(self) -> None:
        """Cancel every job (its steps end with it: slurmstepd ignores SIGTERM), then stop the
        daemons by their pids, slurmd before slurmctld before munged."""
        if any(p.poll() is None for p in self.procs):
            subprocess.run(["scancel", "--full", "--user=root"], env=self.env,
                           capture_output=True)
            end = time.monotonic() + 20
            while time.monotonic() < end and self._squeue():
                time.sleep(0.2)
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()

    def __enter__(self) -> Slurm:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ jobs

    def _squeue(self) -> str:
        return subprocess.run(["squeue", "-h"], env=self.env, capture_output=True,
                              text=True).stdout.strip()

    def sbatch(self, script: Path, *options: str, env: dict | None = None) -> int:
        r = subprocess.run(["sbatch", "--parsable", *options, str(script)],
                           env={**(env or os.environ), "SLURM_CONF": str(self.conf)},
                           capture_output=True, text=True, check=True)
        return int(r.stdout.strip().split(";")[0])

    def job(self, job_id: int) -> dict[str, str]:
        """``scontrol show job``'s fields (JobState, ExitCode, NodeList, ...)."""
        r = subprocess.run(["scontrol", "show", "job", "-o", str(job_id)], env=self.env,
                           capture_output=True, text=True, check=True)
        return dict(re.findall(r"(\w+)=(\S*)", r.stdout))

    def wait(self, job_id: int, timeout: float) -> dict[str, str]:
        """The job's fields once it reached a final state (``squeue`` / ``scontrol`` polled:
        ``sbatch --wait`` polls every 10 s)."""
        end = time.monotonic() + timeout
        while True:
            info = self.job(job_id)
            if info.get("JobState") in FINAL:
                return info
            if time.monotonic() > end:
                raise TimeoutError(f"job {job_id} still {info.get('JobState')} after "
                                   f"{timeout} s")
            time.sleep(0.2)

    def scancel(self, job_id: int) -> None:
        subprocess.run(["scancel", str(job_id)], env=self.env, check=True)
