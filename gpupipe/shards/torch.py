"""PyTorch adapters (optional: ``pip install torch``).

>>> from gpupipe.shards.dataset import ShardSet, ResumableSampler              # doctest: +SKIP
>>> from gpupipe.shards.torch import TorchTokenDataset                         # doctest: +SKIP
>>> ds = TorchTokenDataset(ShardSet("out/quickstart/shards"), seq_length=1024)  # doctest: +SKIP
>>> sampler = ResumableSampler(len(ds), global_batch_size=64, rank=rank, world_size=world)
>>> loader = torch.utils.data.DataLoader(ds, batch_sampler=sampler)           # doctest: +SKIP
>>> # checkpoint: sampler.state_dict() -> {"consumed_samples": N}; resume with consumed_samples=N
"""

from __future__ import annotations

from gpupipe.shards.dataset import TokenWindows

try:
    import torch
except ImportError as e:  # pragma: no cover - exercised only without torch
    raise ImportError("gpupipe.shards.torch needs PyTorch: pip install torch "
                      "(the numpy readers in gpupipe.shards.dataset work without it)") from e


class TorchTokenDataset(torch.utils.data.Dataset):
    """A map-style dataset of `TokenWindows` samples as tensors (int64 ids, float loss mask)."""

    def __init__(self, docs, *, seq_length: int, seed: int = 0, eod_mask_loss: bool = False):
        self.windows = TokenWindows(docs, seq_length=seq_length, seed=seed,
                                    eod_mask_loss=eod_mask_loss)

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {k: torch.from_numpy(v) for k, v in self.windows[i].items()}
