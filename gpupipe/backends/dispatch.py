"""The backend seam: the few frame operations stages use, dispatched on the partition's type.

Stages call these instead of pandas or cuDF methods, so the same stage code runs on a pandas or
a cuDF partition and no stage holds an ``if cudf`` branch (the pattern of dask's
``dask/dataframe/backends.py``). This module holds only the `Dispatch` objects;
`gpupipe.backends.pandas` registers the pandas half and `gpupipe.backends.cudf` the cuDF half,
the first time a cuDF object is dispatched (the hook is in `gpupipe.backends`), so nothing
imports cuDF before a cuDF partition exists.

* `text_buffers(series)`: the ``(offsets, data)`` UTF-8 view of a string column (host numpy
  arrays for pandas, zero-copy device arrays for cuDF);
* `kernels_for(frame)`: the kernel launchers for that memory (`gpupipe.kernels.cpu` or
  `gpupipe.kernels.gpu`; both have the same functions);
* `string_column(like, offsets, data, keep=None)`: a string column of ``like``'s backend and
  index from UTF-8 buffers; where ``keep`` is False the row of ``like`` stays;
* `label_column(like, codes, labels)`: ``labels[code - 1]`` per row, null for 0 (reason labels);
* `filter_rows(frame, keep)`: the rows where ``keep`` is True, renumbered from 0;
* `arrow_table(frame)`: the partition as a canonical Arrow table (`gpupipe.frame.canonical_arrow`),
  what the writers write, so both backends write the same bytes;
* `byte_size(series)`: total UTF-8 bytes of a string column;
* `to_host(frame)`: the partition as a pandas frame with the canonical dtypes (a copy from the
  device for cuDF);
* `take_text(series, rows)`: the strings at positions ``rows`` as a host Arrow
  ``large_string`` array (only those are copied from the device);
* `like(like, frame)`: a pandas ``frame`` moved to ``like``'s backend (with ``like``'s index
  when the lengths match, so its columns can be assigned to ``like``).

`gpupipe.backends.to_backend(frame, name)` moves a partition to a named backend (the runner's
conversions between stages).
"""

from __future__ import annotations

from dask.utils import Dispatch

text_buffers = Dispatch("text_buffers")
kernels_for = Dispatch("kernels_for")
string_column = Dispatch("string_column")
label_column = Dispatch("label_column")
filter_rows = Dispatch("filter_rows")
arrow_table = Dispatch("arrow_table")
byte_size = Dispatch("byte_size")
to_host = Dispatch("to_host")
like = Dispatch("like")
take_text = Dispatch("take_text")

OPERATIONS = (text_buffers, kernels_for, string_column, label_column, filter_rows, arrow_table,
              byte_size, to_host, like, take_text)
