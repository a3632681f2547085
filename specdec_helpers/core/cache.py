"""The only module that touches KV-cache internals.

transformers changes its cache API between versions (5.x: ``DynamicCache.crop`` takes a *negative*
count of tokens to drop; 4.x took the length to keep; 5.24 renamed the forward's ``past_key_values``
to ``cache``). Everything version-sensitive about caches lives here so the decode loop only speaks
of lengths.
"""
from __future__ import annotations

import functools
import inspect

import torch
from transformers import DynamicCache, StaticCache


@functools.lru_cache(maxsize=None)
def _cache_argument(forward) -> str:
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


def cache_kwargs(model, cache) -> dict:
    """``{name: cache}`` under the name ``model``'s forward takes: ``cache`` from transformers 5.24 on
    (where ``past_key_values`` warns, and goes in 5.40), ``past_key_values`` before and in models not yet
    renamed. Passing the wrong one would not fail: it would vanish into ``**kwargs`` and drop the cache."""
    forward = getattr(type(model), "forward", None) or type(model).__call__
    return {_cache_argument(forward): cache}


def last_hidden(out) -> torch.Tensor:
    """The last hidden states ``[B, T, H]`` of an ``output_hidden_states=True`` pass: after the final norm,
    the input of the head (transformers 4.x and 5.x alike; read here only, for drafts that use them)."""
    return out.hidden_states[-1]


def new_cache(model) -> DynamicCache:
    """An empty cache for ``model`` (its config lets transformers pick per-layer types)."""
    return DynamicCache(config=model.config)


def new_static_cache(model, max_length: int) -> StaticCache:
    """An empty cache of ``max_length`` preallocated positions: fixed shapes, for a compiled forward."""
    return StaticCache(config=model.config, max_cache_len=max_length)


def cache_length(cache: DynamicCache | StaticCache | None) -> int:
    """Number of positions the cache holds (0 for ``None``)."""
    return 0 if cache is None else int(cache.get_seq_length())


def crop_cache(cache: DynamicCache | StaticCache, length: int) -> None:
    """Keep the first ``length`` positions, dropping the rest (rollback after rejection)."""
    drop = cache_length(cache) - length
    if drop < 0:
        raise ValueError(f"cannot crop a cache of {cache_length(cache)} positions to {length}")
    if not drop:
        return
    if isinstance(cache, StaticCache):
        from transformers.cache_utils import StaticLayer

        if any(type(layer) is not StaticLayer for layer in cache.layers):
            raise NotImplementedError("only plain full-attention static caches can be rolled back (no sliding window)")
        # transformers 5.x: each static layer writes at its ``cumulative_length`` counter, and the causal
        # mask hides whatever lies beyond the query, so moving the counter back is the whole rollback.
        for layer in cache.layers:
            layer.cumulative_length.fill_(length)
    else:
        cache.crop(-drop)  # transformers 5.x: negative = number of tokens to remove


def keep_cache_positions(cache: DynamicCache, indices) -> None:
    """Keep only the cached positions ``indices`` (in that order) in every layer, dropping the rest.

    Tree speculation needs this instead of `crop_cache`: after one pass over a token tree the cache
    holds the prefix followed by *every* tree node, and only the prefix plus the kept branch (whose
    nodes are scattered through the tree) may stay. ``indices`` must start with ``0 .. prefix - 1``.
    """
    # transformers 5.x: a DynamicCache is a list of per-layer objects (``cache.layers``), each with
    # ``keys``/``values`` tensors shaped [batch, kv_heads, seq, head_dim]; the sequence axis is -2.
    # 4.x kept ``key_cache``/``value_cache`` lists instead. Sliding-window, linear-attention
    # (recurrent state), indexed and quantized layers keep more than plain rows of K/V, so a row
    # gather would silently corrupt them: refuse those.
    from transformers.cache_utils import DynamicLayer

    layers = getattr(cache, "layers", None)
    if layers is None:
        raise NotImplementedError(
            f"{type(cache).__name__} has no per-layer list (transformers < 5?); token trees need transformers 5.x"
        )
    idx = torch.as_tensor(indices, dtype=torch.long).view(-1)
    length = cache_length(cache)
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= length):
        raise ValueError(f"positions {idx.tolist()} outside a cache of {length} positions")
    for layer in layers:
        if type(layer) is not DynamicLayer:
            raise NotImplementedError(
                f"cannot keep scattered positions of a {type(layer).__name__} cache layer (sliding window, "
                "recurrent or quantized state); token trees need plain full-attention KV caches"
            )
    if torch.equal(idx, torch.arange(idx.numel())):  # the kept text is a prefix: a crop is enough
        crop_cache(cache, idx.numel())
        return
    for layer in layers:
        if not layer.is_initialized or layer.keys.numel() == 0:
            continue
        rows = idx.to(layer.keys.device)
        layer.keys = layer.keys.index_select(-2, rows)
        layer.values = layer.values.index_select(-2, rows)


def keep_cache_rows(cache: DynamicCache, rows: torch.Tensor) -> None:
    """Keep only the batch rows ``rows`` (in that order) of every layer: batched decoding drops the rows
    that finished (EOS or their budget) so that later passes stop paying for them."""
    cache.batch_select_indices(torch.as_tensor(rows, dtype=torch.long))


def check_plain_layers(cache: DynamicCache, what: str) -> None:
    """Refuse caches whose layers hold more than plain rows of K/V (sliding window, recurrent state,
    quantized): cropping and masking positions per row would silently corrupt them."""
    from transformers.cache_utils import DynamicLayer

    for layer in getattr(cache, "layers", []):
        if type(layer) is not DynamicLayer:
            raise NotImplementedError(
                f"{what} needs plain full-attention KV caches, and this model's cache has a "
                f"{type(layer).__name__} layer (sliding window, recurrent or quantized state); decode its "
                "prompts one at a time"
            )


def gather_cache_rows(cache: DynamicCache, index: torch.Tensor) -> None:
    """Row ``b`` of every layer keeps the cached positions ``index[b]`` (``[B, C']``, in that order): batched
    decoding packs each row's live positions together once rejected ones (holes) pile up."""
    check_plain_layers(cache, "packing a batched cache")
    for layer in cache.layers:
        if not layer.is_initialized or layer.keys.numel() == 0:
            continue
        rows = index.to(layer.keys.device)[:, None, :, None]
        layer.keys = layer.keys.gather(2, rows.expand(-1, layer.keys.shape[1], -1, layer.keys.shape[-1]))
        layer.values = layer.values.gather(2, rows.expand(-1, layer.values.shape[1], -1, layer.values.shape[-1]))
