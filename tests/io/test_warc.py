"""WARC input: the committed crawl read against warcio's own reading of it, partitions cut at
record starts, and hostile archives (built here with warcio, then damaged byte by byte) under
both ``on_error`` policies; one run of the CLI from a WARC file to Parquet."""

from __future__ import annotations

import collections
import gzip
import io
import json
import os
import random
import re
import subprocess
import sys
import textwrap
import zlib

import pandas as pd
import pyarrow.parquet as pq
import pytest
from warcio.archiveiterator import ArchiveIterator
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from gpupipe.errors import InputError
from gpupipe.frame import STRING
from gpupipe.runner.sources import make_source
from gpupipe.spec import InputSpec
from tests.conftest import REPO

CRAWL = REPO / "data" / "web" / "docs-crawl.warc.gz"
COLUMNS = ["id", "text", "url", "warc_date", "warc_record_id", "content_type", "http_status",
           "warc_filename"]
RECORDS = {"warcinfo": 1, "request": 116, "response": 116, "metadata": 116}
SKIPPED = {"application/javascript": 1, "image/png": 1, "text/css": 1}


def read_all(path, policy="fail", **kw):
    """(the partitions' frames concatenated, rejected counts, rejected rows, per-partition
    stats, the source)."""
    src = make_source(InputSpec(path=str(path), on_error=policy, **kw))
    frames, rejected, rows, stats = [], {}, [], []
    for i in range(src.npartitions):
        r = src.read(i)
        frames.append(r.frame)
        stats.append(r.stats)
        for k, v in r.rejected_counts.items():
            rejected[k] = rejected.get(k, 0) + v
        if r.rejected is not None:
            rows += r.rejected.to_pylist()
    return pd.concat(frames, ignore_index=True), rejected, rows, stats, src


def summed(stats, key):
    out = collections.Counter()
    for s in stats:
        out.update(s[key])
    return dict(out)


def charset_of(content_type: str) -> str:
    return content_type.lower().split("charset=")[1].strip()


@pytest.fixture(scope="module")
def crawl_frame():
    frame, rejected, _, stats, src = read_all(CRAWL)
    assert src.npartitions == 1 and rejected == {}
    return frame, stats[0]


@pytest.fixture(scope="module")
def warcio_responses():
    """Per response record, as warcio (not our reader) reads the committed crawl: (record id,
    url, HTTP Content-Type, the HTTP body)."""
    out = []
    with open(CRAWL, "rb") as f:
        for rec in ArchiveIterator(f):
            if rec.rec_type == "response":
                out.append((rec.rec_headers.get_header("WARC-Record-ID"),
                            rec.rec_headers.get_header("WARC-Target-URI"),
                            rec.http_headers.get_header("Content-Type"),
                            rec.content_stream().read()))
    assert len(out) == 116
    return out


# -- the committed crawl ------------------------------------------------------------------------

def test_crawl_counts_columns_and_types(crawl_frame):
    frame, stats = crawl_frame
    assert len(frame) == 113 and stats["docs"] == 113
    assert stats["records"] == RECORDS and stats["skipped"] == SKIPPED
    assert stats["charset_detected"] == 0 and stats["files"] == 1 and stats["files_corrupt"] == 0
    assert stats["compressed_bytes"] == os.path.getsize(CRAWL) == 839_077
    assert list(frame.columns) == COLUMNS
    assert {c: str(t) for c, t in frame.dtypes.items()} == {
        **{c: "string" for c in COLUMNS}, "http_status": "int32"}
    assert all(frame[c].dtype == STRING for c in COLUMNS if c != "http_status")
    assert frame["id"].tolist() == frame["warc_record_id"].tolist()
    assert frame["id"].is_unique and frame["url"].is_unique   # http:// and https:// copies differ
    assert set(frame["http_status"]) == {200}
    assert set(frame["content_type"]) == {"text/html"}
    assert set(frame["warc_filename"]) == {"docs-crawl.warc.gz"}
    assert frame["warc_date"].iloc[0] == "2026-11-02T08:00:01Z"
    assert frame["warc_date"].str.fullmatch(r"2026-11-02T\d\d:\d\d:\d\dZ").all()
    # the 4 pages crawled twice: the same body under http:// and https://
    by_url = dict(zip(frame["url"], frame["text"]))
    twice = sorted(u for u in by_url if u.startswith("http://"))
    assert len(twice) == 4
    assert all(by_url[u] == by_url["https://" + u[len("http://"):]] for u in twice)
    assert stats["text_bytes"] == sum(len(t.encode("utf-8")) for t in frame["text"]) == 3_607_030


