#!/usr/bin/env python
"""Tokenization + shard writing throughput as a ratio of raw ``Tokenizer.encode_batch``.

    python benchmarks/bench_shards.py [--scale 2] [--workers 2]

Same text, same process: (1) raw ``encode_batch`` of every document — the unavoidable work;
(2) gpupipe's tokenize stage plus routing and writing Megatron shards, in this process;
(3) the whole tokenize pipeline (read, tokenize, shuffle, write shards) on a local Dask cluster
(start-up excluded). Ratios > 1 mean faster than raw encoding alone. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))


def main() -> int:
    from bench_quickstart import make_corpus

    import gpupipe as gp
    from gpupipe.io.jsonl import JsonlSource
    from gpupipe.io.tokenizer import load_tokenizer
    from gpupipe.runner.cluster import worker_env
    from gpupipe.shards import writer
    from gpupipe.shards.routing import SPLIT_ORDER, shards_per_split
    from gpupipe.spec import ShardSpec
    from gpupipe.stages import Tokenize

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    tok_path = str(REPO / "data" / "tokenizer.json")
    report: dict = {"scale": args.scale, "workers": args.workers, "cpu_count": os.cpu_count()}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "in").mkdir()
        files = make_corpus(tmp / "in", args.scale)
        src = JsonlSource(files=tuple(map(str, files)), root=str(tmp / "in"), id_column="id")
        frames = [src.read(i).frame for i in range(src.npartitions)]
        texts = [t for f in frames for t in f["text"].tolist()]
        mb = sum(len(t.encode()) for t in texts) / 1e6
        report["corpus"] = {"docs": len(texts), "text_MB": round(mb, 2)}

        tok = load_tokenizer(tok_path)
        t0 = time.perf_counter()
        raw = tok.encode_batch(texts, add_special_tokens=False)
        t_raw = time.perf_counter() - t0
        n_tokens = sum(len(e.ids) + 1 for e in raw)
        report["raw_encode_batch"] = {"seconds": round(t_raw, 3), "MB_per_s": round(mb / t_raw, 2),
                                      "tokens_per_s": round(n_tokens / t_raw)}
        # the stage itself calls encode_batch_fast (no character offsets): report that bound too
        t0 = time.perf_counter()
        tok.encode_batch_fast(texts, add_special_tokens=False)
        t_fast = time.perf_counter() - t0
        report["raw_encode_batch_fast"] = {"seconds": round(t_fast, 3),
                                           "MB_per_s": round(mb / t_fast, 2)}

        # tokenize stage + routing + shard writing, all in this process
        stage = Tokenize(tokenizer=tok_path)
        spec = ShardSpec(num_shards=4, splits={"train": 0.98, "valid": 0.01, "test": 0.01})
        t0 = time.perf_counter()
        parts_dir = tmp / "parts"
        parts_dir.mkdir()
        for i, f in enumerate(frames):
            out = stage.process(f).frame
            gp.io.writer.write_parquet(gp.frame.to_arrow(out[["id", "tokens"]]),
                                       str(parts_dir / f"part-{i:05d}.parquet"))
        t_tok = time.perf_counter() - t0
        route = str(tmp / "shards" / "_route")
        routes = [writer.route_partition(i, str(parts_dir / f"part-{i:05d}.parquet"),
                                         route_dir=route, seed=spec.seed, fractions=spec.splits,
                                         dtype="uint16", vocab_size=8192)
                  for i in range(len(frames))]
        counts = shards_per_split(spec, {s: sum(r["tokens"][s] for r in routes)
                                         for s in SPLIT_ORDER})
        for s in SPLIT_ORDER:
            for j in range(counts[s]):
                writer.write_shard(s, j, counts[s], route_dir=route, partitions=len(frames),
                                   shards_dir=str(tmp / "shards"), spec=spec.model_dump(),
                                   eod_id=0, tokenizer_name="tokenizer.json")
        t_all = time.perf_counter() - t0
        report["in_process"] = {
            "tokenize_seconds": round(t_tok, 3), "route_and_write_seconds": round(t_all - t_tok, 3),
            "MB_per_s": round(mb / t_all, 2),
            "ratio_vs_raw_encode_batch": round(t_raw / t_all, 3),
            "ratio_vs_raw_encode_batch_fast": round(t_fast / t_all, 3)}

        # the whole pipeline on a local cluster
        from distributed import Client, LocalCluster

        pipe = gp.Pipeline(input={"path": str(tmp / "in"), "id_column": "id"},
                           stages=[Tokenize(tokenizer=tok_path)],
                           output={"path": str(tmp / "run"), "overwrite": True,
                                   "shards": spec.model_dump()})
        with LocalCluster(n_workers=args.workers, threads_per_worker=1, dashboard_address=":0",
                          silence_logs=50, env=worker_env(1)) as cluster, \
                Client(cluster) as client:
            pipe.run(client=client, progress=False)  # warm-up: loads the tokenizer per worker
            t0 = time.perf_counter()
            res = pipe.run(client=client, progress=False)
            t_e2e = time.perf_counter() - t0
        report["pipeline_on_dask"] = {
            "seconds": round(t_e2e, 3), "MB_per_s": round(mb / t_e2e, 2),
            "ratio_vs_raw_encode_batch": round(t_raw / t_e2e, 3),
            "ratio_vs_raw_encode_batch_fast": round(t_fast / t_e2e, 3),
            "shards": res.summary["shards"]["shards"]}
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
