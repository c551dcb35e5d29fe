"""HTML -> main text with an extractor library, in this process or in a helper process that a
per-document timeout can kill (`Extractors`).

This module imports nothing of gpupipe: the helper process runs it as a script
(``python -P -c 'runpy.run_path(...)'``), so that it starts in a tenth of a second instead of
importing the package.
"""

from __future__ import annotations

import os
import pickle
import selectors
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


def extract_all(fn, htmls) -> list[tuple[str | None, str | None]]:
    """``(text, None)`` or ``(None, error)`` per document, in this thread."""
    out = []
    for html in htmls:
        try:
            out.append((fn(html), None))
        except Exception as e:   # the library's own failure on one page is that page's
            out.append((None, f"{type(e).__name__}: {e}"[:500]))
    return out


# -- the helper process -------------------------------------------------------------------------

def _send(stream, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)) + data)
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


def _child_main() -> None:
    """The helper: reads ``(name, options)``, then batches of HTML; answers one result per
    document as soon as it has it. Ends when its input closes (the worker is gone)."""
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr   # a library's print must not corrupt the replies
    try:
        name, options = _recv(inp)
        fn = extractor(name, options)
        _send(out, "ready")
        while True:
            for html in _recv(inp):   # one reply per document, sent as soon as it is done
                _send(out, extract_all(fn, [html])[0])
    except EOFError:
        return


class Helper:
    """One helper process for one extractor configuration."""

    def __init__(self, name: str, options: dict):
        self.name, self.options = name, options
        self.proc = subprocess.Popen(
            [sys.executable, "-P", "-c", "import runpy, sys; "
             "runpy.run_path(sys.argv[1], run_name='__main__')", os.path.abspath(__file__)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        # one selector for the helper's replies (not one per document)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.proc.stdout, selectors.EVENT_READ)
        _send(self.proc.stdin, (name, options))
        reply = self._reply(120.0)
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
            raise RuntimeError(f"the {self.name} helper process died (exit code "
                               f"{self.proc.wait()})") from None

    def _feed(self, htmls: list[str], batch: int) -> None:
        """Send the documents in small batches while the helper works, so that it never
        waits for input (a thread: the pipe holds 64 KiB, and replies must be read
        meanwhile)."""
        try:
            for k in range(0, len(htmls), batch):
                _send(self.proc.stdin, htmls[k:k + batch])
        except (OSError, ValueError):   # the helper was killed (a timeout): nothing to send
            pass

    def extract(self, htmls: list[str], timeout: float, batch: int = 8):
        """``(text, error)`` per document; the document that runs past ``timeout`` seconds is
        ``(None, "timeout")`` and ends this helper (the caller starts another)."""
        feeder = threading.Thread(target=self._feed, args=(htmls, batch), daemon=True,
                                  name="gpupipe-extract-feed")
        feeder.start()
        out = []
        for _ in htmls:
            try:
                out.append(self._reply(timeout))
            except TimeoutError:
                self.close()
                out.append((None, "timeout"))
                break
            except RuntimeError as e:   # killed (out of memory) on this document
                self.close()
                out.append((None, str(e)))
                break
        feeder.join()
        return out

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        self.selector.close()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass


_helpers = threading.local()


def extract_with_timeout(name: str, options: dict, htmls: list[str], timeout: float):
    """``(text, error)`` per document, each extracted in a helper process that is killed when
    one document takes more than ``timeout`` seconds (its error is ``"timeout"``; the next
    helper goes on with the documents after it). One helper per thread and configuration is
    kept for the next partition."""
    key = (name, tuple(sorted(options.items())))
    pool = getattr(_helpers, "pool", None)
    if pool is None:
        pool = _helpers.pool = {}
    out: list = []
    while len(out) < len(htmls):
        helper = pool.get(key)
        if helper is None or not helper.alive():
            helper = pool[key] = Helper(name, options)
        done = helper.extract(htmls[len(out):], timeout)
        out.extend(done)
    return out


if __name__ == "__main__":
    _child_main()
