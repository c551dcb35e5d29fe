"""Filters in a real run: rejected rows on disk, annotate columns, stats, resume, spec checks."""

from __future__ import annotations

import os

import pandas as pd
import pyarrow.parquet as pq
import pytest

import gpupipe as gp
from gpupipe.errors import SpecError
from gpupipe.stages import (
    FineWebQuality,
    GopherQuality,
    GopherRepetition,
    LanguageId,
    NormalizeText,
    PiiRedact,
)


def read_dir(path) -> pd.DataFrame:
    files = sorted(f for f in os.listdir(path) if f.endswith(".parquet"))
    return pd.concat([pq.read_table(os.path.join(path, f)).to_pandas() for f in files],
                     ignore_index=True)


def test_keep_rejected_and_annotate_in_a_run(client, small_corpus, tmp_path):
    stages = [NormalizeText(), LanguageId(), PiiRedact(),
              GopherRepetition(keep_rejected=True), GopherQuality(keep_rejected=True),
              FineWebQuality(mode="annotate")]
    out = tmp_path / "run"
    res = gp.Pipeline(input=str(small_corpus), output=str(out), stages=stages).run(
        client=client, progress=False)
    s = res.summary
    assert s["accounting"]["balanced"]
    data = res.to_pandas()
    assert {"language", "language_score", "fineweb_quality_reason"} <= set(data.columns)
    flagged = data["fineweb_quality_reason"].notna().sum()
    fw = res.stage("fineweb_quality")
    assert fw["drops"] == {} and fw["docs_in"] == fw["docs_out"]
    assert sum(v for k, v in fw["counters"].items() if k.startswith("flagged:")) == flagged
    assert flagged > 0

    for name in ("gopher_quality", "gopher_repetition"):
        st = res.stage(name)
        rejected = read_dir(out / "rejected" / name)
        assert len(rejected) == sum(st["drops"].values()) > 0
        assert rejected["reason"].value_counts().to_dict() == st["drops"]
        assert set(rejected["id"]).isdisjoint(data["id"])
        # the rejected rows carry every column the stage saw, as it saw them
        assert {"id", "text", "language", "language_score", "reason"} <= set(rejected.columns)
    assert res.stage("language_id")["counters"]["language:en"] > 0

    # a rerun with the same pipeline reuses everything and leaves the rejected rows alone
    again = gp.Pipeline(input=str(small_corpus), output=str(out), stages=stages).run(
        client=client, progress=False)
    assert again.summary["segments"][0]["computed"] == 0
    assert len(read_dir(out / "rejected" / "gopher_quality")) == sum(
        res.stage("gopher_quality")["drops"].values())

    # without keep_rejected the stage's old rejected rows are removed on recompute
    stages[4] = GopherQuality()
    gp.Pipeline(input=str(small_corpus), output=str(out), stages=stages).run(
        client=client, progress=False)
    assert not (out / "rejected" / "gopher_quality").exists()


def test_same_filter_twice_gets_its_own_rejected_directory(client, small_corpus, tmp_path):
    stages = [GopherQuality(keep_rejected=True, min_doc_words=20),
              GopherQuality(keep_rejected=True, min_doc_words=200)]
    out = tmp_path / "run"
    gp.Pipeline(input=str(small_corpus), output=str(out), stages=stages).run(
        client=client, progress=False)
    assert {"gopher_quality-0", "gopher_quality-1"} <= set(os.listdir(out / "rejected"))
    assert read_dir(out / "rejected" / "gopher_quality-1")["reason"].tolist()


def test_two_annotating_filters_of_one_kind_are_refused(tmp_path):
    with pytest.raises(SpecError, match="already adds"):
        gp.Pipeline(input="data/sample", output=str(tmp_path / "o"),
                    stages=[GopherQuality(mode="annotate"), GopherQuality(mode="annotate")])


def test_yaml_pipeline_with_filters(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text(
        "input: {path: data/sample}\n"
        "stages:\n"
        "  - stage: gopher_quality\n"
        "    mode: anotate\n"
        f"output: {{path: {tmp_path / 'o'}}}\n")
    with pytest.raises(SpecError, match=r"p.yaml:4.*mode"):
        gp.Pipeline.from_yaml(str(p))
