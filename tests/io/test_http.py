"""Input over http(s):// through fsspec's HTTP filesystem, from a real HTTP server process
serving data/: a directory listing and a glob find the files, JSONL and WARC read equal to the
same files on disk, a WARC file is cut at record starts through range requests, and a server
that ignores ``Range`` gets the file read whole (one partition, the same documents)."""

from __future__ import annotations

import logging

import pandas as pd
import pytest

from gpupipe.errors import InputError
from gpupipe.runner.sources import make_source
from gpupipe.spec import InputSpec
from tests.conftest import REPO
from tests.io.http_server import HttpServer
from tests.io.remote import frames

pytest.importorskip("aiohttp")
pytest.importorskip("requests")

DATA = REPO / "data"


@pytest.fixture(scope="module", params=[True, False], ids=["ranges", "no-ranges"])
def http(request):
    server = HttpServer(DATA, ranges=request.param)
    server.ranges = request.param
    try:
        yield server
    finally:
        server.stop()


def test_jsonl_listing_and_glob(http):
    local, _ = frames(InputSpec(path=str(DATA / "sample"), id_column=None))
    for path in (f"{http.url}/sample/", f"{http.url}/sample/*.jsonl.gz"):
        remote, src = frames(InputSpec(path=path, id_column=None))
        assert src.files == tuple(f"{http.url}/sample/{p.name}"
                                  for p in sorted((DATA / "sample").glob("*.jsonl.gz")))
        assert len(remote) == 5
        for a, b in zip(remote, local):
            assert a.frame.equals(b.frame) and a.stats == b.stats
    with pytest.raises(InputError, match=r"matches no file"):
        make_source(InputSpec(path=f"{http.url}/sample/nothing.jsonl"))


def test_warc_in_partitions_or_whole(http, caplog):
    local, lsrc = frames(InputSpec(path=str(DATA / "web" / "docs-crawl.warc.gz"),
                                   blocksize=100_000))
    with caplog.at_level(logging.WARNING):
        remote, src = frames(InputSpec(path=f"{http.url}/web/docs-crawl.warc.gz",
                                       blocksize=100_000))
    if http.ranges:
        assert src.blocks == lsrc.blocks and len(src.blocks) == 9
        for a, b in zip(remote, local):
            assert a.frame.equals(b.frame) and a.stats == b.stats
    else:
        assert len(src.blocks) == 1 and "does not answer range requests" in caplog.text
        whole = pd.concat([r.frame for r in local], ignore_index=True)
        assert remote[0].frame.equals(whole) and len(whole) == 113
