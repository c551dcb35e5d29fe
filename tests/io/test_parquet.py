from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gpupipe as gp
from gpupipe.errors import InputError
from gpupipe.io.parquet import ParquetSource


def src(p, **kw):
    return ParquetSource(files=(str(p),), root=str(p.parent), **kw)


def test_columns_are_mapped(tmp_path, sample_records):
    recs = sample_records[:30]
    p = tmp_path / "a.parquet"
    pq.write_table(pa.table({"content": [r["text"] for r in recs], "doc": list(range(30))}), p)
    res = src(p, text_column="content", id_column="doc").read(0)
    assert res.frame["id"].tolist() == [str(i) for i in range(30)]
    assert res.frame["text"].tolist() == [r["text"] for r in recs]
    derived = src(p, text_column="content").read(0).frame["id"].tolist()
    assert derived[:2] == ["a.parquet:1", "a.parquet:2"]


def test_missing_column_fails_or_skips_file(tmp_path):
    p = tmp_path / "a.parquet"
    pq.write_table(pa.table({"body": ["x"]}), p)
    with pytest.raises(InputError, match=r"a\.parquet.*\['text'\] not in the file.*body"):
        src(p).read(0)
    res = src(p, on_error="skip").read(0)
    assert len(res.frame) == 0 and res.rejected_counts == {"missing_text": 1}


def test_null_text_rows_are_rejected(tmp_path):
    p = tmp_path / "a.parquet"
    pq.write_table(pa.table({"text": ["a", None, "c"]}), p)
    res = src(p, on_error="skip").read(0)
    assert res.frame["text"].tolist() == ["a", "c"] and res.rejected_counts == {"missing_text": 1}
    assert res.rejected.to_pylist()[0]["line"] == 2


def test_corrupt_parquet(tmp_path):
    p = tmp_path / "a.parquet"
    p.write_bytes(b"PAR1 definitely not parquet")
    with pytest.raises(InputError, match=r"a\.parquet.*cannot read Parquet"):
        src(p).read(0)


def test_read_parquet_api(tmp_path):
    p = tmp_path / "a.parquet"
    pq.write_table(pa.table({"text": ["x y", "z"]}), p)
    ddf = gp.read_parquet(str(tmp_path))
    assert ddf.compute(scheduler="sync")["text"].tolist() == ["x y", "z"]


def test_pipeline_checks_parquet_columns_before_starting(tmp_path):
    pq.write_table(pa.table({"content": ["x y"]}), tmp_path / "a.parquet")
    p = gp.Pipeline(input={"path": str(tmp_path), "format": "parquet", "text_column": "contnt"},
                    output=str(tmp_path / "o"))
    with pytest.raises(InputError, match="no column 'contnt' — did you mean 'content'"):
        p.run(progress=False)  # no cluster is started for this


def test_input_columns_are_carried_or_refused(client, tmp_path):
    from gpupipe.errors import SpecError

    pq.write_table(pa.table({"text": ["one two three", "four five"], "score": [0.5, 0.25],
                             "other": [1, 2]}), tmp_path / "a.parquet")
    res = gp.Pipeline(input={"path": str(tmp_path / "a.parquet"), "columns": ["score"]},
                      stages=[gp.stages.LengthFilter(min_words=3)],
                      output=str(tmp_path / "o")).run(client=client, progress=False)
    out = res.to_pandas()
    assert out.columns.tolist() == ["id", "text", "score"]
    assert out["score"].tolist() == [0.5]
    with pytest.raises(InputError, match="no column 'scor' — did you mean 'score'.*see "
                                         "input.columns"):
        gp.Pipeline(input={"path": str(tmp_path / "a.parquet"), "columns": ["scor"]},
                    output=str(tmp_path / "p")).run(progress=False)
    (tmp_path / "b.jsonl").write_text('{"text": "x"}\n')
    with pytest.raises(SpecError, match=r"input.columns \['score'\] is for Parquet input"):
        gp.Pipeline(input={"path": str(tmp_path / "b.jsonl"), "columns": ["score"]},
                    output=str(tmp_path / "q")).run(progress=False)
