"""The only module that touches KV-cache internals.

transformers changes its cache API between major versions (5.x: ``DynamicCache.crop`` takes a
*negative* count of tokens to drop; 4.x took the length to keep). Everything version-sensitive
about caches lives here so the decode loop only speaks of lengths.
"""
from __future__ import annotations

from transformers import DynamicCache


def new_cache(model) -> DynamicCache:
    """An empty cache for ``model`` (its config lets transformers pick per-layer types)."""
    return DynamicCache(config=model.config)


def cache_length(cache: DynamicCache | None) -> int:
    """Number of positions the cache holds (0 for ``None``)."""
    return 0 if cache is None else int(cache.get_seq_length())


def crop_cache(cache: DynamicCache, length: int) -> None:
    """Keep the first ``length`` positions, dropping the rest (rollback after rejection)."""
    drop = cache_length(cache) - length
    if drop < 0:
        raise ValueError(f"cannot crop a cache of {cache_length(cache)} positions to {length}")
    if drop:
        cache.crop(-drop)  # transformers 5.x: negative = number of tokens to remove
