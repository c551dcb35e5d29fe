"""The shard formats: name -> `ShardFormat` class (as mosaicml/streaming's
``format/__init__.py`` registers its shard formats). Every place that decides by format asks
here: the pipeline file's ``output.shards.format`` (`gpupipe.spec.ShardSpec`), the shard writer
and the manifest (`gpupipe.shards.writer`), ``gpupipe inspect`` (`gpupipe.shards.inspect`),
`gpupipe.shards.dataset.ShardSet`, and what ``gpupipe run`` and the demo print.

A format is found by its pipeline-file name (`get`) or by the ``"format"`` string its
``manifest.json`` carries (`of_manifest`).

Adding a shard format means adding one module under ``gpupipe/shards/formats/`` with a
`ShardFormat` subclass (``name``, ``manifest_format``, ``suffixes``, ``write``; a ``reader``
when gpupipe can read it back; ``write_data_args`` when it writes files beside the manifest),
and its line in `FORMATS` below; nothing else changes.

>>> get("datatrove").manifest_format
'datatrove-ds'
>>> of_manifest("megatron-mmidx-v1").name
'megatron'
"""

from __future__ import annotations

from gpupipe.errors import InputError, SpecError, did_you_mean
from gpupipe.shards.formats.base import ShardFormat, ShardReader
from gpupipe.shards.formats.datatrove import DatatroveFormat
from gpupipe.shards.formats.mds import MdsFormat
from gpupipe.shards.formats.megatron import MegatronFormat

#: pipeline-file name -> format (`output.shards.format`)
FORMATS: dict[str, type[ShardFormat]] = {f.name: f for f in (
    MegatronFormat,
    DatatroveFormat,
    MdsFormat,
)}

__all__ = ["FORMATS", "ShardFormat", "ShardReader", "all_suffixes", "get", "of_manifest",
           "readable"]


def get(name: str) -> type[ShardFormat]:
    """The format of a pipeline file's ``output.shards.format``."""
    try:
        return FORMATS[name]
    except KeyError:
        raise SpecError(f"unknown shard format {name!r}{did_you_mean(name, FORMATS)} "
                        f"(known: {', '.join(FORMATS)})") from None


def of_manifest(manifest_format: str, where: str = "manifest.json") -> type[ShardFormat]:
    """The format of a shard directory, from its manifest's ``"format"`` (``where``: the
    manifest's path, for the error)."""
    for f in FORMATS.values():
        if f.manifest_format == manifest_format:
            return f
    known = [f.manifest_format for f in FORMATS.values()]
    raise InputError(f"{where}: unknown shard format {manifest_format!r}"
                     f"{did_you_mean(manifest_format, known)} (known: {', '.join(known)}); "
                     f"was it written by another version of gpupipe?")


def all_suffixes() -> tuple[str, ...]:
    """The endings of every format's shard files."""
    return tuple(s for f in FORMATS.values() for s in f.suffixes)


def readable() -> tuple[str, ...]:
    """The names of the formats gpupipe can read back (decode, `ShardSet`)."""
    return tuple(f.name for f in FORMATS.values() if f.reader is not None)
