"""Several named inputs blended at token shares: materialize hits the shares within 1% (down-
and up-sampling), weights mode gives Megatron blend weights equal to the request, per-source
stages and stats, byte-identical shards with 1 and 2 workers."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import gpupipe as gp
from gpupipe.errors import SpecError
from gpupipe.shards.megatron import IndexedDataset
from gpupipe.shards.routing import doc_keys

TOK = "data/tokenizer.json"
PY = "data/sample/python-docs-0*.jsonl.gz"
DEB = "data/sample/debian-docs.jsonl.gz"


def pipeline(out, mixture, *, py_stages=(), shards=None):
    return gp.Pipeline(
        inputs={"py": {"path": PY, "stages": list(py_stages)}, "deb": {"path": DEB}},
        stages=[{"stage": "tokenize", "tokenizer": TOK}], mixture=mixture,
        output={"path": str(out), "shards": shards or {"num_shards": 2,
                                                       "splits": {"train": 0.9, "valid": 0.1}}})


def shard_tokens_by_source(shards_dir, manifest, data) -> dict:
    """Tokens per source in the train shards, found by matching every document's tokens to the
    data (so the shares are checked on what was written, not on what the manifest says)."""
    source_of = {tuple(t): s for t, s in zip(data["tokens"], data["source"])}
    got: dict = {}
    for s in manifest["shards"]:
        if s["split"] != "train":
            continue
        ds = IndexedDataset(os.path.join(shards_dir, s["prefix"]))
        for k in range(len(ds)):
            doc = ds[k].tolist()
            src = source_of[tuple(doc)]
            got[src] = got.get(src, 0) + len(doc)
    return got


@pytest.mark.parametrize("weights,total", [({"py": 0.7, "deb": 0.3}, None),
                                           ({"py": 0.5, "deb": 0.5}, 2_000_000)],
                         ids=["down-sampled", "up-sampled"])
def test_materialize_hits_the_token_shares(client, tmp_path, weights, total):
    res = pipeline(tmp_path / "o", {"weights": weights, "seed": 7, "total_tokens": total}).run(
        client=client, progress=False)
    shards = res.shards_path
    with open(os.path.join(shards, "manifest.json")) as f:
        manifest = json.load(f)
    got = shard_tokens_by_source(shards, manifest, res.to_pandas())
    all_tokens = sum(got.values())
    for src, share in weights.items():
        assert abs(got[src] / all_tokens - share) <= 0.01, (src, got)
    train = manifest["mixture"]["splits"]["train"]
    assert {k: v["tokens"] for k, v in train.items()} == got
    assert all(abs(v["achieved_share"] - weights[k]) <= 0.01 for k, v in train.items())
    if total is None:   # the largest mix that needs no repeat: deb is used whole
        assert train["deb"]["tokens"] == train["deb"]["available_tokens"]
        assert all(v["repeats"] == 0 for v in train.values())
        assert train["py"]["tokens"] < train["py"]["available_tokens"]
    else:               # 1e6 tokens each from 0.7e6 and 0.26e6 available
        assert abs(all_tokens - total) <= 2000
        assert train["py"]["repeats"] > 0 and train["deb"]["repeats"] > train["deb"]["documents"] // 2
        # a repeat is a document of its own: every train document is in exactly one shard
        assert manifest["totals"]["train"]["documents"] == sum(v["documents"] for v in train.values())


def test_weights_mode_gives_megatron_the_requested_shares(client, tmp_path):
    res = pipeline(tmp_path / "o", {"weights": {"py": 3, "deb": 1}, "mode": "weights"}).run(
        client=client, progress=False)
    shards = res.shards_path
    with open(os.path.join(shards, "manifest.json")) as f:
        manifest = json.load(f)
    assert sorted(s["prefix"] for s in manifest["shards"] if s["split"] == "train") == [
        "train/deb-00000", "train/deb-00001", "train/py-00000", "train/py-00001"]
    # what Megatron-Core does with --data-args-path (get_blend_from_list, then normalize):
    # weight, prefix pairs; weights divided by their sum
    words = open(os.path.join(shards, "data_args.txt")).read().split()
    weights = np.array([float(w) for w in words[0::2]])
    weights = weights / weights.sum()
    prefixes = [os.path.relpath(p, shards) for p in words[1::2]]
    share = {src: sum(w for w, p in zip(weights, prefixes) if p.startswith(f"train/{src}-"))
             for src in ("py", "deb")}
    assert share == pytest.approx({"py": 0.75, "deb": 0.25}, abs=1e-12)
    # inside a source, shards are weighted by their tokens: sampling is uniform over its tokens
    by_prefix = {s["prefix"]: s["tokens"] for s in manifest["shards"]}
    deb = [(w, by_prefix[p]) for w, p in zip(weights, prefixes) if p.startswith("train/deb-")]
    assert deb[0][0] / deb[1][0] == pytest.approx(deb[0][1] / deb[1][1])
    # every document once, in its own source's shards
    data = res.to_pandas()
    source_of = {tuple(t): s for t, s in zip(data["tokens"], data["source"])}
    for s in manifest["shards"]:
        ds = IndexedDataset(os.path.join(shards, s["prefix"]))
        assert {source_of[tuple(ds[k].tolist())] for k in range(len(ds))} == {s["source"]}
    assert sum(t["documents"] for t in manifest["totals"].values()) == len(data)


def test_per_source_stages_and_stats(client, tmp_path):
    res = pipeline(tmp_path / "o", {"weights": {"py": 1, "deb": 1}},
                   py_stages=[{"stage": "length_filter", "min_words": 100}]).run(
        client=client, progress=False)
    data = res.to_pandas()
    words = data.assign(n=data["text"].str.split().str.len())
    assert words[words["source"] == "py"]["n"].min() >= 100
    assert words[words["source"] == "deb"]["n"].min() < 100   # deb untouched by py's filter
    lf = res.stage("length_filter")
    assert lf["by_source"] == {"py": {"docs_in": 1463, "docs_out": lf["docs_out"]}}
    assert lf["docs_in"] == 1463
    src = res.summary["sources"]
    assert src["deb"] == {"records_in": 345, "rejected": 0, "docs_out": 345,
                          "removed_by_stages": 0, "balanced": True}
    assert src["py"]["records_in"] == 1463 and src["py"]["docs_out"] == lf["docs_out"]
    assert src["py"]["balanced"] and res.summary["accounting"]["balanced"]
    text = pipeline(tmp_path / "o", {"weights": {"py": 1, "deb": 1}},
                    py_stages=[{"stage": "length_filter", "min_words": 100}]).explain()
    assert "input py:" in text and "its own stage: length_filter(min_words=100)" in text
    assert "mixture  token shares py 50.0%, deb 50.0%" in text
    assert "py: length_filter(min_words=100)" in text


def test_shards_are_byte_identical_with_one_and_two_workers(client, tmp_path):
    from distributed import Client, LocalCluster

    mix = {"weights": {"py": 0.4, "deb": 0.6}, "seed": 3, "total_tokens": 600_000}
    pipeline(tmp_path / "two", mix).run(client=client, progress=False)
    with LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=":0") as c, \
            Client(c) as one:
        pipeline(tmp_path / "one", mix).run(client=one, progress=False)
    a, b = tmp_path / "one" / "shards", tmp_path / "two" / "shards"
    files = sorted(str(p.relative_to(a)) for p in a.rglob("*") if p.suffix in (".bin", ".idx"))
    assert len(files) == 6
    for f in files:
        assert (a / f).read_bytes() == (b / f).read_bytes(), f


def test_the_draw_is_by_id_and_seed(tmp_path):
    """Down-sampling keeps the documents with the smallest draws of (id, seed)."""
    from gpupipe.shards.mixture import plan_materialize
    from gpupipe.shards.writer import DOC_DTYPE, doc_copies

    ids = [f"d{i}" for i in range(200)]
    docs = np.zeros(200, DOC_DTYPE)
    docs["key"] = doc_keys(ids, 1)
    docs["length"] = 100
    docs["source"] = np.arange(200) % 2
    docs["draw"] = (doc_keys(ids, 99) >> np.uint64(11)).astype(float) / 2**53
    plan, report = plan_materialize(docs, ("a", "b"), {"a": 0.25, "b": 0.75}, None)
    copies = doc_copies(docs, plan, 0)
    a = docs["source"] == 0
    assert copies[~a].tolist() == [1] * 100            # b is used whole
    assert copies[a].sum() == 33                       # 0.25/0.75 of b's 10,000 tokens
    kept = np.sort(docs["draw"][a & (copies == 1)])
    assert kept.max() < np.sort(docs["draw"][a])[33]   # the 33 smallest draws
    assert report["train"]["a"]["achieved_share"] == pytest.approx(0.2481, abs=1e-4)


def test_bad_mixtures_are_refused():
    with pytest.raises(SpecError, match="must name every source"):
        pipeline("x", {"weights": {"py": 1}})
    with pytest.raises(SpecError, match="tokenize"):
        gp.Pipeline(inputs={"a": {"path": PY}, "b": {"path": DEB}}, output={"path": "x"},
                    mixture={"weights": {"a": 1, "b": 1}})
    with pytest.raises(SpecError, match="not both"):
        gp.Pipeline(input={"path": PY}, inputs={"a": {"path": PY}}, output={"path": "x"})
    with pytest.raises(SpecError, match="row-local"):
        gp.Pipeline(inputs={"a": {"path": PY, "stages": [{"stage": "exact_dedup"}]}},
                    output={"path": "x"})


def test_the_example_pipeline(client, tmp_path):
    res = gp.Pipeline.from_yaml("pipelines/blend_decontam.yaml").run(
        output=str(tmp_path / "o"), client=client, progress=False)
    dc = res.stage("decontaminate")
    # 30: the sections of 50+ words holding a quiz passage's 13-gram (some passages recur in
    # several sections), as the plain-Python reference of test_decontaminate counts them
    assert dc["counters"]["python_quiz:documents"] == 30
    assert "general:documents" not in dc["counters"]
    with open(os.path.join(res.shards_path, "manifest.json")) as f:
        train = json.load(f)["mixture"]["splits"]["train"]
    assert train["docs"]["achieved_share"] == pytest.approx(0.6, abs=0.01)
    assert res.summary["accounting"]["balanced"]
    assert all(s["balanced"] for s in res.summary["sources"].values())
