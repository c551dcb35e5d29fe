#!/usr/bin/env python
"""Fuzzy dedup: gpupipe vs datatrove's four MinHash stages on the same documents. Prints JSON.

    python benchmarks/bench_dedup.py [--workers 2] [--near 300] [--scales 1 10]
                                     [--memory-scales 1 2 4]

Corpus: every sample document of 50+ words, plus ``--near`` planted near-copies (1-5% of the
words replaced) — ground truth for recall / precision. Both tools use word 5-grams and
14 bands x 8 rows (datatrove's defaults; gpupipe's ``datatrove`` preset).

* signatures: MinHash throughput of gpupipe's kernels in this process (MB/s), both presets;
* end to end, for each ``--scales`` factor (1 = the corpus, 10 = ten times as many documents,
  the copies with their words shuffled so they are new documents, not duplicates): gpupipe's
  fuzzy_dedup pipeline on a local Dask cluster (warm) vs datatrove's MinhashDedupSignature ->
  Buckets -> Cluster -> Filter with LocalPipelineExecutor, same number of workers;
  ratio = datatrove seconds / gpupipe seconds. gpupipe runs with its default (candidate pairs
  verified by signature agreement) and with ``verify: off`` / ``jaccard``, with the seconds of
  each step;
* memory: RSS per Dask worker before the run (libraries) and at its peak, for 1x, 2x, 4x, ...
  the data (copies with words shuffled, so they are new documents, not duplicates).

datatrove is optional: ``pip install "datatrove==0.10.1" "xxhash<4" spacy regex orjson``.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
import bench_common  # noqa: E402  (next to this script)
from bench_common import write_files  # noqa: E402


def corpus(n_near: int, seed: int = 0):
    recs = [json.loads(line) for f in sorted(glob.glob(str(REPO / "data/sample/*.jsonl.gz")))
            for line in gzip.open(f, "rt", encoding="utf-8")]
    base = [{"id": r["id"], "text": r["text"]} for r in recs if len(r["text"].split()) >= 50]
    rng = random.Random(seed)
    near = []
    for r in rng.sample(base, n_near):
        words = r["text"].split(" ")
        for j in rng.sample(range(len(words)), max(1, int(len(words) * rng.uniform(0.01, 0.05)))):
            words[j] = rng.choice(["alpha", "beta", "gamma", "delta"])
        text = " ".join(words)
        near.append({"id": r["id"] + "~near", "text": text, "orig": r["id"],
                     "jaccard": word_jaccard(text, r["text"])})
    rows = base + [{"id": r["id"], "text": r["text"]} for r in near]
    rng.shuffle(rows)
    return rows, near


def scaled(rows, k: int):
    """The rows plus ``k - 1`` copies of each with its words shuffled (new documents, no
    near-duplicates of the originals)."""
    rng = random.Random(k)
    out = list(rows)
    for c in range(1, k):
        for r in rows:
            w = r["text"].split()
            rng.shuffle(w)
            out.append({"id": f"{r['id']}~x{c}", "text": " ".join(w)})
    return out


def word_jaccard(x: str, y: str, n: int = 5) -> float:
    """Jaccard similarity of the word 5-grams of datatrove-normalised text (plain Python)."""
    import re
    import unicodedata

    def grams(text):
        t = unicodedata.normalize("NFKD", text)
        t = "".join(c for c in t if unicodedata.category(c) != "Mn").lower()
        t = re.sub("[0-9]", "0", t)
        w = "".join(" " if unicodedata.category(c)[0] in "PSZ" or c.isspace() else c
                    for c in t).split()
        return {tuple(w[i:i + n]) for i in range(max(1, len(w) - n + 1))}

    a, b = grams(x), grams(y)
    return len(a & b) / max(1, len(a | b))


#: datatrove's 14 bands x 8 rows put the LSH threshold at (1/14) ** (1/8)
LSH_THRESHOLD = (1 / 14) ** (1 / 8)


def quality(removed: set[str], near, all_ids) -> dict:
    """recall: planted pairs with one side removed (all, and those whose true word 5-gram
    Jaccard is at least the LSH threshold, 0.72: the near-duplicates the preset is meant to
    find); precision: removed docs that are planted copies or their originals (the corpus may
    hold real near-duplicates, counted as false)."""
    planted = {r["id"] for r in near} | {r["orig"] for r in near}
    hit = [r["id"] in removed or r["orig"] in removed for r in near]
    above = [h for h, r in zip(hit, near) if r["jaccard"] >= LSH_THRESHOLD]
    return {"removed": len(removed), "recall": round(sum(hit) / len(near), 3),
            "recall_above_threshold": f"{sum(above)}/{len(above)}",
            "precision": round(len(removed & planted) / max(1, len(removed)), 3)}


def run_gpupipe(inp: Path, out: Path, workers: int, verify: str = "signature"):
    import pandas as pd
    from distributed import Client, LocalCluster

    import gpupipe as gp
    from gpupipe.runner.cluster import worker_env
    from gpupipe.stages import FuzzyDedup

    pipe = gp.Pipeline(input={"path": str(inp), "id_column": "id"},
                       output={"path": str(out), "overwrite": True},
                       stages=[FuzzyDedup(preset="datatrove", verify=verify)])
    with LocalCluster(n_workers=workers, threads_per_worker=1, dashboard_address=":0",
                      silence_logs=50, env=worker_env(1)) as cluster, Client(cluster) as client:
        pipe.run(client=client, progress=False)  # warm-up: compiled kernels load per worker
        t0 = time.perf_counter()
        res = pipe.run(client=client, progress=False)
        seconds = time.perf_counter() - t0
    removed = set(pd.read_parquet(out / "dedup" / "duplicates.parquet")["id"])
    steps = {s["step"]: s["seconds"] for s in res.stage("fuzzy_dedup")["steps"]}
    return seconds, removed, steps


def run_datatrove(inp: Path, work: Path, workers: int):
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter
    from datatrove.utils.hashing import HashConfig

    cfg = MinhashConfig(hash_config=HashConfig(precision=64), num_buckets=14,
                        hashes_per_bucket=8)
    tasks = 4
    kw = {"workers": workers, "skip_completed": False}
    t0 = time.perf_counter()
    LocalPipelineExecutor(pipeline=[JsonlReader(str(inp), id_key="id"),
                                    MinhashDedupSignature(output_folder=str(work / "sigs"),
                                                          config=cfg)],
                          tasks=tasks, logging_dir=str(work / "log1"), **kw).run()
    LocalPipelineExecutor(pipeline=[MinhashDedupBuckets(input_folder=str(work / "sigs"),
                                                        output_folder=str(work / "buckets"),
                                                        config=cfg)],
                          tasks=cfg.num_buckets, logging_dir=str(work / "log2"), **kw).run()
    LocalPipelineExecutor(pipeline=[MinhashDedupCluster(input_folder=str(work / "buckets"),
                                                        output_folder=str(work / "remove"),
                                                        config=cfg)],
                          tasks=1, logging_dir=str(work / "log3"), **kw).run()
    LocalPipelineExecutor(pipeline=[JsonlReader(str(inp), id_key="id"),
                                    MinhashDedupFilter(input_folder=str(work / "remove"),
                                                       exclusion_writer=JsonlWriter(
                                                           str(work / "removed"))),
                                    JsonlWriter(str(work / "kept"))],
                          tasks=tasks, logging_dir=str(work / "log4"), **kw).run()
    seconds = time.perf_counter() - t0
    removed = set()
    for f in glob.glob(str(work / "removed" / "*")):
        opener = gzip.open if f.endswith(".gz") else open
        with opener(f, "rt", encoding="utf-8") as fh:
            removed.update(json.loads(line)["id"] for line in fh)
    return seconds, removed


def peak_worker_rss(inp: Path, out: Path, workers: int) -> dict:
    import gpupipe as gp
    from gpupipe.stages import FuzzyDedup

    return bench_common.peak_worker_rss(
        gp.Pipeline(input={"path": str(inp), "id_column": "id"},
                    output={"path": str(out), "overwrite": True},
                    stages=[FuzzyDedup(preset="datatrove")]), workers)


def main() -> int:
    import pyarrow as pa

    from gpupipe.kernels.hashing import minhash, minhash_ngrams
    from gpupipe.stages import FuzzyDedup
    from gpupipe.stages.dedup.fuzzy import normalized_words

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--near", type=int, default=300)
    ap.add_argument("--scales", type=int, nargs="*", default=[1, 10])
    ap.add_argument("--memory-scales", type=int, nargs="*", default=[1, 2, 4])
    args = ap.parse_args()
    rows, near = corpus(args.near)
    mb = sum(len(r["text"].encode()) for r in rows) / 1e6
    report: dict = {"docs": len(rows), "text_MB": round(mb, 2), "planted_near": len(near),
                    "workers": args.workers, "cpu_count": os.cpu_count()}
    arr = pa.array([r["text"] for r in rows], pa.large_string())
    sig = {}
    for preset in ("datatrove", "nemo"):
        st = FuzzyDedup(preset=preset)
        cfg = st.config()
        a, b = st.permutations(cfg)

        def compute(cfg=cfg, a=a, b=b):
            if cfg["shingles"] == "chars":
                return minhash(arr, seed=cfg["seed"], a=a, b=b, width=cfg["width"],
                               bits=cfg["bits"])
            return minhash_ngrams(normalized_words(arr), ngrams=cfg["width"] - 1, seed=cfg["seed"], a=a, b=b,
                                  bits=cfg["bits"])

        compute()  # compile
        t0 = time.perf_counter()
        compute()
        t = time.perf_counter() - t0
        sig[preset] = {"MB_per_s": round(mb / t, 2), "docs_per_s": round(len(rows) / t),
                       "num_hashes": cfg["num_hashes"]}
    report["signatures_in_process"] = sig
    try:
        import datatrove  # noqa: F401
    except ImportError:
        datatrove = None
        report["datatrove"] = "not installed (see the docstring)"
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for k in args.scales:
            rows_k = scaled(rows, k)
            mb_k = sum(len(r["text"].encode()) for r in rows_k) / 1e6
            d = tmp / f"x{k}"
            write_files(rows_k, d / "in", n_files=4 * k)
            ids = {r["id"] for r in rows_k}
            entry = {"docs": len(rows_k), "text_MB": round(mb_k, 2)}
            for verify in ("signature", "off", "jaccard"):
                t_gp, removed_gp, steps = run_gpupipe(d / "in", d / "gp", args.workers, verify)
                entry[f"gpupipe_verify_{verify}"] = {
                    "seconds": round(t_gp, 3), "MB_per_s": round(mb_k / t_gp, 2),
                    "docs_per_s": round(len(rows_k) / t_gp), **quality(removed_gp, near, ids),
                    "step_seconds": steps}
            if datatrove is not None:
                t_dt, removed_dt = run_datatrove(d / "in", d / "dt", args.workers)
                entry["datatrove"] = {"seconds": round(t_dt, 3), "MB_per_s": round(mb_k / t_dt, 2),
                                      "docs_per_s": round(len(rows_k) / t_dt),
                                      **quality(removed_dt, near, ids)}
                entry["speedup_vs_datatrove"] = round(
                    t_dt / entry["gpupipe_verify_signature"]["seconds"], 2)
            report[f"end_to_end_{k}x"] = entry
        mem = {}
        for k in args.memory_scales:
            rows_k = scaled(rows, k)
            d = tmp / f"mem{k}"
            write_files(rows_k, d / "in", n_files=4 * k)
            mem[f"{k}x"] = {"docs": len(rows_k), "text_MB": round(
                sum(len(r["text"].encode()) for r in rows_k) / 1e6, 1),
                **peak_worker_rss(d / "in", d / "out", args.workers)}
        report["memory"] = mem
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
