#!/usr/bin/env python
"""Decontamination: the n-gram index and the scan. Prints JSON.

    python benchmarks/bench_decontam.py [--ngrams 1000000] [--scale 2]

* ``index``: build time and memory of an index of ``--ngrams`` distinct 13-grams (evaluation
  samples of 100 words drawn from the sample corpus's vocabulary; every sample gives 88 of
  them): seconds, MiB of the arrays the workers receive (keys, set masks, bitmap), and the
  peak memory of the build above the baseline.
* ``scan``: the ``decontaminate`` stage on pandas partitions of the sample corpus repeated
  ``--scale`` times, one thread, against that index (docs/s, MB/s), with the ratio against
  two references on the same documents: a plain-Python implementation (the same
  normalisation, a ``set`` of n-gram tuples: what one writes without a kernel), and the
  whitespace word count kernel (one pass over the text that does nothing else: the
  unavoidable work).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sys
import tempfile
import time
import tracemalloc
import unicodedata
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from bench_common import sample_texts  # noqa: E402  (next to this script)


def py_words(text: str) -> list[str]:
    out, cur = [], []
    for ch in text:
        cat = unicodedata.category(ch)
        if cat[0] == "M":
            continue
        if cat[0] in "LN":
            base = "".join(c for c in unicodedata.normalize("NFKD", ch)
                           if not unicodedata.combining(c)).lower()
            cur.append(base[0] if base else ch)
        elif cur:
            out.append("".join(cur))
            cur = []
    if cur:
        out.append("".join(cur))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ngrams", type=int, default=1_000_000)
    ap.add_argument("--scale", type=int, default=2)
    ap.add_argument("--partition", type=int, default=2000)
    args = ap.parse_args()

    import pandas as pd

    from gpupipe.backends.dispatch import text_buffers
    from gpupipe.frame import ID, TEXT
    from gpupipe.kernels.contamination import fold_table
    from gpupipe.kernels.utf8 import count_words
    from gpupipe.stages import Decontaminate

    texts = sample_texts(args.scale)
    vocab = sorted({w for t in texts[:2000] for w in t.split() if w.isalpha()})
    rng = random.Random(0)
    per = 100 - 13 + 1
    samples = [" ".join(rng.choices(vocab, k=100)) for _ in range(args.ngrams // per + 1)]
    # a real eval set too: 200 windows of 40 words of the corpus (these are found)
    real = []
    for t in rng.sample(texts, 200):
        w = t.split()
        if len(w) > 60:
            a = rng.randrange(len(w) - 40)
            real.append(" ".join(w[a:a + 40]))
    tmp = tempfile.mkdtemp()
    for name, rows in (("synthetic", samples), ("real", real)):
        with open(os.path.join(tmp, f"{name}.jsonl"), "w", encoding="utf-8") as f:
            f.writelines(json.dumps({"text": r}) + "\n" for r in rows)
    fold_table()  # built once per process (~0.1 s), not part of the index
    stage = Decontaminate(eval_sets=[{"name": "synthetic", "path": f"{tmp}/synthetic.jsonl"},
                                     {"name": "real", "path": f"{tmp}/real.jsonl"}])
    tracemalloc.start()
    t0 = time.perf_counter()
    ix = stage.index()
    build = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    out = {"index": {"samples": sum(ix.samples.values()), "ngrams": sum(ix.ngrams.values()),
                     "distinct_ngrams": len(ix.keys), "seconds": round(build, 3),
                     "MiB_shipped": round(ix.nbytes / 2**20, 2),
                     "peak_build_MiB": round(peak / 2**20, 1),
                     "process_max_rss_MiB": round(resource.getrusage(
                         resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}}

    frames = [pd.DataFrame({ID: [str(i) for i in range(a, min(a + args.partition, len(texts)))],
                            TEXT: pd.array(texts[a:a + args.partition], "string")})
              for a in range(0, len(texts), args.partition)]
    mb = sum(len(t.encode()) for t in texts) / 1e6
    stage.process(frames[0].head(10))  # compile
    t0 = time.perf_counter()
    hit = sum(sum(r.drops.values()) for r in (stage.process(f) for f in frames))
    t_stage = time.perf_counter() - t0
    t0 = time.perf_counter()
    for f in frames:
        count_words(*text_buffers(f[TEXT]))
    t_words = time.perf_counter() - t0
    # the plain-Python reference on a slice (it is slow), scaled to the whole
    ref_n = min(len(texts), 1000)
    grams = set()
    for s in real:
        w = py_words(s)
        grams.update(tuple(w[i:i + 13]) for i in range(len(w) - 12))
    t0 = time.perf_counter()
    ref_hit = 0
    for t in texts[:ref_n]:
        w = py_words(t)
        ref_hit += any(tuple(w[i:i + 13]) in grams for i in range(len(w) - 12))
    t_ref = (time.perf_counter() - t0) * len(texts) / ref_n
    out["scan"] = {"docs": len(texts), "MB": round(mb, 2), "documents_hit": hit,
                   "seconds": round(t_stage, 3), "docs_per_s": round(len(texts) / t_stage),
                   "MB_per_s": round(mb / t_stage, 2),
                   "python_reference_MB_per_s": round(mb / t_ref, 2),
                   "speedup_vs_python_reference": round(t_ref / t_stage, 1),
                   "word_count_kernel_MB_per_s": round(mb / t_words, 2),
                   "share_of_word_count_speed": round(t_words / t_stage, 2)}
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