def test_crawl_text_equals_warcio_bodies_decoded(crawl_frame, warcio_responses):
    """Every kept document is the body warcio reads, decoded with the declared charset; the
    responses left out are exactly the non-text ones."""
    frame, _ = crawl_frame
    ours = dict(zip(frame["id"], frame["text"]))
    expected = {rid: body.decode(charset_of(ctype)) for rid, _, ctype, body in warcio_responses
                if ctype.startswith("text/html")}
    assert len(expected) == 113
    assert ours == expected
    assert dict(zip(frame["id"], frame["url"])) == {
        rid: url for rid, url, ctype, _ in warcio_responses if ctype.startswith("text/html")}
    left_out = collections.Counter(ctype for _, _, ctype, _ in warcio_responses
                                   if not ctype.startswith("text/html"))
    assert dict(left_out) == SKIPPED


def test_crawl_declared_charsets(warcio_responses, crawl_frame):
    """data/make_warc.py serves one real page as ISO-8859-1 with that charset declared: it
    decodes to what Python's codec gives on the body warcio reads, with no detection."""
    declared = collections.Counter(ctype for _, _, ctype, _ in warcio_responses
                                   if ctype.startswith("text/html"))
    assert dict(declared) == {"text/html; charset=utf-8": 112,
                              "text/html; charset=iso-8859-1": 1}
    url, body = next((u, b) for _, u, c, b in warcio_responses if c.endswith("iso-8859-1"))
    assert url.endswith("reference/toplevel_components.html")
    with pytest.raises(UnicodeDecodeError):
        body.decode("utf-8")
    frame = crawl_frame[0]
    assert frame.loc[frame["url"] == url, "text"].tolist() == [body.decode("iso-8859-1")]


# -- partitions ---------------------------------------------------------------------------------

@pytest.mark.parametrize("compressed, partitions", [(True, 9), (False, 32)],
                         ids=["warc.gz", "warc"])
def test_small_blocksize_partitions_equal_the_whole_file(tmp_path, crawl_frame, compressed,
                                                         partitions):
    whole, whole_stats = crawl_frame
    if compressed:
        path = CRAWL
    else:
        path = tmp_path / "docs-crawl.warc"
        path.write_bytes(gzip.decompress(CRAWL.read_bytes()))
    frame, rejected, _, stats, src = read_all(path, blocksize=100_000)
    assert src.npartitions == partitions and rejected == {}
    assert all(s["docs"] > 0 for s in stats[:-1])
    # each block starts at a record: cut at gzip members / WARC/1.x lines
    with open(path, "rb") as f:
        for _, start, _ in src.blocks[1:]:
            f.seek(start)
            head = f.read(4096)
            assert (zlib.decompressobj(wbits=31).decompress(head) if compressed
                    else head).startswith(b"WARC/1.")
    assert frame.drop(columns="warc_filename").equals(whole.drop(columns="warc_filename"))
    assert set(frame["warc_filename"]) == {path.name}
    assert summed(stats, "records") == RECORDS and summed(stats, "skipped") == SKIPPED
    assert sum(s["files"] for s in stats) == 1
    assert sum(s["docs"] for s in stats) == 113
    assert sum(s["compressed_bytes"] for s in stats) == os.path.getsize(path)
    assert sum(s["text_bytes"] for s in stats) == whole_stats["text_bytes"]


