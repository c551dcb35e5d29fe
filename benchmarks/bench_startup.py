#!/usr/bin/env python
"""What a small run costs whatever its size: a one-document ``gpupipe run`` on 2 workers, wall
time from the command's start to its exit, warm (numba's cache and the tokenizer verdict
filled by an untimed first run). Prints JSON.

    python benchmarks/bench_startup.py [--repeat 5] [--workers 2]

Each figure is the median of ``--repeat`` runs, each in a new process:

* ``import_gpupipe``: ``python -c "import gpupipe"``, and which of numba, dask, pandas and
  pyarrow that imported (none);
* ``run_forkserver``: the default, workers forked from the preloaded server
  (``cluster.start_method: forkserver``), the pipeline length_filter + tokenize writing
  Megatron shards;
* ``run_spawn``: the same pipeline with ``cluster.start_method: spawn`` (each worker a new
  interpreter, how gpupipe started its workers before);
* ``run_server``: the same default run, sent to a warm ``gpupipe server`` (started once,
  untimed, on a socket of this script's own, and stopped at the end);
* ``bare_dask_spawn``: the unavoidable work of the old way, in a new process: import
  distributed, start a ``LocalCluster`` of the same workers, run one task, close it;
* ``python``: ``python -c pass``.

Ratios: spawn / forkserver (what the change gives), forkserver / server (what a warm server
gives), and forkserver / bare Dask (what gpupipe costs on top of a bare cluster of spawned
workers).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

PIPELINE = """version: 1
name: startup
input: {{format: jsonl, path: {src}, id_column: id}}
cluster: {{kind: local, workers: {workers}, start_method: {method}}}
stages:
  - stage: length_filter
    min_words: 5
  - stage: tokenize
    tokenizer: {tok}
output:
  path: {out}
  shards: {{num_shards: 1}}
"""

BARE = """
from distributed import Client, LocalCluster
if __name__ == "__main__":
    with LocalCluster(n_workers={workers}, threads_per_worker=1, processes=True,
                      dashboard_address=None) as c, Client(c) as client:
        assert client.submit(sum, [1, 2]).result() == 3
"""


def timed(cmd: list[str], **kw) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)
    return time.perf_counter() - t0


def median_of(n: int, fn) -> float:
    return round(statistics.median(fn() for _ in range(n)), 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    gpupipe = str(Path(sys.executable).with_name("gpupipe"))
    tmp = Path(tempfile.mkdtemp(prefix="gpupipe-startup-"))
    try:
        src = tmp / "one.jsonl"
        src.write_text(json.dumps({"id": "a", "text": "The quick brown fox jumps over the lazy "
                                   "dog and runs far away into the forest."}) + "\n")
        out = {}
        probe = ("import sys, gpupipe; print(sorted(m for m in ('numba', 'dask', 'pandas', "
                 "'pyarrow') if m in sys.modules))")
        loaded = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True,
                                text=True).stdout.strip()
        out["python"] = median_of(args.repeat, lambda: timed([sys.executable, "-c", "pass"]))
        out["import_gpupipe"] = median_of(
            args.repeat, lambda: timed([sys.executable, "-c", "import gpupipe"]))
        out["import_gpupipe_loads"] = loaded
        for method in ("forkserver", "spawn"):
            path = tmp / f"{method}.yaml"
            run_out = tmp / f"out-{method}"
            path.write_text(PIPELINE.format(src=src, workers=args.workers, method=method,
                                            tok=REPO / "data" / "tokenizer.json", out=run_out))

            def once(path=path, run_out=run_out):   # never a server the user runs
                shutil.rmtree(run_out, ignore_errors=True)
                return timed([gpupipe, "run", str(path)],
                             env={**os.environ, "GPUPIPE_SERVER": "off"})

            once()  # numba's cache, the tokenizer verdict
            out[f"run_{method}"] = median_of(args.repeat, once)
            if method == "forkserver":
                env = {**os.environ, "GPUPIPE_SERVER": "",
                       "GPUPIPE_SERVER_SOCKET": str(tmp / "server" / "s.sock")}
                subprocess.run([gpupipe, "server", "start"], check=True, env=env,
                               stdout=subprocess.DEVNULL)
                try:
                    def served(path=path, run_out=run_out, env=env):
                        shutil.rmtree(run_out, ignore_errors=True)
                        return timed([gpupipe, "run", str(path)], env=env)

                    served()
                    out["run_server"] = median_of(args.repeat, served)
                finally:
                    subprocess.run([gpupipe, "server", "stop"], env=env,
                                   stdout=subprocess.DEVNULL)
        bare = tmp / "bare.py"
        bare.write_text(BARE.format(workers=args.workers))
        out["bare_dask_spawn"] = median_of(args.repeat, lambda: timed([sys.executable, str(bare)]))
        out["ratio_spawn_over_forkserver"] = round(out["run_spawn"] / out["run_forkserver"], 2)
        out["ratio_forkserver_over_server"] = round(out["run_forkserver"] / out["run_server"], 2)
        out["ratio_forkserver_over_bare_dask"] = round(
            out["run_forkserver"] / out["bare_dask_spawn"], 2)
        out.update(workers=args.workers, repeat=args.repeat, cpus=os.cpu_count())
        print(json.dumps(out, indent=2))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
