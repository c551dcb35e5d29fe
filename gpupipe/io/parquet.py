"""Parquet reader: one partition per file; the text and id columns are mapped to ``text``/``id``."""

from __future__ import annotations

import contextlib
import dataclasses

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gpupipe.errors import InputError, did_you_mean
from gpupipe.frame import ID, TEXT, empty_frame, from_arrow
from gpupipe.io.files import (
    arrow_path,
    derived_id_prefix,
    file_size,
    is_url,
    open_input,
    remote_error,
)
from gpupipe.io.source import FAIL_HINT, ReadResult, Rejections


@dataclasses.dataclass(frozen=True)
class ParquetSource:
    files: tuple[str, ...]
    root: str
    text_column: str = "text"
    id_column: str | None = None
    on_error: str = "fail"
    #: further columns to carry through unchanged (checkpoints carry what stages added)
    columns: tuple[str, ...] = ()
    #: (path, why) of paths the input matched that are not readable files (on_error: skip)
    left_out: tuple[tuple[str, str], ...] = ()
    #: fsspec options of remote paths (``s3://``: endpoint, credentials)
    storage_options: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def open(cls, files: tuple[str, ...], *, root: str, text_column: str = "text",
             id_column: str | None = None, on_error: str = "fail",
             left_out: tuple = (), columns: tuple[str, ...] = (),
             blocksize: int | None = None, storage_options: dict | None = None) -> ParquetSource:
        """The source of a run's input files (one partition per file; ``blocksize`` does not
        apply). Fails before any cluster starts when the first file lacks a configured
        column."""
        storage_options = dict(storage_options or {})
        if files:
            names = cls._column_names(files[0], storage_options)
            for key, col in (("text_column", text_column), ("id_column", id_column)):
                if col is not None and col not in names:
                    raise InputError(f"{files[0]}: no column {col!r}{did_you_mean(col, names)} "
                                     f"(columns: {', '.join(names[:12])}); set input.{key}")
            for col in columns:
                if col not in names:
                    raise InputError(f"{files[0]}: no column {col!r}{did_you_mean(col, names)} "
                                     f"(columns: {', '.join(names[:12])}); see input.columns")
        return cls(files=tuple(files), root=root, text_column=text_column, id_column=id_column,
                   on_error=on_error, columns=tuple(columns), left_out=tuple(left_out),
                   storage_options=storage_options)

    @staticmethod
    def _column_names(path: str, storage_options: dict | None = None) -> list[str]:
        where, fs = arrow_path(path, storage_options)
        try:
            return pq.read_schema(where, filesystem=fs).names
        except Exception as e:
            if is_url(path) and not isinstance(e, pa.ArrowInvalid):
                raise remote_error(path, e) from None
            raise InputError(f"{path}: cannot read the Parquet schema ({e})") from None

    @property
    def npartitions(self) -> int:
        return len(self.files)

    def describe(self, i: int) -> str:
        return self.files[i]

    def meta(self) -> pd.DataFrame:
        if not self.columns:
            return empty_frame()
        where, fs = arrow_path(self.files[0], self.storage_options) if self.files else (None, None)
        schema = pq.read_schema(where, filesystem=fs) if self.files else pa.schema([])
        extra = {c: schema.field(c).type for c in self.columns if c in schema.names}
        return from_arrow(pa.table({ID: pa.array([], pa.string()), TEXT: pa.array([], pa.string()),
                                    **{c: pa.array([], t) for c, t in extra.items()}}))

    def wanted_columns(self) -> list[str]:
        """The file's columns a read takes: text, id (when configured), carried columns."""
        return list(dict.fromkeys([self.text_column, *([self.id_column] if self.id_column
                                                       else []), *self.columns]))

    def derived_ids(self, path: str, n: int) -> pa.Array:
        """``<file>:<row>`` ids (rows from 1) for a file without an id column."""
        rows = pa.array(range(1, n + 1), pa.int64()).cast(pa.string())
        return pc.binary_join_element_wise(derived_id_prefix(path, self.root), rows, "")

    def _stats(self, path: str, size: int | None = None) -> dict:
        if size is None:
            size = file_size(path, self.storage_options)
        return {"files": 1, "compressed_bytes": size, "bytes": 0, "files_corrupt": 0,
                "blank_lines": 0, "text_bytes": 0}

    def read(self, i: int) -> ReadResult:
        path = self.files[i]
        rejections = Rejections(self.on_error, FAIL_HINT)
        wanted = self.wanted_columns()
        # one open file for the footer and the columns: a remote file costs a request or two
        with contextlib.ExitStack() as stack:
            source = (stack.enter_context(open_input(path, self.storage_options))
                      if is_url(path) else path)
            stats = self._stats(path, source.size if is_url(path) else None)
            try:
                pf = pq.ParquetFile(source)
                schema = pf.schema_arrow
                missing = [c for c in wanted if c not in schema.names]
                if missing:
                    rows = pf.metadata.num_rows
                    rejections.add(path, None, "missing_text" if self.text_column in missing
                                   else "missing_id",
                                   f"column(s) {missing} not in the file (columns: "
                                   f"{schema.names[:12]}); set input.text_column / "
                                   f"input.id_column; its {rows:,} rows are set aside",
                                   records=rows)
                    return self._empty(stats, rejections)
                table = pf.read(columns=wanted)
            except (pa.ArrowInvalid, OSError) as e:
                if is_url(path) and not isinstance(e, pa.ArrowInvalid):
                    raise remote_error(path, e) from e
                rejections.add(path, None, "corrupt_file", f"cannot read Parquet ({e})")
                stats["files_corrupt"] = 1
                return self._empty(stats, rejections)
        text = table.column(self.text_column)
        if pa.types.is_dictionary(text.type) and (pa.types.is_string(text.type.value_type) or
                                                  pa.types.is_large_string(text.type.value_type)):
            text = text.cast(text.type.value_type)   # dictionary-encoded text is text
        if not (pa.types.is_string(text.type) or pa.types.is_large_string(text.type)):
            rejections.add(path, None, "text_not_string",
                           f"column {self.text_column!r} has type {text.type}, not string; its "
                           f"{table.num_rows:,} rows are set aside", records=table.num_rows)
            return self._empty(stats, rejections)
        if self.id_column is None:
            ids = self.derived_ids(path, table.num_rows)
        else:
            ids = table.column(self.id_column).cast(pa.string())
        out = pa.table({ID: ids, TEXT: text, **{c: table.column(c) for c in self.columns}})
        bad = pc.or_(pc.is_null(out.column(TEXT)), pc.is_null(out.column(ID)))
        if pc.any(bad).as_py():
            idx = pc.indices_nonzero(bad).to_pylist()
            for k in idx:
                reason = "missing_text" if out.column(TEXT)[k].as_py() is None else "missing_id"
                rejections.add(path, k + 1, reason, f"row {k + 1}: {reason.replace('_', ' ')}")
            out = out.filter(pc.invert(bad))
        stats["bytes"] = stats["text_bytes"] = int(
            pc.sum(pc.binary_length(out.column(TEXT))).as_py() or 0)
        stats["docs"] = out.num_rows
        return ReadResult(from_arrow(out), stats, rejections.counts, rejections.table())

    def read_device(self, i: int) -> ReadResult | None:
        """`read` on the GPU (`gpupipe.backends.cudf.read_parquet`, through KvikIO) for a file
        whose text and id columns are plain strings without nulls; None for anything else (the
        host reader then decides: it names corrupt files and null rows)."""
        from gpupipe.backends import cudf as cudf_backend
        from gpupipe.backends import dispatch

        path = self.files[i]
        if is_url(path):   # KvikIO reads local files; the host reader reads remote ones
            return None
        try:
            schema = pq.read_schema(path)
        except Exception:  # the host reader names the corrupt file
            return None
        wanted = self.wanted_columns()
        strings = [self.text_column, *([self.id_column] if self.id_column else [])]
        if any(c not in schema.names for c in wanted) or not all(
                pa.types.is_string(schema.field(c).type) or
                pa.types.is_large_string(schema.field(c).type) for c in strings):
            return None
        columns = cudf_backend.read_parquet(path, wanted, not_null=strings)
        if columns is None:
            return None
        text = columns[self.text_column]
        ids = (columns[self.id_column] if self.id_column is not None else
               self.derived_ids(path, len(text)))
        frame = cudf_backend.frame({ID: ids, TEXT: text, **{c: columns[c] for c in self.columns}})
        stats = self._stats(path)
        stats["bytes"] = stats["text_bytes"] = dispatch.byte_size(frame[TEXT])
        stats["docs"] = len(frame)
        return ReadResult(frame, stats, {}, None)

    def _empty(self, stats, rejections) -> ReadResult:
        stats["docs"] = 0
        return ReadResult(self.meta(), stats, rejections.counts, rejections.table())
