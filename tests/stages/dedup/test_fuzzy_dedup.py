from __future__ import annotations

import pandas as pd
import pytest

import gpupipe as gp
from gpupipe.stages import FuzzyDedup
from gpupipe.stages.dedup.fuzzy import bands_for_threshold, candidate_probability


def run(client, planted, out, **kw):
    res = gp.Pipeline(input={"path": str(planted["dir"]), "id_column": "id"}, output=str(out),
                      stages=[FuzzyDedup(**kw)]).run(client=client, progress=False)
    dups = pd.read_parquet(out / "dedup" / "duplicates.parquet")
    return res, dups


def scores(planted, dups):
    removed = set(dups["id"])
    origs = {r["orig"] for r in planted["near"] + planted["exact"]}
    found = [r for r in planted["near"] if r["id"] in removed or r["orig"] in removed]
    false = [i for i in removed if "~" not in i and i not in origs]
    return found, false


@pytest.mark.parametrize("preset", ["datatrove", "nemo"])
def test_planted_near_duplicates_low_threshold(client, planted, tmp_path, preset):
    res, dups = run(client, planted, tmp_path / preset, preset=preset, threshold=0.5)
    found, false = scores(planted, dups)
    assert len(found) >= 90          # recall >= 0.90 on 1-5% word edits (measured 0.95 / 0.99)
    assert false == []               # none of the 500 unrelated documents is removed
    exact_removed = [r for r in planted["exact"] if r["id"] in set(dups["id"])
                     or r["orig"] in set(dups["id"])]
    assert len(exact_removed) == 20  # exact copies are near-duplicates too
    # verified at the threshold: every removal resembles the document it was removed for
    assert (dups["similarity"] >= 0.5).all() and set(dups["stage"]) == {"0:fuzzy_dedup"}
    assert res.stage("fuzzy_dedup")["drops"]["near_duplicate"] == len(dups)


def test_default_datatrove_threshold_finds_the_very_similar(client, planted, tmp_path):
    _, dups = run(client, planted, tmp_path / "d")
    found, false = scores(planted, dups)
    similar = [r for r in planted["near"] if r["jaccard"] >= 0.85]
    assert similar and all(r in found for r in similar)
    assert false == []


def test_verify_and_components(client, planted, tmp_path):
    _, dups = run(client, planted, tmp_path / "v", threshold=0.5, verify=True,
                  jaccard_threshold=0.99)
    # only pairs whose signatures agree almost everywhere survive verification: the exact copies
    exact = {r[k] for r in planted["exact"] for k in ("id", "orig")}
    assert set(dups["id"]) <= exact and set(dups["duplicate_of"]) <= exact
    assert len(dups) == 20 and (dups["similarity"] == 1.0).all()


def test_deterministic_across_worker_counts(planted, tmp_path, client):
    from distributed import Client, LocalCluster

    _, two = run(client, planted, tmp_path / "two", preset="nemo", threshold=0.6)
    with LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=":0") as c, \
            Client(c) as one_client:
        _, one = run(one_client, planted, tmp_path / "one", preset="nemo", threshold=0.6)
    key = ["id", "duplicate_of"]
    pd.testing.assert_frame_equal(one.sort_values(key).reset_index(drop=True),
                                  two.sort_values(key).reset_index(drop=True))


def test_band_selection():
    assert bands_for_threshold(0.8, 260)[0] * bands_for_threshold(0.8, 260)[1] <= 260
    b, r = 20, 13
    assert candidate_probability(0.9, b, r) > 0.95 and candidate_probability(0.5, b, r) < 0.01
    with pytest.raises(ValueError, match="threshold or bands"):
        FuzzyDedup(threshold=0.5, bands=3)


def test_short_documents_and_tiny_corpus(client, tmp_path):
    from tests.conftest import write_jsonl

    # documents shorter than the 24-character shingle; one partition holds a single document
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"id": "1", "text": "hi"}, {"id": "3", "text": "ok"}])
    write_jsonl(tmp_path / "in" / "b.jsonl", [{"id": "2", "text": "hi"}])
    res = gp.Pipeline(input={"path": str(tmp_path / "in"), "id_column": "id"},
                      output=str(tmp_path / "o"),
                      stages=[FuzzyDedup(preset="nemo")]).run(client=client, progress=False)
    assert sorted(res.to_pandas()["id"]) == ["1", "3"]


def test_interrupted_stage_resumes_from_its_checkpoints(client, planted, tmp_path):
    import os

    out = tmp_path / "o"
    first, dups = run(client, planted, out, threshold=0.6)
    work = out / "checkpoints" / "01-fuzzy_dedup.work"
    files = sorted(p for p in work.rglob("*.*") if p.suffix in (".npy", ".parquet", ".arrow"))
    assert any("signatures" in str(p) for p in files) and any("candidates" in str(p)
                                                             for p in files)
    stamps = {p: p.stat().st_mtime_ns for p in files}
    os.remove(out / "data" / "_segment.json")  # as if the run died before the stage finished
    again, dups2 = run(client, planted, out, threshold=0.6)
    assert again.summary["segments"][1]["computed"] > 0
    assert {p: p.stat().st_mtime_ns for p in files} == stamps  # signatures and edges reused
    pd.testing.assert_frame_equal(again.to_pandas(), first.to_pandas())
    pd.testing.assert_frame_equal(dups2.sort_values("id").reset_index(drop=True),
                                  dups.sort_values("id").reset_index(drop=True))


def test_word_normalisation_matches_a_python_reference(sample_records):
    import re
    import unicodedata

    import pyarrow as pa

    from gpupipe.stages.dedup.fuzzy import normalized_words

    def reference(text):
        t = unicodedata.normalize("NFKD", text)
        t = "".join(c for c in t if unicodedata.category(c) != "Mn").lower()
        t = re.sub("[0-9]", "0", t)
        t = "".join(" " if unicodedata.category(c)[0] in "PSZ" or c.isspace() else c for c in t)
        return t.split()

    texts = [r["text"] for r in sample_records[::3]] + ["Ça, c'est l'été 2024!", "", "  ", "a"]
    got = normalized_words(pa.array(texts, pa.large_string())).to_pylist()
    assert got == [reference(t) for t in texts]
