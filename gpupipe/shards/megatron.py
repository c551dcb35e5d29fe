"""Megatron ``MMIDIDX`` indexed datasets (``P.bin`` + ``P.idx``): writer, reader, verifier.

Byte layout (Megatron-Core's ``indexed_dataset.py``; golden vector in
tests/shards/test_megatron_format.py): ``.bin`` is the concatenated tokens; ``.idx`` is a 34-byte
header (magic, version 1, dtype code, S sequences, D = documents + 1) followed by int32 lengths,
int64 byte offsets and int64 document indices. One sequence per document here.
"""

from __future__ import annotations

import hashlib
import os
import struct

import numpy as np

from gpupipe.io.writer import write_bytes

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
HEADER = struct.Struct("<9sQBQQ")  # 34 bytes
DTYPE_CODES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64,
               7: np.float32, 8: np.uint16}
CODE_OF = {np.dtype(v): k for k, v in DTYPE_CODES.items()}


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits (vocab <= 65536), else int32 — there is no uint32 code."""
    return np.dtype(np.uint16) if vocab_size <= 65536 else np.dtype(np.int32)


def write_indexed(prefix: str, tokens: np.ndarray, lengths: np.ndarray) -> dict:
    """Write ``prefix.bin`` then ``prefix.idx`` (each atomically); return sizes and sha256s.

    ``tokens``: all documents' tokens concatenated, already in the shard dtype;
    ``lengths``: tokens per document (EOD included). Empty shards are refused: Megatron cannot
    memory-map an empty ``.bin``.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    s = len(lengths)
    if s == 0 or tokens.size == 0:
        raise ValueError(f"{prefix}: refusing to write an empty shard")
    if s >= 2**31:
        raise ValueError(f"{prefix}: {s} sequences exceed Megatron's int32 limit per prefix")
    if int(lengths.sum()) != tokens.size:
        raise ValueError(f"{prefix}: lengths sum to {int(lengths.sum())}, tokens {tokens.size}")
    code = CODE_OF[tokens.dtype]
    pointers = np.zeros(s, dtype=np.int64)
    np.cumsum(lengths[:-1] * tokens.dtype.itemsize, out=pointers[1:])
    doc_idx = np.arange(s + 1, dtype=np.int64)
    idx = b"".join([
        HEADER.pack(MAGIC, VERSION, code, s, s + 1),
        lengths.astype("<i4").tobytes(),
        pointers.astype("<i8").tobytes(),
        doc_idx.astype("<i8").tobytes(),
    ])
    data = np.ascontiguousarray(tokens.astype(tokens.dtype.newbyteorder("<"), copy=False))
    # .bin first, .idx last: an index never describes a .bin that is not complete
    return {".bin": write_bytes(memoryview(data).cast("B"), prefix + ".bin"),
            ".idx": write_bytes(idx, prefix + ".idx")}


class IndexedDataset:
    """Memory-mapped reader of one prefix (numpy only).

    >>> import os, tempfile
    >>> prefix = os.path.join(tempfile.mkdtemp(), "train-00000")
    >>> docs = [[5, 6, 7, 0], [8, 9, 0], [10, 11, 12, 13, 14, 0]]   # EOD (0) ends each document
    >>> files = write_indexed(prefix, np.array(sum(docs, []), np.uint16), np.array([4, 3, 6]))
    >>> ds = IndexedDataset(prefix)
    >>> len(ds), ds[1].tolist(), ds.sizes.tolist(), ds.verify()
    (3, [8, 9, 0], [4, 3, 6], [])
    """

    def __init__(self, prefix: str):
        self.prefix = prefix
        with open(prefix + ".idx", "rb") as f:
            head = f.read(HEADER.size)
        if len(head) < HEADER.size:
            raise ValueError(f"{prefix}.idx: truncated header ({len(head)} of 34 bytes)")
        magic, version, code, s, d = HEADER.unpack(head)
        if magic != MAGIC:
            raise ValueError(f"{prefix}.idx: bad magic {magic!r} (not a Megatron MMIDIDX index)")
        if version != VERSION:
            raise ValueError(f"{prefix}.idx: version {version}, expected 1")
        if code not in DTYPE_CODES:
            raise ValueError(f"{prefix}.idx: unknown dtype code {code}")
        self.dtype = np.dtype(DTYPE_CODES[code])
        expected = HEADER.size + 12 * s + 8 * d
        actual = os.path.getsize(prefix + ".idx")
        if actual != expected:
            raise ValueError(f"{prefix}.idx: {actual} bytes, the header implies {expected} "
                             f"(S={s}, D={d}): truncated or corrupt")
        idx = np.memmap(prefix + ".idx", mode="r", dtype=np.uint8)
        off = HEADER.size
        self.sizes = np.frombuffer(idx, dtype="<i4", count=s, offset=off)
        self.pointers = np.frombuffer(idx, dtype="<i8", count=s, offset=off + 4 * s)
        self.document_indices = np.frombuffer(idx, dtype="<i8", count=d, offset=off + 12 * s)
        self._bin = np.memmap(prefix + ".bin", mode="r", dtype=self.dtype) if s else None

    def __len__(self) -> int:
        return len(self.sizes)

    def __getitem__(self, i: int) -> np.ndarray:
        start = int(self.pointers[i]) // self.dtype.itemsize
        return np.asarray(self._bin[start: start + int(self.sizes[i])])

    @property
    def tokens(self) -> np.ndarray:
        """All tokens of the prefix (memory-mapped)."""
        return self._bin

    def verify(self) -> list[str]:
        """Invariants of a one-sequence-per-document prefix; returns the problems found."""
        p = self.prefix
        problems = []
        s = len(self.sizes)
        if s == 0:
            problems.append(f"{p}.idx: no sequences (an empty shard cannot be memory-mapped)")
            return problems
        if (self.sizes <= 0).any():
            problems.append(f"{p}.idx: {int((self.sizes <= 0).sum())} sequence(s) of length <= 0")
        expected = np.zeros(s, dtype=np.int64)
        np.cumsum(self.sizes[:-1].astype(np.int64) * self.dtype.itemsize, out=expected[1:])
        if not np.array_equal(self.pointers, expected):
            k = int(np.flatnonzero(self.pointers != expected)[0])
            problems.append(f"{p}.idx: pointer of sequence {k} is {int(self.pointers[k])}, "
                            f"expected {int(expected[k])} (not contiguous)")
        if not np.array_equal(self.document_indices, np.arange(s + 1)):
            problems.append(f"{p}.idx: document_indices are not 0..{s}")
        bin_bytes = os.path.getsize(p + ".bin")
        need = int(self.sizes.astype(np.int64).sum()) * self.dtype.itemsize
        if bin_bytes != need:
            problems.append(f"{p}.bin: {bin_bytes} bytes, the index describes {need}: "
                            f"{'truncated' if bin_bytes < need else 'trailing data'}")
        return problems


def sha256_file(path: str, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()
