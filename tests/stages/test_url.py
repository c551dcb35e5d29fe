"""url_filter and url_dedup: block lists, URL normalisation, one record per URL."""

from __future__ import annotations

import gzip
import re

import pandas as pd
import pytest

import gpupipe as gp
from gpupipe.frame import STRING
from gpupipe.spec import build_stage
from gpupipe.stages import UrlDedup, UrlFilter
from gpupipe.stages.filters.url import normalize_url, read_list

WARC = "data/web/docs-crawl.warc.gz"


def frame(urls):
    return pd.DataFrame({"id": pd.array([str(i) for i in range(len(urls))], dtype=STRING),
                         "text": pd.array(["x"] * len(urls), dtype=STRING),
                         "url": pd.array(urls, dtype=STRING)})


@pytest.mark.parametrize("a, b", [
    ("https://www.Example.com/a/", "http://example.com/a"),
    ("http://example.com:80/a?b=2&a=1#frag", "https://example.com/a?a=1&b=2"),
    ("https://example.com", "http://example.com/"),
])
def test_normalize_url_same_page(a, b):
    assert normalize_url(a) == normalize_url(b)


@pytest.mark.parametrize("a, b", [
    ("https://example.com/a", "https://example.com/b"),
    ("https://example.com:8080/a", "https://example.com/a"),
    ("https://sub.example.com/a", "https://example.com/a"),
    ("https://example.com/a?x=1", "https://example.com/a?x=2"),
])
def test_normalize_url_different_pages(a, b):
    assert normalize_url(a) != normalize_url(b)


def test_read_list_layouts(tmp_path):
    (tmp_path / "plain.txt").write_text("# comment\nbad.example\n\nbad.example/page.html  # x\n")
    ut1 = tmp_path / "ut1"
    (ut1 / "adult").mkdir(parents=True)
    (ut1 / "adult" / "domains").write_text("porn.example\n")
    (ut1 / "adult" / "urls").write_text("host.example/one\n")
    (ut1 / "gambling").mkdir()
    (ut1 / "gambling" / "domains").write_text("casino.example\n")
    assert read_list(str(tmp_path / "plain.txt")) == (["bad.example"], ["bad.example/page.html"])
    assert read_list(str(ut1)) == (["porn.example", "casino.example"], ["host.example/one"])
    assert read_list(str(ut1 / "adult")) == (["porn.example"], ["host.example/one"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="without UT1"):
        read_list(str(tmp_path / "empty"))


def test_url_filter_rules_and_reasons(tmp_path):
    (tmp_path / "adult").mkdir()
    (tmp_path / "adult" / "domains").write_text("porn.example\n")
    (tmp_path / "phish.txt").write_text("login-bank.example/verify\n")
    st = UrlFilter(lists={"adult": [str(tmp_path / "adult")],
                          "phishing": [str(tmp_path / "phish.txt")]},
                   domains=["spam.example"], urls=["https://ok.example/blocked"],
                   banned_words=["viagra"], soft_banned_words=["free", "money", "win"],
                   banned_subwords=["xxx"])
    st.check()
    urls = ["https://www.porn.example/", "http://cdn.images.porn.example/a.jpg",
            "https://notporn.example/", "https://LOGIN-BANK.example/verify/#x",
            "https://login-bank.example/verify/other", "https://a.spam.example/",
            "http://ok.example/blocked/", "https://ok.example/blocked2",
            "https://shop.example/viagra-deals", "https://shop.example/free-money",
            "https://shop.example/free-stuff", "https://shop.example/axxxb", None, ""]
    res = st.process(frame(urls))
    assert res.drops == {"adult": 2, "phishing": 1, "blocked_domain": 1, "blocked_url": 1,
                         "banned_word": 1, "soft_banned_words": 1, "banned_subword": 1}
    assert res.frame["url"].tolist()[:4] == ["https://notporn.example/",
                                             "https://login-bank.example/verify/other",
                                             "https://ok.example/blocked2",
                                             "https://shop.example/free-stuff"]
    assert res.counters == {"no_url": 2}
    assert st.reasons[:2] == ("adult", "phishing")


def test_url_filter_bad_configuration(tmp_path):
    with pytest.raises(ValueError, match="snake_case"):
        UrlFilter(lists={"Adult Sites": []})
    with pytest.raises(ValueError, match="reasons of other rules"):
        UrlFilter(lists={"blocked_url": []})
    with pytest.raises(ValueError, match="does not exist"):
        UrlFilter(lists={"adult": [str(tmp_path / "missing")]}).check()
    with pytest.raises(ValueError, match="no column 'link'"):
        UrlFilter(url_column="link").process(frame(["https://a.example/"]))
    with pytest.raises(gp.SpecError, match="lists.x: Input should be a valid list"):
        build_stage({"stage": "url_filter", "lists": {"x": "not-a-list"}}, "stages[0]")


def warc_urls():
    """(record id, url, date) of the crawl's responses, read with a regex, not our reader."""
    data = gzip.decompress(open(WARC, "rb").read())
    found = re.findall(rb"WARC-Record-ID: (<[^>]+>)\r\nWARC-Date: (\S+)\r\n(?:[^\r]+\r\n)*?"
                       rb"WARC-Type: response\r\nWARC-Target-URI: (\S+)", data)
    return [(i.decode(), u.decode(), d.decode()) for i, d, u in found]


def run_dedup(client, out, keep="latest", blocksize=None):
    inp = {"path": WARC}
    if blocksize:
        inp["blocksize"] = blocksize
    return gp.Pipeline(input=inp, output=str(out), stages=[UrlDedup(keep=keep)]).run(
        client=client, progress=False)


def test_url_dedup_keeps_latest_copy(client, tmp_path):
    res = run_dedup(client, tmp_path / "o", blocksize=100_000)
    st = res.stage("url_dedup")
    assert st["drops"] == {"url_duplicate": 4}
    dups = pd.read_parquet(tmp_path / "o" / "dedup" / "duplicates.parquet")
    by_url = {}
    for rid, url, date in warc_urls():
        by_url.setdefault(normalize_url(url), []).append((date, rid, url))
    twice = {k: sorted(v) for k, v in by_url.items() if len(v) == 2}
    assert len(twice) == 4
    # the older copy (https, crawled first) lost to the newer one (http, crawled again)
    assert sorted(zip(dups["id"], dups["duplicate_of"])) == sorted(
        (v[0][1], v[1][1]) for v in twice.values())
    assert all(v[1][2].startswith("http://") for v in twice.values())
    kept = res.to_pandas()
    assert len(kept) == 109 and kept["url"].map(normalize_url).is_unique


def test_url_dedup_same_with_any_partitioning(client, tmp_path):
    whole = run_dedup(client, tmp_path / "a", keep="longest").to_pandas()
    split = run_dedup(client, tmp_path / "b", keep="longest", blocksize=60_000).to_pandas()
    assert sorted(whole["id"]) == sorted(split["id"]) and len(whole) == 109


def test_url_stages_need_their_columns(client, tmp_path):
    """On JSONL input (no url column), or with a date column the WARC input lacks, the stages
    stop before any data is read."""
    for path, st, missing in (("data/sample/*.jsonl.gz", UrlFilter(), "url"),
                              ("data/sample/*.jsonl.gz", UrlDedup(), "url"),
                              (WARC, UrlDedup(date_column="crawled"), "crawled")):
        with pytest.raises(gp.SpecError, match=f"{st.stage_name}: no column '{missing}'"):
            gp.Pipeline(input={"path": path}, output=str(tmp_path / "o"),
                        stages=[st]).run(client=client, progress=False)
