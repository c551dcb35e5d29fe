"""`gpupipe server`: a real server process on a socket of the test's own, driven by the real
``gpupipe`` command in subprocesses, and stopped by its pid (its session) also on failure."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from gpupipe import server
from tests.conftest import REPO

GPUPIPE = os.path.join(os.path.dirname(sys.executable), "gpupipe")

pytestmark = pytest.mark.xdist_group("server")

PIPELINE = """version: 1
name: served
input: {{format: jsonl, path: {src}, id_column: id}}
cluster: {{kind: local, workers: 2}}
stages:
  - stage: length_filter
    min_words: 5
  - stage: tokenize
    tokenizer: {tok}
output:
  path: {out}
  shards: {{num_shards: 1}}
"""


class Server:
    def __init__(self, root: Path, env: dict):
        self.sock = root / "s" / "gpupipe.sock"
        self.env = {**env, "GPUPIPE_SERVER": "", "GPUPIPE_SERVER_SOCKET": str(self.sock)}
        self.pid: int | None = None

    def gpupipe(self, *args, env=None, **kw) -> subprocess.CompletedProcess:
        return subprocess.run([GPUPIPE, *args], capture_output=True, text=True, timeout=300,
                              env={**self.env, **(env or {})}, **kw)

    def status(self) -> dict | None:
        return server.request({"op": "ping"}, str(self.sock))

    def start(self, *args) -> None:
        r = self.gpupipe("server", "start", *args)
        assert r.returncode == 0, r.stderr
        assert "started in" in r.stdout and str(self.sock) in r.stdout
        self.pid = self.status()["pid"]

    def wait_gone(self, timeout: float) -> float:
        t0 = time.monotonic()
        while self.sock.exists() or _alive(self.pid):
            assert time.monotonic() - t0 < timeout, "the server is still there"
            time.sleep(0.05)
        return time.monotonic() - t0

    def kill(self) -> None:
        if self.pid and _alive(self.pid):   # its session: the server, its forkserver, runs
            os.killpg(self.pid, signal.SIGKILL)


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:   # a zombie is gone for our purpose
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture
def srv(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    s = Server(tmp_path, env)
    try:
        yield s
    finally:
        s.kill()


@pytest.fixture
def one_doc(tmp_path) -> Path:
    src = tmp_path / "one.jsonl"
    src.write_text(json.dumps({"id": "a", "text": "The quick brown fox jumps over the lazy dog "
                               "and runs far away into the forest."}) + "\n")
    p = tmp_path / "p.yaml"
    p.write_text(PIPELINE.format(src=src, tok=REPO / "data" / "tokenizer.json",
                                 out=tmp_path / "out"))
    return p


def _bytes(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes()
            for d in ("data", "shards") for p in sorted((run / d).rglob("*"))
            if p.is_file() and p.suffix not in (".txt", ".json")}


def test_a_served_run_gives_the_bytes_of_a_run_without_it(srv, one_doc, tmp_path):
    srv.start()
    assert srv.status()["served"] == 0
    served, direct = tmp_path / "served", tmp_path / "direct"
    r = srv.gpupipe("run", str(one_doc), "-o", str(served))
    assert r.returncode == 0, r.stderr
    assert "records in 1 = kept 1 + dropped 0 + rejected 0" in r.stdout   # the client's stdout
    assert "INFO [0] read → length_filter → tokenize: 1 task(s)" in r.stderr
    assert srv.status()["served"] == 1
    r = srv.gpupipe("run", str(one_doc), "-o", str(direct), env={"GPUPIPE_SERVER": "off"})
    assert r.returncode == 0, r.stderr
    assert srv.status()["served"] == 1
    assert _bytes(served) == _bytes(direct) and len(_bytes(served)) == 4
    summary = json.loads((served / "run.json").read_text())
    assert summary["status"] == "complete" and summary["accounting"]["docs_out"] == 1
    # the exit code and the error of a failing command come back; a second start says so
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nstages: []\n")
    r = srv.gpupipe("validate", str(bad))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith(f"error: {bad}: invalid pipeline") and "Traceback" not in r.stderr
    assert srv.status()["served"] == 2
    r = srv.gpupipe("server", "start")
    assert r.returncode == 0 and r.stdout.startswith(f"gpupipe server {srv.pid} at {srv.sock}")
    r = srv.gpupipe("server", "stop")
    assert r.returncode == 0 and f"gpupipe server {srv.pid} stopped (2 command(s) served)" in r.stdout
    srv.wait_gone(10)
    assert srv.gpupipe("server", "status").returncode == 3


def test_a_command_in_another_environment_runs_without_it(srv, one_doc, tmp_path):
    srv.start()
    r = srv.gpupipe("validate", str(one_doc), env={"DASK_DISTRIBUTED__COMM__RETRY__COUNT": "7"})
    assert r.returncode == 0 and r.stdout.endswith("valid — 2 stage(s): length_filter, tokenize\n")
    assert r.stderr == ("gpupipe: not using the server (the environment differs in "
                        "DASK_DISTRIBUTED__COMM__RETRY__COUNT, which is read at import; "
                        "`gpupipe server stop` and start it again in this environment); "
                        "running the command here\n")
    assert srv.status()["served"] == 0
    # a variable no import reads reaches the command as it would a new process
    r = srv.gpupipe("validate", str(one_doc), env={"SOME_TOKEN": "x"})
    assert r.returncode == 0 and r.stderr == "" and srv.status()["served"] == 1


def test_code_changed_since_it_started_is_refused_and_stops_it(srv, one_doc, tmp_path):
    extra = tmp_path / "extra"
    extra.mkdir()
    srv.env["PYTHONPATH"] = str(extra)
    srv.start()
    assert srv.gpupipe("validate", str(one_doc)).stderr == ""
    (extra / "new_module.py").write_text("")   # as `pip install` changes site-packages
    r = srv.gpupipe("validate", str(one_doc))
    assert r.returncode == 0 and "valid" in r.stdout
    assert r.stderr == (f"gpupipe: not using the server ({extra} changed since the server "
                        f"started; it stops now, `gpupipe server start` starts it again); "
                        f"running the command here\n")
    srv.wait_gone(10)
    assert "stopped (its code changed; 1 command(s) served)" in (
        srv.sock.parent / "gpupipe.log").read_text()


def _until(path: Path, text: str, proc, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while text not in (path.read_text() if path.exists() else ""):
        assert proc.poll() is None, path.read_text()
        assert time.monotonic() < end, path.read_text()
        time.sleep(0.05)


def _command(srv) -> psutil.Process:
    """The served command's process: the server's child that is not the forkserver."""
    kids = [k for k in psutil.Process(srv.pid).children()
            if "multiprocessing" not in " ".join(k.cmdline())]
    assert len(kids) == 1, kids
    return kids[0]


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _until_state(pid: int, state: str) -> None:
    end = time.monotonic() + 10
    while _state(pid) != state:
        assert time.monotonic() < end, (pid, _state(pid), state)
        time.sleep(0.02)


def _as_typed(*ignore: int):
    """A ``preexec_fn``: the signals a command typed at an interactive shell starts with (a
    test run in the background inherits SIGINT and SIGQUIT ignored), ``ignore`` ignored."""
    def preexec():
        for sig in server._JOB_SIGNALS:
            signal.signal(sig, signal.SIG_IGN if sig in ignore else signal.SIG_DFL)
    return preexec


#: ... and a process group of its own, as a shell job has: one whose parent is outside it (an
#: orphaned group, such as that of a test run in the background, never stops on SIGTSTP)
JOB = {"process_group": 0}


def _served_run(srv, tmp_path) -> tuple[subprocess.Popen, Path]:
    """A served ``gpupipe run`` of english_web, once its cluster starts; its stderr's file."""
    err = tmp_path / "err"
    with open(err, "w") as f:
        proc = subprocess.Popen([GPUPIPE, "run", "pipelines/english_web.yaml", "-o",
                                 str(tmp_path / "run")], stdout=subprocess.DEVNULL, stderr=f,
                                env=srv.env, cwd=REPO, preexec_fn=_as_typed(), **JOB)
    try:
        _until(err, "starting a local Dask cluster", proc)
    except BaseException:
        proc.kill()
        raise
    return proc, err


