"""Dataframe backends: pandas + pyarrow (the default) and cuDF.

* `dispatch`: the seam, the few frame operations stages use, dispatched on the partition type;
* `pandas`: their pandas implementations (registered when this package is imported);
* `cudf`: their cuDF implementations and every other cuDF / KvikIO call (registered lazily, the
  first time a cuDF object is dispatched, so a CPU run never imports cuDF).

A new backend is one module beside these two, registered here (see ``docs/concepts.md``).
"""

from __future__ import annotations

from gpupipe.backends import dispatch
from gpupipe.backends import pandas as _pandas  # noqa: F401  (registers the pandas half)

NAMES = ("pandas", "cudf")


def _register_cudf() -> None:
    from gpupipe.backends import cudf as cudf_backend

    cudf_backend.register()


for _op in dispatch.OPERATIONS:
    _op.register_lazy("cudf", _register_cudf)


def to_backend(frame, name: str):
    """``frame`` (pandas or cuDF) on backend ``name``; unchanged when it is there already. The
    runner calls this before every stage, so a stage without a native path for the run's
    backend gets a pandas partition, and the next native stage gets it back on the device."""
    if name == "pandas":
        return dispatch.to_host(frame)
    if name != "cudf":
        raise ValueError(f"unknown backend {name!r} (known: {', '.join(NAMES)})")
    from gpupipe.backends import cudf as cudf_backend

    return cudf_backend.from_host(frame)


__all__ = ["NAMES", "dispatch", "to_backend"]
