"""A warm gpupipe process that runs commands for ``gpupipe`` (``gpupipe server start``).

A ``gpupipe run`` of one document spends most of its 2-3 s on work that is the same every time:
the driver imports pandas, pyarrow, dask, distributed and the stages (about 1 s of CPU), and
the worker forkserver imports them again with numba (about 2 s), on cores the run shares. The
server does that once and keeps it: a process that imported everything a command needs and
started the worker forkserver, listening on a Unix socket. ``gpupipe COMMAND ...`` then forks
it instead of starting Python anew, the way a shell forks itself:

* the client (`forward`, the first thing the ``gpupipe`` command does; standard library only)
  sends its arguments, working directory, environment and umask over the socket, and its
  standard input, output and error as file descriptors (``SCM_RIGHTS``);
* the server forks a child and tells the client its pid; the child starts only when the
  client answers go, so a client that gave up waiting (and runs the command itself) never
  leaves a second copy running. It takes the client's descriptors as its own 0, 1 and 2, the
  client's directory, environment, umask and ``sys.argv``, and runs the command as a new
  process would. The terminal, progress bars, exit code and signals (the client relays
  SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGWINCH, SIGCONT and SIGUSR1/2, except those its shell
  set to be ignored, which the command ignores too; Ctrl-Z stops the command and then the
  client, as a shell job) are those of the command the user typed;
* the server waits for the child and sends back how it ended: its exit code, or the signal
  that killed it, which then ends the client the same way. A command dies with the server
  (``PR_SET_PDEATHSIG``), and a client whose server died stops the command.

The server refuses a request, and the client runs the command itself as before (saying why,
once per command), when what the server imported could differ from what the command would
import: another ``sys.path``, an environment that differs in a variable read at import
(`IMPORT_ENV`: ``DASK_*``, ``NUMBA_*``, ``PYTHON*``, ``GPUPIPE_*``, ...), other process
settings (resource limits, CPU affinity, cgroup, nice value, groups, capabilities, namespaces,
interpreter flags: `process_settings`), a descriptor named in the arguments that only the
client holds (``/dev/fd/63`` of ``<(cmd)``), or a changed file: of gpupipe, of any module the
server imported, of dask's configuration, or a package directory on ``sys.path`` (an edit, a
``pip install``: the server then also stops). Only the same user may connect: the socket's
directory is private, and each side checks the other's uid.

The server ends after ``--idle-timeout`` seconds without a command (default one hour), on
``gpupipe server stop``, or on SIGTERM; a run under way finishes first. One server runs per
socket (a lock file beside it).
"""

from __future__ import annotations

import array
import contextlib
import hashlib
import json
import os
import re
import signal
import socket
import struct
import sys
import time
import warnings

#: ``GPUPIPE_SERVER=off`` (or 0, no, false): never use a server
ENV_SWITCH = "GPUPIPE_SERVER"
#: where the socket is (default: one per Python environment and gpupipe copy, `socket_path`)
ENV_SOCKET = "GPUPIPE_SERVER_SOCKET"

#: prefixes of environment variables that Python or the libraries the server imported read at
#: import time (a command whose environment differs in one of them runs without the server).
#: The forkserver's own list is checked again for the workers (`gpupipe.runner.forkserver`).
IMPORT_ENV = ("PYTHON", "DASK_", "NUMBA_", "GPUPIPE_", "OMP_", "MKL_", "OPENBLAS_", "BLIS_",
              "VECLIB_", "NUMEXPR_", "ARROW_", "MALLOC_", "LD_", "TZ", "LANG", "LC_", "HOME",
              "XDG_", "CUDA_", "RMM_", "UCX_", "CUDF_", "LIBCUDF_", "KVIKIO_", "TOKENIZERS_",
              "HF_", "RAPIDS_")
#: the served command's pid, whose umask and output its local workers take
#: (`gpupipe.runner.worker_inherit`)
ENV_STDIO = "GPUPIPE_STDIO_OF"
#: ... except these, which concern the client and the server themselves
_NOT_IMPORT_ENV = (ENV_SWITCH, ENV_SOCKET, ENV_STDIO)

