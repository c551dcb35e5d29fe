#!/usr/bin/env python
"""A whole curation run, filters + fuzzy dedup + tokenize, gpupipe against datatrove on the same
JSONL files with the same number of workers. Prints JSON.

    python benchmarks/bench_end_to_end.py [--scale 4] [--workers 2] [--datatrove-python PY]

What a user runs, each in a new process, wall time from start to exit:

* gpupipe: ``gpupipe run`` of gopher_repetition, gopher_quality, fuzzy_dedup (preset
  ``datatrove``: 14 bands x 8 rows over word 5-grams) and tokenize (``data/tokenizer.json``)
  writing Megatron shards, ``--workers N``; once with ``tokenize.engine=huggingface`` (the
  ``tokenizers`` library, what gpupipe used before its own engine) and once with the default
  engine; a first untimed run fills numba's cache (``gpupipe warmup`` does that on a new
  machine);
* datatrove 0.10.1 (in ``--datatrove-python``, default this interpreter): JsonlReader, the two
  Gopher filters and a JsonlWriter; then its four MinHash stages with the same bands, rows and
  64-bit hashes; the last one followed by ``DocumentTokenizer`` with the same tokenizer file
  (``.ds`` files), every executor with ``--workers`` workers.

Reported: seconds, MB/s and docs/s of each, the ratios datatrove / gpupipe, documents kept and
tokens written by each.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_common import sample_texts, write_files  # noqa: E402

PIPELINE = """version: 1
name: end_to_end
input: {{format: jsonl, path: {src}, id_column: id}}
stages:
  - stage: gopher_repetition
  - stage: gopher_quality
  - stage: fuzzy_dedup
    preset: datatrove
  - stage: tokenize
    tokenizer: {tok}
output:
  path: {out}
  shards: {{num_shards: 4}}
"""

DATATROVE = r"""
import sys
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.dedup.minhash import (MinhashConfig, MinhashDedupBuckets,
    MinhashDedupCluster, MinhashDedupFilter, MinhashDedupSignature)
from datatrove.pipeline.filters import GopherQualityFilter, GopherRepetitionFilter
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.tokens import DocumentTokenizer
from datatrove.pipeline.writers import JsonlWriter
from datatrove.utils.hashing import HashConfig

src, work, tok, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
cfg = MinhashConfig(hash_config=HashConfig(precision=64), num_buckets=14, hashes_per_bucket=8)
kw = dict(workers=n, skip_completed=False)
LocalPipelineExecutor(pipeline=[JsonlReader(src, id_key="id"), GopherRepetitionFilter(),
                                GopherQualityFilter(), JsonlWriter(f"{work}/filtered")],
                      tasks=n, logging_dir=f"{work}/log0", **kw).run()
LocalPipelineExecutor(pipeline=[JsonlReader(f"{work}/filtered"),
                                MinhashDedupSignature(output_folder=f"{work}/sigs", config=cfg)],
                      tasks=n, logging_dir=f"{work}/log1", **kw).run()
LocalPipelineExecutor(pipeline=[MinhashDedupBuckets(input_folder=f"{work}/sigs",
                                                    output_folder=f"{work}/buckets", config=cfg)],
                      tasks=cfg.num_buckets, logging_dir=f"{work}/log2", **kw).run()
LocalPipelineExecutor(pipeline=[MinhashDedupCluster(input_folder=f"{work}/buckets",
                                                    output_folder=f"{work}/remove", config=cfg)],
                      tasks=1, logging_dir=f"{work}/log3", **kw).run()
LocalPipelineExecutor(pipeline=[JsonlReader(f"{work}/filtered"),
                                MinhashDedupFilter(input_folder=f"{work}/remove"),
                                JsonlWriter(f"{work}/kept"),
                                DocumentTokenizer(f"{work}/tokens", tokenizer_name_or_path=tok,
                                                  eos_token="<|endoftext|>")],
                      tasks=n, logging_dir=f"{work}/log4", **kw).run()
"""


def timed(cmd, env=None) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env)
    seconds = time.perf_counter() - t0
    if r.returncode:
        raise SystemExit(f"{cmd[:3]} failed:\n{r.stderr[-3000:]}")
    return seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--datatrove-python", default=sys.executable)
    args = ap.parse_args()
    texts = sample_texts(args.scale)
    rows = [{"id": f"d{k}", "text": t} for k, t in enumerate(texts)]
    mb = sum(len(t.encode()) for t in texts) / 1e6
    tok = str(REPO / "data" / "tokenizer.json")
    report: dict = {"docs": len(rows), "mb": round(mb, 1), "workers": args.workers,
                    "cpu_count": os.cpu_count()}
    root = Path(tempfile.mkdtemp(prefix="gpupipe-e2e-"))
    try:
        write_files(rows, root / "in", n_files=8)
        (root / "p.yaml").write_text(PIPELINE.format(src=root / "in", tok=tok, out=root / "gp"))
        run = [sys.executable, "-m", "gpupipe.cli", "run", str(root / "p.yaml"), "--workers",
               str(args.workers), "--overwrite", "--no-progress"]
        timed(run)  # fills numba's cache
        for engine in ("huggingface", "auto"):
            seconds = timed(run + ["--set", f"tokenize.engine={engine}"])
            summary = json.loads((root / "gp" / "run.json").read_text())
            stages = {s["stage"]: s for s in summary["stages"]}
            report[f"gpupipe_engine_{engine}"] = {
                "seconds": round(seconds, 2), "mb_per_s": round(mb / seconds, 2),
                "docs_per_s": round(len(rows) / seconds),
                "tokenize_seconds": stages["tokenize"].get("seconds"),
                "docs_out": stages["tokenize"]["docs_out"],
                "tokens": stages["tokenize"]["counters"]["tokens"]}
        have_dt = subprocess.run([args.datatrove_python, "-c", "import datatrove"],
                                 capture_output=True).returncode == 0
        if have_dt:
            seconds = timed([args.datatrove_python, "-c", DATATROVE, str(root / "in"),
                             str(root / "dt"), tok, str(args.workers)])
            kept = sum(1 for f in (root / "dt" / "kept").glob("*.jsonl.gz")
                       for _ in gzip.open(f, "rt"))
            report["datatrove"] = {"seconds": round(seconds, 2), "mb_per_s": round(mb / seconds, 2),
                                   "docs_per_s": round(len(rows) / seconds), "docs_out": kept}
            for engine in ("huggingface", "auto"):
                report[f"ratio_engine_{engine}"] = round(
                    seconds / report[f"gpupipe_engine_{engine}"]["seconds"], 1)
        else:
            report["datatrove"] = (f"not importable in {args.datatrove_python}: pip install "
                                   "'datatrove==0.10.1' 'xxhash<4' spacy regex orjson")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
