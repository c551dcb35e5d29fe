"""A static HTTP server process for the tests (``python tests/io/http_server.py DIR PORT
[--ranges]``): Python's own `http.server`, which serves directory listings as HTML links (what
fsspec's HTTP filesystem lists) but ignores ``Range``; with ``--ranges`` it answers single
byte ranges with 206, as a CDN or object store does."""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class RangeHandler(SimpleHTTPRequestHandler):
    def send_head(self):
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        path = self.translate_path(self.path)
        if not m or not os.path.isfile(path):
            return super().send_head()
        size = os.path.getsize(path)
        start = int(m.group(1))
        end = min(int(m.group(2)) if m.group(2) else size - 1, size - 1)
        if start >= size:
            self.send_error(416)
            return None
        f = open(path, "rb")
        f.seek(start)
        self.send_response(206)
        self.send_header("Content-Type", self.guess_type(path))
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        self.remaining = end - start + 1
        return f

    def copyfile(self, source, outputfile):
        left = getattr(self, "remaining", None)
        if left is None:
            return super().copyfile(source, outputfile)
        while left > 0:
            chunk = source.read(min(left, 1 << 16))
            if not chunk:
                break
            outputfile.write(chunk)
            left -= len(chunk)

    def log_message(self, *args):
        pass


class HttpServer:
    """The server as a child process, stopped by pid."""

    def __init__(self, root: Path, ranges: bool):
        # here, not at the top: the server process runs this file as a script
        from tests.io.servers import free_port, wait_listening

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, __file__, str(root), str(self.port), *(["--ranges"] if ranges else [])],
            start_new_session=True)
        if not wait_listening(self.proc, self.port, 20):
            self.stop()
            raise RuntimeError("the HTTP test server did not start")

    def stop(self) -> None:
        from tests.io.servers import stop_group

        stop_group(self.proc)


if __name__ == "__main__":
    root, port = sys.argv[1], int(sys.argv[2])
    handler = RangeHandler if "--ranges" in sys.argv else SimpleHTTPRequestHandler
    handler = functools.partial(handler, directory=root)
    ThreadingHTTPServer(("127.0.0.1", port), handler).serve_forever()