#: the command the server is never asked to run (it manages the server itself)
_OWN_COMMAND = "server"
_HEADER = struct.Struct("!I")
#: a path that names one of the process's descriptors (``<(cmd)``: ``/dev/fd/63``)
_FD_PATH = re.compile(r"/(?:dev|proc/self|proc/thread-self|proc/\d+)/fd/(\d+)")
_MAX_MESSAGE = 16 << 20


# --- where ----------------------------------------------------------------------------------

def _package_dir() -> str:
    return os.path.dirname(os.path.abspath(__file__))


def socket_path() -> str:
    """``$GPUPIPE_SERVER_SOCKET``, else ``$XDG_RUNTIME_DIR/gpupipe`` (or
    ``~/.cache/gpupipe/server``) ``/<digest>.sock``, one per host, Python environment and copy
    of gpupipe, so two checkouts or venvs never share a server, nor two hosts a home
    directory's socket."""
    if os.environ.get(ENV_SOCKET):
        return os.path.abspath(os.environ[ENV_SOCKET])
    key = f"{socket.gethostname()}\0{sys.prefix}\0{_package_dir()}".encode()
    base = os.environ.get("XDG_RUNTIME_DIR")
    base = os.path.join(base, "gpupipe") if base else os.path.join(
        os.path.expanduser("~"), ".cache", "gpupipe", "server")
    return os.path.join(base, hashlib.sha256(key).hexdigest()[:16] + ".sock")


def log_path(sock: str) -> str:
    return sock[:-len(".sock")] + ".log" if sock.endswith(".sock") else sock + ".log"


# --- messages: a length-prefixed JSON object, the first one with file descriptors ------------

def _send(conn: socket.socket, obj: dict, fds: list[int] | None = None) -> None:
    data = json.dumps(obj).encode()
    msg = _HEADER.pack(len(data)) + data
    if fds:
        conn.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        conn.sendall(msg)


def _recv_exact(conn: socket.socket, n: int, fds: list[int] | None = None,
                deadline: float | None = None) -> bytes:
    buf = b""
    while len(buf) < n:
        if deadline is not None:   # for the whole message: a client that trickles ends too
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the message did not arrive in time")
            conn.settimeout(left)
        if fds is not None:
            data, ancdata, _flags, _addr = conn.recvmsg(
                n - len(buf), socket.CMSG_SPACE(3 * array.array("i").itemsize))
            for level, kind, payload in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    got = array.array("i")
                    got.frombytes(payload[:len(payload) - len(payload) % got.itemsize])
                    fds.extend(got)
        else:
            data = conn.recv(n - len(buf))
        if not data:
            raise EOFError("the connection closed")
        buf += data
    return buf


def _recv(conn: socket.socket, fds: list[int] | None = None,
          deadline: float | None = None) -> dict:
    (n,) = _HEADER.unpack(_recv_exact(conn, _HEADER.size, fds, deadline))
    if n > _MAX_MESSAGE:
        raise ValueError(f"a message of {n} bytes")
    return json.loads(_recv_exact(conn, n, fds, deadline))


# --- the client ----------------------------------------------------------------------------

def _disabled() -> bool:
    return os.environ.get(ENV_SWITCH, "").strip().lower() in ("0", "off", "no", "false")


def _connect(sock: str, timeout: float = 5.0) -> socket.socket | None:
    try:
        os.stat(sock)
    except OSError:
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(timeout)
    try:
        conn.connect(sock)
    except OSError:  # a socket left by a server that is gone
        conn.close()
        return None
    return conn


def _peer_uid(conn: socket.socket) -> int | None:
    """The uid of the process at the other end (Linux), or None where it cannot be asked."""
    if not hasattr(socket, "SO_PEERCRED"):
        return None
    return struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                               struct.calcsize("3i")))[1]


