"""The run report: every run writes a self-contained report.html, `gpupipe report` rebuilds it
byte for byte, and a real headless Chromium renders it with every plot, no console error and a
page that is not blank."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import sys
import zlib

import pytest

import gpupipe as gp

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def run(client, tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "o"
    res = gp.Pipeline.from_yaml("pipelines/quickstart.yaml").run(output=str(out), client=client,
                                                                  progress=False)
    return res


def test_every_run_writes_the_report_and_the_cli_rebuilds_it(run):
    path = os.path.join(run.output, "report.html")
    first = open(path, "rb").read()
    page = first.decode()
    assert "<script" not in page and "http://" not in page and "https://" not in page
    for st in run.summary["stages"]:
        assert f"{st['position']}: {st['stage']}" in page
    os.remove(path)
    r = subprocess.run([sys.executable, "-m", "gpupipe.cli", "report", run.output],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == path
    assert open(path, "rb").read() == first
    r = subprocess.run([sys.executable, "-m", "gpupipe.cli", "report", "/nonexistent"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "not a gpupipe run directory" in r.stderr


def png_pixels(path) -> bytes:
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + n]
        pos += 12 + n
    return zlib.decompress(idat)


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium (.ci/run installs it: apt-get install "
                                             "-y chromium)")
def test_chromium_renders_every_plot(run, tmp_path):
    url = "file://" + os.path.join(run.output, "report.html")
    dom = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'a'}", "--dump-dom",
                          url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    shot = tmp_path / "shot.png"
    r = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'b'}",
                        "--enable-logging=stderr", "--v=0", f"--screenshot={shot}",
                        "--window-size=1200,1600", url], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert [line for line in r.stderr.splitlines() if "CONSOLE" in line] == []
    svgs = re.findall(r'<svg class="plot".*?</svg>', dom.stdout, re.S)
    stages = run.summary["stages"]
    drop_charts = sum(1 for st in stages if st["drops"])
    # funnel (docs, MB), drops per filter, lengths, tokens per split and shard, time (2)
    assert len(svgs) == 2 + drop_charts + 1 + 2 + 2
    assert all(len(re.findall(r"<rect ", s)) >= 1 for s in svgs)
    text = re.sub(r"<[^>]+>", " ", dom.stdout)
    for st in stages:
        assert f"{st['position']}: {st['stage']}" in text
    pixels = png_pixels(shot)
    assert len(pixels) > 1_000_000 and len(set(pixels[::7])) > 20   # not a blank page