@pytest.mark.parametrize("how", ["ctrl-c", "client-killed", "sigterm", "ctrl-z"])
def test_interrupting_the_client_stops_the_served_command(srv, tmp_path, how):
    srv.start()
    proc, err = _served_run(srv, tmp_path)
    try:
        assert srv.status()["running"] == 1
        if how == "ctrl-z":   # the command stops with the client, and goes on with it
            child = _command(srv).pid
            proc.send_signal(signal.SIGTSTP)
            _until_state(proc.pid, "T")
            _until_state(child, "T")
            proc.send_signal(signal.SIGCONT)
            _until_state(child, "S")
            assert _state(child) != "T" and _state(proc.pid) != "T"
        if how in ("ctrl-c", "ctrl-z"):
            proc.send_signal(signal.SIGINT)
            assert proc.wait(60) == 130
            assert err.read_text().endswith(
                "interrupted — run the same command again to resume\n")
        elif how == "sigterm":   # killed by the signal, as the shell sees it without the server
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(60) == -signal.SIGTERM
        else:
            proc.kill()
            proc.wait(10)
        end = time.monotonic() + 30
        while srv.status()["running"]:
            assert time.monotonic() < end, "the served command still runs"
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_it_stops_when_idle(srv):
    srv.start("--idle-timeout", "1")
    assert 0 < srv.wait_gone(15) < 10
    assert "stopped (idle for 1 s; 0 command(s) served)" in (
        srv.sock.parent / "gpupipe.log").read_text()


