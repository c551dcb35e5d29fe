#!/usr/bin/env python
"""The first run on a machine against the second, with the kernels compiled ahead of time (the
package's module, `gpupipe warmup --aot`) and without (numba compiling at first use,
``GPUPIPE_AOT=0``); and each kernel's speed both ways. Prints JSON.

    python benchmarks/bench_compile.py [--pipeline pipelines/english_web.yaml] [--repeat 3]

Cold is a run with an empty ``NUMBA_CACHE_DIR`` and no warmup before it, warm the same command
again. Each is a whole `gpupipe run` (start-up, 2 local workers, the data, teardown), wall time.
Per kernel: each check of `gpupipe.kernels.checks` on the CPU over ``data/sample`` (best of
``--repeat``, in a process of its own per mode, after one call that loads or compiles it); the
ratio is numba's compiled code (for this machine's CPU) over the ahead-of-time code (for a
generic CPU of the architecture), so above 1 means the ahead-of-time code is faster.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent / "gpupipe"

KERNEL_TIMES = """
import gzip, json, sys, time
from pathlib import Path
from gpupipe.kernels import aot
from gpupipe.kernels.checks import CHECKS, Sample
texts = [json.loads(l)["text"] for f in sorted(Path(sys.argv[1]).glob("*.jsonl.gz"))
         for l in gzip.open(f, "rt")]
sample = Sample.of(texts)
out = {}
for c in CHECKS:
    c.cpu(sample)
    best = min((lambda t0: (c.cpu(sample), time.perf_counter() - t0)[1])(time.perf_counter())
               for _ in range(int(sys.argv[2])))
    out[c.name] = best
print(json.dumps({"seconds": out, "mb": sample.nbytes / 1e6, "state": aot.state()}))
"""


def run_pipeline(pipeline: str, cache: Path, out: Path, env: dict) -> float:
    t0 = time.perf_counter()
    r = subprocess.run([str(BIN), "run", pipeline, "--overwrite", "--set",
                        f"output.path={out}"], env={**env, "NUMBA_CACHE_DIR": str(cache)},
                       capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - t0
    if r.returncode:
        sys.exit(f"gpupipe run failed:\n{r.stderr[-3000:]}")
    return round(wall, 2)


def kernel_times(env: dict, cache: Path, repeat: int) -> dict:
    r = subprocess.run([sys.executable, "-c", KERNEL_TIMES, str(REPO / "data" / "sample"),
                        str(repeat)], env={**env, "NUMBA_CACHE_DIR": str(cache)},
                       capture_output=True, text=True, cwd=REPO)
    if r.returncode:
        sys.exit(f"timing the kernels failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pipeline", default="pipelines/english_web.yaml")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    base = {k: v for k, v in os.environ.items() if not k.startswith("GPUPIPE_AOT")}
    modes = {"ahead-of-time": base, "jit": {**base, "GPUPIPE_AOT": "0"}}
    report: dict = {"pipeline": args.pipeline, "runs": {}, "kernels": {}}
    with tempfile.TemporaryDirectory(prefix="bench-compile-") as tmp:
        for mode, env in modes.items():
            cache = Path(tmp) / mode / "cache"
            out = Path(tmp) / mode / "out"
            cold = run_pipeline(args.pipeline, cache, out, env)
            warm = run_pipeline(args.pipeline, cache, out, env)
            compiled = json.loads((out / "run.json").read_text()).get("compile", {})
            report["runs"][mode] = {"cold_s": cold, "warm_s": warm,
                                    "cold_over_warm": round(cold / warm, 2),
                                    "code": compiled.get("code")}
            report["kernels"][mode] = kernel_times(env, cache, args.repeat)
    aot_k, jit_k = report["kernels"]["ahead-of-time"], report["kernels"]["jit"]
    if aot_k["state"]["kernels"] != "ahead-of-time":
        sys.exit(f"the package's ahead-of-time module is not used ({aot_k['state']['why']}); "
                 f"build it first: gpupipe warmup --aot")
    report["per_kernel"] = {
        name: {"jit_s": round(jit_k["seconds"][name], 4),
               "aot_s": round(aot_k["seconds"][name], 4),
               "jit_over_aot": round(jit_k["seconds"][name] / aot_k["seconds"][name], 2)}
        for name in aot_k["seconds"]}
    report["sample_mb"] = round(aot_k["mb"], 2)
    tot_j, tot_a = sum(jit_k["seconds"].values()), sum(aot_k["seconds"].values())
    report["all_kernels_jit_over_aot"] = round(tot_j / tot_a, 3)
    report["warm_run_jit_over_aot"] = round(report["runs"]["jit"]["warm_s"]
                                            / report["runs"]["ahead-of-time"]["warm_s"], 2)
    del report["kernels"]
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
