"""``gpupipe io-bench PATH``: read throughput of a file set, to check a disk, NVMe or NVMe-oF mount.

Methods, each over every file, ``--repeat`` times:

* ``posix``: plain reads into one reused buffer (the storage and page cache, nothing else);
* ``pyarrow``: what the CPU path does: ``pyarrow`` input streams (``pyarrow.parquet`` decodes
  Parquet files as well, reported separately as ``pyarrow_parquet``);
* ``kvikio``: KvikIO reads into GPU memory (GPUDirect Storage when available, else its POSIX
  compatibility mode), and ``cudf_parquet`` for Parquet files — only when a GPU works; otherwise
  listed as skipped with the reason.

The first pass of a method may read from the device and later ones from the page cache: compare
pass 1 across methods, or use files larger than RAM.
"""

from __future__ import annotations

import os
import time

from gpupipe.errors import InputError

CHUNK = 16 * 2**20


_BUFFER = bytearray()


def _buffer() -> memoryview:
    """The read buffer of ``posix``, allocated once per process (before any timed pass)."""
    if len(_BUFFER) < CHUNK:
        _BUFFER.extend(bytes(CHUNK - len(_BUFFER)))
    return memoryview(_BUFFER)


def _posix(paths: list[str]) -> int:
    view = _buffer()
    total = 0
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while True:
                n = f.readinto(view)
                if not n:
                    break
                total += n
    return total


def _pyarrow(paths: list[str]) -> int:
    import pyarrow as pa

    total = 0
    for p in paths:
        with pa.OSFile(p, "rb") as f:
            while True:
                chunk = f.read(CHUNK)
                if not chunk:
                    break
                total += len(chunk)
    return total


def _pyarrow_parquet(paths: list[str]) -> int:
    import pyarrow.parquet as pq

    total = 0
    for p in paths:
        pq.read_table(p)
        total += os.path.getsize(p)
    return total


def run(paths: list[str], repeat: int = 3, methods: list[str] | None = None) -> dict:
    """{"files", "bytes", "methods": {name: {"passes_mb_s": [...], "best_mb_s"} or
    {"skipped": why}}}."""
    from gpupipe.backends.cudf import cudf_read_parquet_files, kvikio_read_files
    from gpupipe.runner.cluster import probe_gpu

    files = [p for p in paths if os.path.isfile(p)]
    if not files:
        raise InputError(f"io-bench: no files in {paths}")
    size = sum(os.path.getsize(p) for p in files)
    parquet = [p for p in files if p.endswith((".parquet", ".pq"))]
    table = {"posix": (_posix, files), "pyarrow": (_pyarrow, files)}
    if parquet:
        table["pyarrow_parquet"] = (_pyarrow_parquet, parquet)
    _buffer()
    gpu_ok, why = probe_gpu()
    gpu_methods = ["kvikio"] + (["cudf_parquet"] if parquet else [])
    report: dict = {"files": len(files), "bytes": size, "methods": {}}
    for name in methods or [*table, *gpu_methods]:
        if name in gpu_methods and not gpu_ok:
            report["methods"][name] = {"skipped": f"no usable GPU ({why})"}
            continue
        if name == "kvikio":
            fn, subset = kvikio_read_files, files
        elif name == "cudf_parquet":
            fn, subset = cudf_read_parquet_files, parquet
        elif name in table:
            fn, subset = table[name]
        else:
            raise InputError(f"io-bench: unknown method {name!r} (known: "
                             f"{', '.join([*table, *gpu_methods])})")
        nbytes = sum(os.path.getsize(p) for p in subset)
        passes = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            got = fn(subset)
            seconds = time.perf_counter() - t0
            if got != nbytes:
                raise InputError(f"io-bench: {name} read {got} bytes of {nbytes} (did the files "
                                 f"change while reading?)")
            passes.append(round(nbytes / 1e6 / max(seconds, 1e-9), 1))
        report["methods"][name] = {"bytes": nbytes, "passes_mb_s": passes,
                                   "best_mb_s": max(passes)}
    return report


def format_report(report: dict) -> str:
    lines = [f"{report['files']} file(s), {report['bytes'] / 1e6:,.1f} MB"]
    for name, r in report["methods"].items():
        if "skipped" in r:
            lines.append(f"  {name:<16} skipped: {r['skipped']}")
        else:
            passes = "  ".join(f"{v:,.0f}" for v in r["passes_mb_s"])
            lines.append(f"  {name:<16} {r['best_mb_s']:>10,.0f} MB/s best   (passes: {passes})")
    lines.append("  (pass 1 may come from the device, later passes from the page cache)")
    return "\n".join(lines)
