"""Shards written by a pipeline run on a real LocalCluster: layout, determinism, manifest."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest

import gpupipe as gp
from gpupipe.io.tokenizer import load_tokenizer
from gpupipe.shards.inspect import decode_document, verify
from gpupipe.shards.megatron import IndexedDataset
from gpupipe.shards.routing import doc_keys
from gpupipe.stages import LengthFilter, NormalizeText, Repartition, Tokenize

TOK = "data/tokenizer.json"


def pipeline(inp, out, *, shards=None, before=()):
    return gp.Pipeline(
        input={"path": str(inp), "id_column": "id"}, output={"path": str(out), "shards": shards
                                                             or {"num_shards": 3}},
        stages=[NormalizeText(), *before, LengthFilter(min_words=20), Tokenize(tokenizer=TOK)])


def tree_digest(d):
    h = hashlib.sha256()
    for root, _, files in sorted(os.walk(d)):
        for f in sorted(files):
            if f.endswith((".bin", ".idx", ".ds", ".index", ".metadata")):
                p = os.path.join(root, f)
                h.update(os.path.relpath(p, d).encode() + open(p, "rb").read())
    return h.hexdigest()


@pytest.fixture(scope="module")
def run(client, tmp_path_factory):
    out = tmp_path_factory.mktemp("shards") / "run"
    res = pipeline("data/sample/*.jsonl.gz", out,
                   shards={"num_shards": 3, "splits": {"train": 0.9, "valid": 0.05,
                                                       "test": 0.05}}).run(client=client,
                                                                           progress=False)
    return res


def test_every_document_lands_once_in_key_order(run):
    kept = run.to_pandas()
    tok_path = os.path.join(run.shards_path)
    manifest, problems = verify(tok_path)
    assert problems == []
    assert sum(t["documents"] for t in manifest["totals"].values()) == len(kept)
    # every shard: documents in ascending hash64(seed, id); tokens equal the data's tokens
    by_tokens = {tuple(t): i for i, t in zip(kept["id"], kept["tokens"])}
    seen = []
    for s in manifest["shards"]:
        ds = IndexedDataset(os.path.join(tok_path, s["prefix"]))
        ids = [by_tokens[tuple(ds[k].tolist())] for k in range(len(ds))]
        keys = doc_keys(ids, manifest["seed"])
        assert list(keys) == sorted(keys)
        n = manifest["totals"][s["split"]]["shards"]
        assert [int(k) % n for k in keys] == [s["shard"]] * len(keys)
        assert ds.dtype == np.uint16
        seen.extend(ids)
    assert sorted(seen) == sorted(kept["id"])


def test_split_fractions_and_megatron_files(run):
    d = run.shards_path
    m = json.loads(open(os.path.join(d, "manifest.json")).read())
    n = {s: t["documents"] for s, t in m["totals"].items()}
    total = sum(n.values())
    assert abs(n["train"] / total - 0.9) < 0.03 and n["valid"] > 0 and n["test"] > 0
    assert m["format"] == "megatron-mmidx-v1" and m["dtype_code"] == 8
    assert m["tokenizer"]["eod_id"] == 0 and m["tokenizer"]["vocab_size"] == 8192
    per_split = json.loads(open(os.path.join(d, "per_split_data_args.json")).read())
    assert len(per_split["train"]) == 2 * m["totals"]["train"]["shards"]
    args = open(os.path.join(d, "data_args.txt")).read().split()
    assert args == per_split["train"]
    assert all(os.path.exists(p + ".bin") for p in args[1::2])
    assert not any(p.rsplit("/", 1)[-1].replace("-", "").isdigit() for p in args[1::2])
    assert not os.path.exists(os.path.join(d, "_route"))


def test_decode_round_trip(run, sample_records):
    d = run.shards_path
    ids, text = decode_document(d, "train/train-00000", 0)
    assert ids[-1] == 0 and text.endswith("<|endoftext|>")
    kept = run.to_pandas()
    assert text[: -len("<|endoftext|>")] in set(kept["text"])


def test_byte_identical_across_workers_and_partitioning(client, tmp_path, small_corpus):
    from distributed import Client, LocalCluster

    a = pipeline(small_corpus, tmp_path / "a").run(client=client, progress=False)
    b = pipeline(small_corpus, tmp_path / "b", before=[Repartition(npartitions=2)]).run(
        client=client, progress=False)
    with LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=":0") as c, \
            Client(c) as one:
        c1 = pipeline(small_corpus, tmp_path / "c").run(client=one, progress=False)
    assert a.summary["output"]["partitions"] == 3 and b.summary["output"]["partitions"] == 2
    assert tree_digest(a.shards_path) == tree_digest(b.shards_path) == tree_digest(c1.shards_path)
    ma = json.loads(open(os.path.join(a.shards_path, "manifest.json")).read())
    mb = json.loads(open(os.path.join(b.shards_path, "manifest.json")).read())
    assert ma["shards"] == mb["shards"]


def test_resume_skips_finished_shards_and_seed_changes_order(client, tmp_path, small_corpus):
    p = pipeline(small_corpus, tmp_path / "o")
    first = p.run(client=client, progress=False)
    assert first.summary["shards"]["computed"] is True
    again = p.run(client=client, progress=False)
    assert again.summary["shards"]["computed"] is False
    before = tree_digest(first.shards_path)
    with open(os.path.join(first.shards_path, "manifest.json")) as f:
        docs_before = json.load(f)["totals"]
    other = pipeline(small_corpus, tmp_path / "o", shards={"num_shards": 3, "seed": 7}).run(
        client=client, progress=False)
    assert other.summary["shards"]["computed"] is True
    # the same documents, in another order: other bytes, the same totals
    assert tree_digest(other.shards_path) != before
    with open(os.path.join(other.shards_path, "manifest.json")) as f:
        manifest = json.load(f)
    assert manifest["seed"] == 7
    assert sum(t["documents"] for t in manifest["totals"].values()) == \
        sum(t["documents"] for t in docs_before.values())


def test_target_shard_tokens(client, tmp_path, small_corpus):
    res = pipeline(small_corpus, tmp_path / "o", shards={"target_shard_tokens": 50_000}).run(
        client=client, progress=False)
    t = res.summary["shards"]["totals"]["train"]
    assert t["tokens"] > 100_000 and t["shards"] == -(-t["tokens"] // 50_000)


def test_bfd_packing(client, tmp_path, small_corpus):
    res = pipeline(small_corpus, tmp_path / "o",
                   shards={"num_shards": 1, "packing": "bfd", "seq_length": 512}).run(
        client=client, progress=False)
    d = res.shards_path
    ds = IndexedDataset(os.path.join(d, "train/train-00000"))
    assert (ds.sizes == 512).all()
    tokens = np.asarray(ds.tokens)
    data_tokens = sum(len(t) for t in res.to_pandas()["tokens"])
    non_fill = data_tokens
    assert tokens.size >= non_fill and tokens.size - non_fill < 512 * len(ds) * 0.2
    assert verify(d)[1] == []


def test_datatrove_format(client, tmp_path, small_corpus):
    res = pipeline(small_corpus, tmp_path / "o", shards={"num_shards": 2,
                                                         "format": "datatrove"}).run(
        client=client, progress=False)
    d = res.shards_path
    m = json.loads(open(os.path.join(d, "manifest.json")).read())
    s = m["shards"][0]
    prefix = os.path.join(d, s["prefix"])
    tokens = np.fromfile(prefix + ".ds", dtype="<u2")
    ends = np.fromfile(prefix + ".ds.index", dtype="<u8")
    assert len(ends) == s["documents"] and ends[-1] == tokens.size == s["tokens"]
    assert (tokens[ends - 1] == 0).all()  # every document ends with EOD
    meta = open(prefix + ".ds.metadata").read()
    assert meta == f"tokenizer.json|2\n{tokens.size}\n"
    assert verify(d)[1] == []


def test_inspect_reports_tampering(run, tmp_path):
    import shutil

    d = tmp_path / "copy"
    shutil.copytree(run.shards_path, d)
    idx = d / "train" / "train-00001.idx"
    data = bytearray(idx.read_bytes())
    data[40] ^= 0xFF
    idx.write_bytes(bytes(data))
    (d / "valid" / "valid-00000.bin").write_bytes(b"")
    problems = verify(str(d))[1]
    assert any("train-00001.idx: sha256 differs" in p for p in problems)
    assert any("valid-00000.bin: 0 bytes" in p and "truncated" in p for p in problems)
    os.remove(d / "manifest.json")
    with pytest.raises(gp.InputError, match="no manifest.json"):
        verify(str(d))


def test_tokenizer_decodes_quickstart_vocab():
    tok = load_tokenizer(TOK)
    assert tok.get_vocab_size() == 8192 and tok.token_to_id("<|endoftext|>") == 0


def test_duplicate_ids_order_does_not_depend_on_partitioning(client, tmp_path, sample_records):
    from tests.conftest import write_jsonl

    recs = [{"id": "same", "text": r["text"]} for r in sample_records[:40]]
    write_jsonl(tmp_path / "one" / "a.jsonl", recs)
    write_jsonl(tmp_path / "two" / "a.jsonl", recs[25:])
    write_jsonl(tmp_path / "two" / "b.jsonl", recs[:25])
    shards = {"num_shards": 1}
    a = pipeline(tmp_path / "one", tmp_path / "oa", shards=shards).run(client=client,
                                                                       progress=False)
    b = pipeline(tmp_path / "two", tmp_path / "ob", shards=shards).run(client=client,
                                                                       progress=False)
    assert tree_digest(a.shards_path) == tree_digest(b.shards_path)
