"""MosaicML Streaming MDS shards: ``P.mds`` per shard prefix and, per split directory, the
``index.json`` that ``streaming.StreamingDataset(local=<shards>/<split>)`` reads.

One sequence per sample, in one column ``tokens`` encoded ``ndarray:<dtype>`` (the shard dtype,
uint16 or int32; a 1-D array of dynamic length), uncompressed, or with
``output.shards.compression: zstd[:level]`` the whole file compressed as MDSWriter does
(``P.mds.zstd``; the configuration then says ``"compression": "zstd"``, and ``index.json``
gives both files as ``raw_data`` and ``zip_data``). With ``output.shards.text`` a
``text`` column (``str``, UTF-8) comes first, as MDSWriter sorts columns by name. The bytes
follow streaming 0.13's ``MDSWriter`` exactly (``streaming/base/format/mds``): the sample
count (uint32), the sample offsets (uint32, from the start of the file), the writer's
configuration as sorted JSON, then the samples. Each sample is the sizes of its columns
(uint32 each: the text's bytes, then the array's), the text, then the array: one byte
``ndim << 2 | shape dtype`` (the smallest unsigned type holding the length), the length, the
tokens. gpupipe writes the files itself, so that a shard is one file named like its Megatron
twin and the bytes depend only on the documents; the tests read them with streaming itself.

``index.json`` lists a split's shards in shard order and is written after all of them,
before the manifest (the run's commit marker).
"""

from __future__ import annotations

import io
import json
import os
from collections import defaultdict

import numpy as np

from gpupipe.io.writer import write_bytes, write_json
from gpupipe.shards.formats.base import ShardFormat

#: uint32 offsets: the largest shard file MDS can address
MAX_BYTES = 2**32 - 1
_SHAPE_DTYPES = ((1 << 8, np.uint8, 0), (1 << 16, np.uint16, 1), (1 << 32, np.uint32, 2))


def config(dtype: np.dtype, text: bool = False, compression: str | None = None) -> dict:
    """The writer configuration MDS stores in every shard and index entry (columns sorted by
    name, as MDSWriter sorts them: ``text`` before ``tokens``)."""
    names = ["text", "tokens"] if text else ["tokens"]
    encodings = (["str"] if text else []) + [f"ndarray:{np.dtype(dtype).name}"]
    return {"column_encodings": encodings, "column_names": names,
            "column_sizes": [None] * len(names), "compression": compression, "format": "mds",
            "hashes": [], "size_limit": None, "version": 2}


def zstd_level(compression: str) -> int:
    """The level of ``zstd`` (3, streaming's default) or ``zstd:N`` (1 to 22)."""
    family, _, level = compression.partition(":")
    if family != "zstd" or (level and not (level.isdigit() and 1 <= int(level) <= 22)):
        raise ValueError(f"compression {compression!r}: zstd or zstd:N with N from 1 to 22 "
                         f"(the ones MosaicML Streaming reads that gpupipe writes)")
    return int(level) if level else 3


