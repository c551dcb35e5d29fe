"""A warm gpupipe process that runs commands for ``gpupipe`` (``gpupipe server start``).

A ``gpupipe run`` of one document spends most of its 2-3 s on work that is the same every time:
the driver imports pandas, pyarrow, dask, distributed and the stages (about 1 s of CPU), and
the worker forkserver imports them again with numba (about 2 s), on cores the run shares. The
server does that once and keeps it: a process that imported everything a command needs and
started the worker forkserver, listening on a Unix socket. ``gpupipe COMMAND ...`` then forks
it instead of starting Python anew, the way a shell forks itself:

* the client (`forward`, the first thing the ``gpupipe`` command does; standard library only)
  sends its arguments, working directory and environment over the socket, and its standard
  input, output and error as file descriptors (``SCM_RIGHTS``);
* the server forks a child that takes those descriptors as its own 0, 1 and 2, the client's
  directory, environment and ``sys.argv``, and runs the command as a new process would. The
  terminal, progress bars, exit code and Ctrl-C (the client forwards SIGINT, SIGTERM and SIGHUP
  to the child) are those of the command the user typed;
* the server waits for the child and sends its exit status back.

The server refuses a request, and the client runs the command itself as before (saying why,
once per command), when what the server imported could differ from what the command would
import: another ``sys.path``, an environment that differs in a variable read at import
(`IMPORT_ENV`: ``DASK_*``, ``NUMBA_*``, ``PYTHON*``, ``GPUPIPE_*``, ...), or files of
gpupipe or of any package directory on ``sys.path`` changed since it started (an edit, a
``pip install``: the server then also stops). Only the same user may connect (the socket's
directory is private, and the server checks the peer's uid).

The server ends after ``--idle-timeout`` seconds without a command (default one hour), on
``gpupipe server stop``, or on SIGTERM; a run under way finishes first.
"""

from __future__ import annotations

import array
import contextlib
import hashlib
import json
import os
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
#: ... except these, which concern the client and the server themselves
_NOT_IMPORT_ENV = (ENV_SWITCH, ENV_SOCKET)

#: the command the server is never asked to run (it manages the server itself)
_OWN_COMMAND = "server"
_HEADER = struct.Struct("!I")
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


def _recv_exact(conn: socket.socket, n: int, fds: list[int] | None = None) -> bytes:
    buf = b""
    while len(buf) < n:
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


def _recv(conn: socket.socket, fds: list[int] | None = None) -> dict:
    (n,) = _HEADER.unpack(_recv_exact(conn, _HEADER.size, fds))
    if n > _MAX_MESSAGE:
        raise ValueError(f"a message of {n} bytes")
    return json.loads(_recv_exact(conn, n, fds))


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


def forward(argv: list[str]) -> int | None:
    """Run ``gpupipe argv`` in the server, if one serves this environment: its exit code, or
    None when the command is to run here (no server, or it refused, saying why on stderr)."""
    if _disabled() or _OWN_COMMAND in argv[:2] or not argv:
        return None
    conn = _connect(socket_path())
    if conn is None:
        return None
    with conn:
        fds = []
        for fd in (0, 1, 2):
            try:
                os.fstat(fd)
                fds.append(fd)
            except OSError:   # a closed descriptor: the child gets /dev/null there
                fds.append(-1)
        request = {"argv": list(argv), "argv0": sys.argv[0] if sys.argv else "gpupipe",
                   "cwd": os.getcwd(), "env": dict(os.environ), "sys_path": list(sys.path),
                   "executable": sys.executable, "fds": [fd >= 0 for fd in fds]}
        try:
            _send(conn, request, [fd for fd in fds if fd >= 0])
            reply = _recv(conn)
        except KeyboardInterrupt:
            return 130
        except (OSError, EOFError, ValueError) as e:
            print(f"gpupipe: the server at {socket_path()} did not answer ({e}); running the "
                  f"command here", file=sys.stderr)
            return None
        if "refused" in reply:
            print(f"gpupipe: not using the server ({reply['refused']}); running the command "
                  f"here", file=sys.stderr)
            return None
        return _wait(conn, int(reply["pid"]))


def _wait(conn: socket.socket, child: int) -> int:
    """Forward signals to the child until the server reports how it ended."""
    def relay(signum, _frame):
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, relay)
    conn.settimeout(None)
    while True:
        try:
            reply = _recv(conn)
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries these
            continue
        except (OSError, EOFError, ValueError):
            print("gpupipe: the server ended while it ran the command; its exit status is "
                  "unknown", file=sys.stderr)
            return 1
    return int(reply["exit"])


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

def _code_stamp() -> dict[str, tuple[int, int]]:
    """(mtime, size) of every file of gpupipe, and the mtime of every directory on sys.path
    (an install or removal in site-packages changes it)."""
    out: dict[str, tuple[int, int]] = {}
    root = _package_dir()
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x != "__pycache__"]
        for f in files:
            if f.endswith((".py", ".so", ".index")):
                p = os.path.join(d, f)
                with contextlib.suppress(OSError):
                    st = os.stat(p)
                    out[p] = (st.st_mtime_ns, st.st_size)
    for p in sys.path[1:]:   # [0]: the script's directory (the server's: the socket's)
        if p and os.path.isdir(p) and not p.startswith(root):
            with contextlib.suppress(OSError):
                out[p] = (os.stat(p).st_mtime_ns, 0)
    return out


