#!/usr/bin/env python3
"""Regenerate ``data/sample/`` from Debian documentation packages.

The sample corpus is real, redistributable prose (licences in ``data/README.md``):

* ``python3.11-doc`` - reStructuredText sources of the Python 3.11 documentation, one document per
  section;
* ``debian-faq`` - the Debian FAQ (English), one document per group of paragraphs;
* ``debian-history`` - "A Brief History of Debian" in ten languages and the release dedications,
  one document per group of paragraphs.

Usage::

    python data/make_sample.py            # apt-get download + dpkg -x into a temp dir
    python data/make_sample.py --root DIR # use packages already extracted under DIR

Output is deterministic: the same packages give byte-identical ``.jsonl.gz`` files (gzip mtime 0,
sorted inputs, no timestamps).
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

PACKAGES = ("python3.11-doc", "debian-faq", "debian-history")
PY_SECTIONS = ("tutorial", "howto", "faq", "reference", "library")
PY_BUDGET = 3_000_000  # characters of Python documentation to keep
DOCS_PER_FILE = 400
HEADING_UNDERLINE = re.compile(r"^([=\-~^\"'*+#])\1{3,}\s*$")


def extract(root: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["apt-get", "download", *PACKAGES], cwd=tmp, check=True)
        for deb in sorted(Path(tmp).glob("*.deb")):
            subprocess.run(["dpkg", "-x", str(deb), str(root)], check=True)


def rst_sections(text: str) -> list[str]:
    """Split reStructuredText at section headings (a title line followed by an underline)."""
    lines = text.splitlines()
    starts = [0]
    for i in range(1, len(lines)):
        if HEADING_UNDERLINE.match(lines[i]) and lines[i - 1].strip() and i - 1 > starts[-1]:
            starts.append(i - 1)
    starts.append(len(lines))
    return ["\n".join(lines[a:b]).strip() for a, b in zip(starts, starts[1:])]


def paragraph_groups(text: str, target: int = 2500) -> list[str]:
    """Group blank-line separated paragraphs into documents of about ``target`` characters."""
    docs, cur, size = [], [], 0
    for para in re.split(r"\n\s*\n", text):
        para = para.rstrip()
        if not para.strip():
            continue
        cur.append(para)
        size += len(para)
        if size >= target:
            docs.append("\n\n".join(cur))
            cur, size = [], 0
    if cur:
        docs.append("\n\n".join(cur))
    return docs


def python_docs(root: Path):
    src = root / "usr/share/doc/python3.11/html/_sources"
    used = 0
    for section in PY_SECTIONS:
        for path in sorted((src / section).rglob("*.rst.txt")):
            rel = path.relative_to(src).as_posix()
            for k, body in enumerate(rst_sections(path.read_text(encoding="utf-8"))):
                if not body:
                    continue
                yield {"id": f"python-docs/{rel}#{k}", "text": body, "source": "python3.11-doc",
                       "lang": "en"}
                used += len(body)
            if used >= PY_BUDGET:
                return


def debian_docs(root: Path):
    doc = root / "usr/share/doc"
    faq = doc / "debian/FAQ/debian-faq.en.txt.gz"
    for k, body in enumerate(paragraph_groups(gzip.open(faq, "rt", encoding="utf-8").read())):
        yield {"id": f"debian-faq/en#{k}", "text": body, "source": "debian-faq", "lang": "en"}
    for path in sorted((doc / "debian-history/docs").glob("project-history.*.txt.gz")):
        lang = path.name.split(".")[1]
        text = gzip.open(path, "rt", encoding="utf-8").read()
        for k, body in enumerate(paragraph_groups(text)):
            yield {"id": f"debian-history/{lang}#{k}", "text": body, "source": "debian-history",
                   "lang": lang}
    for path in sorted((doc / "debian-history/dedication").glob("dedication-*.txt")):
        parts = path.name.split(".")
        lang = parts[-2] if len(parts) > 3 else "en"
        try:
            body = path.read_text(encoding="utf-8").strip()
        except UnicodeDecodeError:  # the 2.2 dedications use legacy 8-bit encodings: skip them
            continue
        yield {"id": f"debian-dedication/{path.stem}", "text": body, "source": "debian-history",
               "lang": lang}


def write_jsonl_gz(path: Path, records: list[dict]) -> None:
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, compresslevel=9) as gz:
        for rec in records:
            gz.write((json.dumps(rec, ensure_ascii=False) + "\n").encode("utf-8"))
    path.write_bytes(buf.getvalue())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", type=Path, help="directory where the packages are already extracted")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "sample")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.root
        if root is None:
            root = Path(tmp)
            extract(root)
        args.out.mkdir(parents=True, exist_ok=True)
        for old in args.out.glob("*.jsonl.gz"):
            old.unlink()
        py = list(python_docs(root))
        for n, start in enumerate(range(0, len(py), DOCS_PER_FILE)):
            write_jsonl_gz(args.out / f"python-docs-{n:02d}.jsonl.gz", py[start:start + DOCS_PER_FILE])
        write_jsonl_gz(args.out / "debian-docs.jsonl.gz", list(debian_docs(root)))
    for path in sorted(args.out.glob("*.jsonl.gz")):
        print(f"{path}  {path.stat().st_size:>9,d} bytes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