# -- hostile archives ---------------------------------------------------------------------------

def page(i: int) -> bytes:
    return (f"<html><head><title>Page {i}</title></head><body><main><h1>Page {i}</h1>"
            f"<p>Paragraph number {i} of the test crawl, in plain words.</p></main></body>"
            f"</html>").encode()


def response(writer, url, body: bytes, ctype="text/html; charset=utf-8", extra=()):
    http = StatusAndHeaders("200 OK", [("Content-Type", ctype), ("Content-Length", str(len(body))),
                                       *extra], protocol="HTTP/1.1")
    return writer.create_warc_record(url, "response", payload=io.BytesIO(body), length=len(body),
                                     http_headers=http)


def not_http(writer, url, payload: bytes):
    """A response record whose block is not an HTTP message (warcio refuses to write one, so
    it is written as a resource record and renamed)."""
    rec = writer.create_warc_record(url, "resource", payload=io.BytesIO(payload),
                                    length=len(payload),
                                    warc_content_type="application/http; msgtype=response")
    rec.rec_headers.replace_header("WARC-Type", "response")
    return rec


def metadata(writer, url, payload: bytes):
    return writer.create_warc_record(url, "metadata", payload=io.BytesIO(payload),
                                     length=len(payload),
                                     warc_content_type="application/warc-fields")


def build(gz: bool, special=None) -> tuple[bytes, list[int]]:
    """A WARC of responses https://example.org/0..4 with ``special(writer)`` (a record) as the
    third; returns the bytes and each record's offset (one gzip member per record)."""
    buf = io.BytesIO()
    writer = WARCWriter(buf, gzip=gz)
    offsets = []
    for i in range(5):
        offsets.append(buf.tell())
        url = f"https://example.org/{i}"
        writer.write_record(special(writer) if i == 2 and special else response(writer, url,
                                                                                page(i)))
    return buf.getvalue(), offsets


def replace_record(data: bytes, offsets: list[int], k: int, gz: bool, edit) -> bytes:
    """``data`` with record ``k`` rewritten by ``edit`` (on its uncompressed bytes)."""
    end = offsets[k + 1] if k + 1 < len(offsets) else len(data)
    raw = data[offsets[k]:end]
    raw = edit(gzip.decompress(raw) if gz else raw)
    return data[:offsets[k]] + (gzip.compress(raw, mtime=0) if gz else raw) + data[end:]


def lie(delta: int):
    """An edit: the WARC header's Content-Length off by ``delta``."""
    def edit(raw: bytes) -> bytes:
        m = re.search(rb"\r\nContent-Length: (\d+)\r\n", raw)
        return raw[:m.start(1)] + str(int(m.group(1)) + delta).encode() + raw[m.end(1):]
    return edit


URLS = [f"https://example.org/{i}" for i in range(5)]
WITHOUT_2 = [u for u in URLS if not u.endswith("/2")]
FRENCH = ("<html><body><p>Café crème — “quoted” naïve façade, déjà vu; les élèves préfèrent "
          "l’été à l’hiver. Ça coûte 5 €, très cher pour un café noir.</p></body></html>")
JUNK = random.Random(1).randbytes(2000)


def _special_meta_only(w):
    html = ('<html><head><meta http-equiv="Content-Type" content="text/html; '
            'charset=iso-8859-1"></head><body><p>Ça coûte très cher à Zürich.</p></body></html>')
    return response(w, "https://example.org/2", html.encode("iso-8859-1"), "text/html")