def _import_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items()
            if k.startswith(IMPORT_ENV) and not k.startswith(_NOT_IMPORT_ENV)}


def why_not(req: dict, env: dict[str, str], stamp: dict) -> str | None:
    """Why the server must not run ``req``, or None."""
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
    now = _code_stamp()
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

    def __init__(self, req: dict, fds: list[int]):
        super().__init__()
        self.req, self.fds = req, fds


def serve(main, sock: str, idle_timeout: float) -> int:
    """The server's life: ``main(argv) -> exit code`` runs each command in a forked child."""
    try:
        return _Server(sock, idle_timeout).loop()
    except _Served as job:   # only ever in a child
        return _run_child(main, job.req, job.fds)


class _Server:
    def __init__(self, sock: str, idle_timeout: float):
        self.sock, self.idle_timeout = sock, idle_timeout
        self.pid = os.getpid()
        self.started = time.time()
        self.env = dict(os.environ)
        self.stamp = _code_stamp()
        self.children: dict[int, socket.socket] = {}  # child pid -> its client's connection
        self.served = 0
        self.stopping: str | None = None

    def _listen(self) -> socket.socket:
        d = os.path.dirname(self.sock)
        os.makedirs(d, mode=0o700, exist_ok=True)
        os.chmod(d, 0o700)
        if os.path.exists(self.sock):
            if request({"op": "ping"}, self.sock) is not None:
                raise SystemExit(f"a gpupipe server already listens at {self.sock}")
            os.unlink(self.sock)
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
                    else:   # a client's connection: readable means it closed (or died)
                        self._client_gone(key.fileobj, key.data, sel)
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
                print(f"{time.strftime('%H:%M:%S')} gpupipe server {self.pid} stopped "
                      f"({self.stopping or 'error'}; {self.served} command(s) served)",
                      file=sys.stderr, flush=True)
        return 0

    def _stop(self, why: str) -> None:
        if not self.stopping:
            self.stopping = why

    def _handle(self, conn: socket.socket, sel) -> None:
        conn.settimeout(10)
        fds: list[int] = []
        try:
            if hasattr(socket, "SO_PEERCRED"):   # Linux; elsewhere the private directory
                uid = struct.unpack("3i", conn.getsockopt(
                    socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))[1]
                if uid != os.getuid():
                    raise PermissionError(f"a connection from uid {uid}")
            req = _recv(conn, fds)
        except (OSError, EOFError, ValueError) as e:
            print(f"gpupipe server: a request failed: {e}", file=sys.stderr, flush=True)
            for fd in fds:
                os.close(fd)
            conn.close()
            return
        op = req.get("op", "run")
        if op != "run":
            reply = {"pid": self.pid, "socket": self.sock, "started": self.started,
                     "served": self.served, "running": len(self.children)}
            if op == "stop":
                self._stop("gpupipe server stop")
            with contextlib.suppress(OSError):
                _send(conn, reply)
            conn.close()
            return
        why = "the server is stopping" if self.stopping else why_not(req, self.env, self.stamp)
        if why is not None:
            if "changed since the server started" in why:
                self._stop("its code changed")
            with contextlib.suppress(OSError):
                _send(conn, {"refused": why})
            for fd in fds:
                os.close(fd)
            conn.close()
            return
        sys.stdout.flush()
        sys.stderr.flush()
        with warnings.catch_warnings():   # Python 3.12+: numpy's and Arrow's idle pools
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:   # the child keeps none of the server's sockets, only the client's fds
            for other in (*self.children.values(), conn):
                other.close()
            sel.close()
            lsock, wake_r, wake_w = self._own
            lsock.close()
            os.close(wake_r)
            os.close(wake_w)
            raise _Served(req, fds)
        for fd in fds:
            os.close(fd)
        self.served += 1
        self.children[pid] = conn
        try:
            _send(conn, {"pid": pid})
            sel.register(conn, 1, pid)   # selectors.EVENT_READ
        except OSError:   # the client left already
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def _client_gone(self, conn: socket.socket, pid: int, sel) -> None:
        """The client of a running command closed its end (killed): end the command too."""
        with contextlib.suppress(KeyError, ValueError):
            sel.unregister(conn)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)

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
            code = os.waitstatus_to_exitcode(status)
            with contextlib.suppress(KeyError, ValueError):
                sel.unregister(conn)
            with contextlib.suppress(OSError):
                _send(conn, {"exit": code if code >= 0 else 128 - code})
            conn.close()


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


def _run_child(main, req: dict, fds: list[int]) -> int:
    """In the forked child: become the command the client typed, run it, return its code."""
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.clear()
    os.environ.update(req["env"])
    os.chdir(req["cwd"])
    _reopen_std(fds, req.get("fds") or [True, True, True])
    sys.argv = [req.get("argv0") or "gpupipe", *req["argv"]]
    _adopt_forkserver()
    return main(req["argv"])
