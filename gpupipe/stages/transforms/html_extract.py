"""HTML -> main text with an extractor library: in this process, with or without a timer that
ends the process when a document runs past its time (`extract_all`), or in a helper process
that such a document costs instead (`extract_with_timeout`).

This module imports nothing of gpupipe: the helper process runs it as a script
(``python -P -c 'runpy.run_path(...)'``), so that it starts in a tenth of a second instead of
importing the package.
"""

from __future__ import annotations

import os
import pickle
import selectors
import signal
import struct
import subprocess
import sys
import threading

#: extractor name -> the options it takes (the stage's parameters of the same names)
OPTIONS = {
    "resiliparse": ("main_content", "preserve_formatting", "list_bullets", "alt_texts", "links"),
    "trafilatura": ("favor_precision", "favor_recall", "include_comments", "include_tables"),
    "justext": ("language",),
}


def extractor(name: str, options: dict):
    """``html (str) -> text (str)``: the library's own call, with the given options."""
    if name == "resiliparse":
        from resiliparse.extract.html2text import extract_plain_text

        return lambda html: extract_plain_text(html, **options)
    if name == "trafilatura":
        import trafilatura

        return lambda html: trafilatura.extract(html, **options) or ""
    if name == "justext":
        import justext

        stoplist = justext.get_stoplist(options["language"])
        return lambda html: "\n\n".join(p.text for p in justext.justext(html, stoplist)
                                        if not p.is_boilerplate) if html.strip() else ""
    raise ValueError(f"unknown extractor {name!r}")


def extract_all(fn, htmls, alarm: float | None = None) -> list[tuple[str | None, str | None]]:
    """``(text, None)`` or ``(None, error)`` per document, in this thread.

    ``alarm``: seconds each document may take, or this process ends: the document runs under a
    real-time timer whose SIGALRM, at its default action, ends the process even while the
    library holds the GIL (Resiliparse does, for a whole document). Only where `alarm_usable`,
    in a process whose death costs nothing but its time."""
    out = []
    try:
        for html in htmls:
            if alarm:
                signal.setitimer(signal.ITIMER_REAL, alarm)
            try:
                out.append((fn(html), None))
            except Exception as e:   # the library's own failure on one page is that page's
                out.append((None, f"{type(e).__name__}: {e}"[:500]))
    finally:
        if alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
    return out


def alarm_usable() -> bool:
    """Whether `extract_all` may use the real-time timer here: SIGALRM is at its default action
    (ends the process), this thread does not block it, and no timer is set."""
    return (signal.getsignal(signal.SIGALRM) == signal.SIG_DFL
            and signal.SIGALRM not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
            and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0))


# -- the helper process -------------------------------------------------------------------------

