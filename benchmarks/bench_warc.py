#!/usr/bin/env python
"""WARC -> main text: gpupipe's WARC reader + ``extract_html`` against the extractors alone and
against datatrove's standard path (``WarcReader`` + ``Trafilatura``, as FineWeb ran it). Prints
JSON.

    python benchmarks/bench_warc.py [--copies 24] [--workers 2]

Input: data/web/docs-crawl.warc.gz copied ``--copies`` times (each copy its own file, as a crawl
is many files). Measured, each a ratio from this one run:

* ``read``: the records alone, FastWARC (what gpupipe reads with) and warcio (what datatrove
  reads with), one thread, MB of file and records/s;
* ``extractors``: each library on one thread over the same decoded HTML (the unavoidable work):
  Resiliparse ``extract_plain_text``, Trafilatura ``extract``; docs/s and MB of HTML/s; and
  Resiliparse in ``--workers`` processes at once, each on its share, their seconds summed
  (``seconds_summed_all_cores_busy``): the extractor's own speed per core when every core
  works, as in a run, where the cores share caches, memory bandwidth and clock;
* ``gpupipe``: a whole ``gpupipe run`` of WARC -> extract_html (Resiliparse, and Trafilatura)
  with ``--workers`` workers: wall seconds of the command (cluster start included), and the
  seconds its tasks spent reading and extracting, summed over partitions (run.json), whose
  speed against the extractor alone is ``per_core_vs_extractor`` (the target is >= 0.9); the
  extraction stage's seconds alone give ``extract_stage_per_core_vs_extractor``; both also
  against the extractor with every core busy (``..._all_cores_busy``);
* ``datatrove``: datatrove 0.10's ``WarcReader`` -> ``Trafilatura`` -> ``JsonlWriter`` with
  ``--workers`` tasks, when a Python with datatrove is given (``--datatrove-python``, default
  /tmp/dtvenv/bin/python); ``ratio`` = its seconds / gpupipe's;
* ``agreement``: main-content words of each extractor's text against Trafilatura's: recall
  (Trafilatura's words Resiliparse also keeps) and precision, over all documents.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WARC = REPO / "data/web/docs-crawl.warc.gz"
WORD = re.compile(r"\w+")


def copies(d: Path, n: int) -> list[Path]:
    d.mkdir(parents=True, exist_ok=True)
    out = []
    for k in range(n):
        p = d / f"crawl-{k:03d}.warc.gz"
        shutil.copyfile(WARC, p)
        out.append(p)
    return out


def read_fastwarc(files) -> int:
    from fastwarc.warc import ArchiveIterator

    n = 0
    for p in files:
        with open(p, "rb") as f:
            for r in ArchiveIterator(f, parse_http=True):
                r.reader.read()
                n += 1
    return n


def read_warcio(files) -> int:
    from warcio.archiveiterator import ArchiveIterator

    n = 0
    for p in files:
        with open(p, "rb") as f:
            for r in ArchiveIterator(f):
                r.content_stream().read()
                n += 1
    return n


def html_docs(files) -> list[str]:
    from gpupipe.runner.sources import make_source
    from gpupipe.spec import InputSpec

    src = make_source(InputSpec(path=[str(p) for p in files]))
    return [t for i in range(src.npartitions) for t in src.read(i).frame["text"].tolist()]


def _extract_share(htmls: list[str]) -> float:
    """Seconds one process takes to extract its share with Resiliparse (the loaded baseline)."""
    from gpupipe.stages.transforms.html_extract import extract_all, extractor

    res = extractor("resiliparse", RESILIPARSE)
    t0 = time.perf_counter()
    extract_all(res, htmls)
    return time.perf_counter() - t0


def extract_loaded(htmls: list[str], workers: int) -> float:
    """Seconds of Resiliparse alone summed over ``workers`` processes that each extract a share
    at the same time: the extractor's own speed per core with every core busy, as the run's
    workers are."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return sum(pool.map(_extract_share, [htmls[k::workers] for k in range(workers)]))


RESILIPARSE = {"main_content": True, "preserve_formatting": True, "list_bullets": True,
               "alt_texts": False, "links": False}


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def run_gpupipe(files, out: Path, workers: int, extractor: str) -> tuple[float, float, float]:
    """(wall seconds of the whole command, seconds its tasks spent reading, and extracting,
    each summed over partitions: run.json)."""
    import yaml

    spec = {"version": 1, "name": f"bench-warc-{extractor}",
            "input": {"path": [str(p) for p in files], "format": "warc"},
            "stages": [{"stage": "extract_html", "extractor": extractor}],
            "output": {"path": str(out)}}
    path = out.parent / f"{extractor}.yaml"
    path.write_text(yaml.safe_dump(spec))
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "gpupipe.cli", "run", str(path), "--overwrite",
                    "--workers", str(workers)], check=True, capture_output=True)
    wall = time.perf_counter() - t0
    run = json.loads((out / "run.json").read_text())
    return wall, run["read"]["seconds"], sum(st["seconds"] for st in run["stages"])


