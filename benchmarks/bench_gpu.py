#!/usr/bin/env python
"""Every text kernel on the GPU against the same kernel on one CPU thread, same documents, one
process. Prints JSON.

    python benchmarks/bench_gpu.py [--scale 20] [--repeat 3]

Documents: the sample corpus (``data/sample``) repeated ``--scale`` times (or ``--path``). Per
kernel (`gpupipe.kernels.checks.CHECKS`): mismatching documents (must be 0), docs/s and MB/s of
the CPU launcher on one thread and of the GPU launcher (host arrays in, numpy out: transfers
included), best of ``--repeat``, and the ratio. Also the two figures the kernels issue targets:
the Gopher pair (gopher_repetition + gopher_quality) in GB/s and MinHash (the nemo preset's 260
char-24 hashes) in docs/s. And the tokenize stage's device path: ``data/tokenizer.json`` (or
``--tokenizer``) through `gpupipe.io.bpe.encode_buffers` with the GPU launchers, MB/s against HF
``encode_batch_fast`` on one thread (RAYON_NUM_THREADS=1) and the documents whose ids differ
from HF's (must be 0).

Needs a GPU with numba-cuda (``pip install 'gpupipe[kernels-cu12]'``); with
``NUMBA_ENABLE_CUDASIM=1`` it runs in the simulator (slow: use ``--scale 1 --sample 8``), which
only shows that the script works.

    python benchmarks/bench_gpu.py --pipeline pipelines/english_web.yaml [--scale 20]

Whole pipelines instead: the pipeline file on the sample corpus repeated ``--scale`` times, run
with ``backend: pandas`` on a local CPU cluster (``--workers``) and with ``backend: cudf`` on a
LocalCUDACluster, same input. Per stage: backend, seconds, device seconds, MB/s in; end to end:
MB/s of input text and the GPU/CPU ratio; and whether the two runs wrote the same bytes
(``data/`` and the shards). Without a usable GPU the cuDF run is reported as skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("RAYON_NUM_THREADS", "1")  # HF tokenizers on one thread (before import)
sys.path.insert(0, str(REPO))
from bench_common import best_of  # noqa: E402  (next to this script)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--path", default=str(REPO / "data" / "sample"))
    ap.add_argument("--scale", type=int, default=20)
    ap.add_argument("--sample", type=int, default=None, help="documents before scaling")
    ap.add_argument("--max-doc-bytes", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--kernel", action="append")
    ap.add_argument("--tokenizer", default=str(REPO / "data" / "tokenizer.json"))
    ap.add_argument("--pipeline", help="benchmark a whole pipeline file on both backends")
    ap.add_argument("--workers", type=int, default=None, help="CPU workers of the pandas run")
    args = ap.parse_args()
    if args.pipeline:
        return bench_pipeline(args)

    import numpy as np
    import pyarrow as pa

    from gpupipe.gpu_check import load_texts
    from gpupipe.kernels import checks, gpu, hashing
    from gpupipe.kernels import quality as q
    from gpupipe.kernels import repetition as r

    ok, device = gpu.usable()
    if not ok:
        print(f"bench_gpu: no usable GPU ({device}); pip install 'gpupipe[kernels-cu12]' on a "
              f"GPU machine, or set NUMBA_ENABLE_CUDASIM=1 to try the script", file=sys.stderr)
        return 2
    texts = load_texts(args.path, args.sample or 10**9,
                              max_doc_bytes=args.max_doc_bytes)
    texts = pa.concat_arrays([texts] * args.scale)
    sample = checks.Sample.of(texts)
    n, mb = len(sample), sample.nbytes / 1e6
    report = {"device": device, "documents": n, "mb": round(mb, 2), "kernels": {}}
    for check in checks.CHECKS:
        if args.kernel and check.name not in args.kernel:
            continue
        bad = int(check.mismatches(sample).sum())
        t_cpu = best_of(lambda c=check: c.cpu(sample), args.repeat, warm=True)
        t_gpu = best_of(lambda c=check: c.gpu(sample), args.repeat, warm=True)
        report["kernels"][check.name] = {
            "mismatches": bad,
            "cpu_one_thread": {"docs_per_s": round(n / t_cpu), "mb_per_s": round(mb / t_cpu, 1)},
            "gpu": {"docs_per_s": round(n / t_gpu), "mb_per_s": round(mb / t_gpu, 1)},
            "ratio": round(t_cpu / t_gpu, 1)}

    top, dup = [2, 3, 4], [5, 6, 7, 8, 9, 10]
    off, data = sample.offsets, sample.data

    def pair_gpu():
        gpu.gopher_repetition_features(off, data, top, dup)
        gpu.gopher_quality_features(off, data, checks.STOP_WORDS)

    def pair_cpu():
        r.gopher_repetition_features(off, data, top, dup)
        q.gopher_quality_features(off, data, checks.STOP_WORDS)

    t_gpu = best_of(pair_gpu, args.repeat, warm=True)
    t_cpu = best_of(pair_cpu, args.repeat, warm=True)
    report["gopher_pair"] = {"gpu_gb_per_s": round(mb / 1e3 / t_gpu, 3),
                             "cpu_one_thread_mb_per_s": round(mb / t_cpu, 1),
                             "target_gpu_gb_per_s": 1.0}
    rng = np.random.default_rng(42)
    a, b = rng.integers(1, 2**32, 260, dtype=np.uint64), rng.integers(0, 2**32, 260,
                                                                       dtype=np.uint64)
    t_gpu = best_of(lambda: gpu.minhash(off, data, seed=42, a=a, b=b, width=24), args.repeat,
                    warm=True)
    t_cpu = best_of(lambda: hashing.minhash_buffers(off, data, seed=42, a=a, b=b, width=24),
                    args.repeat, warm=True)
    report["minhash_nemo_preset"] = {"gpu_docs_per_s": round(n / t_gpu),
                                     "cpu_one_thread_docs_per_s": round(n / t_cpu),
                                     "target_gpu_docs_per_s": 1_000_000}
    report["tokenize"] = bench_tokenize(args.tokenizer, texts, args.repeat)
    print(json.dumps(report, indent=2))
    return 0 if (all(k["mismatches"] == 0 for k in report["kernels"].values())
                 and report["tokenize"]["docs_with_other_ids"] == 0) else 1


def bench_tokenize(path: str, texts, repeat: int) -> dict:
    """The tokenize stage's device path against HF on one thread, same documents."""
    import numpy as np

    from gpupipe.io.bpe import choose_engine, encode_buffers
    from gpupipe.io.tokenizer import load_tokenizer
    from gpupipe.kernels import gpu
    from gpupipe.kernels.utf8 import utf8_buffers

    engine, tok = choose_engine(path, "gpupipe"), load_tokenizer(path)
    off, data = utf8_buffers(texts)
    d_off, d_data = gpu.to_device(off), gpu.to_device(data)   # where a cuDF column's are
    strings = texts.to_pylist()

    def on_gpu():
        return encode_buffers(engine.tables, d_off, d_data, tok, kernels=gpu,
                              texts_of=lambda rows: texts.take(rows).to_pylist())

    flat, lens, _ = on_gpu()
    ours = np.split(flat, np.cumsum(lens)[:-1])
    theirs = [e.ids for e in tok.encode_batch_fast(strings, add_special_tokens=False)]
    other = sum(a.tolist() != b for a, b in zip(ours, theirs, strict=True))
    t_gpu = best_of(on_gpu, repeat, warm=True)
    t_hf = best_of(lambda: tok.encode_batch_fast(strings, add_special_tokens=False), repeat)
    mb = len(data) / 1e6
    return {"tokenizer": path, "engine": engine.describe(), "docs_with_other_ids": other,
            "tokens": int(lens.sum()), "gpu_mb_per_s": round(mb / t_gpu, 1),
            "hf_one_thread_mb_per_s": round(mb / t_hf, 1), "ratio": round(t_hf / t_gpu, 1),
            "target_gpu_mb_per_s": 500}


