"""Dedup against earlier runs: a new dump loses its copies of documents an earlier run kept,
and only those; the earlier run is never modified; an index with other parameters is refused."""

from __future__ import annotations

import hashlib
import os
import random
from pathlib import Path

import pandas as pd
import pytest

import gpupipe as gp
from gpupipe.errors import SpecError
from gpupipe.stages import ExactDedup, FuzzyDedup
from tests.conftest import write_jsonl


def tree_digest(d: Path) -> dict:
    return {str(p.relative_to(d)): (hashlib.sha256(p.read_bytes()).hexdigest(),
                                    p.stat().st_mtime_ns)
            for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def months(planted, client, tmp_path_factory):
    """Run "october" on 250 documents; november's dump has 200 new documents, exact copies of
    10 october documents, near copies (one word changed) of 10 others, and one document twice."""
    base = planted["base"]
    old, new = base[:250], base[250:450]
    rng = random.Random(1)
    exact = [{"id": f"nov-copy-{k}", "text": r["text"], "orig": r["id"]}
             for k, r in enumerate(rng.sample(old, 10))]
    near = []
    for k, r in enumerate(rng.sample([r for r in old if r["id"] not in
                                      {e["orig"] for e in exact}], 10)):
        w = r["text"].split(" ")
        w[len(w) // 2] = "zebra"
        near.append({"id": f"nov-near-{k}", "text": " ".join(w), "orig": r["id"]})
    twice = {"id": "nov-twice", "text": new[0]["text"]}
    root = tmp_path_factory.mktemp("months")
    write_jsonl(root / "oct-in" / "a.jsonl", [{"id": r["id"], "text": r["text"]} for r in old])
    rows = [{"id": r["id"], "text": r["text"]} for r in new] + [
        {"id": r["id"], "text": r["text"]} for r in exact + near] + [twice]
    rng.shuffle(rows)
    for k in range(2):
        write_jsonl(root / "nov-in" / f"n{k}.jsonl", rows[k::2])
    october = root / "runs" / "2026-10"
    gp.Pipeline(input={"path": str(root / "oct-in"), "id_column": "id"}, output=str(october),
                stages=[ExactDedup(), FuzzyDedup()]).run(client=client, progress=False)
    order = [r["id"] for k in range(2) for r in rows[k::2]]  # input order: n0.jsonl, n1.jsonl
    pair = sorted(["nov-twice", new[0]["id"]], key=order.index)
    return {"root": root, "october": october, "exact": exact, "near": near, "twice": pair}


def november(months, out, client):
    oct_ = str(months["october"])
    return gp.Pipeline(input={"path": str(months["root"] / "nov-in"), "id_column": "id"},
                       output=str(out),
                       stages=[ExactDedup(against=[oct_]), FuzzyDedup(against=[oct_])]).run(
        client=client, progress=False)


def test_new_dump_loses_its_copies_of_earlier_documents_only(months, client, tmp_path):
    before = tree_digest(months["october"])
    res = november(months, tmp_path / "nov", client)
    assert tree_digest(months["october"]) == before  # the earlier run is never modified
    dups = pd.read_parquet(tmp_path / "nov" / "dedup" / "duplicates.parquet")
    dups = dups.sort_values("id").reset_index(drop=True)
    oct_ = str(months["october"])
    expected = sorted([(r["id"], r["orig"], oct_, "0:exact_dedup") for r in months["exact"]]
                      + [(r["id"], r["orig"], oct_, "1:fuzzy_dedup") for r in months["near"]]
                      + [("nov-twice", None, None, "0:exact_dedup")])
    runs = [None if pd.isna(r) else r for r in dups["duplicate_run"]]
    got = list(zip(dups["id"], dups["duplicate_of"], runs, dups["stage"]))
    # within the run, the document that came first in input order is kept
    twice = [g for g in got if g[0] == "nov-twice" or g[1] == "nov-twice"]
    first, second = months["twice"]
    assert twice == [(second, first, None, "0:exact_dedup")]
    assert sorted(g for g in got if g not in twice) == [e for e in expected if e[1] is not None]
    assert res.stage("exact_dedup")["counters"]["duplicates_of_earlier_runs"] == 10
    assert res.stage("fuzzy_dedup")["counters"]["duplicates_of_earlier_runs"] == 10
    assert res.summary["output"]["docs"] == 221 - 21
    # this run leaves its own index for the next one: its 200 kept documents
    idx = tmp_path / "nov" / "dedup" / "index" / "fuzzy_dedup"
    assert (idx / "manifest.json").exists()
    kept = pd.concat([pd.read_parquet(f) for f in sorted(idx.glob("part-*.parquet"))])
    assert len(kept) == 200


def test_same_result_with_one_and_two_workers(months, client, tmp_path):
    from distributed import Client, LocalCluster

    two = november(months, tmp_path / "two", client)
    with LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=":0") as c, \
            Client(c) as one_client:
        one = november(months, tmp_path / "one", one_client)
    for sub in ("data", "dedup/duplicates.parquet", "dedup/index/fuzzy_dedup",
                "dedup/index/exact_dedup"):
        a, b = tmp_path / "one" / sub, tmp_path / "two" / sub
        files = sorted(p.name for p in a.iterdir() if not p.name.startswith(("_", ".")))
        assert files and files == sorted(p.name for p in b.iterdir()
                                         if not p.name.startswith(("_", ".")))
        for f in files:
            if f.endswith((".parquet", ".npy")):
                assert (a / f).read_bytes() == (b / f).read_bytes(), f
    assert one.summary["output"]["docs"] == two.summary["output"]["docs"]


def test_an_index_built_with_other_parameters_is_refused(months, client, tmp_path):
    oct_ = str(months["october"])
    pipe = gp.Pipeline(input={"path": str(months["root"] / "nov-in"), "id_column": "id"},
                       output=str(tmp_path / "x"),
                       stages=[FuzzyDedup(preset="nemo", against=[oct_])])
    with pytest.raises(SpecError, match=r"built with other parameters \(bands=14 there, 20 "
                                        r"here.*shingles='words' there, 'chars' here"):
        pipe.run(client=client, progress=False)
    pipe = gp.Pipeline(input={"path": str(months["root"] / "nov-in"), "id_column": "id"},
                       output=str(tmp_path / "y"),
                       stages=[ExactDedup(normalize=True, against=[oct_])])
    with pytest.raises(SpecError, match="normalize=False there, True here"):
        pipe.run(client=client, progress=False)
    with pytest.raises(SpecError, match="is not a gpupipe run directory"):
        gp.Pipeline(input={"path": str(months["root"] / "nov-in"), "id_column": "id"},
                    output=str(tmp_path / "z"),
                    stages=[ExactDedup(against=[str(months["root"] / "oct-in")])]).run(
            client=client, progress=False)
    # refused before any work: the exact_dedup before it never ran
    pipe = gp.Pipeline(input={"path": str(months["root"] / "nov-in"), "id_column": "id"},
                       output=str(tmp_path / "w"),
                       stages=[ExactDedup(), FuzzyDedup(bands=20, rows=5, against=[oct_])])
    with pytest.raises(SpecError, match="bands=14 there, 20 here"):
        pipe.run(client=client, progress=False)
    assert not os.path.exists(tmp_path / "w")
