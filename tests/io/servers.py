"""What the server processes of the I/O tests share (`tests.io.s3_server`,
`tests.io.http_server`): a free port of 127.0.0.1, the wait until the process listens on it,
and stopping its process group by pid."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(proc: subprocess.Popen, port: int, timeout: float,
                   poll: float = 0.05) -> bool:
    """True once 127.0.0.1:``port`` accepts connections; False when ``proc`` ends or
    ``timeout`` seconds pass first."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                return False
            time.sleep(poll)


def stop_group(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM to the process group of ``proc`` (started with ``start_new_session``), SIGKILL
    after ``grace`` seconds."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
