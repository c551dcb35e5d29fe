"""A family of near-copies larger than ALL_PAIRS_MAX shares LSH buckets that are not expanded
to all pairs: one member survives whatever the keep order, and against an earlier run none."""

from __future__ import annotations

import pandas as pd
import pytest

import gpupipe as gp
from gpupipe.stages import FuzzyDedup
from gpupipe.stages.dedup.fuzzy import ALL_PAIRS_MAX
from tests.conftest import write_jsonl

N = 40


@pytest.fixture(scope="module")
def family(planted, tmp_path_factory):
    """40 copies of one section, each with one distinct last word of growing length, whose ids
    put the smallest id in the middle of the input (k=21); plus 60 unrelated sections."""
    assert N > ALL_PAIRS_MAX
    text = planted["base"][0]["text"]
    fam = [{"id": f"fam-{(7 * k + 13) % N:02d}", "text": f"{text} v{'x' * k}", "k": k}
           for k in range(N)]
    other = [{"id": r["id"], "text": r["text"]} for r in planted["base"][1:61]]
    d = tmp_path_factory.mktemp("family")
    rows = [{"id": r["id"], "text": r["text"]} for r in fam]
    write_jsonl(d / "a.jsonl", rows[:N // 2] + other[:30])
    write_jsonl(d / "b.jsonl", rows[N // 2:] + other[30:])
    return {"dir": d, "fam": fam, "text": text, "root": d.parent}


def dedup(client, src, out, **kw) -> pd.DataFrame:
    gp.Pipeline(input={"path": str(src), "id_column": "id"}, output=str(out),
                stages=[FuzzyDedup(**kw)]).run(client=client, progress=False)
    return pd.read_parquet(out / "dedup" / "duplicates.parquet")


@pytest.mark.parametrize("keep,kept_k", [("first", 0), ("longest", N - 1), ("shortest_id", 21)])
def test_one_member_of_a_large_family_survives(client, family, tmp_path, keep, kept_k):
    dups = dedup(client, family["dir"], tmp_path / keep, keep=keep)
    kept_id = family["fam"][kept_k]["id"]
    assert sorted(dups["id"]) == sorted(r["id"] for r in family["fam"] if r["k"] != kept_k)
    assert set(dups["duplicate_of"]) == {kept_id}


def test_a_large_family_goes_whole_against_an_earlier_copy(client, family, tmp_path):
    earlier_in = tmp_path / "oct-in"
    write_jsonl(earlier_in / "a.jsonl", [{"id": "oct-original", "text": family["text"]}])
    october = tmp_path / "oct"
    gp.Pipeline(input={"path": str(earlier_in), "id_column": "id"}, output=str(october),
                stages=[FuzzyDedup()]).run(client=client, progress=False)
    dups = dedup(client, family["dir"], tmp_path / "nov", keep="longest", against=[str(october)])
    assert sorted(dups["id"]) == sorted(r["id"] for r in family["fam"])
    assert set(dups["duplicate_of"]) == {"oct-original"}
    assert set(dups["duplicate_run"]) == {str(october)}
