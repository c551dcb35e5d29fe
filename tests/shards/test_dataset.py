"""Readers for training: windows, position ids, the resumable data-parallel sampler."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupipe.io.tokenizer import describe_tokenizer
from gpupipe.shards.dataset import ResumableSampler, ShardSet, TokenWindows, reset_positions
from gpupipe.shards.megatron import write_indexed
from gpupipe.shards.writer import write_manifest


@pytest.fixture
def shard_dir(tmp_path):
    rng = np.random.default_rng(0)
    docs = [np.r_[rng.integers(1, 100, rng.integers(1, 40)), 0].astype(np.uint16)
            for _ in range(60)]
    shards = []
    for j, chunk in enumerate((docs[:25], docs[25:])):
        prefix = f"train/train-{j:05d}"
        files = write_indexed(str(tmp_path / prefix), np.concatenate(chunk),
                              [len(d) for d in chunk])
        shards.append({"split": "train", "shard": j, "prefix": prefix, "documents": len(chunk),
                       "sequences": len(chunk), "tokens": int(sum(map(len, chunk))),
                       "files": files})
    spec = {"format": "megatron", "seed": 1, "splits": {"train": 1.0}, "packing": "none",
            "seq_length": None}
    write_manifest(str(tmp_path), shards=shards, spec=spec,
                   tokenizer=describe_tokenizer("data/tokenizer.json"), dtype="uint16",
                   version="test", fingerprint="x", append_eod=True)
    return tmp_path, docs


def test_shardset_reads_every_document(shard_dir):
    d, docs = shard_dir
    s = ShardSet(str(d))
    assert len(s) == 60 and [s[i].tolist() for i in range(60)] == [x.tolist() for x in docs]


def test_windows_cover_the_shuffled_stream(shard_dir):
    d, docs = shard_dir
    w = TokenWindows(ShardSet(str(d)), seq_length=16, seed=3)
    stream = np.concatenate([docs[i] for i in w.order]).astype(np.int64)
    assert len(w) == (len(stream) - 1) // 16
    for i in range(len(w)):
        sample = w[i]
        np.testing.assert_array_equal(sample["input_ids"], stream[i * 16: i * 16 + 16])
        np.testing.assert_array_equal(sample["labels"], stream[i * 16 + 1: i * 16 + 17])
    other = TokenWindows(ShardSet(str(d)), seq_length=16, seed=4)
    assert not np.array_equal(other.order, w.order)


def test_position_ids_reset_after_eod_and_loss_mask(shard_dir):
    ids = np.array([5, 6, 0, 7, 8, 9, 0, 1])
    assert reset_positions(ids, 0).tolist() == [0, 1, 2, 0, 1, 2, 3, 0]
    d, _ = shard_dir
    w = TokenWindows(ShardSet(str(d)), seq_length=32, seed=0, eod_mask_loss=True)
    s = w[1]
    assert (s["loss_mask"][s["input_ids"] == 0] == 0).all()
    assert (s["loss_mask"][s["input_ids"] != 0] == 1).all()


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 8).map(lambda k: 2 ** (k % 4)), st.integers(0, 40), st.integers(0, 5))
def test_sampler_ranks_partition_each_global_batch(world, steps_before, seed):
    gbs = 8
    n = 37
    samplers = [ResumableSampler(n, global_batch_size=gbs, rank=r, world_size=world, seed=seed,
                                 consumed_samples=steps_before * gbs) for r in range(world)]
    iters = [iter(s) for s in samplers]
    for _ in range(5):
        parts = [next(it) for it in iters]
        flat = [i for p in parts for i in p]
        assert len(flat) == gbs == len(set(flat))  # no overlap between ranks, nothing missing
        assert all(0 <= i < n for i in flat)


def test_resume_and_rank_count_change_keep_global_order():
    def global_order(world, steps, start=0):
        samplers = [ResumableSampler(100, global_batch_size=12, rank=r, world_size=world,
                                     seed=9, consumed_samples=start) for r in range(world)]
        iters = [iter(s) for s in samplers]
        out = []
        for _ in range(steps):
            out.extend(i for it in iters for i in next(it))
        return out, samplers[0].state_dict()

    full, _ = global_order(2, 20)
    first, state = global_order(2, 7)
    assert state == {"consumed_samples": 7 * 12}
    rest, _ = global_order(4, 13, start=state["consumed_samples"])  # resumed on 4 ranks
    assert first + rest == full
    three, _ = global_order(3, 20)
    assert three == full
    # epochs: every sample once per epoch (96 of 100 samples used per epoch: whole batches)
    assert len(set(full[:96])) == 96


def test_sampler_rejects_bad_arguments():
    with pytest.raises(ValueError, match="not divisible"):
        ResumableSampler(100, global_batch_size=10, world_size=3)
    with pytest.raises(ValueError, match="do not fill"):
        ResumableSampler(5, global_batch_size=8)


def test_torch_dataset(shard_dir):
    torch = pytest.importorskip("torch")
    from gpupipe.shards.torch import TorchTokenDataset

    d, _ = shard_dir
    ds = TorchTokenDataset(ShardSet(str(d)), seq_length=16)
    loader = torch.utils.data.DataLoader(ds, batch_sampler=ResumableSampler(
        len(ds), global_batch_size=4, rank=0, world_size=2))
    batch = next(iter(loader))
    assert batch["input_ids"].shape == (2, 16) and batch["input_ids"].dtype == torch.int64
