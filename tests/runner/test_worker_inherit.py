"""`gpupipe.runner.worker_inherit`: a forked worker takes the driver's umask, and writes where
the driver writes (a pipe, an appended file), never over a file the driver writes at its own
offset."""

from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = ("import sys; from gpupipe.runner.worker_inherit import redirect; "
          "done = redirect(sys.argv[1]); print('worker', done, flush=True); "
          "print('worker err', file=sys.stderr, flush=True)")


def _driver(stdout, stderr) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            stdout=stdout, stderr=stderr)


def _worker(pid: int) -> None:
    subprocess.run([sys.executable, "-c", SCRIPT, str(pid)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)


def test_a_pipe_and_an_appended_file_are_shared_a_plain_file_is_not(tmp_path):
    r, w = os.pipe()
    appended = tmp_path / "err.log"
    with open(appended, "a") as err:
        err.write("driver\n")
        err.flush()
        driver = _driver(w, err)
    os.close(w)
    try:
        _worker(driver.pid)
    finally:
        driver.kill()
        driver.wait()
    with os.fdopen(r) as f:
        assert f.read() == "worker [1, 2]\n"
    assert appended.read_text() == "driver\nworker err\n"
    plain = tmp_path / "out.txt"
    with open(plain, "w") as out:
        driver = _driver(out, subprocess.DEVNULL)
    try:
        _worker(driver.pid)
    finally:
        driver.kill()
        driver.wait()
    assert plain.read_text() == ""   # fd 1: a file not appended to; fd 2: /dev/null (a device)


def test_nothing_happens_without_a_driver():
    from gpupipe.runner.worker_inherit import redirect

    assert redirect("") == [] and redirect("not-a-pid") == []
    assert redirect(str(2 ** 22 + 1)) == []   # no such process


def test_the_driver_s_umask():
    driver = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                              preexec_fn=lambda: os.umask(0o027))
    try:
        r = subprocess.run([sys.executable, "-c", "import os, sys; from gpupipe.runner."
                            "worker_inherit import umask; print(oct(umask(sys.argv[1])), "
                            "oct(os.umask(0)))", str(driver.pid)], capture_output=True,
                           text=True, check=True, timeout=60)
    finally:
        driver.kill()
        driver.wait()
    assert r.stdout == "0o27 0o27\n"
