"""One rule decides an input's format (`gpupipe.io.formats`): the pipeline file's inference,
the run's source, the readers of the Python API, check-gpu and train-tokenizer all ask it."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

import gpupipe as gp
from gpupipe.io import formats
from gpupipe.runner.sources import make_source
from gpupipe.spec import InputSpec


def _zstd_jsonl(path, records):
    raw = "".join(json.dumps(r) + "\n" for r in records).encode()
    path.write_bytes(zstandard.ZstdCompressor().compress(raw))


@pytest.mark.parametrize("name", ["a.ndjson.zstd", "a.json.zstd", "a.jsonl.zst", "a.ndjson",
                                  "a.JSONL.GZ"])
def test_every_jsonl_ending_is_read_in_a_directory_and_by_name(tmp_path, sample_records, name):
    """Was: a directory of ``*.ndjson.zstd`` was inferred as jsonl, then the run said it
    "matches no file" (the reader's endings lacked .ndjson.zstd), while the file named
    directly was read."""
    records = sample_records[:7]
    d = tmp_path / "in"
    d.mkdir()
    if name.endswith(("zst", "zstd")):
        _zstd_jsonl(d / name, records)
    elif name.lower().endswith(".gz"):
        import gzip

        (d / name).write_bytes(gzip.compress("".join(json.dumps(r) + "\n"
                                                     for r in records).encode()))
    else:
        (d / name).write_text("".join(json.dumps(r) + "\n" for r in records))
    for path in (str(d), str(d / name), str(d / "*")):
        spec = InputSpec(path=path, id_column="id")
        assert spec.resolved_format() == "jsonl"
        source = make_source(spec)
        assert source.files == (str(d / name),)
        assert source.read(0).frame["id"].tolist() == [r["id"] for r in records]


def test_a_directory_takes_the_format_of_its_first_data_file(tmp_path, sample_records):
    d = tmp_path / "in"
    (d / "sub").mkdir(parents=True)
    (d / "README.txt").write_text("not data")
    pq.write_table(pa.table({"id": ["x", "y"], "text": ["one two", "three"]}),
                   d / "sub" / "part.parquet")
    assert InputSpec(path=str(d)).resolved_format() == "parquet"
    assert make_source(InputSpec(path=str(d), id_column="id")).npartitions == 1
    assert InputSpec(path=str(tmp_path / "nothing")).resolved_format() == formats.DEFAULT


def test_an_unknown_format_name_is_refused_with_the_known_ones():
    with pytest.raises(gp.SpecError, match="input.format"):
        gp.Pipeline(input={"path": "data/sample", "format": "csv"}, output="out/x")
    with pytest.raises(gp.SpecError, match=r"unknown input format 'jsnl' — did you mean "
                                           r"'jsonl'\? \(known: jsonl, parquet, warc\)"):
        formats.get("jsnl")
