"""JSONL reading: fast path, line-by-line path, every rejection reason, corrupt files."""

from __future__ import annotations

import dataclasses
import gzip
import json

import pytest
import zstandard

from gpupipe.errors import InputError
from gpupipe.io.jsonl import JsonlSource
from gpupipe.io.source import READ_REASONS
from tests.conftest import write_jsonl


def source(path, **kw):
    kw.setdefault("root", str(path.parent))
    return JsonlSource(files=(str(path),), **kw)


def test_fast_path_reads_real_sample(tmp_path, sample_records):
    recs = sample_records[:50]
    p = write_jsonl(tmp_path / "s.jsonl.gz", recs, compress=True)
    res = source(p, id_column="id").read(0)
    assert res.frame["id"].tolist() == [r["id"] for r in recs]
    assert res.frame["text"].tolist() == [r["text"] for r in recs]
    assert str(res.frame["text"].dtype) == "string" and res.rejected is None
    assert res.stats["docs"] == 50 and res.stats["files_corrupt"] == 0


def test_derived_ids_are_file_and_line_and_skip_blank_lines(tmp_path):
    p = tmp_path / "sub" / "x.jsonl"
    p.parent.mkdir()
    p.write_text('{"text": "a"}\n\n   \n{"text": "b"}\n{"text": "c"}')
    res = JsonlSource(files=(str(p),), root=str(tmp_path)).read(0)
    assert res.frame["id"].tolist() == ["sub/x.jsonl:1", "sub/x.jsonl:4", "sub/x.jsonl:5"]
    assert res.stats["blank_lines"] == 2


def test_numeric_ids_become_strings(tmp_path):
    p = tmp_path / "n.jsonl"
    p.write_text('{"id": 7, "text": "a"}\n{"id": "x", "text": "b"}\n')
    assert source(p, id_column="id").read(0).frame["id"].tolist() == ["7", "x"]


BAD_LINES = {
    "bad_utf8": b'{"text": "caf\xe9"}',
    "malformed_json": b'{"text": "unterminated}',
    "not_an_object": b'["text", "a list"]',
    "missing_text": b'{"content": "wrong field"}',
    "text_not_string": b'{"text": 42}',
    "missing_id": b'{"text": "no id here"}',
    "bad_id": b'{"text": "t", "id": {"nested": 1}}',
}


@pytest.mark.parametrize("reason", sorted(BAD_LINES))
def test_skip_sets_aside_each_reason_with_line(tmp_path, reason):
    good = b'{"id": "g1", "text": "good one"}\n'
    p = tmp_path / "bad.jsonl"
    p.write_bytes(good + BAD_LINES[reason] + b"\n" + good.replace(b"g1", b"g2"))
    res = source(p, id_column="id", on_error="skip").read(0)
    assert res.frame["id"].tolist() == ["g1", "g2"]
    assert res.rejected_counts == {reason: 1}
    row = res.rejected.to_pylist()[0]
    assert row["line"] == 2 and row["reason"] == reason and row["file"] == str(p)
    assert row["raw"] == BAD_LINES[reason]
    assert reason in READ_REASONS


@pytest.mark.parametrize("reason", sorted(BAD_LINES))
def test_fail_names_file_line_and_fix(tmp_path, reason):
    p = tmp_path / "bad.jsonl"
    p.write_bytes(b'{"id": "1", "text": "ok"}\n' + BAD_LINES[reason] + b"\n")
    with pytest.raises(InputError) as e:
        source(p, id_column="id").read(0)
    msg = str(e.value)
    assert f"{p} line 2" in msg and reason in msg and "on_error: skip" in msg


def test_missing_text_message_lists_fields(tmp_path):
    p = tmp_path / "f.jsonl"
    p.write_text('{"content": "x", "url": "u"}\n')
    with pytest.raises(InputError, match=r"fields: content, url.*text_column"):
        source(p).read(0)