# name -> (special record, edit of record 2 or None, expected:
#          (kept urls, rejected, records, skipped, charset_detected),
#          fail: the message after "<path>: " (a regex), or None when nothing is rejected)
CASES = {
    "content_length_too_large": (
        None, lie(+50), (WITHOUT_2, {"bad_record": 1}, {"response": 5}, {}, 0),
        r"record at byte {o2}: response record https://example\.org/2: Content-Length 278, "
        r"but 232 bytes follow \[bad_record\]"),
    "content_length_far_too_large": (
        None, lie(+5000), (WITHOUT_2, {"bad_record": 1}, {"response": 5}, {}, 0),
        r"record at byte {o2}: response record https://example\.org/2: Content-Length "
        r"5,228, but 232 bytes follow \[bad_record\]"),
    "content_length_too_small": (
        None, lie(-20), (WITHOUT_2, {"bad_record": 1}, {"response": 5}, {}, 0),
        r"record at byte {o2}: response record https://example\.org/2: Content-Length 208, "
        r"but more bytes follow before the next record \[bad_record\]"),
    "metadata_content_length_too_small": (
        lambda w: metadata(w, "https://example.org/2", b"fetchTimeMs: 17\ncharset: utf-8\n"),
        lie(-7), (WITHOUT_2, {"bad_record": 1}, {"response": 4, "metadata": 1}, {}, 0),
        r"record at byte {o2}: metadata record https://example\.org/2: Content-Length 24, "
        r"but more bytes follow before the next record \[bad_record\]"),
    "not_http": (
        lambda w: not_http(w, "https://example.org/2", b"just some bytes, no HTTP status line"),
        None, (WITHOUT_2, {"not_http": 1}, {"response": 5}, {}, 0),
        r"record at byte {o2}: https://example\.org/2: the payload is not an HTTP response "
        r"\[not_http\]"),
    "undecodable_body": (   # random bytes, no charset anywhere: charset-normalizer finds no text
        lambda w: response(w, "https://example.org/2", JUNK, "text/html"),
        None, (WITHOUT_2, {"undecodable_body": 1}, {"response": 5}, {}, 0),
        r"record at byte {o2}: https://example\.org/2: no charset decodes the body \(2,000 "
        r"bytes; declared none\) \[undecodable_body\]"),
    "charset_lie": (   # declared UTF-8, the bytes are cp1252
        lambda w: response(w, "https://example.org/2", FRENCH.encode("cp1252")),
        None, (URLS, {}, {"response": 5}, {}, 1), None),
    "charset_in_meta_only": (
        _special_meta_only, None, (URLS, {}, {"response": 5}, {}, 0), None),
    "image_png": (
        lambda w: response(w, "https://example.org/2",
                           b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4, "image/png"),
        None, (WITHOUT_2, {}, {"response": 5}, {"image/png": 1}, 0), None),
    "content_encoding_gzip": (
        lambda w: response(w, "https://example.org/2", gzip.compress(page(2), mtime=0),
                           "text/html; charset=utf-8", [("Content-Encoding", "gzip")]),
        None, (URLS, {}, {"response": 5}, {}, 0), None),
}
EXPECTED_TEXT = {   # the text of https://example.org/2 where it is kept
    "charset_lie": FRENCH,
    "charset_in_meta_only": ('<html><head><meta http-equiv="Content-Type" content="text/html; '
                             'charset=iso-8859-1"></head><body><p>Ça coûte très cher à Zürich.'
                             '</p></body></html>'),
    "content_encoding_gzip": page(2).decode(),
}


