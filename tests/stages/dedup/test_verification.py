"""fuzzy_dedup verifies candidate pairs: templated short texts are not chained together, every
removal resembles the document it was removed for, and planted near-copies are still found."""

from __future__ import annotations

import random
import re
import unicodedata

import pandas as pd
import pytest

import gpupipe as gp
from gpupipe.stages import FuzzyDedup
from tests.conftest import write_jsonl

NAMES = ("Kevin Chantal Justin Mandy Dustin Jacqueline Ronny Cindy Maik Peggy Enrico Nancy Rocco "
         "Sandy Marvin Jessica Pascal Vanessa Dennis Jenny Tyler Madison Finn Leonie Jayden Emily "
         "Ben Mia Paul Lina Noah Lea Elias Ella Luis Clara Felix Hanna Jonas Lena").split()
DATATROVE_THRESHOLD = 0.7188  # (1/14) ** (1/8), rounded as the stage rounds it


def words(text: str) -> list[str]:
    """The datatrove normalisation, in plain Python."""
    t = unicodedata.normalize("NFKD", text)
    t = "".join(c for c in t if unicodedata.category(c) != "Mn").lower()
    t = re.sub("[0-9]", "0", t)
    t = "".join(" " if unicodedata.category(c)[0] in "PSZ" or c.isspace() else c for c in t)
    return t.split()


def jaccard(x: str, y: str, n: int = 5) -> float:
    def grams(t):
        w = words(t)
        return {tuple(w[i:i + n]) for i in range(max(1, len(w) - n + 1))}
    a, b = grams(x), grams(y)
    return len(a & b) / len(a | b)


@pytest.fixture(scope="module")
def corpus(planted, tmp_path_factory):
    """The planted corpus plus 300 templated short texts ("Wie man sein Kind nicht nennen
    sollte, die Liste: <four names>"): any two share about 0.38 of their word 5-grams, so a few
    hundred pairs of them collide in some LSH band by chance."""
    rng = random.Random(0)
    tpl = [{"id": f"tpl-{k:04d}", "text": "Wie man sein Kind nicht nennen sollte, die Liste: "
            + ", ".join(rng.sample(NAMES, 4))} for k in range(300)]
    rows = [{"id": r["id"], "text": r["text"]} for r in
            planted["base"] + planted["near"] + planted["exact"]] + tpl
    rng.shuffle(rows)
    d = tmp_path_factory.mktemp("templated")
    for k in range(3):
        write_jsonl(d / f"t{k}.jsonl", rows[k::3])
    return {"dir": d, "text": {r["id"]: r["text"] for r in rows}, "near": planted["near"]}


def run(client, corpus, out, **kw):
    res = gp.Pipeline(input={"path": str(corpus["dir"]), "id_column": "id"}, output=str(out),
                      stages=[FuzzyDedup(**kw)]).run(client=client, progress=False)
    return res, pd.read_parquet(out / "dedup" / "duplicates.parquet")


def found_near(corpus, dups, min_jaccard=0.0) -> tuple[int, int]:
    removed = set(dups["id"])
    text = corpus["text"]
    near = [r for r in corpus["near"] if jaccard(text[r["id"]], text[r["orig"]]) >= min_jaccard]
    return sum(r["id"] in removed or r["orig"] in removed for r in near), len(near)


def test_templated_texts_are_not_chained(client, corpus, tmp_path):
    _, off = run(client, corpus, tmp_path / "off", verify="off")
    res, on = run(client, corpus, tmp_path / "on")
    text = corpus["text"]
    # unverified, LSH collisions chain the template family: many removals resemble nothing
    unrelated_off = [a for a, b in zip(off["id"], off["duplicate_of"]) if jaccard(text[a], text[b]) < 0.5]
    assert sum(i.startswith("tpl-") for i in off["id"]) >= 50 and len(unrelated_off) >= 20
    # verified (the default): no templated text is removed, none removal is unlike its keeper
    assert [i for i in on["id"] if i.startswith("tpl-")] == []
    assert all(jaccard(text[a], text[b]) >= 0.5 for a, b in zip(on["id"], on["duplicate_of"]))
    assert (on["similarity"] >= DATATROVE_THRESHOLD).all()
    c = res.stage("fuzzy_dedup")["counters"]
    assert c["candidate_pairs"] == c["verified_pairs"] + c["rejected_pairs"]
    assert c["rejected_pairs"] > 300 and c["components"] > 0 and c["component_size_max"] >= 2
    assert res.stage("fuzzy_dedup")["drops"] == {"near_duplicate": len(on)}


def test_true_jaccard_verification_records_the_jaccard_of_the_shingle_sets(client, corpus,
                                                                          tmp_path):
    _, dups = run(client, corpus, tmp_path / "j", verify="jaccard", jaccard_threshold=0.6)
    text = corpus["text"]
    assert len(dups) > 40
    expected = [jaccard(text[a], text[b]) for a, b in zip(dups["id"], dups["duplicate_of"])]
    assert dups["similarity"].tolist() == pytest.approx(expected, abs=1e-12)
    assert min(expected) >= 0.6
    # the kept document is never itself removed
    assert not set(dups["duplicate_of"]) & set(dups["id"])


def test_recall_on_planted_near_copies_does_not_fall(client, corpus, tmp_path):
    """Planted copies at least as similar as the LSH threshold: verification by true Jaccard
    finds every one the unverified run finds; the signature estimate (the default) may miss a
    pair whose estimate falls just under the threshold (measured: 46 vs 48 of 61)."""
    counts = {}
    for mode in ("off", "signature", "jaccard"):
        _, dups = run(client, corpus, tmp_path / mode, verify=mode)
        counts[mode] = found_near(corpus, dups, DATATROVE_THRESHOLD)
    total = counts["off"][1]
    assert total == 61
    assert counts["jaccard"][0] == counts["off"][0] == 48
    assert counts["signature"][0] >= counts["off"][0] - 3