def test_truncated_gzip_keeps_complete_records(tmp_path, sample_records):
    recs = sample_records[:400]
    data = gzip.compress("".join(json.dumps(r) + "\n" for r in recs).encode(), mtime=0)
    p = tmp_path / "cut.jsonl.gz"
    p.write_bytes(data[: len(data) // 2])
    res = source(p, id_column="id", on_error="skip").read(0)
    n = len(res.frame)
    assert 0 < n < 400
    assert res.frame["id"].tolist() == [r["id"] for r in recs[:n]]
    assert res.stats["files_corrupt"] == 1
    assert res.rejected_counts["corrupt_file"] == 1
    assert res.rejected_counts.get("truncated_record", 0) == 1
    with pytest.raises(InputError, match=r"cut\.jsonl\.gz: corrupt or truncated"):
        source(p, id_column="id").read(0)


def test_garbage_gzip(tmp_path):
    p = tmp_path / "x.jsonl.gz"
    p.write_bytes(b"this is not gzip at all\n")
    res = source(p, on_error="skip").read(0)
    assert len(res.frame) == 0 and res.rejected_counts == {"corrupt_file": 1}


def test_zstd(tmp_path, sample_records):
    recs = sample_records[:20]
    raw = "".join(json.dumps(r) + "\n" for r in recs).encode()
    p = tmp_path / "z.jsonl.zst"
    p.write_bytes(zstandard.ZstdCompressor().compress(raw))
    assert source(p, id_column="id").read(0).frame["id"].tolist() == [r["id"] for r in recs]


def test_fast_and_slow_paths_agree(tmp_path, sample_records):
    recs = [{"text": r["text"], "id": r["id"]} for r in sample_records[:200]]
    p = write_jsonl(tmp_path / "a.jsonl", recs)
    s = source(p)
    fast, _ = s._parse_fast(str(p), p.read_bytes(), lambda: 0)
    from gpupipe.io.source import Rejections

    slow, _ = s._parse_lines(str(p), p.read_bytes(), Rejections("fail", ""), lambda: 0)
    assert fast.equals(slow)


def test_empty_file(tmp_path):
    p = tmp_path / "e.jsonl"
    p.write_text("\n\n")
    res = source(p).read(0)
    assert len(res.frame) == 0 and list(res.frame.columns) == ["id", "text"]


def test_truncated_zstd_is_reported_not_silently_short(tmp_path, sample_records):
    raw = "".join(json.dumps(r) + "\n" for r in sample_records[:400]).encode()
    data = zstandard.ZstdCompressor().compress(raw)
    p = tmp_path / "cut.jsonl.zst"
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="stops before its end marker"):
        source(p, id_column="id").read(0)
    res = source(p, id_column="id", on_error="skip").read(0)
    assert res.stats["files_corrupt"] == 1 and 0 < len(res.frame) < 400


def test_concatenated_gzip_members(tmp_path, sample_records):
    a = "".join(json.dumps(r) + "\n" for r in sample_records[:3]).encode()
    b = "".join(json.dumps(r) + "\n" for r in sample_records[3:5]).encode()
    p = tmp_path / "m.jsonl.gz"
    p.write_bytes(gzip.compress(a) + gzip.compress(b))
    assert len(source(p).read(0).frame) == 5


def test_two_objects_on_one_line_is_malformed(tmp_path):
    p = tmp_path / "two.jsonl"
    p.write_text('{"text": "a"} {"text": "b"}\n{"text": "c"}\n')
    res = source(p, on_error="skip").read(0)
    assert res.frame["text"].tolist() == ["c"] and res.rejected_counts == {"malformed_json": 1}


def test_large_file_is_cut_into_blocks_with_whole_file_line_numbers(tmp_path, sample_records):
    from gpupipe.io.jsonl import count_newlines, split_blocks

    recs = [{"text": r["text"]} for r in sample_records[:600]]
    p = write_jsonl(tmp_path / "big.jsonl", recs)
    whole = JsonlSource(files=(str(p),), root=str(tmp_path)).read(0).frame
    blocks = split_blocks((str(p),), 200_000)
    assert len(blocks) > 3 and blocks[0][1] == 0 and blocks[-1][2] == p.stat().st_size
    assert all(a[2] == b[1] for a, b in zip(blocks, blocks[1:]))  # contiguous, no overlap
    src = JsonlSource(files=(str(p),), root=str(tmp_path), blocks=blocks)
    assert src.needs_line_bases()
    src = src.with_line_bases([count_newlines(str(p), s, e) for _, s, e in blocks])
    parts = [src.read(i).frame for i in range(src.npartitions)]
    import pandas as pd

    got = pd.concat(parts, ignore_index=True)
    assert got["id"].tolist() == whole["id"].tolist() == [f"big.jsonl:{k}" for k in
                                                          range(1, 601)]
    assert got["text"].tolist() == whole["text"].tolist()


def test_error_in_a_later_block_names_the_file_line(tmp_path, sample_records):
    from gpupipe.io.jsonl import split_blocks

    lines = [json.dumps({"id": str(k), "text": r["text"]}) for k, r in
             enumerate(sample_records[:300])]
    lines[250] = '{"id": "250", "text": broken'
    p = tmp_path / "big.jsonl"
    p.write_text("\n".join(lines) + "\n")
    blocks = split_blocks((str(p),), 100_000)
    src = JsonlSource(files=(str(p),), root=str(tmp_path), id_column="id", blocks=blocks)
    assert not src.needs_line_bases()  # ids come from the data: no counting pass
    messages = []
    for i in range(src.npartitions):
        try:
            src.read(i)
        except InputError as e:
            messages.append(str(e))
    assert len(messages) == 1 and f"{p} line 251: malformed JSON" in messages[0]
    skip = dataclasses.replace(src, on_error="skip")
    rejected = [r for i in range(skip.npartitions) if (t := skip.read(i).rejected) is not None
                for r in t.to_pylist()]
    assert [(r["line"], r["reason"]) for r in rejected] == [(251, "malformed_json")]