def process_settings() -> dict:
    """What a process inherits besides its environment that the libraries the server imported
    read when they were imported, or that a command must have as its own: resource limits
    (distributed's memory limit), the CPUs it may run on (dask's CPU count), its cgroup (a
    Slurm job's), its nice value, and the interpreter's flags. A command whose settings
    differ from the server's runs without it."""
    import resource

    limits, seen = {}, set()
    for name in sorted(n for n in dir(resource) if n.startswith("RLIMIT_")):
        if getattr(resource, name) in seen:   # an alias (RLIMIT_OFILE is RLIMIT_NOFILE)
            continue
        seen.add(getattr(resource, name))
        with contextlib.suppress(ValueError, OSError):
            limits[name] = list(resource.getrlimit(getattr(resource, name)))
    out: dict = {"rlimits": limits, "flags": list(sys.flags), "warnoptions": sys.warnoptions,
                 "xoptions": {k: str(v) for k, v in sys._xoptions.items()}}
    with contextlib.suppress(AttributeError, OSError):
        out["affinity"] = sorted(os.sched_getaffinity(0))
    with contextlib.suppress(AttributeError, OSError):
        out["nice"] = os.getpriority(os.PRIO_PROCESS, 0)
    with contextlib.suppress(OSError), open("/proc/self/cgroup") as f:
        out["cgroup"] = f.read()
    # the groups new files get and access is checked with (``newgrp``, ``sg``)
    out["groups"] = [os.getgid(), os.getegid(), sorted(os.getgroups())]
    with contextlib.suppress(OSError), open("/proc/self/status") as f:
        out["privileges"] = [line.strip() for line in f if line.startswith(
            ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp:"))]
    # a command started in another namespace (a container, ``unshare``, ``nsenter --net``,
    # ``ip netns exec``) must see its own mounts, network and processes
    namespaces = {}
    for ns in ("mnt", "net", "pid", "ipc", "uts", "user", "cgroup", "time"):
        with contextlib.suppress(OSError):
            namespaces[ns] = os.readlink(f"/proc/self/ns/{ns}")
    out["namespaces"] = namespaces
    return out


#: what the client relays to the command (Ctrl-Z, SIGTSTP, is handled apart: `_relay_to`)
RELAYED = tuple(getattr(signal, name) for name in (
    "SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGWINCH", "SIGCONT", "SIGUSR1", "SIGUSR2")
    if hasattr(signal, name))
#: ... and those a job gets from its shell, whose ignored state a command keeps
_JOB_SIGNALS = RELAYED + ((signal.SIGTSTP,) if hasattr(signal, "SIGTSTP") else ())


def forward(argv: list[str]) -> int | None:
    """Run ``gpupipe argv`` in the server, if one serves this environment: its exit code, or
    None when the command is to run here (no server, or it refused, saying why on stderr).

    The server forks the command's process at once but lets it start only when the client
    says go, after it learnt the pid: a client that gave up waiting (and runs the command
    itself) or was interrupted never leaves a second copy running in the server."""
    if _disabled() or _OWN_COMMAND in argv[:2] or not argv:
        return None
    present = []
    for fd in (0, 1, 2):   # before the socket takes the number of a closed one
        try:
            os.fstat(fd)
            present.append(True)
        except OSError:   # a closed descriptor: the child gets /dev/null there
            present.append(False)
    try:
        cwd = os.getcwd()
    except OSError:   # a directory removed under the shell: the command itself says so
        return None
    # what the shell set to be ignored (``nohup``, ``cmd &`` in a script) stays ignored
    ignored = [int(sig) for sig in _JOB_SIGNALS if signal.getsignal(sig) == signal.SIG_IGN]
    sock = socket_path()
    conn = _connect(sock)
    if conn is None:
        return None
    with conn:
        uid = _peer_uid(conn)
        if uid is not None and uid != os.getuid():
            print(f"gpupipe: not using the server at {sock}: it runs as uid {uid}; running "
                  f"the command here", file=sys.stderr)
            return None
        named = sorted({int(m) for arg in argv for m in _FD_PATH.findall(arg) if int(m) > 2})
        if named:   # process substitution, ``3<file``: only this process has them
            print(f"gpupipe: not using the server (the command names descriptor "
                  f"{', '.join(map(str, named))}, which only this process holds); running "
                  f"the command here", file=sys.stderr)
            return None
        mask = os.umask(0o022)
        os.umask(mask)
        request = {"argv": list(argv), "argv0": sys.argv[0] if sys.argv else "gpupipe",
                   "cwd": cwd, "env": dict(os.environ), "sys_path": list(sys.path),
                   "executable": sys.executable, "fds": present, "umask": mask,
                   "ignored": ignored, "settings": process_settings()}
        try:
            _send(conn, request, [fd for fd, ok in zip((0, 1, 2), present) if ok])
            reply = _recv(conn)
        except KeyboardInterrupt:
            return 130   # nothing runs: the command starts only on our go
        except (OSError, EOFError, ValueError) as e:
            print(f"gpupipe: the server at {sock} did not answer ({e}); running the "
                  f"command here", file=sys.stderr)
            return None
        if "refused" in reply:
            print(f"gpupipe: not using the server ({reply['refused']}); running the command "
                  f"here", file=sys.stderr)
            return None
        child = int(reply["pid"])
        before = {sig: signal.getsignal(sig) for sig in _JOB_SIGNALS}
        _relay_to(child, ignored)
        try:
            _send(conn, {"go": True})
        except OSError as e:   # the server went away, or the command ended before its go
            ended = None
            with contextlib.suppress(OSError, EOFError, ValueError):
                ended = _recv(conn, deadline=time.monotonic() + 1.0)
            _restore(before)
            if isinstance(ended, dict) and "exit" in ended:   # a signal relayed to it
                return _ended(ended)
            print(f"gpupipe: the server at {sock} went away ({e}); running the command here",
                  file=sys.stderr)
            return None
        return _wait(conn, child, before)


def _relay_to(child: int, ignored=()) -> None:
    """Signals the client gets go to the command's process ``child``, except those the
    client ignores (``ignored``). Ctrl-Z stops the command, then the client, as a shell job;
    ``fg`` or ``bg`` resumes both."""
    def relay(signum, _frame):
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signum)

    def suspend(_signum, _frame):
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGSTOP)   # SIGTSTP: its process group is orphaned
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTSTP)   # stops here until SIGCONT
        signal.signal(signal.SIGTSTP, suspend)
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGCONT)

    for sig in RELAYED:
        if int(sig) not in ignored:
            signal.signal(sig, relay)
    if hasattr(signal, "SIGTSTP") and int(signal.SIGTSTP) not in ignored:
        signal.signal(signal.SIGTSTP, suspend)


