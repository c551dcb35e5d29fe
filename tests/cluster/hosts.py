"""Hosts in network namespaces: each its own network stack with one interface, ``eth0``, on a
bridge that lives in a namespace of its own, with private addresses that exist only inside
them. Processes started on a host run under ``ip netns exec``; they share the test host's
filesystem (the "shared storage" of a real cluster). Everything is removed by `Hosts.stop`,
processes first, each by pid.

Needs root and ``ip netns``; `why_not` says why a machine cannot run them.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

SUBNET = "10.77.{}.{}"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def why_not() -> str | None:
    """Why network-namespace hosts cannot be made here, or None."""
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    if os.geteuid() != 0:
        return "network namespaces need root"
    name = f"gpupipe-probe-{os.getpid()}"
    r = _ip("netns", "add", name, check=False)
    if r.returncode != 0:
        return f"`ip netns add` fails here: {r.stderr.strip()}"
    _ip("netns", "del", name, check=False)
    return None


class Hosts:
    """``n`` hosts ``h1``..``hn`` (addresses ``10.77.<net>.1``..``n``) on one bridge."""

    def __init__(self, n: int, logs: Path):
        tag = f"{os.getpid() % 100000}"
        self.net = os.getpid() % 200 + 1
        self.bridge_ns = f"gp{tag}-br"
        self.names = [f"gp{tag}-h{i + 1}" for i in range(n)]
        self.addresses = [SUBNET.format(self.net, i + 1) for i in range(n)]
        self.logs = logs
        self.procs: dict[str, list[subprocess.Popen]] = {h: [] for h in self.names}
        self._made: list[str] = []

    def start(self) -> Hosts:
        _ip("netns", "add", self.bridge_ns)
        self._made.append(self.bridge_ns)
        _ip("-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.bridge_ns, "link", "set", "br0", "up")
        for i, (host, addr) in enumerate(zip(self.names, self.addresses, strict=True)):
            _ip("netns", "add", host)
            self._made.append(host)
            port = f"gpp{os.getpid() % 100000}-{i + 1}"
            _ip("link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", host)
            _ip("link", "set", port, "netns", self.bridge_ns)
            _ip("-n", self.bridge_ns, "link", "set", port, "master", "br0", "up")
            _ip("-n", host, "addr", "add", f"{addr}/24", "dev", "eth0")
            _ip("-n", host, "link", "set", "eth0", "up")
            _ip("-n", host, "link", "set", "lo", "up")
        return self

    def run(self, host: int, argv: list[str], name: str, env: dict | None = None
            ) -> subprocess.Popen:
        """Start ``argv`` on host ``host`` (0-based), its output in ``logs/<name>.log``."""
        ns = self.names[host]
        log = open(self.logs / f"{name}.log", "wb")
        p = subprocess.Popen(["ip", "netns", "exec", ns, *argv], stdout=log,
                             stderr=subprocess.STDOUT, env=env, start_new_session=True)
        log.close()
        self.procs[ns].append(p)
        return p

    def pids(self, host: int) -> list[int]:
        """Every process on host ``host`` (``ip netns pids``)."""
        r = _ip("netns", "pids", self.names[host], check=False)
        return [int(x) for x in r.stdout.split()]

    def kill(self, host: int) -> list[int]:
        """SIGKILL every process of host ``host`` (the host dies); the pids killed."""
        pids = self.pids(host)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in self.procs[self.names[host]]:
            p.wait(10)
        return pids

    def link_down(self, host: int) -> None:
        """Cut host ``host`` off the network: its processes live on and hear nothing."""
        _ip("-n", self.names[host], "link", "set", "eth0", "down")

    def stop(self) -> None:
        """Every process of every host (SIGTERM, then SIGKILL), then the namespaces."""
        for i, host in enumerate(self.names):
            if host not in self._made:
                continue
            for p in self.procs[host]:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGTERM)
            end = time.monotonic() + 10
            while time.monotonic() < end and any(p.poll() is None for p in self.procs[host]):
                time.sleep(0.1)
            self.kill(i)
        for ns in reversed(self._made):
            _ip("netns", "del", ns, check=False)
        self._made.clear()

    def __enter__(self) -> Hosts:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()
