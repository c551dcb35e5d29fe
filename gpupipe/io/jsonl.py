"""JSON Lines reader (``.jsonl``, ``.jsonl.gz``, ``.jsonl.zst``).

One partition per file, except that uncompressed files larger than the block size are cut
into blocks at line boundaries (`split_blocks`), so a single huge file does not become one
huge task. Line numbers (for derived ids and error messages) stay those of the whole file.

Fast path: Arrow's JSON parser over the whole file. When that path meets anything unusual
(bad UTF-8, a malformed line, a missing or non-string ``text``, a numeric id), the file is parsed
again line by line so that every record is either kept or set aside with its line number and
reason — never dropped silently.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from gpupipe.frame import ID, STRING, TEXT, empty_frame, from_arrow, utf8_bytes
from gpupipe.io.files import compression_of, derived_id_prefix, file_size, is_url, read_bytes
from gpupipe.io.source import FAIL_HINT, ReadResult, Rejections


def split_blocks(files: tuple[str, ...], blocksize: int | None) -> tuple[tuple[int, int, int], ...]:
    """``(file index, start, end)`` per partition; ``end == -1`` reads the whole file.

    Only uncompressed files larger than ``blocksize`` are cut, each cut just after a newline.
    """
    blocks: list[tuple[int, int, int]] = []
    for fi, path in enumerate(files):
        if blocksize is None or is_url(path) or compression_of(path) is not None or \
                os.path.getsize(path) <= blocksize:   # remote files are read whole
            blocks.append((fi, 0, -1))
            continue
        size = os.path.getsize(path)
        if size <= blocksize:
            blocks.append((fi, 0, -1))
            continue
        bounds = [0]
        with open(path, "rb") as f:
            target = blocksize
            while target < size:
                f.seek(target)
                cut = size
                while chunk := f.read(1 << 16):
                    k = chunk.find(b"\n")
                    if k >= 0:
                        cut = f.tell() - len(chunk) + k + 1
                        break
                if cut >= size:
                    break
                bounds.append(cut)
                target = cut + blocksize
        bounds.append(size)
        blocks.extend((fi, a, b) for a, b in zip(bounds, bounds[1:]))
    return tuple(blocks)


def count_newlines(path: str, start: int, end: int) -> int:
    """Newlines in bytes ``[start, end)`` of an uncompressed file."""
    n = 0
    with open(path, "rb") as f:
        f.seek(start)
        left = end - start
        while left > 0 and (chunk := f.read(min(left, 1 << 24))):
            n += chunk.count(b"\n")
            left -= len(chunk)
    return n


@dataclasses.dataclass(frozen=True)
class JsonlSource:
    files: tuple[str, ...]
    root: str
    text_column: str = "text"
    id_column: str | None = None
    on_error: str = "fail"
    #: partitions as (file index, start, end); empty: one partition per whole file
    blocks: tuple[tuple[int, int, int], ...] = ()
    #: per block, the number of lines before it in its file (empty: computed when needed)
    line_bases: tuple[int, ...] = ()
    #: (path, why) of paths the input matched that are not readable files (on_error: skip)
    left_out: tuple[tuple[str, str], ...] = ()
    #: fsspec options of remote paths (``s3://``: endpoint, credentials)
    storage_options: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def open(cls, files: tuple[str, ...], *, root: str, text_column: str = "text",
             id_column: str | None = None, on_error: str = "fail",
             left_out: tuple = (), columns: tuple[str, ...] = (),
             blocksize: int | None = None, storage_options: dict | None = None) -> JsonlSource:
        """The source of a run's input files: one partition per file, or per ``blocksize``
        bytes of a large uncompressed file."""
        if columns:
            from gpupipe.errors import SpecError

            raise SpecError(f"input.columns {list(columns)} is for Parquet input (JSON Lines "
                            f"input reads id and text)")
        return cls(files=tuple(files), root=root, text_column=text_column, id_column=id_column,
                   on_error=on_error, left_out=tuple(left_out),
                   blocks=split_blocks(tuple(files), blocksize),
                   storage_options=dict(storage_options or {}))

    @property
    def npartitions(self) -> int:
        return len(self.blocks) if self.blocks else len(self.files)

    def _block(self, i: int) -> tuple[str, int, int]:
        if not self.blocks:
            return self.files[i], 0, -1
        fi, start, end = self.blocks[i]
        return self.files[fi], start, end

    def describe(self, i: int) -> str:
        path, start, end = self._block(i)
        return path if end == -1 else f"{path} bytes {start}-{end}"

    def needs_line_bases(self) -> bool:
        """Derived ids of a file cut into blocks need the line count before every block."""
        return self.id_column is None and not self.line_bases and any(
            start > 0 for _, start, _ in self.blocks)

    def with_line_bases(self, counts: list[int]) -> JsonlSource:
        """Given the newline count of every block (in order), fill `line_bases`."""
        bases, running, last_file = [], 0, None
        for (fi, _, _), n in zip(self.blocks, counts):
            if fi != last_file:
                running, last_file = 0, fi
            bases.append(running)
            running += n
        return dataclasses.replace(self, line_bases=tuple(bases))

    def meta(self) -> pd.DataFrame:
        return empty_frame()

    def derived_id_prefix(self, path: str) -> str:
        return derived_id_prefix(path, self.root)

    def read(self, i: int) -> ReadResult:
        path, start, end = self._block(i)
        if end == -1:
            data, corruption = read_bytes(path, self.storage_options)
            on_disk = file_size(path, self.storage_options)
        else:
            with open(path, "rb") as f:
                f.seek(start)
                data, corruption = f.read(end - start), None
            on_disk = end - start
        known = self.line_bases[i] if self.line_bases else (0 if start == 0 else None)
        base = _LineBase(path, start, known)
        rejections = Rejections(self.on_error, FAIL_HINT, line_base=base)
        stats = {
            "files": 1 if start == 0 else 0,
            "compressed_bytes": on_disk,
            "bytes": len(data),
            "files_corrupt": 0,
        }
        if corruption is not None:
            stats["files_corrupt"] = 1
            cut = data.rfind(b"\n") + 1
            tail, data = data[cut:], data[:cut]
            rejections.add(path, None, "corrupt_file", corruption)
            if tail.strip():
                line = data.count(b"\n") + 1
                rejections.add(path, line, "truncated_record",
                               "record cut off by the corrupt end of the file", tail)
        if start == 0 and data.startswith(b"\xef\xbb\xbf"):
            data = data[3:]  # a UTF-8 byte order mark opens the file: not part of line 1
        frame, blank = self._parse_fast(path, data, base)
        if frame is None:
            frame, blank = self._parse_lines(path, data, rejections, base)
        stats["docs"] = len(frame)
        stats["blank_lines"] = blank
        stats["text_bytes"] = utf8_bytes(frame[TEXT])
        return ReadResult(frame, stats, rejections.counts, rejections.table())

    # -- fast path ------------------------------------------------------------------------------

    def _parse_fast(self, path: str, data: bytes, base) -> tuple[pd.DataFrame | None, int]:
        if not data.strip():  # only blank lines (or nothing)
            return empty_frame(), data.count(b"\n") + (0 if not data or data.endswith(b"\n")
                                                       else 1)
        fields = [(self.text_column, pa.string())]
        if self.id_column is not None and self.id_column != self.text_column:
            fields.append((self.id_column, pa.string()))
        options = pj.ParseOptions(explicit_schema=pa.schema(fields),
                                  unexpected_field_behavior="ignore", newlines_in_values=False)
        try:
            table = pj.read_json(io.BytesIO(data), parse_options=options,
                                 read_options=pj.ReadOptions(block_size=max(1 << 20, len(data) + 1)))
        except (pa.ArrowInvalid, UnicodeDecodeError, pa.ArrowNotImplementedError):
            return None, 0
        text = table.column(self.text_column)
        ids = table.column(self.id_column) if self.id_column is not None else None
        if text.null_count or (ids is not None and ids.null_count):
            return None, 0  # let the line-by-line path name the offending lines
        try:  # Arrow's JSON reader passes invalid UTF-8 inside strings through: check it
            for col in (text, ids):
                for chunk in (col.chunks if col is not None else ()):
                    chunk.validate(full=True)
        except pa.ArrowInvalid:
            return None, 0
        n_lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
        blank = n_lines - table.num_rows
        if blank < 0:  # more records than lines: two objects on one line; name it line by line
            return None, 0
        if ids is None:
            if blank == 0:  # the common case: record k is on line k
                lines = pa.array(np.arange(1, n_lines + 1, dtype=np.int64))
            else:
                found = [k for k, line in enumerate(data.split(b"\n"), 1) if line.strip()]
                if len(found) != table.num_rows:
                    return None, 0
                lines = pa.array(found, pa.int64())
            if base():
                lines = pc.add(lines, base())
            ids = pc.binary_join_element_wise(self.derived_id_prefix(path),
                                              lines.cast(pa.string()), "")
        return from_arrow(pa.table({ID: ids, TEXT: text})), blank

    # -- line-by-line path ----------------------------------------------------------------------

    def _parse_lines(self, path: str, data: bytes, rejections: Rejections, base):
        ids: list[str] = []
        texts: list[str] = []
        blank = 0
        prefix = self.derived_id_prefix(path) if self.id_column is None else ""
        for lineno, raw in enumerate(data.split(b"\n"), 1):
            if not raw.strip():
                blank += 1
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                rejections.add(path, lineno, "bad_utf8", f"invalid UTF-8 at byte {e.start}", raw)
                continue
            try:
                obj = json.loads(line)
            except ValueError as e:
                rejections.add(path, lineno, "malformed_json", f"malformed JSON ({e})", raw)
                continue
            except RecursionError:
                rejections.add(path, lineno, "malformed_json",
                               "malformed JSON (nested deeper than Python's recursion limit)",
                               raw[:1000])
                continue
            if not isinstance(obj, dict):
                rejections.add(path, lineno, "not_an_object",
                               f"expected a JSON object, found {type(obj).__name__}", raw)
                continue
            text = obj.get(self.text_column)
            if text is None:
                found = ", ".join(list(obj)[:8]) or "none"
                what = (f"{self.text_column!r} is null" if self.text_column in obj else
                        f"no {self.text_column!r} field (fields: {found}); input.text_column "
                        f"names the field holding the text")
                rejections.add(path, lineno, "missing_text", what, raw)
                continue
            if not isinstance(text, str):
                rejections.add(path, lineno, "text_not_string",
                               f"{self.text_column!r} is a {type(text).__name__}, not a string", raw)
                continue
            if self.id_column is None:
                doc_id = f"{prefix}{lineno + base()}"
            else:
                value = obj.get(self.id_column)
                if value is None:
                    rejections.add(path, lineno, "missing_id", f"no {self.id_column!r} field", raw)
                    continue
                if isinstance(value, (dict, list, bool)):
                    rejections.add(path, lineno, "bad_id",
                                   f"{self.id_column!r} is a {type(value).__name__}", raw)
                    continue
                doc_id = str(value)
            bad = _lone_surrogate(text) or _lone_surrogate(doc_id)
            if bad:
                rejections.add(path, lineno, "bad_utf8",
                               f"a lone surrogate escape (\\u{bad:04x}) is not a character "
                               f"and has no UTF-8 form", raw)
                continue
            ids.append(doc_id)
            texts.append(text)
        if data.endswith(b"\n"):
            blank -= 1  # the empty string after the final newline is not a line
        frame = pd.DataFrame({ID: pd.array(ids, dtype=STRING), TEXT: pd.array(texts, dtype=STRING)})
        return frame, blank


def _lone_surrogate(s: str) -> int:
    """The first lone surrogate (``"\\ud800"`` in JSON) in ``s``, 0 if none."""
    try:
        s.encode("utf-8")
        return 0
    except UnicodeEncodeError as e:
        return ord(s[e.start])


class _LineBase:
    """Lines before a block, counted only if a line number is actually needed."""

    def __init__(self, path: str, start: int, known: int | None):
        self.path, self.start, self.value = path, start, known

    def __call__(self) -> int:
        if self.value is None:
            self.value = count_newlines(self.path, 0, self.start)
        return self.value
