from __future__ import annotations

import pandas as pd
import pytest

import gpupipe as gp
from gpupipe.stages import ExactDedup
from gpupipe.stages.dedup.exact import text_hashes


def run(client, planted, out, **kw):
    return gp.Pipeline(input={"path": str(planted["dir"]), "id_column": "id"},
                       output=str(out), stages=[ExactDedup(**kw)]).run(client=client,
                                                                        progress=False)


def test_removes_exact_copies_only(client, planted, tmp_path):
    res = run(client, planted, tmp_path / "o")
    st = res.stage("exact_dedup")
    assert st["drops"] == {"exact_duplicate": 20}
    dups = pd.read_parquet(tmp_path / "o" / "dedup" / "duplicates.parquet")
    assert len(dups) == 20 and set(dups["stage"]) == {"0:exact_dedup"}
    pairs = {(r["id"], r["orig"]) for r in planted["exact"]}
    # keep=first: whichever of a pair comes first in input order stays
    assert {frozenset(p) for p in zip(dups["id"], dups["duplicate_of"])} == {
        frozenset(p) for p in pairs}
    kept = set(res.to_pandas()["id"])
    assert all(r["id"] in kept for r in planted["near"])  # near copies are not exact copies


def test_keep_rules_and_normalize(client, tmp_path):
    from tests.conftest import write_jsonl

    rows = [{"id": "b", "text": "Hello  World"}, {"id": "a", "text": "hello world"},
            {"id": "c", "text": "Hello  World"}, {"id": "d", "text": "unique text"}]
    write_jsonl(tmp_path / "in" / "x.jsonl", rows)
    planted = {"dir": tmp_path / "in"}
    kept = lambda r: sorted(r.to_pandas()["id"])  # noqa: E731
    assert kept(run(client, planted, tmp_path / "1")) == ["a", "b", "d"]
    assert kept(run(client, planted, tmp_path / "2", keep="shortest_id", normalize=True)) == [
        "a", "d"]
    assert kept(run(client, planted, tmp_path / "3", normalize=True)) == ["b", "d"]
    assert kept(run(client, planted, tmp_path / "4", hash="md5")) == ["a", "b", "d"]


def test_hashes_equal_reference_libraries():
    import hashlib

    import xxhash

    h1, h2 = text_hashes(["abc", "é"], "md5")
    digest = hashlib.md5("é".encode()).hexdigest()
    assert f"{int(h1[1]):016x}{int(h2[1]):016x}" == digest
    x, _ = text_hashes(["abc"], "xxhash64")
    assert int(x[0]) == xxhash.xxh64_intdigest(b"abc")


def test_same_result_with_one_worker(planted, tmp_path, client):
    from distributed import Client, LocalCluster

    two = run(client, planted, tmp_path / "two")
    with LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=":0") as c, \
            Client(c) as one_client:
        one = run(one_client, planted, tmp_path / "one")
    pd.testing.assert_frame_equal(one.to_pandas(), two.to_pandas())


@pytest.mark.parametrize("keep", ["first", "longest", "shortest_id"])
def test_never_adds_rows(client, planted, tmp_path, keep):
    res = run(client, planted, tmp_path / keep, keep=keep)
    assert res.summary["output"]["docs"] == 620 - 20


def test_group_losers_keeps_64_bit_codes_exact():
    import numpy as np

    from gpupipe.stages.dedup.common import doc_codes, group_losers, old_part

    old = int(doc_codes(old_part(3, 5), 1)[0]) + 12345   # > 2**53, odd: not exact in float64
    new = doc_codes(7, 3)
    frame = pd.DataFrame({"h1": [1, 1, 1, 2, 2], "h2": [9, 9, 9, 9, 9],
                          "doc": np.array([new[2], old, new[0], new[1], 2**40 + 3], np.int64),
                          "id": ["c", "old", "a", "b", "d"], "length": [1, 1, 1, 1, 1]})
    lost = group_losers(frame, ["h1", "h2"], "first").sort_values("id")
    assert lost["id"].tolist() == ["a", "c", "d"]
    assert lost["kept"].tolist() == [old, old, int(new[1])]
    assert lost["duplicate_of"].tolist() == ["old", "old", "b"]
