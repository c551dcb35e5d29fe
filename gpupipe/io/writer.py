"""Atomic writes: a file appears under its final name complete or not at all."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import uuid
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


@contextlib.contextmanager
def atomic_path(path: str) -> Iterator[str]:
    """Yield a temporary path beside ``path``; rename it over ``path`` when the block succeeds.

    The temporary name is hidden (leading dot), so readers listing the directory (pyarrow,
    Dask) never see a partial file; on failure it is removed.
    """
    head, tail = os.path.split(path)
    os.makedirs(head or ".", exist_ok=True)
    tmp = os.path.join(head, f".{tail}.tmp-{uuid.uuid4().hex[:12]}")
    try:
        yield tmp
        os.replace(tmp, path)
    except OSError as e:
        if e.errno in _FULL:
            from gpupipe.errors import OutputError

            raise OutputError(f"{path}: cannot write: {e.strerror} (the disk or the quota is "
                              f"full, or a file size limit is reached); free space or choose "
                              f"another output.path, then run again to resume. No partial "
                              f"file was left under that name") from None
        raise
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def remove_partial(directory: str) -> int:
    """Delete the temporary files (``.<name>.tmp-<id>``: `atomic_path`'s, a row segment's
    shipped stages) left in ``directory`` when a process was killed (SIGKILL runs no
    clean-up): a resumed run writes those files again. Returns how many were removed."""
    import glob

    stale = glob.glob(os.path.join(glob.escape(directory), ".*.tmp-*"))
    for f in stale:
        try:
            os.unlink(f)
        except FileNotFoundError:
            pass
    return len(stale)


#: errno values that mean "no room": ENOSPC, EDQUOT, EFBIG
_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def write_bytes(payload, path: str) -> dict:
    """Write ``payload`` atomically; return its size and sha256 (what manifests record)."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(payload)
    view = memoryview(payload)
    return {"bytes": view.nbytes, "sha256": hashlib.sha256(view).hexdigest()}


def write_parquet(table: pa.Table, path: str) -> None:
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")


def write_json(obj, path: str) -> None:
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, sort_keys=False, default=str)
        f.write("\n")


def write_npy(arr: np.ndarray, path: str) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.save(f, arr)
