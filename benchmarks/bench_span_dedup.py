#!/usr/bin/env python
"""Span dedup: gpupipe's span_dedup vs datatrove's three SentenceDedup stages on the same
documents (3-sentence spans, keep the first). Prints JSON.

    python benchmarks/bench_span_dedup.py [--workers 2] [--scales 1 4]
                                          [--memory-scales 1 4 16] [--datatrove-python PY]

Corpus: the sample documents (``data/sample``); ``k``x adds ``k - 1`` copies of each with its
words shuffled (new text, so the spans of the original stay the only repeats).

* kernels, one thread: split + normalise + hash (``span_units``) and the cut (``cut_units``) in
  this process, MB/s: the unavoidable per-document work;
* end to end, for each ``--scales`` factor: gpupipe's span_dedup pipeline on a local Dask
  cluster with 1 and with ``--workers`` workers (warm: the second of two runs) against
  datatrove's SentenceDedupSignature -> SentenceFindDedups -> SentenceDedupFilter with
  LocalPipelineExecutor and as many workers and tasks; ratio = datatrove seconds / gpupipe
  seconds;
* agreement (1x): both tools with no minimum of words after the cut (datatrove:
  ``min_doc_words=0, min_num_sentences=0``; datatrove still drops a document left empty, as
  gpupipe's is counted here); a document agrees when both leave the same text. datatrove runs
  with one task there, so that its "first" document is the first in input order, as gpupipe's
  (with several tasks it keeps the one with the smallest index within its task's file);
* ``counting: bloom`` (at the default false-positive rate) beside exact counting: end to end
  with ``--workers`` workers, and its memory;
* memory: RSS per Dask worker before the run (libraries) and at its peak, for each
  ``--memory-scales`` factor.

datatrove is optional. It needs Python packages gpupipe's environment does not pin (spaCy), so
it runs in a subprocess of ``--datatrove-python`` (default: this interpreter, when it imports
datatrove): ``python -m venv dt && dt/bin/pip install "datatrove[processing]==0.10.1" spacy``.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
import bench_common  # noqa: E402  (next to this script)


def corpus() -> list[dict]:
    return [{"id": r["id"], "text": r["text"]}
            for f in sorted(glob.glob(str(REPO / "data/sample/*.jsonl.gz")))
            for r in map(json.loads, gzip.open(f, "rt", encoding="utf-8"))]


def scaled(rows, k: int):
    rng = random.Random(k)
    out = list(rows)
    for c in range(1, k):
        for r in rows:
            w = r["text"].split(" ")
            rng.shuffle(w)
            out.append({"id": f"{r['id']}~x{c}", "text": " ".join(w)})
    return out


# --- datatrove (run in its own interpreter: imports only datatrove and the standard library) ---

def datatrove_run(inp: str, work: str, workers: int, tasks: int, min_words: int) -> dict:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup.sentence_dedup import (
        SentDedupConfig,
        SentenceDedupFilter,
        SentenceDedupSignature,
        SentenceFindDedups,
    )
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter

    cfg = SentDedupConfig(n_sentences=3, min_doc_words=min_words,
                          min_num_sentences=3 if min_words else 0)
    kw = {"workers": workers, "skip_completed": False}
    w = Path(work)
    t0 = time.perf_counter()
    LocalPipelineExecutor(pipeline=[JsonlReader(inp, id_key="id"),
                                    SentenceDedupSignature(output_folder=str(w / "sigs"),
                                                           config=cfg, finder_workers=workers)],
                          tasks=tasks, logging_dir=str(w / "log1"), **kw).run()
    LocalPipelineExecutor(pipeline=[SentenceFindDedups(data_folder=str(w / "sigs"),
                                                       output_folder=str(w / "dups"),
                                                       config=cfg)],
                          tasks=workers, logging_dir=str(w / "log2"), **kw).run()
    LocalPipelineExecutor(pipeline=[JsonlReader(inp, id_key="id"),
                                    SentenceDedupFilter(data_folder=str(w / "dups"), config=cfg),
                                    JsonlWriter(str(w / "kept"))],
                          tasks=tasks, logging_dir=str(w / "log3"), **kw).run()
    seconds = time.perf_counter() - t0
    kept = {}
    for f in sorted(glob.glob(str(w / "kept" / "*"))):
        opener = gzip.open if f.endswith(".gz") else open
        with opener(f, "rt", encoding="utf-8") as fh:
            for line in fh:
                r = json.loads(line)
                kept[r["id"]] = r["text"]
    return {"seconds": seconds, "kept": kept}


def datatrove(python: str, inp: Path, work: Path, workers: int, tasks: int,
              min_words: int = 50) -> dict:
    out = work / "result.json"
    code = (f"import sys, json; sys.path.insert(0, {str(REPO / 'benchmarks')!r}); "
            f"from bench_span_dedup import datatrove_run; "
            f"json.dump(datatrove_run({str(inp)!r}, {str(work)!r}, {workers}, {tasks}, "
            f"{min_words}), open({str(out)!r}, 'w'))")
    r = subprocess.run([python, "-c", code], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"datatrove failed: {r.stderr[-2000:]}")
    return json.loads(out.read_text())


def has_datatrove(python: str) -> bool:
    try:
        return subprocess.run([python, "-c",
                               "import datatrove.pipeline.dedup.sentence_dedup, spacy"],
                              capture_output=True).returncode == 0
    except OSError:   # no such interpreter
        return False


# --- gpupipe --------------------------------------------------------------------------------

def gpupipe_run(inp: Path, out: Path, workers: int, min_words: int = 50,
                within_document: bool = True, counting: str = "exact") -> dict:
    from distributed import Client, LocalCluster

    import gpupipe as gp
    from gpupipe.runner.cluster import worker_env
    from gpupipe.stages import SpanDedup

    pipe = gp.Pipeline(input={"path": str(inp), "id_column": "id"},
                       output={"path": str(out), "overwrite": True},
                       stages=[SpanDedup(unit="sentence", span=3, min_words=min_words,
                                         within_document=within_document,
                                         counting=counting)])
    with LocalCluster(n_workers=workers, threads_per_worker=1, dashboard_address=":0",
                      silence_logs=50, env=worker_env(1)) as cluster, Client(cluster) as client:
        pipe.run(client=client, progress=False)   # warm-up: compiled kernels load per worker
        t0 = time.perf_counter()
        res = pipe.run(client=client, progress=False)
        seconds = time.perf_counter() - t0
    df = res.to_pandas()
    st = res.stage("span_dedup")
    return {"seconds": seconds, "kept": dict(zip(df["id"], df["text"])),
            "steps": {s["step"]: s["seconds"] for s in st["steps"]},
            "counters": st["counters"]}


def kernels_one_thread(rows) -> dict:
    import numpy as np
    import pyarrow as pa

    from gpupipe.kernels.spans import cut_units, norm_table, span_units
    from gpupipe.kernels.utf8 import utf8_buffers

    off, data = utf8_buffers(pa.array([r["text"] for r in rows], pa.large_string()))
    table = norm_table()
    mb = len(data) / 1e6
    span_units(off[:3], data, "sentence", 3, table)   # compile / load
    t0 = time.perf_counter()
    nunits, ends, nwin, wh = span_units(off, data, "sentence", 3, table)
    t_split = time.perf_counter() - t0
    cut = np.zeros(len(ends), bool)
    cut[::7] = True
    cut_units(off[:3], data, nunits[:2], ends[:int(nunits[:2].sum())], cut[:int(nunits[:2].sum())])
    t0 = time.perf_counter()
    cut_units(off, data, nunits, ends, cut)
    t_cut = time.perf_counter() - t0
    return {"split_hash_MB_per_s": round(mb / t_split, 1),
            "cut_MB_per_s": round(mb / t_cut, 1),
            "docs_per_s": round(len(rows) / (t_split + t_cut))}


def peak_worker_rss(inp: Path, out: Path, workers: int, counting: str = "exact") -> dict:
    import gpupipe as gp
    from gpupipe.stages import SpanDedup

    return bench_common.peak_worker_rss(
        gp.Pipeline(input={"path": str(inp), "id_column": "id"},
                    output={"path": str(out), "overwrite": True},
                    stages=[SpanDedup(counting=counting)]), workers)


def agreement(rows, gp_kept: dict, dt_kept: dict) -> dict:
    """Documents where both tools leave the same text (a document left empty counts as
    dropped), overall and among the documents either tool cut."""
    same, touched, touched_same, examples = 0, 0, 0, []
    for r in rows:
        g = gp_kept.get(r["id"]) or None
        d = dt_kept.get(r["id"]) or None
        cut = g != r["text"] or d != r["text"]
        touched += cut
        if g == d:
            same += 1
            touched_same += cut
        elif len(examples) < 20:
            examples.append(r["id"])
    return {"docs": len(rows), "same_text": same, "agreement": round(same / len(rows), 4),
            "cut_by_either": touched, "same_among_cut": touched_same,
            "differing_ids": examples}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--scales", type=int, nargs="*", default=[1, 4])
    ap.add_argument("--memory-scales", type=int, nargs="*", default=[1, 4, 16])
    ap.add_argument("--datatrove-python", default=sys.executable)
    args = ap.parse_args()
    rows = corpus()
    mb = sum(len(r["text"].encode()) for r in rows) / 1e6
    report: dict = {"docs": len(rows), "text_MB": round(mb, 2), "workers": args.workers,
                    "cpu_count": os.cpu_count(),
                    "kernels_one_thread": kernels_one_thread(rows)}
    dt = has_datatrove(args.datatrove_python)
    if not dt:
        report["datatrove"] = "not installed (see the docstring)"
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if dt:
            d = tmp / "agree"
            bench_common.write_files(rows, d / "in", 4, contiguous=True)
            t = datatrove(args.datatrove_python, d / "in", d / "dt", 1, 1, min_words=0)
            g = gpupipe_run(d / "in", d / "gp", args.workers, min_words=0)
            report["agreement_1x"] = agreement(rows, g["kept"], t["kept"])
            # gpupipe's default counts documents: a document's own repeats stay
            g = gpupipe_run(d / "in", d / "gpd", args.workers, min_words=0,
                            within_document=False)
            report["agreement_1x_documents"] = agreement(rows, g["kept"], t["kept"])
        for k in args.scales:
            rows_k = scaled(rows, k)
            mb_k = sum(len(r["text"].encode()) for r in rows_k) / 1e6
            d = tmp / f"x{k}"
            bench_common.write_files(rows_k, d / "in", 4 * k, contiguous=True)
            entry: dict = {"docs": len(rows_k), "text_MB": round(mb_k, 2)}
            for w in sorted({1, args.workers}):
                g = gpupipe_run(d / "in", d / f"gp{w}", w)
                e = {"seconds": round(g["seconds"], 3), "MB_per_s": round(mb_k / g["seconds"], 2),
                     "docs_per_s": round(len(rows_k) / g["seconds"]), "docs_out": len(g["kept"]),
                     "step_seconds": g["steps"], "spans_cut": g["counters"]["spans_cut"]}
                if dt:
                    t = datatrove(args.datatrove_python, d / "in", d / f"dt{w}", w, 4 * k)
                    e["datatrove"] = {"seconds": round(t["seconds"], 3),
                                      "MB_per_s": round(mb_k / t["seconds"], 2),
                                      "docs_per_s": round(len(rows_k) / t["seconds"]),
                                      "docs_out": len(t["kept"])}
                    e["speedup_vs_datatrove"] = round(t["seconds"] / g["seconds"], 1)
                entry[f"workers_{w}"] = e
            g = gpupipe_run(d / "in", d / "gpb", args.workers, counting="bloom")
            entry[f"bloom_workers_{args.workers}"] = {
                "seconds": round(g["seconds"], 3), "MB_per_s": round(mb_k / g["seconds"], 2),
                "docs_out": len(g["kept"]), "step_seconds": g["steps"],
                "spans_cut": g["counters"]["spans_cut"],
                "bloom_bytes": g["counters"]["bloom_bytes"]}
            report[f"end_to_end_{k}x"] = entry
        mem = {}
        for k in args.memory_scales:
            rows_k = scaled(rows, k)
            d = tmp / f"mem{k}"
            bench_common.write_files(rows_k, d / "in", 4 * k, contiguous=True)
            mem[f"{k}x"] = {"docs": len(rows_k), "text_MB": round(
                sum(len(r["text"].encode()) for r in rows_k) / 1e6, 1),
                **peak_worker_rss(d / "in", d / "out", args.workers),
                "bloom": peak_worker_rss(d / "in", d / "outb", args.workers, "bloom")}
        report["memory"] = mem
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