GIVE_UP = """
import os, sys
from gpupipe import server
conn = server._connect(server.socket_path())
null = os.open(os.devnull, os.O_RDWR)
server._send(conn, {"argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ),
                    "sys_path": sys.path, "executable": sys.executable, "fds": [True] * 3,
                    "umask": 0o022, "settings": server.process_settings()}, [null] * 3)
print(server._recv(conn)["pid"])
"""


def test_a_command_the_client_gave_up_on_never_runs(srv, one_doc, tmp_path):
    """The server forks the command at once, but it starts only on the client's go: a client
    that stopped waiting (and ran the command itself) leaves no second copy running."""
    srv.start()
    out = tmp_path / "never"
    r = subprocess.run([sys.executable, "-c", GIVE_UP, "run", str(one_doc), "-o", str(out)],
                       capture_output=True, text=True, env=srv.env, timeout=60)
    assert r.returncode == 0, r.stderr
    child = int(r.stdout)
    end = time.monotonic() + 10
    while _alive(child):
        assert time.monotonic() < end, "the command started without a go"
        time.sleep(0.02)
    assert not out.exists()
    assert (srv.status()["served"], srv.status()["running"]) == (0, 0)


def test_the_command_has_the_client_s_umask_and_settings(srv, one_doc, tmp_path):
    import resource

    srv.start()
    out = tmp_path / "private"
    r = srv.gpupipe("run", str(one_doc), "-o", str(out), preexec_fn=lambda: os.umask(0o077))
    assert r.returncode == 0, r.stderr
    assert {oct(p.stat().st_mode & 0o777) for p in [out, *out.rglob("*")]} == {"0o700", "0o600"}
    assert srv.status()["served"] == 1
    # other resource limits: what distributed read at import could differ
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    r = srv.gpupipe("validate", str(one_doc), preexec_fn=lambda: resource.setrlimit(
        resource.RLIMIT_NOFILE, (soft - 1, hard)))
    assert r.returncode == 0 and "valid" in r.stdout
    assert r.stderr == ("gpupipe: not using the server (the process settings differ "
                        "(RLIMIT_NOFILE); `gpupipe server stop` and start it again from this "
                        "shell); running the command here\n")
    assert srv.status()["served"] == 1


def test_a_killed_server_takes_its_command_along(srv, tmp_path):
    srv.start()
    proc, err = _served_run(srv, tmp_path)
    try:
        tree = psutil.Process(srv.pid).children(recursive=True)
        os.kill(srv.pid, signal.SIGKILL)
        assert proc.wait(30) == 1
        assert err.read_text().endswith("gpupipe: the server ended while it ran the command; "
                                        "the command was stopped\n")
        end = time.monotonic() + 20
        while any(_alive(p.pid) for p in tree):
            assert time.monotonic() < end, [p.pid for p in tree if _alive(p.pid)]
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            proc.kill()


