"""``gpupipe check-gpu``: every text kernel on the CPU and on the GPU, compared bit for bit on
real documents (`gpupipe.kernels.checks` holds the comparisons).

    python -m gpupipe.gpu_check [PATH] [--sample N] [--json]

runs the comparison in this process; ``NUMBA_ENABLE_CUDASIM=1`` in the environment makes the GPU
side the CUDA simulator (``gpupipe check-gpu --simulate`` starts it that way).
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import pyarrow as pa

from gpupipe.kernels.checks import CHECKS, run


def load_texts(path: str, n: int, *, max_doc_bytes: int | None = None) -> pa.Array:
    """Up to ``n`` documents spread over the JSONL / Parquet files under ``path`` (every k-th
    document, deterministic), optionally cut to ``max_doc_bytes`` at a character boundary."""
    from gpupipe.io import formats
    from gpupipe.io.files import common_root, expand_paths

    files = expand_paths(path, suffixes=formats.all_suffixes())
    root = common_root(files)
    parts = []
    for f in files:
        source = formats.of_path(f).source(files=(f,), root=root, on_error="skip")
        frame = source.read(0).frame
        parts.append(pa.array(frame["text"], type=pa.large_string(), from_pandas=True))
    texts = pa.chunked_array(parts, pa.large_string()).combine_chunks() if parts else pa.array(
        [], pa.large_string())
    if len(texts) > n:
        texts = texts.take(pa.array(np.linspace(0, len(texts) - 1, n).astype(np.int64)))
    if max_doc_bytes is not None:
        texts = pa.array([_cut(t, max_doc_bytes) for t in texts.to_pylist()], pa.large_string())
    return texts


def _cut(text: str | None, limit: int) -> str:
    raw = (text or "").encode()[:limit]
    return raw.decode("utf-8", errors="ignore")


def check_gpu(data="data", *, sample: int = 1000, max_doc_bytes: int | None = None,
              kernels: list[str] | None = None, simulate: bool = False) -> list[dict]:
    """Run every text kernel (or those named) on the CPU and on the GPU and compare them bit for
    bit: one dict per kernel with ``docs``, ``mismatches`` (must be 0), docs/s and MB/s on each
    side. ``data``: JSONL / Parquet files, a directory or a glob, or a list of texts.
    ``simulate``: the GPU side in numba's CUDA simulator, in a new process (no GPU needed; slow,
    so take a few short documents).

    >>> import gpupipe as gp
    >>> results = gp.check_gpu("data/sample", sample=8, max_doc_bytes=200, simulate=True)
    >>> len(results) == len(CHECKS), sum(r["mismatches"] for r in results)
    (True, 0)
    >>> sorted(results[0])[:4]
    ['cpu_docs_per_s', 'cpu_mb_per_s', 'docs', 'first_mismatch']
    """
    from gpupipe.errors import BackendUnavailableError, InputError, SpecError

    if sample < 1:
        raise SpecError(f"sample: expected at least 1 document, got {sample}")
    if max_doc_bytes is not None and max_doc_bytes < 1:
        raise SpecError(f"max_doc_bytes: expected at least 1, got {max_doc_bytes}")
    known = [c.name for c in CHECKS]
    unknown = [k for k in kernels or () if k not in known]
    if unknown:
        raise SpecError(f"unknown kernel(s) {unknown}; the kernels are: {', '.join(known)}")
    if simulate:
        return _simulated(data, sample=sample, max_doc_bytes=max_doc_bytes, kernels=kernels)
    from gpupipe.kernels.gpu import usable

    ok, why = usable()
    if not ok:
        raise BackendUnavailableError(
            f"no usable GPU here ({why}). On a GPU machine: pip install 'gpupipe[kernels-cu12]' "
            f"(kernels-cu13 for CUDA 13 drivers). Without a GPU: gpupipe check-gpu --simulate "
            f"or --compile-only")
    if isinstance(data, str | bytes) or hasattr(data, "__fspath__"):
        texts = load_texts(str(data), sample, max_doc_bytes=max_doc_bytes)
    else:
        try:
            texts = pa.array(list(data)[:sample], pa.large_string())
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            raise InputError(f"check_gpu: data must be a path or a list of strings ({e})") from None
        if max_doc_bytes is not None:
            texts = pa.array([_cut(t, max_doc_bytes) for t in texts.to_pylist()],
                             pa.large_string())
    if len(texts) == 0:
        raise InputError(f"check_gpu: no document in {data!r}")
    return run(texts, names=kernels)


def _simulated(data, *, sample: int, max_doc_bytes: int | None,
               kernels: list[str] | None) -> list[dict]:
    """`check_gpu` in a new process with ``NUMBA_ENABLE_CUDASIM=1``: the simulator replaces
    numba.cuda only when set before numba is imported."""
    import os
    import subprocess
    import tempfile

    from gpupipe.errors import GpupipeError, InputError

    with tempfile.TemporaryDirectory(prefix="gpupipe-check-") as tmp:
        if isinstance(data, str | bytes) or hasattr(data, "__fspath__"):
            path = os.fsdecode(data)
        else:   # a list of texts travels as a JSON Lines file
            path = os.path.join(tmp, "texts.jsonl")
            with open(path, "w", encoding="utf-8") as f:
                for k, t in enumerate(list(data)[:sample]):
                    if not isinstance(t, str):
                        raise InputError(f"check_gpu: data must be a path or a list of strings "
                                         f"(item {k} is {type(t).__name__})")
                    f.write(json.dumps({"text": t}) + "\n")
        argv = [path, "--sample", str(sample), "--json"]
        if max_doc_bytes is not None:
            argv += ["--max-doc-bytes", str(max_doc_bytes)]
        for k in kernels or ():
            argv += ["--kernel", k]
        r = subprocess.run([sys.executable, "-m", "gpupipe.gpu_check", *argv], capture_output=True,
                           text=True, env={**os.environ, "NUMBA_ENABLE_CUDASIM": "1"})
    if not r.stdout.strip():
        raise GpupipeError(f"check_gpu(simulate=True): {r.stderr.strip() or 'no output'}")
    return json.loads(r.stdout)["results"]


def format_table(results: list[dict]) -> str:
    head = f"{'kernel':<22}{'docs':>7}{'mismatches':>12}{'CPU docs/s':>13}{'GPU docs/s':>13}" \
           f"{'CPU MB/s':>10}{'GPU MB/s':>10}"
    lines = [head, "-" * len(head)]
    for r in results:
        lines.append(f"{r['kernel']:<22}{r['docs']:>7}{r['mismatches']:>12}"
                     f"{r['cpu_docs_per_s'] or 0:>13,.0f}{r['gpu_docs_per_s'] or 0:>13,.0f}"
                     f"{r['cpu_mb_per_s'] or 0:>10.2f}{r['gpu_mb_per_s'] or 0:>10.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gpupipe.gpu_check")
    p.add_argument("path", nargs="?", default="data")
    p.add_argument("--sample", type=int, default=1000)
    p.add_argument("--max-doc-bytes", type=int, default=None)
    p.add_argument("--kernel", action="append", default=None)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    from gpupipe.errors import BackendUnavailableError, GpupipeError
    from gpupipe.kernels.gpu import usable

    try:
        results = check_gpu(args.path, sample=args.sample, max_doc_bytes=args.max_doc_bytes,
                            kernels=args.kernel)
    except BackendUnavailableError as e:
        print(f"error: check-gpu: {e}", file=sys.stderr)
        return 2
    except GpupipeError as e:
        print(f"error: check-gpu: {e}", file=sys.stderr)
        return e.exit_code if e.exit_code != 1 else 2
    device = usable()[1]
    if args.json:
        print(json.dumps({"device": device, "results": results}, indent=2))
    else:
        print(f"GPU side: {device}; {results[0]['docs'] if results else 0} documents from "
              f"{args.path}")
        print(format_table(results))
    bad = sum(r["mismatches"] for r in results)
    if bad:
        worst = [f"{r['kernel']} ({r['mismatches']}, first: document {r['first_mismatch']})"
                 for r in results if r["mismatches"]]
        print(f"check-gpu: the GPU kernels disagree with the CPU kernels: {', '.join(worst)}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
