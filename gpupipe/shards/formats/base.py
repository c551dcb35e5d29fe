"""The base of every shard format (`gpupipe.shards.formats`): what the writer, the manifest,
``gpupipe inspect`` and `gpupipe.shards.dataset.ShardSet` ask of one."""

from __future__ import annotations

from typing import ClassVar, Protocol

import numpy as np


class ShardReader(Protocol):
    """One shard prefix, read back: its sequences (one per document unless packed)."""

    #: tokens per sequence
    sizes: np.ndarray

    def __len__(self) -> int: ...

    def __getitem__(self, i: int) -> np.ndarray: ...

    def verify(self) -> list[str]:
        """The format's invariants that do not hold (empty: none)."""
        ...


class ShardFormat:
    """A shard format: its names, the files it writes for one prefix, and how they are read.

    Formats are classes, never instantiated; `gpupipe.shards.formats.FORMATS` holds them.
    """

    #: the name in the pipeline file (``output.shards.format``)
    name: ClassVar[str]
    #: the name in ``manifest.json`` (``"format"``)
    manifest_format: ClassVar[str]
    #: the endings of the files one prefix gets, in the order they are written
    suffixes: ClassVar[tuple[str, ...]]
    #: the class that reads one prefix (`ShardReader`), or None when gpupipe has no reader
    reader: ClassVar[type | None] = None
    #: whether `write_data_args` writes Megatron's ``data_args.txt`` and
    #: ``per_split_data_args.json``
    writes_data_args: ClassVar[bool] = False
    #: whether `write` takes ``texts`` (one str per sequence: ``output.shards.text``)
    takes_text: ClassVar[bool] = False
    #: whether `write` takes ``compression`` (``output.shards.compression``)
    takes_compression: ClassVar[bool] = False

    @classmethod
    def write(cls, prefix: str, tokens: np.ndarray, lengths: np.ndarray, *,
              tokenizer_name: str) -> dict[str, dict]:
        """Write the files of ``prefix`` (``tokens`` in the shard dtype, ``lengths`` per
        sequence); return ``{suffix: {"bytes": ..., "sha256": ...}}`` for the manifest. A
        format with `takes_text` also gets ``texts=``, one str per sequence, and one with
        `takes_compression` ``compression=`` when it is set."""
        raise NotImplementedError

    @classmethod
    def open(cls, prefix: str) -> ShardReader | None:
        """The reader of ``prefix`` (``ValueError`` when its files are corrupt), or None."""
        return None if cls.reader is None else cls.reader(prefix)

    @classmethod
    def write_data_args(cls, shards_dir: str, shards: list[dict],
                        weights: dict | None) -> None:
        """Files beside the manifest that a trainer reads (``shards``: the manifest's list;
        ``weights``: a blend weight per prefix, else None). Nothing by default."""
