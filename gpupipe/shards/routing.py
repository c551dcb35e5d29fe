"""Deterministic global shuffle: a document's split, shard and position depend only on
``(seed, id)``, never on partitioning or worker count: ``key = xxh64(utf8(id), seed)``, the
split from ``(key >> 11) / 2**53`` against the cumulative fractions, shard = ``key mod shards``,
order inside a shard = ascending key (docs/formats.md, the manifest's ``shuffle``)."""

from __future__ import annotations

import numpy as np
import xxhash

SPLIT_ORDER = ("train", "valid", "test")


def doc_keys(ids, seed: int) -> np.ndarray:
    """``hash64(seed, id)``: xxHash64 of the id's UTF-8 bytes with ``seed`` (as cuDF's xxhash64)."""
    h = xxhash.xxh64_intdigest
    seed = seed % 2**64
    return np.fromiter((h(i.encode("utf-8"), seed) for i in ids), dtype=np.uint64,
                       count=len(ids))


def assign_splits(keys: np.ndarray, fractions: dict[str, float]) -> np.ndarray:
    """Split index (into `SPLIT_ORDER`) from the top 53 bits of the key, by cumulative fraction."""
    u = (keys >> np.uint64(11)).astype(np.float64) * (1.0 / 2**53)
    bounds = np.cumsum([fractions.get(s, 0.0) for s in SPLIT_ORDER])
    bounds[-1] = 1.0 + 1e-12  # fractions sum to 1 within rounding: nothing falls off the end
    return np.searchsorted(bounds, u, side="right").astype(np.uint8)


def shards_per_split(spec, tokens_per_split: dict[str, int]) -> dict[str, int]:
    """How many shards each split gets (0 for a split without documents)."""
    out = {}
    for s in SPLIT_ORDER:
        tokens = tokens_per_split.get(s, 0)
        if tokens == 0:
            out[s] = 0
        elif spec.num_shards is not None:
            out[s] = max(1, round(spec.num_shards * spec.splits.get(s, 0.0)))
        else:
            target = spec.target_shard_tokens or 2**30
            out[s] = max(1, -(-tokens // target))
    return out


def ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(start, start + length)`` for every pair, vectorised."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    shift = np.asarray(starts, dtype=np.int64) - np.concatenate(([0], np.cumsum(lengths)[:-1]))
    return np.repeat(shift, lengths) + np.arange(total, dtype=np.int64)
