"""What a local worker forked from the warm server's forkserver takes from its driver.

Preloaded in each worker of a local cluster whose workers fork from the worker forkserver
(``distributed.worker.preload``, set by `gpupipe.runner.cluster`). A driver running in the warm
server (`gpupipe.server`) forks its workers from the server's forkserver, so they would have
the server's umask, and its log file as their standard output and error. When the driver's
environment names its pid in ``GPUPIPE_STDIO_OF`` (the server sets it), a worker takes the
driver's instead, as a worker of a driver started from the shell does: files it writes get the
user's permissions, and a library's warning or a plugin's ``print`` reaches the user's terminal
or pipe, not the server's log.

The umask is read from ``/proc/<pid>/status``. A terminal, a pipe or a character device is
opened again through ``/proc/<pid>/fd``; a regular file only when the driver appends to it
(``>>``: otherwise the driver's own writes, at its own offset, would overwrite the worker's).
Anything else (a socket, no ``/proc``) keeps the forkserver's.
"""

from __future__ import annotations

import os
import stat
import sys

ENV = "GPUPIPE_STDIO_OF"


def _appends(pid: str, fd: int) -> bool:
    try:
        with open(f"/proc/{pid}/fdinfo/{fd}") as f:
            flags = next(line for line in f if line.startswith("flags:")).split()[1]
    except (OSError, StopIteration, IndexError):
        return False
    return bool(int(flags, 8) & os.O_APPEND)


def umask(pid: str | None = None) -> int | None:
    """Set this process's umask to that of process ``pid`` (default: ``$GPUPIPE_STDIO_OF``);
    the umask set, or None."""
    pid = pid or os.environ.get(ENV)
    if not pid or not pid.isdigit():
        return None
    try:
        with open(f"/proc/{pid}/status") as f:
            mask = int(next(line for line in f if line.startswith("Umask:")).split()[1], 8)
    except (OSError, StopIteration, IndexError, ValueError):
        return None
    os.umask(mask)
    return mask


def redirect(pid: str | None = None) -> list[int]:
    """Point this process's descriptors 1 and 2 at those of process ``pid`` (default: from
    ``$GPUPIPE_STDIO_OF``); the descriptors it did point."""
    pid = pid or os.environ.get(ENV)
    if not pid or not pid.isdigit():
        return []
    done = []
    for fd, stream in ((1, sys.stdout), (2, sys.stderr)):
        path = f"/proc/{pid}/fd/{fd}"
        try:
            mode = os.stat(path).st_mode
            if stat.S_ISSOCK(mode) or (stat.S_ISREG(mode) and not _appends(pid, fd)):
                continue
            new = os.open(path, os.O_WRONLY | os.O_NOCTTY |
                          (os.O_APPEND if stat.S_ISREG(mode) else 0))
        except OSError:
            continue
        if stream is not None:
            stream.flush()
        os.dup2(new, fd)
        os.close(new)
        done.append(fd)
    return done


umask()
redirect()