def _restore(handlers: dict) -> None:
    """The signal handlers ``handlers`` (``signal.getsignal`` of each) again."""
    for sig, handler in handlers.items():
        with contextlib.suppress(OSError, ValueError, TypeError):
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


def _wait(conn: socket.socket, child: int, before: dict) -> int:
    """Relay signals to the child until the server reports how it ended; a command killed by
    a signal ends the client by the same signal, as the shell would see it without the
    server."""
    conn.settimeout(None)
    try:
        reply = _recv(conn)
    except (OSError, EOFError, ValueError):
        _restore(before)
        stopped = _end(child)
        print(f"gpupipe: the server ended while it ran the command; the command "
              f"{'was stopped' if stopped else f'(pid {child}) still runs'}", file=sys.stderr)
        return 1
    _restore(before)
    return _ended(reply)


def _ended(reply: dict) -> int:
    """The exit code of a command that ended as ``reply`` says; one killed by a signal ends
    this process by the same signal (SIGKILL too)."""
    code, sig = int(reply["exit"]), reply.get("signal")
    if sig:
        with contextlib.suppress(OSError, ValueError):   # SIGKILL's cannot be set
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    return code


def _end(pid: int, timeout: float = 10.0) -> bool:
    """SIGTERM ``pid`` (SIGKILL where this process ignores SIGTERM, and so does the command)
    and wait until it is gone; False when it outlives ``timeout``."""
    end = time.monotonic() + timeout
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, _ending(signal.getsignal(signal.SIGTERM) == signal.SIG_IGN))
        os.kill(pid, signal.SIGCONT)   # a stopped process acts on it only when continued
        while time.monotonic() < end:
            os.kill(pid, 0)
            time.sleep(0.02)
        return False
    return True


def request(message: dict, sock: str | None = None, timeout: float = 5.0) -> dict | None:
    """A control message (``ping``, ``stop``) to the server: its answer, or None when none
    listens at ``sock``."""
    conn = _connect(sock or socket_path(), timeout)
    if conn is None:
        return None
    with conn:
        try:
            _send(conn, message)
            return _recv(conn)
        except (OSError, EOFError, ValueError):
            return None


# --- what the server checks before it forks ---------------------------------------------------

