"""Reading shards for training without Megatron: numpy readers, windows, a resumable sampler.

* `ShardSet`: the documents of one split, across its shards (memory-mapped, numpy only).
* `TokenWindows`: Megatron-GPT-style samples: documents in a seeded shuffled order,
  concatenated, cut into windows of ``seq_length + 1`` tokens (consecutive windows share one
  token); ``input_ids``, ``labels``, ``position_ids`` (reset after EOD) and ``loss_mask``.
* `ResumableSampler`: data-parallel batches whose whole state is ``consumed_samples``;
  resuming with another number of ranks but the same global batch keeps the global order.

``gpupipe.shards.torch`` wraps these for a PyTorch ``DataLoader``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np

from gpupipe.shards import formats


class ShardSet:
    """All documents of ``split`` in a shard directory (order: shard by shard, as written)."""

    def __init__(self, shards_dir: str, split: str = "train"):
        from gpupipe.shards.inspect import resolve_dir
        from gpupipe.shards.writer import read_manifest

        shards_dir = resolve_dir(shards_dir)
        self.manifest = read_manifest(shards_dir)
        fmt = formats.of_manifest(self.manifest["format"],
                                   os.path.join(shards_dir, "manifest.json"))
        if fmt.reader is None:
            raise ValueError(f"ShardSet reads {', '.join(formats.readable())} shards; gpupipe "
                             f"has no reader of {fmt.name} shards ({fmt.manifest_format})")
        prefixes = [s["prefix"] for s in self.manifest["shards"] if s["split"] == split]
        if not prefixes:
            raise ValueError(f"{shards_dir}: no shards for split {split!r}")
        self.split = split
        self.eod_id = self.manifest["tokenizer"]["eod_id"]
        self.datasets = [fmt.open(os.path.join(shards_dir, p)) for p in prefixes]
        self.sizes = np.concatenate([d.sizes.astype(np.int64) for d in self.datasets])
        self._first = np.cumsum([0] + [len(d) for d in self.datasets])

    def __len__(self) -> int:
        return int(self._first[-1])

    def __getitem__(self, i: int) -> np.ndarray:
        if not 0 <= i < len(self):
            raise IndexError(i)
        k = int(np.searchsorted(self._first, i, side="right")) - 1
        return self.datasets[k][i - int(self._first[k])]


class TokenWindows:
    """Samples of ``seq_length + 1`` tokens over the documents of a `ShardSet`.

    >>> import tempfile, gpupipe as gp
    >>> run = gp.Pipeline.from_yaml("pipelines/quickstart.yaml").run(
    ...     output=tempfile.mkdtemp(), workers=1, progress=False)
    >>> docs = ShardSet(run.shards_path, split="train")
    >>> ds = TokenWindows(docs, seq_length=512, seed=0)
    >>> sample = ds[0]; sample["input_ids"].shape, sample["labels"].shape
    ((512,), (512,))
    >>> len(ds) == (int(docs.sizes.sum()) - 1) // 512
    True
    """

    def __init__(self, docs: ShardSet, *, seq_length: int, seed: int = 0,
                 eod_mask_loss: bool = False):
        if seq_length < 1:
            raise ValueError("seq_length must be >= 1")
        self.docs = docs
        self.seq_length = seq_length
        self.eod_id = docs.eod_id
        self.eod_mask_loss = eod_mask_loss
        self.order = np.random.default_rng(seed).permutation(len(docs))
        sizes = docs.sizes[self.order]
        self.ends = np.cumsum(sizes)  # end (exclusive) of each ordered document in the stream
        total = int(self.ends[-1]) if len(sizes) else 0
        self.num_samples = max(0, (total - 1) // seq_length)

    def __len__(self) -> int:
        return self.num_samples

    def window(self, i: int) -> np.ndarray:
        if not 0 <= i < self.num_samples:
            raise IndexError(i)
        start, stop = i * self.seq_length, (i + 1) * self.seq_length + 1
        first = int(np.searchsorted(self.ends, start, side="right"))
        last = int(np.searchsorted(self.ends, stop - 1, side="right"))
        pieces = []
        for k in range(first, last + 1):
            doc = self.docs[int(self.order[k])]
            doc_start = int(self.ends[k]) - len(doc)
            lo, hi = max(start, doc_start) - doc_start, min(stop, int(self.ends[k])) - doc_start
            pieces.append(doc[lo:hi])
        return np.concatenate(pieces).astype(np.int64)

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        w = self.window(i)
        input_ids, labels = w[:-1], w[1:]
        return {"input_ids": input_ids, "labels": labels,
                "position_ids": reset_positions(input_ids, self.eod_id),
                "loss_mask": (input_ids != self.eod_id).astype(np.float32) if self.eod_mask_loss
                else np.ones(len(input_ids), dtype=np.float32)}


def reset_positions(input_ids: np.ndarray, eod_id: int) -> np.ndarray:
    """Position ids that restart at 0 after every EOD token (documents don't see each other)."""
    n = len(input_ids)
    idx = np.arange(n, dtype=np.int64)
    starts = np.zeros(n, dtype=np.int64)
    after_eod = np.flatnonzero(input_ids[:-1] == eod_id) + 1
    starts[after_eod] = after_eod
    return idx - np.maximum.accumulate(starts)


class ResumableSampler:
    """Batches of sample indices for one data-parallel rank; the state is one integer.

    Step ``t`` takes global samples ``[t * G, (t + 1) * G)`` of a seeded permutation of all
    samples (a new permutation each epoch); rank ``r`` of ``W`` gets the ``r``-th contiguous
    slice of ``G / W``. So ranks never overlap, and the global order depends only on ``seed``
    and ``G`` — not on ``W``, which may change between a save and a resume.

    >>> s = ResumableSampler(10, global_batch_size=4, rank=1, world_size=2, seed=0)
    >>> batch = next(iter(s)); len(batch), s.consumed_samples
    (2, 4)
    """

    def __init__(self, num_samples: int, *, global_batch_size: int, rank: int = 0,
                 world_size: int = 1, seed: int = 0, shuffle: bool = True,
                 consumed_samples: int = 0):
        if global_batch_size % world_size:
            raise ValueError(f"global_batch_size {global_batch_size} is not divisible by "
                             f"world_size {world_size}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside 0..{world_size - 1}")
        if num_samples < global_batch_size:
            raise ValueError(f"{num_samples} samples do not fill one global batch "
                             f"({global_batch_size})")
        self.num_samples = num_samples
        self.global_batch_size = global_batch_size
        self.rank, self.world_size = rank, world_size
        self.seed, self.shuffle = seed, shuffle
        self.consumed_samples = consumed_samples
        # each epoch uses whole global batches only
        self.per_epoch = num_samples - num_samples % global_batch_size
        self._perm_epoch, self._perm = -1, None

    def _permutation(self, epoch: int) -> np.ndarray:
        if epoch != self._perm_epoch:
            self._perm = (np.random.default_rng([self.seed, epoch]).permutation(self.num_samples)
                          if self.shuffle else np.arange(self.num_samples))
            self._perm_epoch = epoch
        return self._perm

    def global_batch(self, step_start: int) -> np.ndarray:
        epoch, pos = divmod(step_start, self.per_epoch)
        return self._permutation(epoch)[pos: pos + self.global_batch_size]

    def __iter__(self) -> Iterator[list[int]]:
        micro = self.global_batch_size // self.world_size
        while True:
            batch = self.global_batch(self.consumed_samples)
            self.consumed_samples += self.global_batch_size
            yield batch[self.rank * micro:(self.rank + 1) * micro].tolist()

    def state_dict(self) -> dict:
        return {"consumed_samples": self.consumed_samples}

    def load_state_dict(self, state: dict) -> None:
        self.consumed_samples = int(state["consumed_samples"])
