#!/usr/bin/env python
"""Tokenization: gpupipe's BPE engine against Hugging Face ``tokenizers`` and ``tiktoken`` on the
same text with the same vocabulary. Prints JSON.

    python benchmarks/bench_tokenize.py [--scale 8] [--vocab-size 32000]

Text: data/sample/ repeated ``--scale`` times (8: 34 MB). Tokenizers: ``data/tokenizer.json``
(GPT-2 style, 8,192 tokens), and GPT-2, Llama 3 and Qwen 2.5 style files trained here on the
sample with ``--vocab-size`` tokens (`gpupipe.kernels.bpe_tables.train_bpe`), and the real
65,000-token file anthropic 0.20 ships (NFKC) when it is installed. For each:

* one thread: HF ``encode_batch_fast`` (the call gpupipe made before) and ``encode_batch``,
  ``tiktoken`` (an ``Encoding`` built from the same vocabulary, ranks = ids, and pattern;
  ``encode_ordinary_batch`` with one thread) and gpupipe's engine (`gpupipe.io.bpe
  .encode_buffers`, the call the tokenize stage makes); MB/s, tokens/s, and the ratio to HF's
  ``encode_batch_fast``;
* two threads: the same with ``RAYON_NUM_THREADS=2`` (HF, in a child process), tiktoken's
  ``num_threads=2`` and gpupipe's kernel on two halves in two threads (it releases the GIL);
* ``same_ids_docs``: documents whose ids equal HF's, per engine (tiktoken cannot apply a
  normalizer or ``ignore_merges``: a difference there is tiktoken's, not the text's);
* gpupipe's one-off costs: compiling (an empty numba cache dir, in a child process), building
  the tables from the JSON, and the check against HF on its test texts.

Timings are the best of 3 (``--repeat``). HF is pinned to one thread with RAYON_NUM_THREADS=1,
set before ``tokenizers`` is imported.
"""

from __future__ import annotations

import os

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # noqa: E402  (before tokenizers is imported)

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_common import best_of, sample_texts  # noqa: E402

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def tiktoken_encoding(path: str):
    """A tiktoken Encoding with the file's vocabulary (rank = id: a trained BPE numbers its
    tokens in merge order), pattern and added tokens; None where it cannot be built."""
    try:
        import tiktoken
    except ImportError:
        return None
    from gpupipe.kernels import bpe
    from gpupipe.kernels.bpe_tables import _bytes_of_char, pre_tokenizer_mode

    spec = json.load(open(path, encoding="utf-8"))
    mode = pre_tokenizer_mode(spec["pre_tokenizer"])
    if mode is None:
        return None
    chars = _bytes_of_char()
    ranks = {bytes(chars[c] for c in tok): i for tok, i in spec["model"]["vocab"].items()}
    specials = {t["content"]: t["id"] for t in spec["added_tokens"]
                if t["content"].encode() not in ranks}
    pattern = GPT2_PATTERN if mode == bpe.GPT2 else bpe.PATTERNS[mode]
    try:
        return tiktoken.Encoding(name=Path(path).stem, pat_str=pattern, mergeable_ranks=ranks,
                                 special_tokens=specials)
    except Exception as e:  # noqa: BLE001  (its Rust core refuses some vocabularies)
        print(f"tiktoken: {path}: {e}", file=sys.stderr)
        return None


HF_CHILD = r"""
import json, sys, time
from tokenizers import Tokenizer
texts = json.load(open(sys.argv[2]))
tok = Tokenizer.from_file(sys.argv[1])
tok.encode_batch_fast(texts[:64], add_special_tokens=False)
best = 1e9
for _ in range(int(sys.argv[3])):
    t0 = time.perf_counter()
    tok.encode_batch_fast(texts, add_special_tokens=False)
    best = min(best, time.perf_counter() - t0)
print(best)
"""

