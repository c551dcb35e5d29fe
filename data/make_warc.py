#!/usr/bin/env python3
"""Regenerate ``data/web/docs-crawl.warc.gz``: a small, real-looking web crawl of HTML
documentation shipped in Debian packages (licences in ``data/README.md``).

* ``python3.11-doc``: HTML pages of the Python 3.11 documentation under
  ``https://docs.python.org/3.11/``, plus their stylesheet, a script and an image (responses that
  are not text, which a crawl always holds);
* ``debian-faq``: the HTML Debian FAQ under ``https://www.debian.org/doc/manuals/debian-faq/``.

Like a Common Crawl file, the archive opens with a ``warcinfo`` record and holds, per URL, a
``request``, a ``response`` (with its HTTP headers) and a ``metadata`` record, each its own gzip
member. A few pages are crawled twice (under ``http://`` and ``https://``, as crawls do), and one
page is served as ISO-8859-1 with that charset declared.

Usage::

    python data/make_warc.py              # apt-get download + dpkg -x into a temp dir
    python data/make_warc.py --root DIR   # packages already extracted under DIR

The output is deterministic: record ids are UUIDs derived from the URL, dates are fixed, and gzip
members carry no time stamp, so the same packages give a byte-identical file.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import io
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

PACKAGES = ("python3.11-doc", "debian-faq")
PY_HTML = "usr/share/doc/python3.11/html"
FAQ_HTML = "usr/share/doc/debian/FAQ"
PY_SECTIONS = ("tutorial", "howto", "faq", "reference", "library", "c-api")
MAX_PAGE = 60_000          # bytes: larger pages are left out (keeps the file small)
BUDGET = 3_200_000         # bytes of HTML in all
NOT_TEXT = (("_static/classic.css", "text/css"), ("_static/file.png", "image/png"),
            ("_static/searchtools.js", "application/javascript"))
TWICE = 4                  # the first pages are crawled again under http://
LATIN1 = "reference/toplevel_components.html"
START = datetime.datetime(2026, 11, 2, 8, 0, 0, tzinfo=datetime.UTC)
OUT = Path(__file__).parent / "web" / "docs-crawl.warc.gz"


def extract(root: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["apt-get", "download", *PACKAGES], cwd=tmp, check=True)
        for deb in sorted(Path(tmp).glob("*.deb")):
            subprocess.run(["dpkg", "-x", str(deb), str(root)], check=True)


def pages(root: Path) -> list[tuple[str, bytes, str]]:
    """(url, body, content type) of every response, in crawl order."""
    out: list[tuple[str, bytes, str]] = []
    used = 0
    py = root / PY_HTML
    for section in PY_SECTIONS:
        for path in sorted((py / section).glob("*.html")):
            body = path.read_bytes()
            if len(body) > MAX_PAGE or used + len(body) > BUDGET:
                continue
            used += len(body)
            rel = path.relative_to(py).as_posix()
            ctype = "text/html; charset=utf-8"
            if rel == LATIN1:
                body = body.decode("utf-8").encode("iso-8859-1", errors="xmlcharrefreplace")
                ctype = "text/html; charset=iso-8859-1"
            out.append((f"https://docs.python.org/3.11/{rel}", body, ctype))
    for rel, ctype in NOT_TEXT:
        out.append((f"https://docs.python.org/3.11/{rel}", (py / rel).read_bytes(), ctype))
    for path in sorted((root / FAQ_HTML).glob("*.en.html")):
        name = path.name.replace(".en.html", ".html")
        out.append((f"https://www.debian.org/doc/manuals/debian-faq/{name}", path.read_bytes(),
                    "text/html; charset=utf-8"))
    html = [p for p in out if p[2].startswith("text/html")]
    out.extend((url.replace("https://", "http://", 1), body, ctype)
               for url, body, ctype in html[:TWICE])
    return out


def write(records: list[tuple[str, bytes, str]], out: Path) -> None:
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    buf = io.BytesIO()
    writer = WARCWriter(buf, gzip=True)

    def headers(url: str, kind: str, k: int, extra: dict | None = None) -> dict:
        date = (START + datetime.timedelta(seconds=k)).strftime("%Y-%m-%dT%H:%M:%SZ")
        rid = uuid.uuid5(uuid.NAMESPACE_URL, f"{kind}:{url}")
        return {"WARC-Record-ID": f"<urn:uuid:{rid}>", "WARC-Date": date, **(extra or {})}

    info = writer.create_warcinfo_record(out.name, {
        "software": "gpupipe data/make_warc.py", "format": "WARC File Format 1.1",
        "description": "HTML documentation from Debian's python3.11-doc and debian-faq"})
    info.rec_headers.replace_header("WARC-Record-ID", headers(out.name, "warcinfo", 0)[
        "WARC-Record-ID"])
    info.rec_headers.replace_header("WARC-Date", START.strftime("%Y-%m-%dT%H:%M:%SZ"))
    writer.write_record(info)
    for k, (url, body, ctype) in enumerate(records, 1):
        host = url.split("/")[2]
        path = "/" + url.split("/", 3)[3]
        req = StatusAndHeaders(f"GET {path} HTTP/1.1", [("Host", host), (
            "User-Agent", "gpupipe-sample-crawler/1.0"), ("Accept", "text/html,*/*")],
            is_http_request=True)
        request = writer.create_warc_record(url, "request", payload=io.BytesIO(b""),
                                            length=0, http_headers=req,
                                            warc_headers_dict=headers(url, "request", k))
        resp = StatusAndHeaders("200 OK", [("Content-Type", ctype),
                                           ("Content-Length", str(len(body)))],
                                protocol="HTTP/1.1")
        response = writer.create_warc_record(
            url, "response", payload=io.BytesIO(body), length=len(body), http_headers=resp,
            warc_headers_dict=headers(url, "response", k, {
                "WARC-Concurrent-To": request.rec_headers.get_header("WARC-Record-ID"),
                "WARC-Identified-Payload-Type": ctype.split(";")[0]}))
        meta = (f"fetchTimeMs: {5 + k % 17}\ncharset-detected: "
                f"{ctype.split('charset=')[-1] if 'charset=' in ctype else 'none'}\n").encode()
        metadata = writer.create_warc_record(
            url, "metadata", payload=io.BytesIO(meta), length=len(meta),
            warc_content_type="application/warc-fields",
            warc_headers_dict=headers(url, "metadata", k, {
                "WARC-Concurrent-To": response.rec_headers.get_header("WARC-Record-ID")}))
        for record in (request, response, metadata):
            writer.write_record(record)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(buf.getvalue())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, help="packages already extracted under this directory")
    ap.add_argument("-o", "--output", type=Path, default=OUT)
    args = ap.parse_args(argv)
    if args.root is None:
        with tempfile.TemporaryDirectory() as tmp:
            extract(Path(tmp))
            records = pages(Path(tmp))
    else:
        records = pages(args.root)
    write(records, args.output)
    html = sum(1 for _, _, t in records if t.startswith("text/html"))
    print(f"{args.output}: {len(records)} responses ({html} HTML, "
          f"{sum(len(b) for _, b, _ in records):,} bytes), {args.output.stat().st_size:,} bytes, "
          f"sha256 {hashlib.sha256(args.output.read_bytes()).hexdigest()[:16]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
