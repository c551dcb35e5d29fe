"""Building the ahead-of-time module of the CPU kernels (`gpupipe.kernels.aot` reads it):
``gpupipe warmup --aot``, ``make install`` and the Dockerfile call `build`."""

from __future__ import annotations

import hashlib
import os
import pickle
import time
from pathlib import Path

from gpupipe.kernels import aot


def build(out: str | os.PathLike | None = None, names=None, cpu: str = "generic",
          progress=print) -> dict:
    """Compile every entry point for the argument types the kernels' checks pass (all of
    `gpupipe.kernels.checks`, or the kernels ``names``) into the module, in ``out`` (default:
    `directory`). ``cpu``: ``generic`` (any machine of this architecture) or ``host``
    (this machine's CPU only). Returns what was built."""
    import tempfile
    import warnings

    try:
        from numba.core.errors import NumbaPendingDeprecationWarning
        from numba.pycc import CC
    except ImportError as e:  # setuptools, which numba.pycc builds with, is missing
        raise RuntimeError(f"numba's ahead-of-time compiler cannot be imported ({e}); "
                           f"pip install setuptools") from None
    from gpupipe.kernels import checks  # noqa: F401  (imports every kernel module)
    from gpupipe.kernels.target import ENTRIES
    from gpupipe.kernels.warm import all_kernels, warm

    out = Path(out or aot.directory())
    out.mkdir(parents=True, exist_ok=True)
    aot.hold("building the ahead-of-time module")   # numba's dispatchers give the types
    t0 = time.perf_counter()
    names = list(names or all_kernels())
    for name in names:   # numba types (and compiles) each, which gives the argument types
        progress(f"  {name:<24} {warm([name])[name]:7.2f} s")
    _exercise_others()
    exports: dict[str, list] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NumbaPendingDeprecationWarning)
        cc = CC(aot.MODULE)
    cc.target_cpu = "" if cpu == "generic" else cpu
    for i, e in enumerate(ENTRIES):
        for j, argtypes in enumerate(sorted(e.jit.overloads, key=str)):
            symbol = f"e{i}_{j}_{e.__name__}"
            cc.export(symbol, argtypes)(e.py_func)
            exports.setdefault(e.key, []).append((argtypes, symbol))
    if not exports:
        raise RuntimeError(f"the kernels {names} call no entry point: nothing to compile")
    n = sum(len(v) for v in exports.values())
    progress(f"compiling {len(exports)} entry points ({n} argument type variants) ahead of "
             f"time (cpu: {cpu})")
    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=out, prefix=".build-") as tmp:
        cc.output_dir = tmp
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NumbaPendingDeprecationWarning)
            try:
                cc.compile()
            except Exception as e:   # distutils' CompileError, LinkError, a missing compiler
                raise RuntimeError(
                    f"numba's ahead-of-time compiler failed ({type(e).__name__}: {e}); it "
                    f"needs a C compiler and Python's headers (Debian: apt-get install gcc "
                    f"python3-dev)") from e
        (built,) = Path(tmp).glob(aot.MODULE + "*")
        # a name of its own: a process that read the index before this one was replaced loads
        # the module that index describes, or none (and then compiles), never this one
        digest = hashlib.sha256(built.read_bytes()).hexdigest()[:12]
        name = built.name.replace(aot.MODULE, f"{aot.MODULE}-{digest}", 1)
        meta = {"built_from": aot.identity(), "built": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                   time.gmtime()),
                "cpu": cpu, "file": name, "entries": exports}
        os.replace(built, out / name)
        with open(Path(tmp) / aot.INDEX, "wb") as f:
            pickle.dump(meta, f)
        os.replace(Path(tmp) / aot.INDEX, out / aot.INDEX)   # last: it names a complete module
    for old in out.glob(aot.MODULE + "-*"):
        if old.name != name:
            old.unlink(missing_ok=True)   # processes that loaded it keep it mapped
    aot.forget()
    return {"module": str(out / name), "entries": len(exports), "exports": n,
            "names": sorted(exports),
            "seconds": round(time.perf_counter() - t0, 1),
            "aot_seconds": round(time.perf_counter() - t1, 1)}


def _exercise_others() -> None:
    """Call the entry points that no check calls, with the argument types their launchers
    pass."""
    import numpy as np

    from gpupipe.kernels import graph

    i64 = np.zeros(1, np.int64)
    graph.greedy(i64, np.zeros(2, np.int64), i64[:0], np.zeros(0), np.ones(1, np.bool_))