def _corpus(path: str, scale: int, out: Path) -> tuple[str, float]:
    """The corpus repeated ``scale`` times as JSON Lines with unique ids; (path, MB of text)."""
    from gpupipe.gpu_check import load_texts

    texts = load_texts(path, 10**9).to_pylist()
    out.mkdir(parents=True, exist_ok=True)
    mb = 0.0
    with open(out / "corpus.jsonl", "w", encoding="utf-8") as f:
        for k in range(scale):
            for i, t in enumerate(texts):
                f.write(json.dumps({"id": f"{k}-{i}", "text": t}, ensure_ascii=False) + "\n")
                mb += len(t.encode()) / 1e6
    return str(out / "corpus.jsonl"), mb


def _same_bytes(a: Path, b: Path) -> bool:
    def files(root):
        return {p.relative_to(root): p.read_bytes() for sub in ("data", "shards")
                for p in (root / sub).rglob("*") if p.is_file() and p.name != "manifest.json"}
    return files(a) == files(b)


def bench_pipeline(args) -> int:
    import tempfile

    import gpupipe as gp
    from gpupipe.runner.cluster import probe_gpu

    with tempfile.TemporaryDirectory(prefix="gpupipe-bench-") as tmp:
        tmp = Path(tmp)
        corpus, mb = _corpus(args.path, args.scale, tmp / "in")
        report = {"pipeline": args.pipeline, "mb": round(mb, 2), "runs": {}}
        usable, why = probe_gpu()
        runs = [("pandas", "local")] + ([("cudf", "cuda")] if usable else [])
        for backend, kind in runs:
            p = gp.Pipeline.from_yaml(args.pipeline, overrides=[
                f"input.path={corpus}", "input.id_column=id", f"backend={backend}",
                f"cluster.kind={kind}", f"output.path={tmp / backend}"])
            res = p.run(workers=args.workers if kind == "local" else None, progress=False)
            stages = {}
            for st in res.summary["stages"]:
                sec = st["seconds"] or 1e-9
                stages[f"{st['position']}:{st['stage']}"] = {
                    "backend": st["backend"], "seconds": st["seconds"],
                    "mb_per_s_in": round(st["bytes_in"] / 1e6 / sec, 1)}
            report["runs"][backend] = {"seconds": res.summary["seconds"],
                                       "mb_per_s": round(mb / res.summary["seconds"], 2),
                                       "docs_out": res.summary["output"]["docs"],
                                       "stages": stages}
        if usable:
            report["gpu_over_cpu"] = round(report["runs"]["pandas"]["seconds"]
                                           / report["runs"]["cudf"]["seconds"], 2)
            report["same_bytes"] = _same_bytes(tmp / "pandas", tmp / "cudf")
        else:
            report["runs"]["cudf"] = {"skipped": f"no usable GPU: {why}"}
    print(json.dumps(report, indent=2))
    return 0 if report.get("same_bytes", True) else 1


if __name__ == "__main__":
    sys.exit(main())
