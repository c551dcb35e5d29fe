"""The CPU kernels compiled ahead of time: one extension module, so that no process compiles.

numba compiles a kernel the first time a process calls it: about a minute of CPU for all of
them, paid by every fresh machine, container and worker whose cache is empty. `gpupipe.kernels.
aot_build` compiles every entry point (`gpupipe.kernels.target.Entry`), for the argument types
the stages pass, into the extension module ``_compiled`` with numba's ahead-of-time compiler
(``numba.pycc``), for a generic CPU of the architecture, so that it serves any machine of that
architecture. An index beside it (``_compiled.index``) names, for each entry, the argument types
each exported function takes, with what the module was built from: the sources of
`gpupipe.kernels`, numba, NumPy and Python.

`compiled` hands an entry its table, loaded once per process. A module built from other sources
or versions is not used (it is logged once, saying how to rebuild): the kernels are then compiled
by numba as before, as they are for argument types the module does not hold. The module lives in
the package (``make install``, ``gpupipe warmup --aot``, the Dockerfile build it), or in
``GPUPIPE_AOT_DIR`` where the package cannot be written. ``GPUPIPE_AOT=0`` turns it off.

Only the standard library is imported here: `gpupipe.kernels.gpu` and the driver read
`sources_digest` without numba.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import os
import pickle
import platform
import sys
import threading
from pathlib import Path

log = logging.getLogger(__name__)

#: the extension module's name (its file: ``_compiled`` + the interpreter's extension suffix)
MODULE = "_compiled"
#: the index beside it
INDEX = MODULE + ".index"
#: the layout of the index; a different one is not read
FORMAT = 1

_lock = threading.Lock()
_tables: dict[str, dict] | None = None
_state: dict = {}
_missed: set = set()


@functools.cache
def sources_digest(directory: str | None = None) -> str:
    """sha256 of every module of `gpupipe.kernels` (or of ``directory``): a kernel calls
    routines from all of them, and numba's cache only looks at the file of the function it
    compiles."""
    h = hashlib.sha256()
    for f in sorted(Path(directory or Path(__file__).parent).glob("*.py")):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def directory() -> Path:
    """Where the module is looked for and built: ``GPUPIPE_AOT_DIR``, else the package."""
    return Path(os.environ.get("GPUPIPE_AOT_DIR") or Path(__file__).parent)


def enabled() -> bool:
    return os.environ.get("GPUPIPE_AOT", "1").strip().lower() not in ("0", "false", "no", "off")


def identity() -> dict:
    """What a module must have been built from to be used here."""
    import numba
    import numpy

    return {"format": FORMAT, "sources": sources_digest(), "numba": numba.__version__,
            "numpy": numpy.__version__, "python": sys.implementation.cache_tag,
            "machine": platform.machine()}


def compiled(key: str) -> dict | None:
    """The table of entry ``key`` (``module.qualname``): argument types -> compiled function;
    None where the module lacks it or cannot be used."""
    tables = _tables if _tables is not None else _load()
    return tables.get(key)


def missed(key: str, argtypes: tuple) -> None:
    """Log, once per process, an entry called with argument types the module lacks (numba
    then compiles it for them)."""
    if (key, argtypes) not in _missed:
        _missed.add((key, argtypes))
        log.info("kernel %s: no ahead-of-time code for %s; numba compiles it", key,
                 ", ".join(map(str, argtypes)))


def misses() -> list[tuple[str, tuple]]:
    """The entries this process called with argument types the module lacks (`missed`)."""
    return sorted(_missed, key=str)


def state() -> dict:
    """How this process runs its kernels: ``{"kernels": "ahead-of-time" | "jit", ...}`` with
    the module's path and build time, or why it is not used."""
    if _tables is None:
        _load()
    return dict(_state)


def _load() -> dict[str, dict]:
    global _tables
    with _lock:
        if _tables is None:
            _tables = _read()
        return _tables


def _read() -> dict[str, dict]:
    where = directory()
    index = where / INDEX
    if not enabled():
        _state.update(kernels="jit", why="GPUPIPE_AOT=0")
        return {}
    if not index.exists():
        _state.update(kernels="jit", why=f"no ahead-of-time module in {where}")
        return {}
    try:
        with open(index, "rb") as f:
            meta = pickle.load(f)
        mine = identity()
        stale = [k for k in mine if meta.get("built_from", {}).get(k) != mine[k]]
        if stale:
            why = f"the ahead-of-time module in {where} was built from other {', '.join(stale)}"
            _state.update(kernels="jit", why=why)
            log.warning("%s: the kernels are compiled at first use instead (`gpupipe warmup "
                        "--aot` or `make install` rebuilds it)", why)
            return {}
        spec = importlib.util.spec_from_file_location(f"gpupipe.kernels.{MODULE}",
                                                      where / meta["file"])
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as e:  # a damaged or foreign file: numba compiles, as without it
        why = f"the ahead-of-time module in {where} cannot be loaded ({type(e).__name__}: {e})"
        _state.update(kernels="jit", why=why)
        log.warning("%s; the kernels are compiled at first use instead", why)
        return {}
    tables: dict[str, dict] = {}
    for key, exports in meta["entries"].items():
        tables[key] = {argtypes: getattr(module, symbol) for argtypes, symbol in exports}
    _state.update(kernels="ahead-of-time", module=str(where / meta["file"]),
                  built=meta["built"], exports=sum(len(t) for t in tables.values()))
    return tables


def hold(why: str) -> None:
    """Serve nothing in this process (numba compiles every kernel), saying ``why``."""
    global _tables
    with _lock:
        _tables = {}
        _state.clear()
        _state.update(kernels="jit", why=why)


def forget() -> None:
    """Read the module again at the next call (after a build)."""
    global _tables
    with _lock:
        _tables = None
        _state.clear()
