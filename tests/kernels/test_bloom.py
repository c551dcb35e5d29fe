"""The blocked Bloom filter of span_dedup's ``counting: bloom``: no false negatives, and the
false-positive rate its sizing promises, measured on keys never inserted."""

from __future__ import annotations

import numpy as np
import pytest

from gpupipe.kernels.bloom import BLOCK_BITS, bloom_scan, bloom_size, fill_fp_rate, fp_rate


def filled(n: int, rate: float, seed: int = 0):
    keys = np.random.default_rng(seed).integers(0, 2**64, n, dtype=np.uint64)
    nblocks, k = bloom_size(n, rate)
    bits = np.zeros(nblocks * BLOCK_BITS // 64, np.uint64)
    seen = np.zeros(n, np.uint8)
    bloom_scan(keys, np.ones(n, np.int64), bits, nblocks, k, True, seen)
    return keys, bits, nblocks, k, seen


def probe(keys, bits, nblocks, k) -> np.ndarray:
    """Test keys without inserting them (one document: all tested before any insert)."""
    seen = np.zeros(len(keys), np.uint8)
    bloom_scan(keys, np.array([len(keys)], np.int64), bits.copy(), nblocks, k, False, seen)
    return seen


@pytest.mark.parametrize("rate, positives", [(1e-2, 2017), (1e-3, 179)])
def test_the_measured_rate_is_the_promised_one(rate, positives):
    n = 200_000
    keys, bits, nblocks, k, _ = filled(n, rate)
    assert probe(keys, bits, nblocks, k).all()                  # no false negative
    fresh = np.arange(n, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    got = int(probe(fresh, bits, nblocks, k).sum())
    assert got == positives                                     # seeded: exact
    assert 0.8 * rate < got / n < 1.2 * rate                    # what the sizing promised
    assert fp_rate(n, nblocks, k) <= rate
    assert abs(fill_fp_rate(bits, k) - got / n) < 0.15 * rate


def test_a_document_never_sees_itself_unless_within_document():
    keys = np.array([5, 7, 5, 9, 7, 11], np.uint64)             # docs: [5, 7, 5] [9, 7, 11]
    nwin = np.array([3, 3], np.int64)
    nblocks, k = bloom_size(len(keys), 1e-9)
    for within, want in [(False, [0, 0, 0, 0, 1, 0]), (True, [0, 0, 1, 0, 1, 0])]:
        bits = np.zeros(nblocks * 8, np.uint64)
        seen = np.zeros(6, np.uint8)
        bloom_scan(keys, nwin, bits, nblocks, k, within, seen)
        assert seen.tolist() == want


def test_sizing():
    assert bloom_size(10**9, 1e-4) == (43038216, 11)           # 22.0 bits per key
    nblocks, k = bloom_size(10**6, 1e-4)
    assert fp_rate(10**6, nblocks, k) <= 1e-4 < fp_rate(10**6, int(nblocks * 0.97), k)
    with pytest.raises(ValueError, match="rate"):
        bloom_size(10, 0.0)
