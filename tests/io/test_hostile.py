"""Hostile input, for every reader: each class is set aside with its reason (``skip``) or stops
the run naming the file and line (``fail``); never a traceback, a hang or silent loss."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import textwrap

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpupipe.errors import InputError
from gpupipe.runner.sources import make_source
from gpupipe.spec import InputSpec

NORMAL = b"".join(json.dumps({"id": f"n{i}", "text": f"normal document {i}"}).encode() + b"\n"
                  for i in range(5))


def read_all(path, policy, **kw):
    src = make_source(InputSpec(path=str(path), on_error=policy, **kw))
    frames, rejected, rows = [], {}, []
    for i in range(src.npartitions):
        r = src.read(i)
        frames.append(r.frame)
        for k, v in r.rejected_counts.items():
            rejected[k] = rejected.get(k, 0) + v
        if r.rejected is not None:
            rows += r.rejected.to_pylist()
    texts = [t for f in frames for t in f["text"]]
    return texts, rejected, rows, src


# (file content, skip: (documents kept, {reason: count}), fail: message part or None = no stop)
JSONL_CASES = {
    "nul_escaped": (NORMAL + b'{"id": "e", "text": "a\\u0000b"}\n', (6, {}), None),
    "nul_raw": (NORMAL + b'{"id": "r", "text": "a\x00b"}\n', (5, {"malformed_json": 1}),
                "line 6: malformed JSON (Invalid control character"),
    "bom": (b"\xef\xbb\xbf" + NORMAL, (5, {}), None),
    "bom_slow_path": (b"\xef\xbb\xbf" + NORMAL + b"{bad\n", (5, {"malformed_json": 1}),
                      "line 6: malformed JSON"),
    "crlf": (NORMAL.replace(b"\n", b"\r\n"), (5, {}), None),
    "no_final_newline": (NORMAL.rstrip(b"\n"), (5, {}), None),
    "only_blank_lines": (b"\n\n   \n\n", (0, {}), None),
    "latin1": ('{"id": "l", "text": "caf\xe9"}\n'.encode("latin-1"), (0, {"bad_utf8": 1}),
               "line 1: invalid UTF-8 at byte 24"),
    "overlong_utf8": (NORMAL + b'{"id": "o", "text": "\xc0\xaf"}\n', (5, {"bad_utf8": 1}),
                      "line 6: invalid UTF-8"),
    "lone_surrogate": (NORMAL + b'{"id": "s", "text": "x \\ud800 y"}\n', (5, {"bad_utf8": 1}),
                       "line 6: a lone surrogate escape (\\ud800)"),
    "mixed_valid_invalid": (NORMAL + b'{"id": "m", "text": "\xff"}\n' + NORMAL,
                            (10, {"bad_utf8": 1}), "line 6: invalid UTF-8"),
    "text_types": (b'{"id": "a", "text": null}\n{"id": "b", "text": 3}\n'
                   b'{"id": "c", "text": ["x"]}\n{"id": "d", "text": {"k": 1}}\n' + NORMAL,
                   (5, {"missing_text": 1, "text_not_string": 3}), "line 1: 'text' is null"),
    "nested_100k_deep": (NORMAL + b'{"id": "d", "text": ' + b"[" * 100_000 + b"]" * 100_000
                         + b"}\n", (5, {"malformed_json": 1}),
                         "line 6: malformed JSON (nested deeper than Python's recursion limit)"),
    "10MB_of_whitespace": (NORMAL + b" " * 10_000_000 + b"\n" + NORMAL, (10, {}), None),
    "zero_bytes": (b"", (0, {}), None),
}


@pytest.mark.parametrize("name", sorted(JSONL_CASES))
def test_jsonl_classes_under_both_policies(tmp_path, name):
    content, (kept, reasons), stop = JSONL_CASES[name]
    path = tmp_path / "a.jsonl"
    path.write_bytes(content)
    texts, rejected, rows, _ = read_all(path, "skip")
    assert (len(texts), rejected) == (kept, reasons)
    assert all(r["file"] == str(path) for r in rows)
    for t in texts:   # whatever is kept is valid text
        t.encode("utf-8")
    if stop is None:
        assert len(read_all(path, "fail")[0]) == kept
    else:
        with pytest.raises(InputError, match=r"^" + str(path).replace(".", r"\.")) as e:
            read_all(path, "fail")
        assert stop in str(e.value)


def test_ids_of_every_kind(tmp_path):
    path = tmp_path / "a.jsonl"
    recs = [{"text": "no id"}, {"id": 17, "text": "numeric id"}, {"id": "i" * 1_000_000,
            "text": "a 1 MB id"}, {"id": "new\nline", "text": "id with a newline"},
            {"id": ["x"], "text": "a list id"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    src = make_source(InputSpec(path=str(path), id_column="id", on_error="skip"))
    r = src.read(0)
    assert r.frame["id"].tolist() == ["17", "i" * 1_000_000, "new\nline"]
    assert r.rejected_counts == {"missing_id": 1, "bad_id": 1}


def test_compressed_and_odd_files(tmp_path):
    (tmp_path / "plain.jsonl.gz").write_bytes(NORMAL)           # a .gz that is plain text
    texts, rejected, rows, _ = read_all(tmp_path / "plain.jsonl.gz", "skip")
    assert (texts, rejected) == ([], {"corrupt_file": 1})
    assert "incorrect header check" in rows[0]["detail"]
    import zstandard

    (tmp_path / "t.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(NORMAL * 4000)[:-40])
    texts, rejected, _, _ = read_all(tmp_path / "t.jsonl.zst", "skip")
    assert rejected["corrupt_file"] == 1 and 0 < len(texts) < 20000
    with pytest.raises(InputError, match="t.jsonl.zst: corrupt or truncated compressed data"):
        read_all(tmp_path / "t.jsonl.zst", "fail")


@pytest.mark.parametrize("odd", ["fifo", "broken_symlink", "directory"])
def test_paths_that_are_not_files(tmp_path, odd):
    d = tmp_path / "in"
    d.mkdir()
    (d / "a.jsonl").write_bytes(NORMAL)
    target = d / "b.jsonl"
    {"fifo": lambda: os.mkfifo(target), "broken_symlink": lambda: os.symlink("/nope", target),
     "directory": lambda: target.mkdir()}[odd]()
    why = {"fifo": "a FIFO", "broken_symlink": "a broken symbolic link", "directory":
           "a directory"}[odd]
    texts, _, _, src = read_all(d / "*.jsonl", "skip")          # left out, and said so
    assert len(texts) == 5 and src.left_out == ((str(target), src.left_out[0][1]),)
    assert src.left_out[0][1].startswith(why)
    with pytest.raises(InputError, match=f"{target}: {why}"):     # never a hang on the FIFO
        read_all(d / "*.jsonl", "fail")
    with pytest.raises(InputError, match="matches no file"):
        read_all(tmp_path / "nothing-*.jsonl", "skip")


def test_parquet_schemas_and_damage(tmp_path):
    base = pa.table({"id": ["a", "b"], "text": ["first", "second"]})
    d = tmp_path / "pq"
    d.mkdir()
    pq.write_table(base, d / "a.parquet")
    pq.write_table(base.append_column("extra", pa.array([1, 2])), d / "b.parquet")
    pq.write_table(pa.table({"id": ["c"], "text": pa.array(["large"], pa.large_string())}),
                   d / "c.parquet")
    pq.write_table(pa.table({"id": ["d"], "text": pa.array(["dict", "dict"])
                   .dictionary_encode()[:1]}), d / "d.parquet")
    pq.write_table(base.slice(0, 0), d / "e.parquet")
    texts, rejected, _, _ = read_all(d, "fail", id_column="id")
    assert sorted(texts) == ["dict", "first", "first", "large", "second", "second"]
    pq.write_table(pa.table({"id": ["x", "y", "z"], "text": pa.array([1, 2, 3])}),
                   d / "f.parquet")
    raw = (d / "a.parquet").read_bytes()
    (d / "g.parquet").write_bytes(raw[:-20] + b"\0" * 20)
    texts, rejected, _, _ = read_all(d, "skip", id_column="id")
    assert len(texts) == 6 and rejected == {"text_not_string": 3, "corrupt_file": 1}
    with pytest.raises(InputError, match="f.parquet: column 'text' has type int64"):
        read_all(d, "fail", id_column="id")


def test_many_small_things_lose_nothing(tmp_path):
    one = tmp_path / "one"
    one.mkdir()
    (one / "a.jsonl").write_bytes(b"".join(b'{"text": "w%d"}\n' % i for i in range(200_000)))
    texts, rejected, _, _ = read_all(one, "fail")
    assert len(texts) == 200_000 and len(set(texts)) == 200_000 and rejected == {}
    many = tmp_path / "many"
    many.mkdir()
    for i in range(2000):
        (many / f"f{i:04d}.jsonl").write_bytes(
            b"".join(b'{"text": "d %d %d"}\n' % (i, j) for j in range(10)))
    texts, _, _, src = read_all(many, "fail")
    assert src.npartitions == 2000 and len(set(texts)) == 20_000


BIG = textwrap.dedent("""\
    import gzip, json, resource, sys
    sys.path.insert(0, {repo!r})
    from gpupipe.runner.sources import make_source
    from gpupipe.spec import InputSpec
    path, n = sys.argv[1], int(sys.argv[2])
    src = make_source(InputSpec(path=path, blocksize=sys.argv[3] if len(sys.argv) > 3 else None))
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    docs = sum(len(src.read(i).frame) for i in range(src.npartitions))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({{"docs": docs, "partitions": src.npartitions,
                       "above_MiB": (peak - base) / 1024}}))
    """)


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_a_150MB_document_on_one_line(tmp_path, compress):
    """Arrow's JSON block is sized to the data, so a line longer than any default block is
    read; the reader's peak stays within 3.5x the document."""
    from tests.conftest import REPO

    doc = json.dumps({"id": "big", "text": "word " * 30_000_000}).encode() + b"\n"
    path = tmp_path / ("big.jsonl.gz" if compress else "big.jsonl")
    path.write_bytes(gzip.compress(doc, 1) if compress else doc)
    script = tmp_path / "big.py"
    script.write_text(BIG.format(repo=str(REPO)))
    r = subprocess.run([sys.executable, str(script), str(path), "1"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout)
    assert got["docs"] == 1 and got["above_MiB"] < 3.5 * len(doc) / 2**20


def test_a_30MB_document_among_normal_ones_with_a_small_blocksize(tmp_path):
    from tests.conftest import REPO

    path = tmp_path / "a.jsonl"
    path.write_bytes(NORMAL + json.dumps({"id": "b", "text": "x " * 15_000_000}).encode()
                     + b"\n" + NORMAL)
    script = tmp_path / "big.py"
    script.write_text(BIG.format(repo=str(REPO)))
    r = subprocess.run([sys.executable, str(script), str(path), "1", "1MB"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout)
    assert got["docs"] == 11 and got["partitions"] == 2   # the block grows to the line's end
