"""The S3-compatible test server (tests/io/s3_server.py), shared by the object-storage tests:
one moto_server process for the session, with a ``corpus`` bucket holding the sample JSONL files
and the WARC crawl."""

from __future__ import annotations

import pytest

from tests.io.remote import fill_corpus


@pytest.fixture(scope="session")
def s3(tmp_path_factory):
    from tests.io.s3_server import S3Server

    server = S3Server(tmp_path_factory.mktemp("moto"))
    try:
        fill_corpus(server.fs())
        yield server
    finally:
        server.stop()
