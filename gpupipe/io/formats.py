"""The input formats: name -> the file-name endings that mark it and the source that reads it
(as mosaicml/streaming's ``format/__init__.py`` registers shard formats). Every place that
decides a format asks here: the pipeline file's ``input.format`` (and its inference), the run's
source, `gpupipe.read_jsonl` / `read_parquet`, ``check-gpu`` and ``train-tokenizer``.

A new reader is a module of `gpupipe.io` with a source class (``files``, ``npartitions``,
``read(i)``, ``meta()``, ``describe(i)``, and an ``open`` classmethod), and one entry here.

>>> of_path("data/sample/part-0.ndjson.zstd").name
'jsonl'
>>> infer(["data/sample/*.jsonl.gz"])
'jsonl'
>>> of_path("CC-MAIN-20241201-00000.warc.gz").name
'warc'
"""

from __future__ import annotations

import dataclasses
import os

from gpupipe.errors import SpecError, did_you_mean
from gpupipe.io.jsonl import JsonlSource
from gpupipe.io.parquet import ParquetSource
from gpupipe.io.warc import COLUMNS as WARC_COLUMNS
from gpupipe.io.warc import WarcSource

#: endings of compressed files a reader decompresses itself (`gpupipe.io.files.read_bytes`)
COMPRESSIONS = ("", ".gz", ".zst", ".zstd")


@dataclasses.dataclass(frozen=True)
class Format:
    name: str
    #: lower-case endings of the file names of this format, compressed forms included
    suffixes: tuple[str, ...]
    #: the source class (`JsonlSource`, `ParquetSource`): ``source.open(files, ...)``
    source: type
    #: columns every source of this format carries besides id and text (WARC: url, ...)
    columns: tuple[str, ...] = ()

    def matches(self, path: str) -> bool:
        return os.fspath(path).lower().endswith(self.suffixes)


def _compressed(*bases: str) -> tuple[str, ...]:
    return tuple(b + c for b in bases for c in COMPRESSIONS)


FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("jsonl", _compressed(".jsonl", ".json", ".ndjson"), JsonlSource),
    Format("parquet", (".parquet", ".pq"), ParquetSource),
    Format("warc", (".warc", ".warc.gz", ".arc", ".arc.gz"), WarcSource, tuple(WARC_COLUMNS)),
)}
#: the format of an input whose names say nothing (``data/*``)
DEFAULT = "jsonl"


def get(name: str) -> Format:
    try:
        return FORMATS[name]
    except KeyError:
        raise SpecError(f"unknown input format {name!r}{did_you_mean(name, FORMATS)} "
                        f"(known: {', '.join(FORMATS)})") from None


def of_path(path: str) -> Format | None:
    """The format a file name (or a glob) ends with, or None."""
    return next((f for f in FORMATS.values() if f.matches(path)), None)


def all_suffixes() -> tuple[str, ...]:
    return tuple(s for f in FORMATS.values() for s in f.suffixes)


def infer(paths: list[str], storage_options: dict | None = None) -> str:
    """The format of an input: that of the first path's name, or for a directory (local or
    remote) that of the first file under it with a known ending (sorted); `DEFAULT` when no
    name says."""
    from pathlib import Path

    from gpupipe.io.files import expand_paths, is_url

    first = os.fspath(paths[0])
    if is_url(first):
        found = of_path(first)
        if found is None:
            listed = expand_paths(first, suffixes=all_suffixes(),
                                  storage_options=storage_options)
            found = next((f for f in map(of_path, listed) if f is not None), None)
        return found.name if found is not None else DEFAULT
    first = os.path.expanduser(first)
    if os.path.isdir(first):
        for p in sorted(Path(first).rglob("*")):
            found = of_path(p.name)
            if found is not None and not p.is_dir():
                return found.name
        return DEFAULT
    found = of_path(first)
    return found.name if found is not None else DEFAULT
