"""The CPU MinHash kernels reproduce cuDF's published outputs bit for bit."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupipe.kernels.hashing import minhash, minhash_ngrams, murmur3_32, murmur3_64

# cuDF's published minhash outputs, verbatim
VECTORS = Path(__file__).resolve().parents[2] / "golden" / "minhash_vectors.json"
CASES = json.loads(VECTORS.read_text())["cases"]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['kind']}-{c['bits']}")
def test_cudf_published_vectors(case):
    if case["kind"] == "chars":
        got = minhash(case["strings"], seed=case["seed"], a=case["a"], b=case["b"],
                      width=case["width"], bits=case["bits"])
    else:
        got = minhash_ngrams(case["lists"], ngrams=case["ngrams"], seed=case["seed"],
                             a=case["a"], b=case["b"], bits=case["bits"])
    assert got.tolist() == case["expected"]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80), st.integers(0, 2**32 - 1))
def test_murmur3_equals_reference(data, seed):
    mmh3 = pytest.importorskip("mmh3")
    arr = np.frombuffer(data, np.uint8) if data else np.zeros(0, np.uint8)
    assert murmur3_32(arr, 0, len(data), np.uint32(seed)) == mmh3.hash(data, seed, signed=False)
    assert murmur3_64(arr, 0, len(data), np.uint64(seed)) == mmh3.hash64(data, seed,
                                                                         signed=False)[0]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=100), max_size=6), st.integers(0, 2**64 - 1))
def test_xxh64_equals_the_xxhash_package(items, seed):
    import pyarrow as pa
    import xxhash

    from gpupipe.kernels.hashing import xxh64_strings
    from gpupipe.kernels.utf8 import utf8_buffers

    arr = pa.array(items, pa.large_binary()).cast(pa.large_string(), safe=False)
    offsets, data = utf8_buffers(arr)
    assert xxh64_strings(offsets, data, seed).tolist() == [
        xxhash.xxh64_intdigest(b, seed) for b in items]


def test_edge_cases():
    sig = minhash(["", "ab", "abcdef"], seed=1, a=[3, 5], b=[7, 11], width=4)
    assert sig[0].tolist() == [0, 0]                 # empty string: zeros
    assert (sig[1] != 0).all()                       # shorter than width: one window
    with pytest.raises(ValueError, match="width"):
        minhash(["x"], seed=0, a=[1], b=[1], width=1)
    assert minhash_ngrams([[]], ngrams=2, seed=0, a=[1], b=[1]).tolist() == [[0]]
