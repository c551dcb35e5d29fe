"""Readers and writers. `read_jsonl` / `read_parquet` give a Dask DataFrame for exploration."""

from __future__ import annotations

from typing import Literal

from gpupipe.io.files import common_root, expand_paths
from gpupipe.io.formats import FORMATS
from gpupipe.io.jsonl import JsonlSource, count_newlines
from gpupipe.io.parquet import ParquetSource


def _to_dask(source, label: str):
    """A Dask DataFrame whose partition ``i`` is ``source.read(i).frame``."""
    import dask.dataframe as dd

    from gpupipe.io.source import FrameReader

    return dd.from_map(FrameReader(source), list(range(source.npartitions)),
                       meta=source.meta(), enforce_metadata=False, label=label)


def read_jsonl(path: str | list[str], *, text_column: str = "text", id_column: str | None = None,
               on_error: Literal["fail", "skip"] = "fail", blocksize: int | None = 256 * 2**20):
    """JSON Lines files (plain, .gz, .zst) as a Dask DataFrame with columns ``id`` and ``text``.

    One partition per file, or per ``blocksize`` bytes of a large uncompressed file. With
    ``on_error="skip"`` bad records are left out (a pipeline run also counts them and writes
    them to ``rejected/read/``).

    >>> import gpupipe as gp
    >>> ddf = gp.read_jsonl("data/sample/*.jsonl.gz", id_column="id")
    >>> list(ddf.columns)
    ['id', 'text']
    """
    files = tuple(expand_paths(path, suffixes=FORMATS["jsonl"].suffixes))
    source = JsonlSource.open(files, root=common_root(list(files)), text_column=text_column,
                              id_column=id_column, on_error=on_error, blocksize=blocksize)
    if source.needs_line_bases():
        import os

        source = source.with_line_bases([
            count_newlines(source.files[fi], start, end if end != -1 else
                           os.path.getsize(source.files[fi]))
            for fi, start, end in source.blocks])
    return _to_dask(source, "gpupipe-read-jsonl")


def read_parquet(path: str | list[str], *, text_column: str = "text",
                 id_column: str | None = None, on_error: Literal["fail", "skip"] = "fail"):
    """Parquet files as a Dask DataFrame with columns ``id`` and ``text`` (one partition per file)."""
    files = expand_paths(path, suffixes=FORMATS["parquet"].suffixes)
    source = ParquetSource(files=tuple(files), root=common_root(files), text_column=text_column,
                           id_column=id_column, on_error=on_error)
    return _to_dask(source, "gpupipe-read-parquet")


__all__ = ["JsonlSource", "ParquetSource", "read_jsonl", "read_parquet"]