COMPILE_CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[2])
t0 = time.perf_counter()
from gpupipe.io import bpe
engine = bpe.choose_engine(sys.argv[1], "gpupipe")
print(json.dumps({"first_choose_engine_s": round(time.perf_counter() - t0, 2)}))
"""


def bench_one(name: str, path: str, texts: list[str], text_file: str, repeat: int) -> dict:
    import pyarrow as pa

    from gpupipe.io import bpe
    from gpupipe.io.tokenizer import load_tokenizer
    from gpupipe.kernels.bpe import encode
    from gpupipe.kernels.bpe_tables import build_tables
    from gpupipe.kernels.utf8 import utf8_buffers

    mb = sum(len(t.encode()) for t in texts) / 1e6
    tok = load_tokenizer(path)
    entry: dict = {"tokenizer": name, "vocab": tok.get_vocab_size(), "mb": round(mb, 1),
                   "docs": len(texts)}

    def rate(seconds, tokens):
        return {"seconds": round(seconds, 3), "mb_per_s": round(mb / seconds, 2),
                "tokens_per_s": round(tokens / seconds)}

    # ----------------------------------------------------------------- one thread
    hf = [e.ids for e in tok.encode_batch_fast(texts, add_special_tokens=False)]
    n_tokens = sum(map(len, hf))
    t_fast = best_of(lambda: tok.encode_batch_fast(texts, add_special_tokens=False), repeat)
    t_slow = best_of(lambda: tok.encode_batch(texts, add_special_tokens=False), 1)
    entry["tokens"] = n_tokens
    one = {"hf_encode_batch_fast": rate(t_fast, n_tokens),
           "hf_encode_batch": rate(t_slow, n_tokens)}

    t0 = time.perf_counter()
    engine = bpe.choose_engine(path)
    entry["engine"] = engine.describe()
    entry["choose_engine_s_warm_cache"] = round(time.perf_counter() - t0, 2)
    if engine.name == "gpupipe":
        spec = json.load(open(path, encoding="utf-8"))
        t0 = time.perf_counter()
        build_tables(spec)
        entry["build_tables_s"] = round(time.perf_counter() - t0, 2)
        off, data = utf8_buffers(pa.array(texts, pa.large_string()))
        tables = engine.tables
        flat, lens, by_hf = bpe.encode_buffers(tables, off, data, tok)
        t_ours = best_of(lambda: bpe.encode_buffers(tables, off, data, tok), repeat)
        ends = np.cumsum(lens)
        ours = [flat[e - n: e].tolist() for e, n in zip(ends, lens, strict=True)]
        one["gpupipe"] = {**rate(t_ours, int(lens.sum())),
                          "ratio_to_hf_fast": round(t_fast / t_ours, 2),
                          "docs_encoded_by_hf_for_normalization": int(by_hf),
                          "same_ids_docs": sum(a == b for a, b in zip(ours, hf, strict=True))}
    enc = tiktoken_encoding(path)
    if enc is not None:
        tk = enc.encode_ordinary_batch(texts, num_threads=1)
        t_tk = best_of(lambda: enc.encode_ordinary_batch(texts, num_threads=1), repeat)
        one["tiktoken"] = {**rate(t_tk, sum(map(len, tk))),
                           "ratio_to_hf_fast": round(t_fast / t_tk, 2),
                           "same_ids_docs": sum(a == b for a, b in zip(tk, hf, strict=True))}
    entry["one_thread"] = one

    # ----------------------------------------------------------------- two threads
    two: dict = {}
    env = {**os.environ, "RAYON_NUM_THREADS": "2"}
    r = subprocess.run([sys.executable, "-c", HF_CHILD, path, text_file, str(repeat)],
                       capture_output=True, text=True, env=env, check=True)
    t_hf2 = float(r.stdout.strip().splitlines()[-1])
    two["hf_encode_batch_fast"] = rate(t_hf2, n_tokens)
    if engine.name == "gpupipe" and engine.tables.normal_form is None:
        half = len(texts) // 2
        parts = [utf8_buffers(pa.array(p, pa.large_string())) for p in (texts[:half],
                                                                        texts[half:])]

        def both():
            threads = [threading.Thread(target=encode, args=(o, d, engine.tables))
                       for o, d in parts]
            for t in threads:
                t.start()
            for t in threads:
                t.join()

        t2 = best_of(both, repeat)
        two["gpupipe"] = {**rate(t2, n_tokens), "ratio_to_hf_fast_2_threads": round(t_hf2 / t2, 2)}
    if enc is not None:
        t_tk2 = best_of(lambda: enc.encode_ordinary_batch(texts, num_threads=2), repeat)
        two["tiktoken"] = rate(t_tk2, n_tokens)
    entry["two_threads"] = two
    return entry


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=int, default=8)
    ap.add_argument("--vocab-size", type=int, default=32000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", action="append", help="only these tokenizers (repeatable)")
    args = ap.parse_args()

    from gpupipe.kernels.bpe_tables import train_bpe

    texts = sample_texts(args.scale)
    report: dict = {"threads_per_engine": "see keys", "results": []}
    with tempfile.TemporaryDirectory(prefix="gpupipe-bench-tok-") as tmp:
        text_file = os.path.join(tmp, "texts.json")
        with open(text_file, "w", encoding="utf-8") as f:
            json.dump(texts, f)
        paths = {"committed_gpt2_8k": str(REPO / "data/tokenizer.json")}
        base = sample_texts(1)
        specials = {"gpt2": ("<|endoftext|>",),
                    "llama3": ("<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"),
                    "qwen2": ("<|endoftext|>", "<|im_start|>", "<|im_end|>")}
        for style, sp in specials.items():
            name = f"{style}_{args.vocab_size // 1000}k"
            if args.only and name not in args.only:
                continue
            p = os.path.join(tmp, f"{name}.json")
            train_bpe(base, vocab_size=args.vocab_size, special_tokens=sp, style=style).save(p)
            paths[name] = p
        try:
            import anthropic

            claude = os.path.join(os.path.dirname(anthropic.__file__), "tokenizer.json")
            if os.path.exists(claude):
                paths["anthropic_0.20_65k_nfkc"] = claude
        except ImportError:
            pass
        cold = tempfile.mkdtemp(prefix="gpupipe-numba-cold-", dir=tmp)
        r = subprocess.run([sys.executable, "-c", COMPILE_CHILD, paths["committed_gpt2_8k"],
                            str(REPO)], capture_output=True, text=True, check=True,
                           env={**os.environ, "NUMBA_CACHE_DIR": cold})
        report["cold_compile"] = json.loads(r.stdout.strip().splitlines()[-1])
        for name, path in paths.items():
            if args.only and name not in args.only:
                continue
            report["results"].append(bench_one(name, path, texts, text_file, args.repeat))
            print(json.dumps(report["results"][-1]), file=sys.stderr)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