def _code_stamp(files: tuple[str, ...] = ()) -> dict[str, tuple[int, int]]:
    """(mtime, size) of every file of gpupipe and of ``files`` (the modules the server
    imported, dask's configuration files), and the mtime of every directory on sys.path (an
    install or removal in site-packages changes it)."""
    out: dict[str, tuple[int, int]] = {}
    root = _package_dir()
    for d, dirs, names in os.walk(root):
        dirs[:] = [x for x in dirs if x != "__pycache__"]
        for f in names:
            if f.endswith((".py", ".so", ".index")):
                p = os.path.join(d, f)
                with contextlib.suppress(OSError):
                    st = os.stat(p)
                    out[p] = (st.st_mtime_ns, st.st_size)
    for p in files:
        try:
            st = os.stat(p)
            out[p] = (st.st_mtime_ns, st.st_size)
        except OSError:
            out[p] = (-1, -1)   # gone
    for p in sys.path[1:]:   # [0]: the script's directory (the server's: the socket's)
        if p and os.path.isdir(p) and not p.startswith(root):
            with contextlib.suppress(OSError):
                out[p] = (os.stat(p).st_mtime_ns, 0)
    return out


def _loaded_files() -> tuple[str, ...]:
    """The files of every module imported, and dask's configuration directories and files
    (read at import: ``~/.config/dask``, ``/etc/dask``, ``$DASK_CONFIG``); not gpupipe's own,
    which `_code_stamp` walks."""
    files = {m.__file__ for m in list(sys.modules.values())
             if isinstance(getattr(m, "__file__", None), str)}
    with contextlib.suppress(ImportError, AttributeError):
        import dask.config

        for d in dask.config.paths:
            if os.path.isdir(d):
                files.add(d)
                files.update(os.path.join(d, f) for f in os.listdir(d)
                             if f.endswith((".yaml", ".yml", ".json")))
    root = os.path.join(_package_dir(), "")
    return tuple(sorted(f for f in files if os.path.exists(f) and not f.startswith(root)))


def _import_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items()
            if k.startswith(IMPORT_ENV) and not k.startswith(_NOT_IMPORT_ENV)}


def why_not(req: dict, env: dict[str, str], stamp: dict, settings: dict | None = None,
            files: tuple[str, ...] = ()) -> str | None:
    """Why a server started in ``env`` with ``settings`` (`process_settings`), whose code was
    ``stamp`` (`_code_stamp` of ``files``), must not run ``req``; None when it may."""
    if req.get("executable") != sys.executable:
        return f"it runs {sys.executable}, the command {req.get('executable')}"
    if (req.get("sys_path") or [None])[1:] != sys.path[1:]:   # [0]: the script's directory
        return "the command's sys.path differs from the server's"
    mine, theirs = _import_env(env), _import_env(req.get("env") or {})
    differ = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
    if differ:
        return (f"the environment differs in {', '.join(differ[:5])}"
                f"{' ...' if len(differ) > 5 else ''}, which is read at import; "
                f"`gpupipe server stop` and start it again in this environment")
    mine, theirs = settings or process_settings(), req.get("settings") or {}
    differ = sorted(k for k in set(mine) | set(theirs) if k != "rlimits" and
                    mine.get(k) != theirs.get(k))
    limits = mine.get("rlimits", {}), theirs.get("rlimits", {})
    differ += sorted(k for k in set(limits[0]) | set(limits[1])
                     if limits[0].get(k) != limits[1].get(k))
    if differ:
        return (f"the process settings differ ({', '.join(differ[:5])}"
                f"{' ...' if len(differ) > 5 else ''}); `gpupipe server stop` and start it "
                f"again from this shell")
    now = _code_stamp(files)
    changed = sorted(k for k in set(now) | set(stamp) if now.get(k) != stamp.get(k))
    if changed:
        return (f"{changed[0]}{f' and {len(changed) - 1} more' if len(changed) > 1 else ''} "
                f"changed since the server started; it stops now, `gpupipe server start` "
                f"starts it again")
    return None


# --- the server ----------------------------------------------------------------------------