def _served_validate(srv, tmp_path, ignore=()) -> tuple[subprocess.Popen, psutil.Process]:
    """A served ``gpupipe validate /dev/stdin`` that waits for its input, and its process,
    once it started (the client sent its go, so its signals are relayed)."""
    served = srv.status()["served"]
    proc = subprocess.Popen([GPUPIPE, "validate", "/dev/stdin"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=srv.env,
                            preexec_fn=_as_typed(*ignore), **JOB)
    end = time.monotonic() + 30
    while srv.status()["served"] == served:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end
        time.sleep(0.02)
    return proc, _command(srv)


def test_commands_leak_no_descriptor_and_a_sigkill_ends_the_client_so(srv, one_doc, tmp_path):
    srv.start()
    fds = len(os.listdir(f"/proc/{srv.pid}/fd"))
    for _ in range(4):
        r = srv.gpupipe("validate", str(one_doc))
        assert r.returncode == 0 and r.stderr == "", r.stderr
    assert srv.status()["served"] == 4
    # a connection closes just after its client got its answer: the count taken after start
    # may hold the ping's, and the last command's may still be open
    end = time.monotonic() + 10
    while len(os.listdir(f"/proc/{srv.pid}/fd")) > fds:
        assert time.monotonic() < end, (len(os.listdir(f"/proc/{srv.pid}/fd")), fds)
        time.sleep(0.05)
    # the kernel's OOM killer, or kill -9: the client ends by SIGKILL too, without a word
    proc, child = _served_validate(srv, tmp_path)
    child.kill()
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL and err == b""


def test_signals_the_shell_ignores_stay_ignored(srv, one_doc, tmp_path):
    """``nohup gpupipe run ... &``: a hangup ends neither the client nor the command."""
    srv.start()
    proc, child = _served_validate(
        srv, tmp_path, ignore=(signal.SIGHUP,))
    try:
        proc.send_signal(signal.SIGHUP)
        child.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        assert proc.poll() is None and _alive(child.pid)
        out, err = proc.communicate(one_doc.read_bytes(), timeout=30)
        assert proc.returncode == 0 and b"valid" in out, err
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize("ignore", [(), (signal.SIGTERM,)], ids=["", "sigterm-ignored"])
def test_a_stopped_command_whose_client_was_killed_ends(srv, tmp_path, ignore):
    """SIGTERM, then SIGCONT so that it acts on it; SIGKILL for a command that ignores SIGTERM
    (as its client's shell did)."""
    srv.start()
    proc, child = _served_validate(srv, tmp_path, ignore)
    try:
        proc.send_signal(signal.SIGTSTP)
        _until_state(child.pid, "T")
        proc.kill()
        proc.wait(10)
        child.wait(20)
        assert srv.status()["running"] == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_descriptors_only_the_client_holds_and_other_groups_run_without_it(srv, one_doc,
                                                                          tmp_path):
    srv.start()
    fd = os.open(one_doc, os.O_RDONLY)
    try:
        r = subprocess.run([GPUPIPE, "validate", f"/dev/fd/{fd}"], capture_output=True,
                           text=True, env=srv.env, pass_fds=(fd,), timeout=60)
    finally:
        os.close(fd)
    assert r.returncode == 0 and "valid" in r.stdout
    assert r.stderr == (f"gpupipe: not using the server (the command names descriptor {fd}, "
                        f"which only this process holds); running the command here\n")
    if os.geteuid() != 0:
        pytest.skip("changing the group needs root")
    r = srv.gpupipe("validate", str(one_doc), preexec_fn=lambda: os.setgid(4321))
    assert r.returncode == 0 and "valid" in r.stdout
    assert r.stderr == ("gpupipe: not using the server (the process settings differ "
                        "(groups); `gpupipe server stop` and start it again from this "
                        "shell); running the command here\n")
    assert srv.status()["served"] == 0