@pytest.mark.parametrize("gz", [True, False], ids=["warc.gz", "warc"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_records_under_both_policies(tmp_path, name, gz):
    special, edit, (urls, reasons, records, skipped, detected), stop = CASES[name]
    data, offsets = build(gz, special)
    if edit is not None:
        data = replace_record(data, offsets, 2, gz, edit)
    path = tmp_path / ("a.warc.gz" if gz else "a.warc")
    path.write_bytes(data)
    frame, rejected, rows, stats, src = read_all(path, "skip")
    assert src.npartitions == 1
    assert frame["url"].tolist() == urls and rejected == reasons
    assert (stats[0]["records"], stats[0]["skipped"], stats[0]["charset_detected"]) == (
        records, skipped, detected)
    assert [r["file"] for r in rows] == [str(path)] * sum(reasons.values())
    texts = dict(zip(frame["url"], frame["text"]))
    for i in (0, 1, 3, 4):   # the records around the damage are read whole
        assert texts[f"https://example.org/{i}"] == page(i).decode()
    if "https://example.org/2" in texts:
        assert texts["https://example.org/2"] == EXPECTED_TEXT[name]
    if stop is None:
        assert read_all(path, "fail")[0].equals(frame)
    else:
        with pytest.raises(InputError) as e:
            read_all(path, "fail")
        assert re.match(re.escape(f"{path}: ") + stop.format(o2=offsets[2]), str(e.value)), \
            str(e.value)


def test_iso_8859_1_page_of_the_crawl(tmp_path, warcio_responses):
    """A real page of the crawl served as ISO-8859-1 (as data/make_warc.py does it) decodes to
    what Python's codec gives on the body warcio reads back."""
    url, html = next((u, b) for _, u, _, b in warcio_responses
                     if u.endswith("howto/sorting.html"))
    latin1 = html.decode("utf-8").encode("iso-8859-1", errors="xmlcharrefreplace")
    assert {b for b in latin1 if b > 127} == {0xab, 0xb6, 0xe0}   # «, ¶ and à as one byte each
    buf = io.BytesIO()
    writer = WARCWriter(buf, gzip=True)
    writer.write_record(response(writer, url, latin1, "text/html; charset=iso-8859-1"))
    path = tmp_path / "latin1.warc.gz"
    path.write_bytes(buf.getvalue())
    with open(path, "rb") as f:
        body = next(iter(ArchiveIterator(f))).content_stream().read()
    assert body == latin1
    with pytest.raises(UnicodeDecodeError):
        body.decode("utf-8")
    frame, rejected, _, stats, _ = read_all(path)
    assert frame["text"].tolist() == [body.decode("iso-8859-1")] and rejected == {}
    assert "à" in frame["text"][0] and stats[0]["charset_detected"] == 0


@pytest.mark.parametrize("body, declared", [
    (b"<p>plain ASCII</p>", None), ("<p>caf\u00e9 \u2014 \u00e0</p>".encode(), "utf-8"),
    ("<p>caf\u00e9</p>".encode(), "UTF8"), ("<p>caf\u00e9</p>".encode(), None),
    (b"<p>a\x00b\x00</p>", None), ("<p>\u00e9\x00</p>".encode(), "utf-8"),
    ("<p>caf\u00e9</p>".encode("latin-1"), "utf-8"),   # a charset lie: detected
    ("<p>caf\u00e9</p>".encode("latin-1"), "iso-8859-1"), ("<p>caf\u00e9</p>".encode(), "koi8-r"),
    ("<meta charset=windows-1252><p>caf\u00e9".encode("cp1252"), None),
    ("<p>caf\u00e9</p>".encode(), "no-such-charset"), (b"\xef\xbb\xbf<p>bom", "utf-8-sig"),
    (bytes(range(256)) * 4, "utf-8"), ("<p>caf\u00e9</p>".encode(), "utf-8\x00")])
def test_utf8_bodies_equal_the_decoded_text(body, declared):
    """The reader keeps a UTF-8 body as its own bytes: the same text, and the same detection
    count, as decoding it to str and back."""
    from gpupipe.io.warc import decode_body, utf8_body

    text, detected = decode_body(body, declared)
    assert utf8_body(body, declared) == (None if text is None else text.encode(), detected)


@pytest.mark.parametrize("policy", ["skip", "fail"])
def test_truncated_warc_gz(tmp_path, policy):
    data, offsets = build(True)
    path = tmp_path / "cut.warc.gz"
    path.write_bytes(data[:(offsets[2] + offsets[3]) // 2])   # the file ends inside member 3
    if policy == "fail":
        with pytest.raises(InputError, match=re.escape(
                f"{path}: gzip member at byte {offsets[2]}: unexpected end of file inside a gzip "
                f"member; the records before it are kept [corrupt_file]")):
            read_all(path, policy)
        return
    frame, rejected, rows, stats, _ = read_all(path, policy)
    assert frame["url"].tolist() == URLS[:2]
    assert frame["text"].tolist() == [page(0).decode(), page(1).decode()]
    # the damage is one corrupt file, and the record it cut off is named as well
    assert rejected == {"corrupt_file": 1, "truncated_record": 1}
    assert [r["reason"] for r in rows] == ["corrupt_file", "truncated_record"]
    assert rows[1]["detail"] == f"record at byte {offsets[2]}: record cut off by the damage"
    assert rows[1]["raw"].startswith(b"WARC/1.")
    assert stats[0]["files_corrupt"] == 1 and stats[0]["records"] == {"response": 2}


def test_reserved_gzip_header_flags_are_damage(tmp_path):
    """A member whose gzip header sets reserved flag bits is corrupt, as zlib says (ISA-L,
    which inflates the rest, would read it)."""
    data, offsets = build(True)
    path = tmp_path / "flags.warc.gz"
    path.write_bytes(data[:offsets[1] + 3] + bytes([data[offsets[1] + 3] | 0x20])
                     + data[offsets[1] + 4:])
    with pytest.raises(InputError, match=re.escape(
            f"{path}: gzip member at byte {offsets[1]}: corrupt gzip data (Error -3 while "
            f"decompressing data: unknown header flags set)")):
        read_all(path, "fail")


@pytest.mark.parametrize("policy", ["skip", "fail"])
def test_corrupt_member_in_the_middle(tmp_path, policy):
    """A member whose deflate data is damaged (the rest of the file intact): the records before
    it are kept, and the partition's reading stops there (what the module documents)."""
    data, offsets = build(True)
    mid = (offsets[2] + offsets[3]) // 2
    path = tmp_path / "bad.warc.gz"
    path.write_bytes(data[:offsets[2] + 12] + bytes(b ^ 0xFF for b in data[offsets[2] + 12:mid])
                     + data[mid:])
    if policy == "fail":
        with pytest.raises(InputError, match=re.escape(
                f"{path}: gzip member at byte {offsets[2]}: corrupt gzip data (Error -3 "
                f"while decompressing data: ")):   # zlib's words, whichever inflate read it
            read_all(path, policy)
        return
    frame, rejected, _, stats, _ = read_all(path, policy)
    assert frame["url"].tolist() == URLS[:2]
    assert rejected == {"corrupt_file": 1} and stats[0]["records"] == {"response": 2}


@pytest.mark.parametrize("policy", ["skip", "fail"])
def test_truncated_uncompressed_warc(tmp_path, policy):
    data, offsets = build(False)
    path = tmp_path / "cut.warc"
    path.write_bytes(data[:offsets[4] - 100])   # record 4 (index 3) loses its last 100 bytes
    if policy == "fail":   # 228 bytes of block + 4 of line ends, less 100
        with pytest.raises(InputError, match=re.escape(
                f"{path}: record at byte {offsets[3]}: response record https://example.org/3: "
                f"Content-Length 228, but 132 bytes follow [bad_record]")):
            read_all(path, policy)
        return
    frame, rejected, _, stats, _ = read_all(path, policy)
    assert frame["url"].tolist() == URLS[:3] and rejected == {"bad_record": 1}
    assert stats[0]["records"] == {"response": 4}


BIG = textwrap.dedent("""\
    import json, resource, sys
    sys.path.insert(0, {repo!r})
    from gpupipe.runner.sources import make_source
    from gpupipe.spec import InputSpec
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = {{}}
    for policy in ("skip", "fail"):
        src = make_source(InputSpec(path=sys.argv[1], on_error=policy))
        r = [src.read(i) for i in range(src.npartitions)]
        out[policy] = {{"lengths": [len(t) for p in r for t in p.frame["text"]],
                        "rejected": [p.rejected_counts for p in r],
                        "big_ok": r[0].frame["text"][1] == open(sys.argv[2]).read()}}
        del r
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({{**out, "above_MiB": (peak - base) / 1024}}))
    """)


@pytest.mark.parametrize("gz", [True, False], ids=["warc.gz", "warc"])
def test_a_50MB_html_page(tmp_path, gz):
    """Kept whole between two small pages; the reader's peak memory stays under 7x the page
    (it holds the decompressed record, the body and the text: about 5.6x measured)."""
    big = (b"<html><body>" + b"<p>word word word word word word word word word.</p>\n" * 1_000_000
           + b"</body></html>")
    assert len(big) == 53_000_026
    (tmp_path / "big.html").write_bytes(big)
    buf = io.BytesIO()
    writer = WARCWriter(buf, gzip=gz)
    for url, body in (("https://e/0", page(0)), ("https://e/big", big), ("https://e/1", page(1))):
        writer.write_record(response(writer, url, body))
    path = tmp_path / ("big.warc.gz" if gz else "big.warc")
    path.write_bytes(buf.getvalue())
    del buf, writer
    script = tmp_path / "big.py"
    script.write_text(BIG.format(repo=str(REPO)))
    r = subprocess.run([sys.executable, str(script), str(path), str(tmp_path / "big.html")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout)
    for policy in ("skip", "fail"):
        assert got[policy] == {"lengths": [len(page(0)), len(big), len(page(1))],
                               "rejected": [{}], "big_ok": True}
    assert got["above_MiB"] < 7 * len(big) / 2**20, got


# -- the CLI ------------------------------------------------------------------------------------

GPUPIPE = os.path.join(os.path.dirname(sys.executable), "gpupipe")


def test_cli_run_from_warc_to_parquet(tmp_path, crawl_frame):
    from resiliparse.extract.html2text import extract_plain_text

    p = tmp_path / "p.yaml"
    p.write_text(textwrap.dedent(f"""\
        version: 1
        name: warc-to-text
        input: {{path: {CRAWL}, format: warc, on_error: fail}}
        cluster: {{workers: 1}}
        stages:
          - stage: extract_html
            timeout: null
          - stage: normalize_text
        output: {{path: {tmp_path}/unused}}
        """))
    out = tmp_path / "out"
    r = subprocess.run([GPUPIPE, "run", str(p), "-o", str(out), "--overwrite", "--no-progress"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    run = json.loads((out / "run.json").read_text())
    read = run["read"]
    assert (read["docs"], read["records"], read["skipped"], read["charset_detected"],
            read["rejected"]) == (113, RECORDS, SKIPPED, 0, {})
    extract, normalize = run["stages"]
    assert (extract["stage"], extract["docs_in"], extract["docs_out"], extract["drops"]) == (
        "extract_html", 113, 113, {})
    assert extract["params"]["extractor"] == "resiliparse" and extract["params"]["timeout"] is None
    frame, _ = crawl_frame
    texts = [extract_plain_text(h, main_content=True, preserve_formatting=True, list_bullets=True,
                                alt_texts=False, links=False) for h in frame["text"]]
    assert extract["bytes_out"] == sum(len(t.encode("utf-8")) for t in texts)
    assert (normalize["stage"], normalize["docs_in"], normalize["docs_out"]) == (
        "normalize_text", 113, 113)
    files = sorted((out / "data").glob("part-*.parquet"))
    table = pq.read_table(files[0]) if len(files) == 1 else None
    assert table is not None, files
    assert table.schema.names == COLUMNS
    assert str(table.schema.field("http_status").type) == "int32"
    got = table.to_pandas().set_index("id")
    want = frame.set_index("id")
    assert sorted(got.index) == sorted(want.index)
    for c in ("url", "warc_date", "warc_record_id", "content_type", "http_status",
              "warc_filename"):
        assert got[c].loc[want.index].tolist() == want[c].tolist(), c
    assert got["warc_record_id"].tolist() == got.index.tolist()


# -- ARC files (through warcio) -----------------------------------------------------------------

def arc_file(records: list[tuple[str, str, bytes]]) -> bytes:
    """An ARC v1 file (one gzip member per record): the filedesc header record, then per
    ``(url, content type, HTTP response)`` a record line and the response."""
    version = b"1 0 gpupipe-tests\nURL IP-address Archive-date Content-type Archive-length\n"
    members = [b"filedesc://t.arc 0.0.0.0 20240101000000 text/plain %d\n%s\n"
               % (len(version), version)]
    members += [f"{url} 10.0.0.1 20240102030405 {ctype} {len(payload)}\n".encode() + payload
                + b"\n" for url, ctype, payload in records]
    return b"".join(gzip.compress(m, mtime=0) for m in members)


ARC_PAGE = ("<html><body><p>Hello ARC world, café.</p></body></html>").encode()
ARC_RECORDS = [
    ("http://a.example/x.html", "text/html",
     b"HTTP/1.0 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n\r\n" + ARC_PAGE),
    ("http://a.example/i.png", "image/png",
     b"HTTP/1.0 200 OK\r\nContent-Type: image/png\r\n\r\n\x89PNG\r\n\x1a\n"),
    ("http://b.example/", "text/html",
     b"HTTP/1.0 200 OK\r\nContent-Type: text/html\r\n\r\n<p>second page</p>"),
]


def test_arc_file(tmp_path):
    path = tmp_path / "t.arc.gz"
    path.write_bytes(arc_file(ARC_RECORDS))
    frame, rejected, _, stats, _ = read_all(path)
    assert rejected == {}
    assert frame["url"].tolist() == ["http://a.example/x.html", "http://b.example/"]
    assert frame["text"].tolist() == [ARC_PAGE.decode(), "<p>second page</p>"]
    # ARC records have no id: the file and the record's byte offset, the same on every read
    first = len(arc_file([]))   # the filedesc member; the first record's member starts after it
    assert frame["id"].tolist()[0] == f"t.arc.gz:{first}"
    assert frame["warc_record_id"].isna().all()
    assert frame["warc_date"].tolist() == ["2024-01-02T03:04:05Z"] * 2
    assert stats[0]["records"] == {"warcinfo": 1, "response": 3}
    assert stats[0]["skipped"] == {"image/png": 1}
    assert read_all(path)[0].equals(frame)


@pytest.mark.parametrize("policy", ["skip", "fail"])
def test_truncated_arc_file(tmp_path, policy):
    data = arc_file(ARC_RECORDS)
    path = tmp_path / "cut.arc.gz"
    path.write_bytes(data[:len(data) - 30])   # inside the last record's gzip member
    if policy == "fail":
        with pytest.raises(InputError, match=re.escape(str(path)) + ".*truncated_record"):
            read_all(path, policy)
        return
    frame, rejected, _, stats, _ = read_all(path, policy)
    assert frame["url"].tolist() == ["http://a.example/x.html"]
    assert rejected == {"corrupt_file": 1, "truncated_record": 1}
    assert stats[0]["files_corrupt"] == 1 and stats[0]["skipped"] == {"image/png": 1}


def test_a_directory_without_warc_files_says_which_endings():
    with pytest.raises(InputError, match=r"input path 'data/sample' is a directory without a "
                                         r"file ending in \.warc, \.warc\.gz, \.arc, \.arc\.gz; "
                                         r"check input.path and input.format"):
        make_source(InputSpec(path="data/sample", format="warc"))
