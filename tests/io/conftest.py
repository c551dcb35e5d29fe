"""The S3-compatible test server (tests/io/s3_server.py), shared by the object-storage tests:
one moto_server process for the session, with a ``corpus`` bucket holding the sample JSONL files
and the WARC crawl."""

from __future__ import annotations

import pytest

from tests.conftest import REPO

SAMPLE = sorted((REPO / "data" / "sample").glob("*.jsonl.gz"))
WARC = REPO / "data" / "web" / "docs-crawl.warc.gz"


@pytest.fixture(scope="session")
def s3(tmp_path_factory):
    from tests.io.s3_server import S3Server

    server = S3Server(tmp_path_factory.mktemp("moto"))
    try:
        fs = server.fs()
        fs.mkdir("corpus")
        for f in SAMPLE:
            fs.put_file(str(f), f"corpus/sample/{f.name}")
        fs.put_file(str(WARC), f"corpus/crawl/{WARC.name}")
        yield server
    finally:
        server.stop()
