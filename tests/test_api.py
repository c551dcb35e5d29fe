"""The Python API as a notebook user meets it."""

from __future__ import annotations

import gpupipe as gp
from gpupipe.stages import LengthFilter, NormalizeText


def test_read_jsonl_is_a_dask_dataframe(client, sample_records):
    ddf = gp.read_jsonl("data/sample/*.jsonl.gz", id_column="id")
    assert ddf.npartitions == 5 and list(ddf.columns) == ["id", "text"]
    df = client.compute(ddf).result()
    assert len(df) == len(sample_records)
    assert df["id"].tolist() == [r["id"] for r in sample_records]
    # a stage applied to a partition in a notebook gives what the pipeline gives
    part = ddf.get_partition(0).compute(scheduler="sync")
    res = LengthFilter(min_words=20).process(part)
    assert len(res.frame) + res.drops.get("too_few_words", 0) == len(part)


def test_pipeline_in_python_run_and_result(client, tmp_path, small_corpus):
    p = gp.Pipeline(name="nb", input={"path": str(small_corpus)}, output=str(tmp_path / "o"),
                    stages=[NormalizeText(form="NFKC"), LengthFilter(min_words=25)])
    assert "normalize_text(form='NFKC')" in p.explain()
    res = p.run(client=client, progress=False)
    assert isinstance(res, gp.RunResult)
    assert res.stage("length_filter")["docs_out"] == res.summary["output"]["docs"]
    df = res.to_pandas()
    assert len(df) == res.summary["output"]["docs"]
    assert (df["text"].str.split().str.len() >= 25).all()
    assert len(res.to_dask().compute(scheduler="sync")) == len(df)
    assert "length_filter" in str(res.table())
    assert repr(res) == (f"RunResult(output={str(tmp_path / 'o')!r}, "
                         f"docs={res.summary['output']['docs']:,}, partitions=3, "
                         f"seconds={res.summary['seconds']:.2f})")


def test_custom_stage_defined_in_a_notebook_runs_on_the_workers(client, tmp_path,
                                                               small_corpus):
    from gpupipe.stages import Transform, stage
    from gpupipe.stages.registry import all_stages

    if "lowercase_demo" not in all_stages():
        @stage("lowercase_demo")
        class Lower(Transform):
            """Lower-case the text."""

            def transform(self, df):
                return df.assign(text=df["text"].str.lower())

    lower = all_stages()["lowercase_demo"]()
    res = gp.Pipeline(input=str(small_corpus), output=str(tmp_path / "o"),
                      stages=[lower]).run(client=client, progress=False)
    df = res.to_pandas()
    assert len(df) == 300 and (df["text"] == df["text"].str.lower()).all()
    assert df["text"].str.contains("[a-z]").any()
