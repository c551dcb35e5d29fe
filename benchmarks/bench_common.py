"""What several benchmark scripts share: the sample corpus's texts, a best-of timer, JSONL input
files and the peak memory of a pipeline's Dask workers."""

from __future__ import annotations

import glob
import gzip
import json
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def sample_texts(scale: int = 1) -> list[str]:
    """Every text of data/sample/, in file order, repeated ``scale`` times."""
    texts = [json.loads(line)["text"]
             for f in sorted(glob.glob(str(REPO / "data/sample/*.jsonl.gz")))
             for line in gzip.open(f, "rt", encoding="utf-8")]
    return texts * scale


def best_of(fn, repeat: int = 3, warm: bool = False) -> float:
    """The shortest of ``repeat`` timed calls of ``fn`` (after one untimed call when ``warm``:
    compilation, allocation)."""
    if warm:
        fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def write_files(rows: list[dict], d: Path, n_files: int = 4, contiguous: bool = False) -> None:
    """``rows`` as ``n_files`` JSONL files in ``d``: contiguous slices (file order is input
    order) or every ``n_files``-th row."""
    d.mkdir(parents=True, exist_ok=True)
    per = -(-len(rows) // n_files)
    for k in range(n_files):
        part = rows[k * per:(k + 1) * per] if contiguous else rows[k::n_files]
        with open(d / f"part-{k:03d}.jsonl", "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in part)


def peak_worker_rss(pipe, workers: int) -> dict:
    """Run ``pipe`` (a `gpupipe.Pipeline`) on a fresh local cluster: each worker's RSS before
    (the imported libraries) and the largest peak RSS of a worker after, MiB."""
    from distributed import Client, LocalCluster

    def peak():
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024   # MiB on Linux

    def warm():
        import psutil

        import gpupipe.stages  # noqa: F401

        return psutil.Process().memory_info().rss / 2**20

    with LocalCluster(n_workers=workers, threads_per_worker=1, dashboard_address=":0",
                      silence_logs=50) as cluster, Client(cluster) as client:
        base = max(client.run(warm).values())
        pipe.run(client=client, progress=False)
        top = max(client.run(peak).values())
    return {"baseline_MiB": round(base, 1), "peak_MiB": round(top, 1),
            "peak_above_baseline_MiB": round(top - base, 1)}
