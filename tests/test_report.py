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


def _length_hist(texts) -> dict:
    # the reference: plain Python over the texts, the buckets written out again
    edges = [0, 100, 300, 1_000, 3_000, 10_000, 30_000, 100_000]
    labels = [f"{a:,}–{b:,}" for a, b in zip(edges, edges[1:])] + ["100,000+"]
    counts = dict.fromkeys(labels, 0)
    for t in texts:
        k = sum(1 for e in edges[1:] if len(t) >= e)
        counts[labels[k]] += 1
    return counts


def test_lengths_and_languages_before_and_after(client, tmp_path, sample_records):
    """run.json counts every document read and written per length bucket and language; the
    report draws both side by side."""
    out = tmp_path / "o"
    res = gp.Pipeline(input={"path": "data/sample/*.jsonl.gz", "id_column": "id"},
                      stages=[gp.stages.LanguageId(keep=("en", "de")),
                              gp.stages.LengthFilter(min_chars=300)],
                      output=str(out)).run(client=client, progress=False)
    s = res.summary
    assert s["read"]["length_hist"] == _length_hist(r["text"] for r in sample_records)
    data = res.to_pandas()
    assert s["output"]["length_hist"] == _length_hist(data["text"])
    assert sum(s["output"]["length_hist"].values()) == s["output"]["docs"] == len(data)
    assert s["output"]["languages"] == data["language"].value_counts().to_dict()
    assert set(s["output"]["languages"]) == {"en", "de"}
    page = open(res.report_path, encoding="utf-8").read()
    svgs = re.findall(r'<svg class="plot" role="img" aria-label="([^"]+)".*?</svg>', page, re.S)
    assert svgs.count("documents by length (characters)") == 1
    assert svgs.count("documents by language") == 1
    lang_chart = re.search(r'aria-label="documents by language".*?</svg>', page, re.S).group(0)
    seen = s["stages"][0]["counters"]
    en_seen = seen["language:en"]
    assert ">at 0: language_id<" in lang_chart and ">output<" in lang_chart
    assert f">{en_seen:,} ({en_seen / len(sample_records):.1%})<" in lang_chart
    en_out = s["output"]["languages"]["en"]
    assert f">{en_out:,} ({en_out / len(data):.1%})<" in lang_chart
    # every document read was identified before language_id filtered
    assert sum(seen.values()) == len(sample_records)


def test_duplicate_clusters_with_their_texts(client, tmp_path, sample_records):
    """The report's duplicate section: the cluster-size histogram counts the audit's clusters,
    and the largest clusters show the kept and a removed document's text, read back from the
    dedup stage's input."""
    import pandas as pd

    from tests.conftest import write_jsonl

    base = [r for r in sample_records if len(r["text"].split()) > 300][:60]
    a = base[0]
    words = a["text"].split(" ")
    near = [dict(a, id=f"near-{k}", text=" ".join(words[:50 + k] + ["zebra"] + words[51 + k:]))
            for k in range(2)]
    write_jsonl(tmp_path / "in" / "a.jsonl", base + [dict(a, id="exact-copy")] + near)
    res = gp.Pipeline(input={"path": str(tmp_path / "in"), "id_column": "id"},
                      stages=[gp.stages.ExactDedup(), gp.stages.FuzzyDedup(preset="datatrove")],
                      output=str(tmp_path / "o")).run(client=client, progress=False)
    audit = pd.read_parquet(tmp_path / "o" / "dedup" / "duplicates.parquet")
    assert set(audit.loc[audit["duplicate_of"] == a["id"], "id"]) == {"exact-copy", "near-0",
                                                                     "near-1"}
    page = open(res.report_path, encoding="utf-8").read()
    chart = re.search(r'aria-label="clusters by size[^"]*".*?</svg>', page, re.S).group(0)
    assert audit.columns.tolist() == ["id", "duplicate_of", "duplicate_run", "stage",
                                      "similarity", "component"]
    exact_rows = audit[audit["stage"] == "0:exact_dedup"]
    assert exact_rows["similarity"].tolist() == [1.0] and exact_rows["component"].isna().all()
    key = audit["component"].astype("string").fillna("kept " + audit["duplicate_of"])
    sizes = (audit.assign(key=key).groupby(["stage", "key"]).size() + 1).tolist()
    bars = dict(re.findall(r'font-size="11">([^<]+)</text><rect [^>]*/><text [^>]*>([\d,.]+)<',
                           chart))
    assert bars == {"2": str(sizes.count(2)), "3": str(sizes.count(3)),
                    "4–5": str(sum(4 <= n <= 5 for n in sizes)),
                    "6–10": str(sum(6 <= n <= 10 for n in sizes)),
                    "11–100": str(sum(11 <= n <= 100 for n in sizes)),
                    "101+": str(sum(n > 100 for n in sizes))}
    assert sizes.count(3) >= 1

    table = page[page.index("The largest clusters"):]
    cells = re.findall(r"<td>([^<]*)</td>", table.split("</table>")[0])
    rows = [cells[k:k + 5] for k in range(0, len(cells), 5)]

    def snippet(text):
        flat = " ".join(text.split())
        return flat if len(flat) <= 160 else flat[:157] + "…"

    import html as _html

    fuzzy = next(r for r in rows if r[1] == a["id"] and r[0] == "3")
    assert _html.unescape(fuzzy[2]) == snippet(a["text"])
    removed = next(x for x in near if x["id"] == fuzzy[3])
    assert _html.unescape(fuzzy[4]) == snippet(removed["text"])
    exact = next(r for r in rows if r[1] == a["id"] and r[0] == "2")
    assert exact[3] == "exact-copy" and _html.unescape(exact[4]) == snippet(a["text"])


def test_old_run_directories_get_the_same_length_buckets(run):
    """A run.json from before output.length_hist: the report reads the output back and counts
    it in the same buckets."""
    from gpupipe.report import _lengths

    assert _lengths(run.output) == [(k, float(v)) for k, v in
                                    run.summary["output"]["length_hist"].items()]
