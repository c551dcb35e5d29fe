#!/usr/bin/env python
"""Every text kernel on the GPU against the same kernel on one CPU thread, same documents, one
process. Prints JSON.

    python benchmarks/bench_gpu.py [--scale 20] [--repeat 3]

Documents: the sample corpus (``data/sample``) repeated ``--scale`` times (or ``--path``). Per
kernel (`gpupipe.kernels.checks.CHECKS`): mismatching documents (must be 0), docs/s and MB/s of
the CPU launcher on one thread and of the GPU launcher (host arrays in, numpy out: transfers
included), best of ``--repeat``, and the ratio. Also the two figures the kernels issue targets:
the Gopher pair (gopher_repetition + gopher_quality) in GB/s and MinHash (the nemo preset's 260
char-24 hashes) in docs/s.

Needs a GPU with numba-cuda (``pip install 'gpupipe[kernels-cu12]'``); with
``NUMBA_ENABLE_CUDASIM=1`` it runs in the simulator (slow: use ``--scale 1 --sample 8``), which
only shows that the script works.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def best_of(fn, repeat: int) -> float:
    fn()  # compile, allocate
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--path", default=str(REPO / "data" / "sample"))
    ap.add_argument("--scale", type=int, default=20)
    ap.add_argument("--sample", type=int, default=None, help="documents before scaling")
    ap.add_argument("--max-doc-bytes", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--kernel", action="append")
    args = ap.parse_args()

    import numpy as np
    import pyarrow as pa

    from gpupipe.kernels import checks, gpu, hashing
    from gpupipe.kernels import quality as q
    from gpupipe.kernels import repetition as r

    ok, device = gpu.usable()
    if not ok:
        print(f"bench_gpu: no usable GPU ({device}); pip install 'gpupipe[kernels-cu12]' on a "
              f"GPU machine, or set NUMBA_ENABLE_CUDASIM=1 to try the script", file=sys.stderr)
        return 2
    texts = checks.load_texts(args.path, args.sample or 10**9,
                              max_doc_bytes=args.max_doc_bytes)
    texts = pa.concat_arrays([texts] * args.scale)
    sample = checks.Sample.of(texts)
    n, mb = len(sample), sample.nbytes / 1e6
    report = {"device": device, "documents": n, "mb": round(mb, 2), "kernels": {}}
    for check in checks.CHECKS:
        if args.kernel and check.name not in args.kernel:
            continue
        bad = int(check.mismatches(sample).sum())
        t_cpu = best_of(lambda c=check: c.cpu(sample), args.repeat)
        t_gpu = best_of(lambda c=check: c.gpu(sample), args.repeat)
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

    t_gpu, t_cpu = best_of(pair_gpu, args.repeat), best_of(pair_cpu, args.repeat)
    report["gopher_pair"] = {"gpu_gb_per_s": round(mb / 1e3 / t_gpu, 3),
                             "cpu_one_thread_mb_per_s": round(mb / t_cpu, 1),
                             "target_gpu_gb_per_s": 1.0}
    rng = np.random.default_rng(42)
    a, b = rng.integers(1, 2**32, 260, dtype=np.uint64), rng.integers(0, 2**32, 260,
                                                                       dtype=np.uint64)
    t_gpu = best_of(lambda: gpu.minhash(off, data, seed=42, a=a, b=b, width=24), args.repeat)
    t_cpu = best_of(lambda: hashing.minhash_buffers(off, data, seed=42, a=a, b=b, width=24),
                    args.repeat)
    report["minhash_nemo_preset"] = {"gpu_docs_per_s": round(n / t_gpu),
                                     "cpu_one_thread_docs_per_s": round(n / t_cpu),
                                     "target_gpu_docs_per_s": 1_000_000}
    print(json.dumps(report, indent=2))
    return 0 if all(k["mismatches"] == 0 for k in report["kernels"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