DATATROVE = """
import sys, time
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.readers import WarcReader
from datatrove.pipeline.extractors import Trafilatura
from datatrove.pipeline.writers import JsonlWriter
src, out, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
if __name__ == "__main__":
    t0 = time.perf_counter()
    LocalPipelineExecutor(pipeline=[WarcReader(src, glob_pattern="*.warc.gz"),
                                    Trafilatura(favour_precision=True, timeout=10.0),
                                    JsonlWriter(out)],
                          tasks=workers, workers=workers, logging_dir=out + "-logs").run()
    print(time.perf_counter() - t0)
"""


def words(text: str) -> set[str]:
    return set(WORD.findall(text.lower()))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--copies", type=int, default=24)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--datatrove-python", default="/tmp/dtvenv/bin/python")
    ap.add_argument("--trafilatura-docs", type=int, default=600,
                    help="documents Trafilatura alone is timed on (0: all)")
    args = ap.parse_args(argv)
    report: dict = {"copies": args.copies, "workers": args.workers}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        files = copies(tmp / "in", args.copies)
        file_mb = sum(p.stat().st_size for p in files) / 1e6
        n_fw, t_fw = timed(lambda: read_fastwarc(files))
        n_wi, t_wi = timed(lambda: read_warcio(files))
        report["read"] = {"file_mb": round(file_mb, 2), "records": n_fw,
                          "fastwarc": {"seconds": round(t_fw, 3), "mb_per_s": round(file_mb / t_fw, 1)},
                          "warcio": {"seconds": round(t_wi, 3), "mb_per_s": round(file_mb / t_wi, 1),
                                     "records": n_wi},
                          "fastwarc_vs_warcio": round(t_wi / t_fw, 2)}
        htmls = html_docs(files)
        html_mb = sum(len(h.encode()) for h in htmls) / 1e6
        report["docs"], report["html_mb"] = len(htmls), round(html_mb, 2)
        from gpupipe.stages.transforms.html_extract import extract_all, extractor

        res = extractor("resiliparse", RESILIPARSE)
        traf = extractor("trafilatura", {"favor_precision": False, "favor_recall": False,
                                         "include_comments": False, "include_tables": True})
        r_out, t_res = timed(lambda: extract_all(res, htmls))
        subset = htmls[:args.trafilatura_docs] if args.trafilatura_docs else htmls
        t_out, t_traf = timed(lambda: extract_all(traf, subset))
        # one worker: the single-thread figure is that
        t_loaded = extract_loaded(htmls, args.workers) if args.workers > 1 else t_res
        report["extractors"] = {
            "resiliparse": {"seconds": round(t_res, 3), "docs_per_s": round(len(htmls) / t_res),
                            "html_mb_per_s": round(html_mb / t_res, 2),
                            "seconds_summed_all_cores_busy": round(t_loaded, 3)},
            "trafilatura": {"docs": len(subset), "seconds": round(t_traf, 3),
                            "docs_per_s": round(len(subset) / t_traf, 1),
                            "html_mb_per_s": round(
                                sum(len(h.encode()) for h in subset) / 1e6 / t_traf, 2)}}
        recall = precision = 0.0
        for (a, _), (b, _) in zip(r_out, t_out):
            wa, wb = words(a or ""), words(b or "")
            recall += len(wa & wb) / len(wb) if wb else 1.0
            precision += len(wa & wb) / len(wa) if wa else 1.0
        report["agreement"] = {"docs": len(t_out), "resiliparse_recall_of_trafilatura_words":
                               round(recall / len(t_out), 3),
                               "resiliparse_precision_against_trafilatura":
                               round(precision / len(t_out), 3)}
        gp = {}
        for name in ("resiliparse", "trafilatura"):
            seconds, read, extract = run_gpupipe(files, tmp / f"out-{name}", args.workers, name)
            work = read + extract
            alone = t_res if name == "resiliparse" else t_traf * len(htmls) / len(subset)
            gp[name] = {"seconds": round(seconds, 2), "docs_per_s": round(len(htmls) / seconds, 1),
                        "html_mb_per_s": round(html_mb / seconds, 2),
                        "task_seconds": round(work, 2), "read_seconds": round(read, 2),
                        "per_core_vs_extractor": round(alone / work, 2),
                        "extract_stage_per_core_vs_extractor": round(alone / extract, 2)}
            if name == "resiliparse":   # against the extractor with every core busy too
                gp[name]["per_core_vs_extractor_all_cores_busy"] = round(t_loaded / work, 2)
                gp[name]["extract_stage_per_core_vs_extractor_all_cores_busy"] = round(
                    t_loaded / extract, 2)
        report["gpupipe"] = gp
        dt = None
        if os.path.exists(args.datatrove_python):
            r = subprocess.run([args.datatrove_python, "-c", DATATROVE, str(tmp / "in"),
                                str(tmp / "dt-out"), str(args.workers)], capture_output=True,
                               text=True)
            if r.returncode == 0:
                seconds = float(r.stdout.strip().splitlines()[-1])
                dt = {"seconds": round(seconds, 2),
                      "docs_per_s": round(len(htmls) / seconds, 1),
                      "gpupipe_resiliparse_ratio": round(seconds / gp["resiliparse"]["seconds"], 1),
                      "gpupipe_trafilatura_ratio": round(seconds / gp["trafilatura"]["seconds"], 2)}
            else:
                dt = {"error": r.stderr[-800:]}
        report["datatrove"] = dt
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