def preload() -> None:
    """Import what a command imports, and start the worker forkserver (its own imports run
    in the background). Stage plugins are not imported: a command imports them itself, so an
    edit to one shows at once."""
    from gpupipe.runner import forkserver

    forkserver.start()
    import gc

    import dask  # noqa: F401
    import distributed  # noqa: F401
    import pandas  # noqa: F401
    import pyarrow  # noqa: F401
    import pyarrow.parquet  # noqa: F401
    import pydantic  # noqa: F401
    import rich.console  # noqa: F401
    import rich.progress  # noqa: F401
    import rich.table  # noqa: F401
    import tokenizers  # noqa: F401
    import yaml  # noqa: F401

    import gpupipe.pipeline  # noqa: F401
    import gpupipe.report  # noqa: F401
    import gpupipe.runner.cluster  # noqa: F401
    import gpupipe.runner.run  # noqa: F401
    import gpupipe.spec  # noqa: F401
    import gpupipe.stages  # noqa: F401

    gc.collect()
    gc.freeze()   # a forked command's collector never walks (and so never copies) all of this


class _Served(BaseException):
    """Raised inside a forked child to leave the server's loop: the command it is to run."""

    def __init__(self, req: dict, fds: list[int], mask):
        super().__init__()
        self.req, self.fds, self.mask = req, fds, mask


def serve(main, sock: str, idle_timeout: float) -> int:
    """The server's life: ``main(argv) -> exit code`` runs each command in a forked child."""
    try:
        return _Server(sock, idle_timeout).loop()
    except _Served as job:   # only ever in a child
        return _run_child(main, job.req, job.fds, job.mask)


