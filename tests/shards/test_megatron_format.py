"""The Megatron MMIDIDX format, byte for byte against a golden vector
(the layout Megatron-Core's indexed_dataset.py reads)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from gpupipe.shards.megatron import IndexedDataset, token_dtype, write_indexed

GOLDEN = [[5, 6, 7, 0], [8, 9, 0], [10, 11, 12, 13, 14, 0], [15, 0], [16, 17, 18, 0]]
BIN_SHA = "537f4885554353eea7dbf9f1fcee39b0039b70c1c21d189ae8b6f01e9f450b0d"
IDX_SHA = "b2ed768afca811e35b4af08e3f7b80638212a701dbb3852f6b40dd66873848d3"
IDX_HEAD = bytes.fromhex(
    "4d4d4944494458000001000000000000"
    "00080500000000000000060000000000"
    "00000400000003000000060000000200")


def write_golden(tmp_path):
    tokens = np.concatenate([np.array(d, dtype=np.uint16) for d in GOLDEN])
    return write_indexed(str(tmp_path / "golden"), tokens, [len(d) for d in GOLDEN])


def test_golden_vector_byte_for_byte(tmp_path):
    info = write_golden(tmp_path)
    b = (tmp_path / "golden.bin").read_bytes()
    i = (tmp_path / "golden.idx").read_bytes()
    assert len(b) == 38 and len(i) == 142
    assert i[:48] == IDX_HEAD
    assert hashlib.sha256(b).hexdigest() == BIN_SHA
    assert hashlib.sha256(i).hexdigest() == IDX_SHA
    assert info[".bin"]["sha256"] == BIN_SHA and info[".idx"]["sha256"] == IDX_SHA


def test_reader_round_trip_and_invariants(tmp_path):
    write_golden(tmp_path)
    ds = IndexedDataset(str(tmp_path / "golden"))
    assert len(ds) == 5 and ds.dtype == np.uint16
    assert [ds[k].tolist() for k in range(5)] == GOLDEN
    assert ds.verify() == []


def test_int32_when_vocab_exceeds_uint16(tmp_path):
    assert token_dtype(65536) == np.uint16 and token_dtype(65537) == np.int32
    toks = np.array([70000, 0, 1, 0], dtype=np.int32)
    write_indexed(str(tmp_path / "big"), toks, [2, 2])
    ds = IndexedDataset(str(tmp_path / "big"))
    assert ds.dtype == np.int32 and ds[0].tolist() == [70000, 0]


def test_refuses_empty_and_inconsistent(tmp_path):
    with pytest.raises(ValueError, match="empty"):
        write_indexed(str(tmp_path / "e"), np.zeros(0, np.uint16), [])
    with pytest.raises(ValueError, match="lengths sum"):
        write_indexed(str(tmp_path / "x"), np.zeros(3, np.uint16), [2, 2])


def test_truncated_and_tampered_files_are_reported(tmp_path):
    write_golden(tmp_path)
    p = tmp_path / "golden"
    b = p.with_suffix(".bin").read_bytes()
    p.with_suffix(".bin").write_bytes(b[:-4])
    assert any("truncated" in m for m in IndexedDataset(str(p)).verify())
    p.with_suffix(".bin").write_bytes(b)
    i = bytearray(p.with_suffix(".idx").read_bytes())
    i[34] = 9  # first length 4 -> 9
    p.with_suffix(".idx").write_bytes(bytes(i))
    problems = IndexedDataset(str(p)).verify()
    assert any("not contiguous" in m for m in problems)
    p.with_suffix(".idx").write_bytes(bytes(i[:100]))
    with pytest.raises(ValueError, match="truncated or corrupt"):
        IndexedDataset(str(p))
    p.with_suffix(".idx").write_bytes(b"NOTMAGIC!" + bytes(i[9:]))
    with pytest.raises(ValueError, match="bad magic"):
        IndexedDataset(str(p))
