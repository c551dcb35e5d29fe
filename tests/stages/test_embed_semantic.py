"""embed (ONNX encoder, mean pooling, normalised) gives the vectors of calling the model on each
text alone; semantic_dedup removes planted paraphrase-level copies, keeps unrelated documents,
and gives the same result with 1 or 2 workers."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gpupipe as gp
from gpupipe.errors import SpecError
from gpupipe.stages import Embed, SemanticDedup
from tests.conftest import REPO, write_jsonl
from tests.stages.onnx_models import mean_pool_linear, token_embeddings

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("sklearn")

TOKENIZER = str(REPO / "data" / "tokenizer.json")


@pytest.fixture(scope="module")
def encoder(tmp_path_factory) -> str:
    return token_embeddings(tmp_path_factory.mktemp("enc") / "enc.onnx", vocab=8192, dim=256)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, sample_records):
    """Documents of 80+ words, and for ten of them a copy with three words replaced."""
    base = [{"id": r["id"], "text": r["text"]} for r in sample_records
            if len(r["text"].split()) >= 80]
    rng = random.Random(0)
    planted = {}
    for k, r in enumerate(base[:: len(base) // 10][:10]):
        words = r["text"].split(" ")
        for j in rng.sample(range(len(words)), 3):
            words[j] = "zebra"
        planted[f"para-{k}"] = (r["id"], " ".join(words))
    d = tmp_path_factory.mktemp("sem") / "in"
    write_jsonl(d / "a.jsonl", base[:700])
    write_jsonl(d / "b.jsonl", base[700:] + [{"id": i, "text": t}
                                            for i, (_, t) in planted.items()])
    return d, base, planted


def test_embed_gives_the_model_s_vectors(client, tmp_path, encoder, corpus):
    d, base, _ = corpus
    stage = Embed(model=encoder, tokenizer=TOKENIZER, max_length=128, batch_tokens=4096)
    res = gp.Pipeline(input={"path": str(d / "a.jsonl"), "id_column": "id"}, stages=[stage],
                      output=str(tmp_path / "o")).run(client=client, progress=False)
    files = sorted((tmp_path / "o" / "data").glob("*.parquet"))
    table = pa.concat_tables([pq.read_table(f) for f in files])
    assert table.schema.field("embedding").type == pa.list_(pa.float32(), 256)
    got = np.asarray(table["embedding"].combine_chunks().flatten()).reshape(-1, 256)

    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(TOKENIZER)
    tok.enable_truncation(128)
    session = ort.InferenceSession(encoder, providers=["CPUExecutionProvider"])
    text = {r["id"]: r["text"] for r in base}
    want = []
    for i in table["id"].to_pylist():
        ids = np.array([tok.encode(text[i]).ids], dtype=np.int64)
        out = session.run(["last_hidden_state"], {"input_ids": ids,
                                                  "attention_mask": np.ones_like(ids)})[0][0]
        v = out.mean(axis=0)
        want.append(v / np.linalg.norm(v))
    np.testing.assert_allclose(got, np.array(want), rtol=1e-5, atol=1e-6)
    assert res.stage("embed")["counters"] == {"documents_embedded": 700}


def test_embed_refuses_a_model_that_does_not_fit(tmp_path, encoder):
    clf = mean_pool_linear(tmp_path / "clf.onnx", vocab=8192, classes=3)
    p = gp.Pipeline(input={"path": "data/sample/*.jsonl.gz"}, output=str(tmp_path / "o"),
                    stages=[Embed(model=clf, tokenizer=TOKENIZER)])
    with pytest.raises(SpecError, match=r"stage 0 \(embed\): .*clf.onnx: output 'logits' has 2 "
                                        r"dimensions; pooling: mean needs 3"):
        p.run(workers=1, progress=False)
    assert not (tmp_path / "o" / "data").exists()
    with pytest.raises(SpecError, match="model '/no/enc.onnx' is not a file"):
        gp.Pipeline(input={"path": "data/sample/*.jsonl.gz"}, output="unused",
                    stages=[{"stage": "embed", "model": "/no/enc.onnx", "tokenizer": TOKENIZER}])


def _run(d, encoder, out, keep="first", **kw):
    return gp.Pipeline(input={"path": str(d), "id_column": "id"}, output=str(out), stages=[
        Embed(model=encoder, tokenizer=TOKENIZER, max_length=512),
        SemanticDedup(n_clusters=20, eps=0.05, keep=keep)]).run(progress=False, **kw)


def test_semantic_dedup_removes_paraphrases_and_keeps_the_rest(client, tmp_path, encoder,
                                                               corpus):
    d, base, planted = corpus
    res = _run(d, encoder, tmp_path / "two", client=client)
    audit = pd.read_parquet(tmp_path / "two" / "dedup" / "duplicates.parquet")
    removed = dict(zip(audit["id"], audit["duplicate_of"]))
    # every planted copy is removed for its original, which stays
    assert {i: removed.get(i) for i in planted} == {i: orig for i, (orig, _) in planted.items()}
    kept = set(res.to_pandas()["id"])
    assert {orig for orig, _ in planted.values()} <= kept
    # unrelated documents stay: no Python documentation page was removed but the planted copies
    assert sorted(i for i in removed if i.startswith("python-docs")) == []
    assert (audit["similarity"] >= 0.95).all() and audit["component"].notna().all()
    st = res.stage("semantic_dedup")
    assert st["drops"] == {"semantic_duplicate": len(audit)}
    assert st["docs_out"] == len(base) + len(planted) - len(audit)
    assert st["counters"]["clusters"] == 20

    # the same with one worker (its own cluster): data and audit byte for byte
    _run(d, encoder, tmp_path / "one", workers=1)
    for sub in ("data", "dedup/duplicates.parquet"):
        a = sorted((tmp_path / "two" / sub).glob("*.parquet"))
        b = sorted((tmp_path / "one" / sub).glob("*.parquet"))
        assert [f.name for f in a] == [f.name for f in b] and a
        assert all(x.read_bytes() == y.read_bytes() for x, y in zip(a, b))


def test_semantic_dedup_keep_orders(client, tmp_path, encoder, corpus):
    d, _, planted = corpus
    longest = _run(d, encoder, tmp_path / "longest", keep="longest", client=client)
    audit = pd.read_parquet(tmp_path / "longest" / "dedup" / "duplicates.parquet")
    text = dict(zip(*[longest.to_pandas()[c] for c in ("id", "text")]))
    # the kept document of each removal is at least as long as the removed one
    for i, kept in zip(audit["id"], audit["duplicate_of"]):
        own = planted[i][1] if i in planted else None
        if own is not None:
            assert len(text[kept]) >= len(own)
    far = _run(d, encoder, tmp_path / "far", keep="centroid_farthest", client=client)
    assert far.stage("semantic_dedup")["drops"]["semantic_duplicate"] >= len(planted)


def test_kmeans_cuml_without_cuml_says_so(client, tmp_path, encoder, corpus):
    pytest.importorskip("sklearn")
    if __import__("importlib").util.find_spec("cuml") is not None:
        pytest.skip("cuML is installed here")
    from gpupipe.errors import BackendUnavailableError

    d, _, _ = corpus
    p = gp.Pipeline(input={"path": str(d / "a.jsonl"), "id_column": "id"},
                    output=str(tmp_path / "o"), stages=[
                        Embed(model=encoder, tokenizer=TOKENIZER, max_length=64),
                        SemanticDedup(n_clusters=4, kmeans="cuml")])
    with pytest.raises(BackendUnavailableError, match=r"kmeans: cuml needs cuML \(pip install "
                                                      r"cuml-cu12, or cuml-cu13\) and a GPU"):
        p.run(client=client, progress=False)


def test_semantic_dedup_without_embeddings_says_so(client, tmp_path, encoder, corpus):
    p = gp.Pipeline(input={"path": "data/sample/*.jsonl.gz", "id_column": "id"},
                    output=str(tmp_path / "o"), stages=[SemanticDedup(n_clusters=4)])
    with pytest.raises(SpecError, match=r"stage 0 \(semantic_dedup\): no stage before it adds "
                                        r"the column 'embedding' and the input does not carry "
                                        r"it: put an embed stage before semantic_dedup"):
        p.run(client=client, progress=False)
    assert not (tmp_path / "o" / "data").exists()
    # embeddings that come with a Parquet input are used as they are
    d, _, planted = corpus
    first = gp.Pipeline(input={"path": str(d), "id_column": "id"}, output=str(tmp_path / "emb"),
                        stages=[Embed(model=encoder, tokenizer=TOKENIZER, max_length=512)]).run(
        client=client, progress=False)
    again = gp.Pipeline(input={"path": first.data_path, "format": "parquet", "id_column": "id",
                               "columns": ["embedding"]},
                        output=str(tmp_path / "sem"),
                        stages=[SemanticDedup(n_clusters=20, keep="first")]).run(
        client=client, progress=False)
    audit = pd.read_parquet(tmp_path / "sem" / "dedup" / "duplicates.parquet")
    assert set(planted) <= set(audit["id"])
    assert again.stage("semantic_dedup")["drops"]["semantic_duplicate"] == len(audit)