class _Server:
    def __init__(self, sock: str, idle_timeout: float):
        self.sock, self.idle_timeout = sock, idle_timeout
        self.pid = os.getpid()
        self.started = time.time()
        self.env = dict(os.environ)
        self.settings = process_settings()
        self.files = _loaded_files()
        self.stamp = _code_stamp(self.files)
        self.children: dict[int, socket.socket] = {}  # child pid -> its client's connection
        self.waiting: dict[int, int] = {}   # child pid -> the pipe its go is written to
        self.ending: dict[int, int] = {}   # child pid -> the signal that ends it (`_ending`)
        self.served = 0
        self.stopping: str | None = None

    def _listen(self) -> socket.socket:
        import fcntl

        # the directory is created private; one the user chose is left as it is
        os.makedirs(os.path.dirname(self.sock), mode=0o700, exist_ok=True)
        # one server per socket: the lock is held for the server's life (never by a child)
        self.lock = os.open(self.sock + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise SystemExit(f"a gpupipe server already runs at {self.sock}") from None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.sock)   # left by a server that was killed
        lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        lsock.bind(self.sock)
        os.chmod(self.sock, 0o600)
        lsock.listen(64)
        return lsock

    def loop(self) -> int:
        import selectors

        lsock = self._listen()
        wake_r, wake_w = os.pipe()
        self._own = (lsock, wake_r, wake_w)   # what a forked child closes
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, lambda *_: self._stop("SIGTERM"))
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        sel = selectors.DefaultSelector()
        sel.register(lsock, selectors.EVENT_READ, "accept")
        sel.register(wake_r, selectors.EVENT_READ, "wake")
        print(f"{time.strftime('%H:%M:%S')} gpupipe server {self.pid} listening at {self.sock}",
              file=sys.stderr, flush=True)
        last = time.monotonic()
        try:
            while not (self.stopping and not self.children):
                timeout = None if self.idle_timeout <= 0 else max(
                    0.0, last + self.idle_timeout - time.monotonic())
                for key, _ in sel.select(timeout if not self.children else 5.0):
                    if key.data == "accept":
                        with contextlib.suppress(BlockingIOError):
                            conn, _ = lsock.accept()
                            self._handle(conn, sel)   # a forked child raises _Served here
                        last = time.monotonic()
                    elif key.data == "wake":
                        with contextlib.suppress(BlockingIOError):
                            os.read(wake_r, 512)
                    else:   # a client's go, or its connection closed (it died)
                        self._from_client(key.fileobj, key.data, sel)
                self._reap(sel)
                if self.children:
                    last = time.monotonic()
                elif self.idle_timeout > 0 and time.monotonic() - last >= self.idle_timeout:
                    self._stop(f"idle for {self.idle_timeout:g} s")
        finally:
            if os.getpid() == self.pid:
                sel.close()
                lsock.close()
                with contextlib.suppress(OSError):
                    os.unlink(self.sock)
                os.close(self.lock)
                print(f"{time.strftime('%H:%M:%S')} gpupipe server {self.pid} stopped "
                      f"({self.stopping or 'error'}; {self.served} command(s) served)",
                      file=sys.stderr, flush=True)
        return 0

    def _stop(self, why: str) -> None:
        if not self.stopping:
            self.stopping = why

    def _handle(self, conn: socket.socket, sel) -> None:
        fds: list[int] = []
        try:
            self._request(conn, sel, fds)
            return
        except _Refused as e:
            with contextlib.suppress(OSError):
                _send(conn, {"refused": str(e)})
        except Exception as e:   # one bad request never ends the server
            print(f"gpupipe server: a request failed: {type(e).__name__}: {e}", file=sys.stderr,
                  flush=True)
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        if conn not in self.children.values():
            conn.close()

    def _request(self, conn: socket.socket, sel, fds: list[int]) -> None:
        conn.settimeout(2)   # a client sends its request as it connects
        uid = _peer_uid(conn)
        if uid is not None and uid != os.getuid():
            raise PermissionError(f"a connection from uid {uid}")
        req = _recv(conn, fds, deadline=time.monotonic() + 2.0)
        if not isinstance(req, dict):
            raise ValueError("a request that is not a JSON object")
        op = req.get("op", "run")
        if op != "run":
            for fd in fds:   # descriptors that only a command takes
                os.close(fd)
            fds.clear()
            reply = {"pid": self.pid, "socket": self.sock, "started": self.started,
                     "served": self.served, "running": len(self.children)}
            if op == "stop":
                self._stop("gpupipe server stop")
            with contextlib.suppress(OSError):
                _send(conn, reply)
            conn.close()
            return
        why = "the server is stopping" if self.stopping else why_not(
            req, self.env, self.stamp, self.settings, self.files)
        if why is not None:
            if "changed since the server started" in why:
                self._stop("its code changed")
            raise _Refused(why)
        ending = _ending(int(signal.SIGTERM) in (req.get("ignored") or ()))
        go_r, go_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        # the child must not run the server's handlers: no signal reaches it before its own,
        # and what the client relays before the go waits until the command starts
        blocked = {*_JOB_SIGNALS, signal.SIGCHLD}
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
        try:
            with warnings.catch_warnings():   # Python 3.12+: numpy's and Arrow's idle pools
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
        except OSError as e:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            os.close(go_r)
            os.close(go_w)
            raise _Refused(f"the server cannot fork ({e})") from None
        if pid == 0:
            self._become_child(conn, sel, go_r, go_w, ending)
            raise _Served(req, fds, mask)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.close(go_r)
        for fd in fds:
            os.close(fd)
        fds.clear()
        self.children[pid] = conn
        self.waiting[pid] = go_w
        self.ending[pid] = ending
        try:
            _send(conn, {"pid": pid})
            sel.register(conn, 1, pid)   # selectors.EVENT_READ: the client's go
        except OSError:   # the client left already: the child ends without running
            self._no_go(pid)

    def _become_child(self, conn, sel, go_r: int, go_w: int, ending: int) -> None:
        """In the forked child: keep none of the server's descriptors, then wait for the
        client's go (the pipe closes without one when the client gave up). The server's
        signal handlers stay until `_run_child` sets the command's: until then, every signal
        they or the command handle is blocked."""
        for other in (*self.children.values(), conn):
            other.close()
        for w in (*self.waiting.values(), go_w, self.lock):
            os.close(w)
        sel.close()
        lsock, wake_r, wake_w = self._own
        lsock.close()
        os.close(wake_r)
        os.close(wake_w)
        signal.set_wakeup_fd(-1)
        _die_with_parent(self.pid, ending)
        go = b""
        with contextlib.suppress(OSError):
            go = os.read(go_r, 1)
        os.close(go_r)
        if go != b"g":
            os._exit(0)

    def _no_go(self, pid: int) -> None:
        with contextlib.suppress(KeyError, OSError):
            os.close(self.waiting.pop(pid))

    def _from_client(self, conn: socket.socket, pid: int, sel) -> None:
        """The client's go for a child that waits for it; otherwise (or anything else) the
        client closed its end (killed): end the command too."""
        if pid in self.waiting:
            try:
                msg = _recv(conn, deadline=time.monotonic() + 2.0)
            except (OSError, EOFError, ValueError):
                msg = None
            if isinstance(msg, dict) and msg.get("go") is True:
                go = self.waiting.pop(pid)
                try:
                    os.write(go, b"g")
                    self.served += 1
                except OSError:   # it died before its go: `_reap` tells the client how
                    pass
                finally:
                    os.close(go)
                return
            self._no_go(pid)
        with contextlib.suppress(KeyError, ValueError):
            sel.unregister(conn)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, self.ending.get(pid, signal.SIGTERM))
            os.kill(pid, signal.SIGCONT)   # a command stopped with its client (Ctrl-Z)

    def _reap(self, sel) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is None:
                continue   # not a command: the forkserver
            self._no_go(pid)
            self.ending.pop(pid, None)
            code = os.waitstatus_to_exitcode(status)
            with contextlib.suppress(KeyError, ValueError):
                sel.unregister(conn)
            with contextlib.suppress(OSError):
                _send(conn, {"exit": code} if code >= 0 else {"exit": 128 - code,
                                                               "signal": -code})
            conn.close()