def _send(stream, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    for part in (struct.pack("<Q", len(data)), data):
        view = memoryview(part)
        while view:   # an unbuffered pipe may take part of it (a signal during the write)
            view = view[stream.write(view):]
    stream.flush()


def _recv_exact(stream, n: int) -> bytes:
    parts, left = [], n
    while left:
        chunk = stream.read(left)
        if not chunk:
            raise EOFError
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def _recv(stream):
    (n,) = struct.unpack("<Q", _recv_exact(stream, 8))
    return pickle.loads(_recv_exact(stream, n))


#: the helper sends what it extracted at least this often (seconds), and the worker looks at its
#: progress this often while it waits: a document is stopped at most this much past its timeout
FLUSH = POLL = 0.1
_COUNT = struct.Struct("<Q")


def _child_main() -> None:
    """The helper: reads ``(name, options)``, then a partition's HTML at a time; before each
    document it counts it in the shared progress counter (the descriptor in ``sys.argv[2]``),
    and it sends what it extracted in batches, every `FLUSH` seconds and at the partition's
    end. Ends when its input closes (the worker is gone)."""
    import mmap
    import time

    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr   # a library's print must not corrupt the replies
    progress = mmap.mmap(int(sys.argv[2]), _COUNT.size)
    started = 0
    try:
        name, options = _recv(inp)
        fn = extractor(name, options)
        _send(out, "ready")
        while True:
            batch, last = [], time.monotonic()
            for html in _recv(inp):
                started += 1
                _COUNT.pack_into(progress, 0, started)
                batch.append(extract_all(fn, [html])[0])
                if time.monotonic() - last >= FLUSH:
                    _send(out, batch)
                    batch, last = [], time.monotonic()
            if batch:
                _send(out, batch)
    except EOFError:
        return


class Helper:
    """One helper process for one extractor configuration. A partition goes to it in one
    message; it answers in batches, and the worker follows which document it is on through a
    counter in shared memory, so a slow one is found without a reply per document."""

    def __init__(self, name: str, options: dict):
        import mmap

        self.name, self.options = name, options
        self.proc = self.selector = self.progress = None
        fd = os.memfd_create("gpupipe-extract-progress")
        try:
            os.ftruncate(fd, _COUNT.size)
            self.progress = mmap.mmap(fd, _COUNT.size)
            self.proc = subprocess.Popen(
                [sys.executable, "-P", "-c", "import runpy, sys; "
                 "runpy.run_path(sys.argv[1], run_name='__main__')", os.path.abspath(__file__),
                 str(fd)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0,
                pass_fds=(fd,))
            self.selector = selectors.DefaultSelector()
            self.selector.register(self.proc.stdout, selectors.EVENT_READ)
            _send(self.proc.stdin, (name, options))
            try:
                reply = self._reply(120.0)
            except TimeoutError:
                raise RuntimeError(f"the {name} helper process did not start in 120 s") from None
        except BaseException:
            self.close()
            raise
        finally:
            os.close(fd)
        if reply != "ready":
            self.close()
            raise RuntimeError(f"the {name} helper process did not start ({reply!r}); is "
                               f"the library installed?")

    def _reply(self, timeout: float):
        """The next reply, or ``TimeoutError`` after ``timeout`` seconds."""
        if not self.selector.select(timeout):
            raise TimeoutError
        try:
            return _recv(self.proc.stdout)
        except EOFError:
            raise RuntimeError(self._died()) from None

    def _died(self) -> str:
        return f"the {self.name} helper process died (exit code {self.proc.wait()})"

    def _started(self) -> int:
        return _COUNT.unpack_from(self.progress, 0)[0]

    def extract(self, htmls: list[str], timeout: float):
        """``(results, stuck, error)``: ``(text, error)`` for the first documents, in order,
        and ``(results of all, None, None)`` when all went well. Else this helper is closed and
        ``error`` says why (``"timeout"``, or why it died): ``stuck`` is the index of the
        document it was stopped or died on, which ran past ``timeout`` seconds (the
        documents between the results and ``stuck`` are to be done again), or None when it
        stopped between documents (the rest is to be done again)."""
        import time

        base = self._started()
        out: list = []
        try:
            try:
                _send(self.proc.stdin, htmls)   # read whole before the first document starts
            except OSError:   # it died since the last partition, or reading this one
                return self._stop(out, None, self._died())
            # ``seen``: the documents started, as last read; ``since``: when the one in
            # progress started (or the last of the started ones was delivered)
            seen, since = base, time.monotonic()
            while len(out) < len(htmls):
                if self.selector.select(POLL):
                    try:
                        out.extend(_recv(self.proc.stdout))
                    except EOFError:   # killed (out of memory) on the document it was on
                        return self._stop(out, self._started() - base - 1, self._died())
                    if len(out) >= seen - base:   # between documents: no document's time
                        since = time.monotonic()
                    continue
                now, started = time.monotonic(), self._started()
                if started != seen:
                    seen, since = started, now
                elif started > base and len(out) < started - base and now - since > timeout:
                    return self._stop(out, started - base - 1, "timeout")
        except BaseException:   # a half-read reply must not reach the next partition
            self.close()
            raise
        return out, None, None

    def _stop(self, out: list, stuck: int | None, error: str):
        """Close this helper; ``stuck`` only when that document had started and was not
        delivered (else the helper stopped between documents)."""
        self.close()
        if stuck is not None and stuck < len(out):
            stuck = None
        return out, stuck, error

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.selector is not None:
            self.selector.close()
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            for stream in (self.proc.stdin, self.proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
        if self.progress is not None:
            self.progress.close()


_helpers = threading.local()


def extract_with_timeout(name: str, options: dict, htmls: list[str], timeout: float):
    """``(text, error)`` per document, extracted in a helper process that is killed when one
    document takes more than ``timeout`` seconds (its error is ``"timeout"``; the next helper
    goes on with the documents after it). One helper per thread and configuration is kept for
    the next partition."""
    key = (name, tuple(sorted(options.items())))
    pool = getattr(_helpers, "pool", None)
    if pool is None:
        pool = _helpers.pool = {}
    out: list = []
    idle = 0   # helpers in a row that stopped before they delivered or started anything
    while len(out) < len(htmls):
        helper = pool.get(key)
        if helper is None or not helper.alive():
            helper = pool[key] = Helper(name, options)
        rest = htmls[len(out):]
        done, stuck, error = helper.extract(rest, timeout)
        out.extend(done)
        if stuck is not None:
            # what the stopped helper did after its last reply is done again by the next one
            out.extend(extract_with_timeout(name, options, rest[len(done):stuck], timeout))
            out.append((None, error))
        idle = idle + 1 if not done and stuck is None and error is not None else 0
        if idle == 2:
            raise RuntimeError(f"{error}, twice, before the helper started a document")
    return out


if __name__ == "__main__":
    _child_main()
