"""The only module that touches KV-cache internals.

transformers changes its cache API between versions (5.x: ``DynamicCache.crop`` takes a *negative*
count of tokens to drop; 4.x took the length to keep; 5.24 renamed the forward's ``past_key_values``
to ``cache``). Everything version-sensitive about caches lives here so the decode loop only speaks
of lengths.
"""
from __future__ import annotations

import functools
import inspect
from numbers import Integral

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


def rollback(cache, kept) -> None:
    """Roll ``cache`` back to the positions the text keeps: THE rollback, which every decode loop calls (chain, tree,
    tree sampling, batch, the drafts, the benchmarks).

    ``kept`` is one of:

    - an int ``n``: keep the first ``n`` positions (after a rejection: the text plus the accepted draft). A static
      cache moves its position back (nothing is copied; the causal mask hides the rows beyond); a dynamic one
      drops the rest.
    - a 1-D index (a list or a LongTensor) of the positions to keep, in that order: a token tree's prefix plus the
      kept branch, whose nodes are scattered through the tree. ``0 .. n - 1`` is the int case.
    - a 2-D LongTensor ``[B, C']``: row ``b`` keeps positions ``kept[b]`` (batched decoding packs each row's live
      positions together once rejected ones pile up).

    ``cache=None`` (a loop that keeps no cache): nothing to roll back.
    """
    if cache is None:
        return
    if isinstance(kept, bool) or not isinstance(kept, (Integral, list, tuple, torch.Tensor)):
        raise TypeError(f"rollback keeps an int (the first n positions), a list or 1-D LongTensor of positions, or a "
                        f"[B, C'] LongTensor of positions per row; got {type(kept).__name__}")
    if isinstance(kept, torch.Tensor) and kept.dim() == 0:
        kept = int(kept)
    if isinstance(kept, Integral):
        _keep_first(cache, int(kept))
        return
    index = torch.as_tensor(kept, dtype=torch.long)
    if index.dim() == 1:
        _keep_positions(cache, index)
    elif index.dim() == 2:
        _keep_positions_per_row(cache, index)
    else:
        raise ValueError(f"rollback got positions shaped {list(index.shape)}: pass [C'] positions for every row, or "
                         "[B, C'] (one list of positions per batch row)")


def crop_cache(cache: DynamicCache | StaticCache, length: int) -> None:
    """Keep the first ``length`` positions, dropping the rest: `rollback` ``(cache, length)``, under the name the
    graded cells (PA3's) use."""
    rollback(cache, length)


def _keep_first(cache: DynamicCache | StaticCache, length: int) -> None:
    held = cache_length(cache)
    if not 0 <= length <= held:
        raise ValueError(f"cannot crop a cache of {held} positions to {length}: a rollback keeps between 0 and the "
                         f"{held} positions it holds (count the kept text, prompt included)")
    if length == held:
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
        cache.crop(length - held)  # transformers 5.x: negative = number of tokens to remove (`graphs.StaticKV` too)


def _keep_positions(cache: DynamicCache, idx: torch.Tensor) -> None:
    """Keep only the cached positions ``idx`` (in that order) in every layer: after one pass over a token tree the
    cache holds the prefix followed by *every* tree node, and only the prefix plus the kept branch may stay."""
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
    length = cache_length(cache)
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= length):
        raise ValueError(f"positions {idx.tolist()} outside a cache of {length} positions: keep positions "
                         f"0 .. {length - 1}")
    for layer in layers:
        if type(layer) is not DynamicLayer:
            raise NotImplementedError(
                f"cannot keep scattered positions of a {type(layer).__name__} cache layer (sliding window, "
                "recurrent or quantized state); token trees need plain full-attention KV caches"
            )
    if torch.equal(idx.cpu(), torch.arange(idx.numel())):  # the kept text is a prefix: a crop is enough
        _keep_first(cache, idx.numel())
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


def _keep_positions_per_row(cache: DynamicCache, index: torch.Tensor) -> None:
    """Row ``b`` of every layer keeps the cached positions ``index[b]`` (``[B, C']``, in that order): batched
    decoding packs each row's live positions together once rejected ones (holes) pile up."""
    check_plain_layers(cache, "packing a batched cache")
    for layer in cache.layers:
        if layer.is_initialized and layer.keys.numel() and index.shape[0] != layer.keys.shape[0]:
            raise ValueError(f"rollback got positions for {index.shape[0]} rows, but the cache holds "
                             f"{layer.keys.shape[0]}: pass one row of positions per batch row ([B, C'])")
    for layer in cache.layers:
        if not layer.is_initialized or layer.keys.numel() == 0:
            continue
        rows = index.to(layer.keys.device)[:, None, :, None]
        layer.keys = layer.keys.gather(2, rows.expand(-1, layer.keys.shape[1], -1, layer.keys.shape[-1]))
        layer.values = layer.values.gather(2, rows.expand(-1, layer.values.shape[1], -1, layer.values.shape[-1]))
