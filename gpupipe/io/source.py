"""A source is a list of partitions that a worker can read independently and deterministically."""

from __future__ import annotations

import dataclasses
from typing import Any

import pandas as pd
import pyarrow as pa

#: what a reader sets aside under ``on_error: skip`` (written to ``<output>/rejected/read/``)
REJECTED_SCHEMA = pa.schema(
    [
        ("file", pa.string()),
        ("line", pa.int64()),
        ("reason", pa.string()),
        ("detail", pa.string()),
        ("raw", pa.binary()),
    ]
)

#: reason codes a reader can reject a record (or a whole file) for
READ_REASONS = (
    "bad_utf8",
    "malformed_json",
    "not_an_object",
    "missing_text",
    "text_not_string",
    "missing_id",
    "bad_id",
    "truncated_record",
    "corrupt_file",
    # WARC input (`gpupipe.io.warc`)
    "bad_record",
    "not_http",
    "undecodable_body",
)


@dataclasses.dataclass
class ReadResult:
    frame: pd.DataFrame
    #: counters: docs, bytes (uncompressed input), compressed_bytes, blank_lines, files_corrupt
    stats: dict[str, int]
    #: reason -> number of records set aside
    rejected_counts: dict[str, int]
    rejected: pa.Table | None = None


class Rejections:
    """Collects records set aside by a reader, or raises at the first one under ``fail``."""

    def __init__(self, on_error: str, hint: str, line_base=None):
        self.on_error = on_error
        self.hint = hint
        # callable giving the lines before this block of the file (blocks of a split file)
        self.line_base = line_base
        self.rows: dict[str, list[Any]] = {name: [] for name in REJECTED_SCHEMA.names}
        self.counts: dict[str, int] = {}

    def add(self, file: str, line: int | None, reason: str, detail: str, raw: bytes = b"",
            records: int = 1) -> None:
        """Set aside ``records`` records (a whole file's rows: one row here, counted as all of
        them) for ``reason``, or raise under ``fail``."""
        from gpupipe.errors import InputError

        if line is not None and self.line_base is not None:
            line += self.line_base()
        where = f"{file} line {line}" if line is not None else file
        if self.on_error == "fail":
            raise InputError(f"{where}: {detail} [{reason}] — {self.hint}")
        self.counts[reason] = self.counts.get(reason, 0) + records
        for name, value in zip(REJECTED_SCHEMA.names, (file, line, reason, detail, raw)):
            self.rows[name].append(value)

    def table(self) -> pa.Table | None:
        if not self.rows["reason"]:
            return None
        return pa.table(self.rows, schema=REJECTED_SCHEMA)


FAIL_HINT = "fix the input, or set `input.on_error: skip` to set such records aside and go on"


def read_partition(source, i: int, backend: str) -> ReadResult:
    """`ReadResult` of partition ``i`` of ``source`` with its frame on ``backend``. On cuDF a
    reader with a GPU path of its own (``read_device``, e.g. Parquet decoded on the GPU) reads
    there; where that path declines (it returns None), and for every other reader, the host
    reader reads, counting and setting aside bad records with their file and line, and the
    frame is then copied over."""
    if backend == "cudf":
        read_device = getattr(source, "read_device", None)
        if read_device is not None:
            result = read_device(i)
            if result is not None:
                return result
    result = source.read(i)
    if backend == "pandas":
        return result
    from gpupipe.backends import to_backend

    return dataclasses.replace(result, frame=to_backend(result.frame, backend))


class FrameReader:
    """Picklable callable for `dask.dataframe.from_map`: partition index -> pandas frame."""

    def __init__(self, source):
        self.source = source

    def __call__(self, i: int):
        return self.source.read(i).frame