def encode_shard(tokens: np.ndarray, lengths: np.ndarray, texts: list[str] | None = None,
                 compression: str | None = None) -> bytes:
    """The bytes of one ``.mds`` file holding one sample per sequence (with ``texts``, each
    sample's text in a ``text`` column before its tokens; ``compression``: what its
    configuration declares, the bytes are those before compressing)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if (lengths <= 0).any():
        raise ValueError("MDS cannot hold an empty sequence (its ndarray encoding refuses "
                         "zero elements); keep append_eod on")
    raw = [t.encode("utf-8") for t in texts] if texts is not None else None
    text_bytes = (np.array([len(b) for b in raw], dtype=np.int64) if raw is not None
                  else np.zeros(len(lengths), np.int64))
    item = tokens.dtype.itemsize
    shape_bytes = np.select([lengths < 1 << 8, lengths < 1 << 16], [1, 2], 4)
    sizes = 1 + shape_bytes + lengths * item            # the encoded array
    dynamic = 2 if raw is not None else 1               # a uint32 size per dynamic column
    samples = 4 * dynamic + text_bytes + sizes
    head = json.dumps(config(tokens.dtype, raw is not None, compression),
                      sort_keys=True).encode("utf-8")
    n = len(lengths)
    start = 4 + 4 * (n + 1) + len(head)
    offsets = start + np.concatenate([[0], np.cumsum(samples)])
    if offsets[-1] > MAX_BYTES:
        raise ValueError(f"an MDS shard holds at most 4 GiB ({offsets[-1]:,} bytes asked): "
                         f"raise output.shards.num_shards or lower target_shard_tokens")
    out = bytearray(int(offsets[-1]))
    out[:4] = np.uint32(n).tobytes()
    out[4:4 + 4 * (n + 1)] = offsets.astype("<u4").tobytes()
    out[4 + 4 * (n + 1):start] = head
    data = tokens.astype(tokens.dtype.newbyteorder("<"), copy=False).tobytes()
    ends = np.cumsum(lengths) * item
    pos = start
    for k in range(n):
        length, sb = int(lengths[k]), int(shape_bytes[k])
        code = {1: 0, 2: 1, 4: 2}[sb]
        if raw is not None:
            out[pos:pos + 4] = len(raw[k]).to_bytes(4, "little")
            pos += 4
        out[pos:pos + 4] = int(sizes[k]).to_bytes(4, "little")
        pos += 4
        if raw is not None:
            out[pos:pos + len(raw[k])] = raw[k]
            pos += len(raw[k])
        out[pos] = (1 << 2) | code
        out[pos + 1:pos + 1 + sb] = length.to_bytes(sb, "little")
        body = pos + 1 + sb
        out[body:body + length * item] = data[int(ends[k]) - length * item:int(ends[k])]
        pos = body + length * item
    return bytes(out)


class MdsReader:
    """One ``.mds`` file written by gpupipe, read back (`ShardReader`)."""

    def __init__(self, prefix: str):
        self.data = read_shard(prefix)
        try:
            (n,) = np.frombuffer(self.data, "<u4", 1)
            self.offsets = np.frombuffer(self.data, "<u4", int(n) + 1, 4).astype(np.int64)
            head = self.data[4 + 4 * (int(n) + 1):int(self.offsets[0])]
            self.config = json.loads(head)
            self.has_text = self.config["column_names"] == ["text", "tokens"]
            encoding = self.config["column_encodings"][-1]
            self.dtype = np.dtype(encoding.split(":", 1)[1]).newbyteorder("<")
        except (ValueError, KeyError, IndexError) as e:
            raise ValueError(f"{prefix}.mds: not an MDS shard ({e})") from None
        self.sizes = np.array([self._header(k)[1] for k in range(int(n))], dtype=np.int64)

    def _text_size(self, k: int) -> int:
        pos = int(self.offsets[k])
        return int.from_bytes(self.data[pos:pos + 4], "little") if self.has_text else -1

    def text(self, k: int) -> str:
        """The text of sample ``k`` (shards written with ``output.shards.text``)."""
        if not self.has_text:
            raise KeyError("this shard holds no text (output.shards.text was off)")
        start = int(self.offsets[k]) + 8
        return self.data[start:start + self._text_size(k)].decode("utf-8")

    def _header(self, k: int) -> tuple[int, int]:
        """(offset of the tokens, their count) of sample ``k``."""
        pos = int(self.offsets[k]) + 4
        if self.has_text:
            pos += 4 + self._text_size(k)
        byte = self.data[pos]
        sb = 1 << (byte & 3)
        length = int.from_bytes(self.data[pos + 1:pos + 1 + sb], "little")
        return pos + 1 + sb, length

    def __len__(self) -> int:
        return len(self.sizes)

    def __getitem__(self, k: int) -> np.ndarray:
        start, length = self._header(k)
        return np.frombuffer(self.data, self.dtype, length, start)

    def verify(self) -> list[str]:
        problems = []
        if self.config != config(self.dtype, self.has_text, self.config.get("compression")):
            problems.append(f"configuration {self.config} is not gpupipe's")
        if int(self.offsets[-1]) != len(self.data):
            problems.append(f"the last offset {int(self.offsets[-1]):,} is not the file size "
                            f"{len(self.data):,}")
        for k in range(len(self)):
            start, length = self._header(k)
            if start + length * self.dtype.itemsize != int(self.offsets[k + 1]):
                problems.append(f"sample {k} does not end at the next offset")
                break
        return problems


def _open_shard(prefix: str):
    """Shard ``prefix`` as a binary file: ``P.mds``, or ``P.mds.zstd`` decompressed as it is
    read."""
    if not os.path.exists(prefix + ".mds") and os.path.exists(prefix + ".mds.zstd"):
        import zstandard

        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(
            open(prefix + ".mds.zstd", "rb"), closefd=True))
    return open(prefix + ".mds", "rb")


def read_shard(prefix: str) -> bytes:
    """The bytes of shard ``prefix``: ``P.mds``, or ``P.mds.zstd`` decompressed."""
    import zstandard

    try:
        with _open_shard(prefix) as f:
            return f.read()
    except zstandard.ZstdError as e:
        raise ValueError(f"{prefix}.mds.zstd: not a zstd frame ({e})") from None


class MdsFormat(ShardFormat):
    name = "mds"
    manifest_format = "mosaicml-mds-v2"
    suffixes = (".mds", ".mds.zstd")
    reader = MdsReader
    takes_text = True
    takes_compression = True

    @classmethod
    def write(cls, prefix, tokens, lengths, *, tokenizer_name, texts=None, compression=None):
        raw = encode_shard(tokens, lengths, texts, compression)
        if compression is None:
            return {".mds": write_bytes(raw, prefix + ".mds")}
        import zstandard

        # one thread and a fixed level: the same bytes on every run (streaming decompresses it
        # into its cache; index.json names both files)
        packed = zstandard.ZstdCompressor(level=zstd_level(compression), threads=0,
                                          write_content_size=True).compress(raw)
        return {".mds.zstd": {**write_bytes(packed, prefix + ".mds.zstd"),
                              "raw_bytes": len(raw)}}

    @classmethod
    def write_data_args(cls, shards_dir, shards, weights):
        """``<split>/index.json`` (streaming's index, version 2) for every split directory,
        listing its shards in order."""
        by_dir: dict[str, list[dict]] = defaultdict(list)
        for s in shards:
            folder, name = os.path.split(s["prefix"])
            if ".mds.zstd" in s["files"]:
                info = s["files"][".mds.zstd"]
                raw = {"basename": name + ".mds", "bytes": info["raw_bytes"], "hashes": {}}
                packed = {"basename": name + ".mds.zstd", "bytes": info["bytes"], "hashes": {}}
            else:
                raw = {"basename": name + ".mds", "bytes": s["files"][".mds"]["bytes"],
                       "hashes": {}}
                packed = None
            by_dir[folder].append({
                **_config_of(os.path.join(shards_dir, s["prefix"])),
                "samples": s["sequences"], "zip_data": packed, "raw_data": raw})
        for folder, entries in by_dir.items():
            write_json({"shards": entries, "version": 2},
                       os.path.join(shards_dir, folder, "index.json"))


def _config_of(prefix: str) -> dict:
    """The configuration a written shard declares (after its offsets), read from its head
    (decompressing only that much of a ``.mds.zstd``)."""
    with _open_shard(prefix) as f:
        n, start = (int(x) for x in np.frombuffer(f.read(8), "<u4"))
        f.read(4 * n)   # the other offsets
        return json.loads(f.read(start - 4 - 4 * (n + 1)))