class _Refused(Exception):
    """A request the server does not run: the client runs the command itself."""


def _ending(term_ignored: bool) -> int:
    """The signal that ends a command whose client is gone: SIGTERM, or SIGKILL for one that
    ignores SIGTERM (its client's shell ignored it)."""
    return signal.SIGKILL if term_ignored else signal.SIGTERM


def _die_with_parent(parent: int, sig: int) -> None:
    """Linux: this process gets ``sig`` when the server dies (``PR_SET_PDEATHSIG``), so a
    command never outlives a server that was killed."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, sig)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:   # it died before the call
        os._exit(1)


def _reopen_std(fds: list[int], present: list[bool]) -> None:
    """The client's descriptors become this process's 0, 1 and 2, and sys.std* are opened
    on them as Python opens its own at start: stdout line-buffered on a terminal, stderr
    line-buffered, both written through under PYTHONUNBUFFERED."""
    it = iter(fds)
    for target, ok in zip((0, 1, 2), present):
        fd = next(it) if ok else os.open(os.devnull, os.O_RDWR)
        if fd != target:
            os.dup2(fd, target)
            os.close(fd)
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    for name, fd in (("stdin", 0), ("stdout", 1), ("stderr", 2)):
        old = getattr(sys, name)
        stream = open(fd, "r" if fd == 0 else "w", closefd=False,  # noqa: SIM115
                      encoding=getattr(old, "encoding", None) or "utf-8",
                      errors=getattr(old, "errors", None))
        if fd:
            stream.reconfigure(line_buffering=fd == 2 or os.isatty(fd), write_through=unbuffered)
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _adopt_forkserver() -> None:
    """The worker forkserver is the server's child, not ours: multiprocessing asks
    ``waitpid`` whether it still runs, which only its parent may. Ask the kernel instead."""
    import multiprocessing.forkserver as mpfs

    server = mpfs._forkserver
    own = server.ensure_running

    def ensure_running():
        pid = server._forkserver_pid
        if pid is not None:
            try:
                os.kill(pid, 0)
                return None
            except ProcessLookupError:
                server._forkserver_pid = None   # gone: start one of our own
        return own()

    server.ensure_running = ensure_running


def _run_child(main, req: dict, fds: list[int], mask) -> int:
    """In the forked child: become the command the client typed, run it, return its code."""
    import random
    import tempfile

    ignored = set(req.get("ignored") or ())
    for sig in _JOB_SIGNALS:   # as Python sets them at start, where the client's shell did not
        signal.signal(sig, signal.SIG_IGN if int(sig) in ignored else
                      signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)   # not the server's
    os.environ.clear()
    os.environ.update(req["env"])
    # local workers fork from the server's forkserver (its umask, the server's log as output):
    # they take this process's instead (`gpupipe.runner.worker_inherit`)
    os.environ[ENV_STDIO] = str(os.getpid())
    os.umask(int(req.get("umask", 0o022)))
    os.chdir(req["cwd"])
    tempfile.tempdir = None   # from the client's TMPDIR
    random.seed()   # a new process's own random state, not the server's
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    _reopen_std(fds, req.get("fds") or [True, True, True])
    sys.argv = [req.get("argv0") or "gpupipe", *req["argv"]]
    if req.get("sys_path"):   # the script's directory (``python -m``: the working directory)
        sys.path[0] = req["sys_path"][0]
    _adopt_forkserver()
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)   # what was relayed before the go
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return main(req["argv"])
