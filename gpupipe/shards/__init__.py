"""Training shards: Megatron ``.bin/.idx`` writer and readers, routing, manifest, inspection."""

from gpupipe.shards.megatron import IndexedDataset, token_dtype, write_indexed

__all__ = ["IndexedDataset", "token_dtype", "write_indexed"]
