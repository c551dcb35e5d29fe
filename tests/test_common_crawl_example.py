"""pipelines/common_crawl.yaml, as a user runs it: from the CLI and from Python, on the shipped
crawl, with the same result; the report shows the WARC records and the extraction drops."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import gpupipe as gp

PIPELINE = "pipelines/common_crawl.yaml"
#: what the example does to data/web/docs-crawl.warc.gz, stage by stage (docs out)
EXPECTED_OUT = {"extract_html": 113, "url_filter": 111, "url_dedup": 107, "language_id": 107}


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("cc") / "out"
    r = subprocess.run([sys.executable, "-m", "gpupipe.cli", "run", PIPELINE, "-o", str(out),
                        "--workers", "2"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return out, json.loads((out / "run.json").read_text())


def test_cli_run_counts(cli_run):
    out, run = cli_run
    read = run["read"]
    assert read["records"] == {"metadata": 116, "request": 116, "response": 116, "warcinfo": 1}
    assert read["skipped"] == {"application/javascript": 1, "image/png": 1, "text/css": 1}
    assert (read["docs"], read["charset_detected"], read["rejected"]) == (113, 0, {})
    stages = {st["stage"]: st for st in run["stages"]}
    assert {k: stages[k]["docs_out"] for k in EXPECTED_OUT} == EXPECTED_OUT
    assert stages["url_filter"]["drops"] == {"example": 2}
    assert stages["url_dedup"]["drops"] == {"url_duplicate": 4}
    assert run["accounting"]["balanced"]
    html = (out / "report.html").read_text()
    assert "WARC records by type" in html and "text/css" in html
    assert "no_main_text" not in json.dumps(stages["extract_html"]["drops"])


def test_python_run_equals_cli(cli_run, client, tmp_path):
    out, run = cli_run
    res = gp.Pipeline.from_yaml(PIPELINE).run(output=str(tmp_path / "py"), client=client,
                                             progress=False)
    assert res.stage("url_dedup")["drops"] == {"url_duplicate": 4}
    mine = sorted((tmp_path / "py" / "shards").rglob("*.bin"))
    theirs = sorted((out / "shards").rglob("*.bin"))
    assert [p.name for p in mine] == [p.name for p in theirs] and mine
    for a, b in zip(mine, theirs):
        assert np.array_equal(np.fromfile(a, np.uint8), np.fromfile(b, np.uint8)), a.name
    kept = res.to_pandas()
    assert set(kept.columns) >= {"url", "warc_date", "warc_record_id", "content_type",
                                 "http_status", "warc_filename"}
    assert (kept["id"] == kept["warc_record_id"]).all()
