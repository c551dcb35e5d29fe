"""The backend seam: the few frame operations stages use, dispatched on the partition's type.

Stages call these instead of pandas or cuDF methods, so the same stage code runs on a pandas or
a cuDF partition and no stage holds an ``if cudf`` branch (the pattern of dask's
``dask/dataframe/backends.py``). `gpupipe.frame` registers the pandas half; the cuDF half
(`gpupipe.backend.register_cudf_seam`) is registered the first time a cuDF object is
dispatched, so nothing imports cuDF before a cuDF partition exists.

* `text_buffers(series)`: the ``(offsets, data)`` UTF-8 view of a string column (host numpy
  arrays for pandas, zero-copy device arrays for cuDF);
* `kernels_for(frame)`: the kernel launchers for that memory (`gpupipe.kernels.cpu` or
  `gpupipe.kernels.gpu`; both have the same functions);
* `string_column(like, offsets, data, keep=None)`: a string column of ``like``'s backend and
  index from UTF-8 buffers; where ``keep`` is False the row of ``like`` stays;
* `label_column(like, codes, labels)`: ``labels[code - 1]`` per row, null for 0 (reason labels);
* `filter_rows(frame, keep)`: the rows where ``keep`` is True, renumbered from 0.
"""

from __future__ import annotations

from dask.utils import Dispatch

text_buffers = Dispatch("text_buffers")
kernels_for = Dispatch("kernels_for")
string_column = Dispatch("string_column")
label_column = Dispatch("label_column")
filter_rows = Dispatch("filter_rows")

OPERATIONS = (text_buffers, kernels_for, string_column, label_column, filter_rows)


def _register_cudf() -> None:
    from gpupipe.backend import register_cudf_seam

    register_cudf_seam()


for _op in OPERATIONS:
    _op.register_lazy("cudf", _register_cudf)

import gpupipe.frame  # noqa: E402,F401  (registers the pandas half)
