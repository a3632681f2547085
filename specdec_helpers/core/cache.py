"""KV caches: which argument a forward takes them by, and THE rollback of each kind (transformers' dynamic and static
caches, and the kit's one static cache, `lean.StaticKV`, which the lean forward, graphs and compiled run over).

transformers changes its cache API between versions (5.x: ``DynamicCache.crop`` takes a *negative* count of tokens
to drop; 4.x took the length to keep; 5.24 renamed the forward's ``past_key_values`` to ``cache``). What is
version-sensitive about caches lives here, so the loops speak only of lengths. (Two other modules write into cache
tensors they own: the batch loop's columns, `batch_rows`, and the lean forward's rows of a `StaticKV`, `lean`.)
"""

from __future__ import annotations

import functools
import inspect
from numbers import Integral

import torch
from transformers import DynamicCache, StaticCache
from transformers.cache_utils import DynamicLayer, StaticLayer


# graphs' and compiled's cache capacities are multiples of this, so texts of different lengths share one cache (and
# its steps or compiled graph); lean's is exactly the prompt plus max_new_tokens.
BLOCK = 256


class PositionCache:
    """A cache whose rollback moves a position (gpt-fast's ``input_pos``): the kit's one static cache, `lean.StaticKV`,
    is one. It holds a transformers cache (``cache``), which a model's own forward is given; the kit's forwards take
    the `PositionCache` itself. (A base class here, so that this module needs nothing of `lean`.)"""

    cache: StaticCache

    def keep(self, n_kept: int) -> None:
        """Keep the first ``n_kept`` positions."""
        raise NotImplementedError


@functools.lru_cache(maxsize=None)
def _cache_argument(forward) -> str:
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


def cache_kwargs(model, cache) -> dict:
    """``{name: cache}`` under the name ``model``'s forward takes: ``cache`` from transformers 5.24 on
    (where ``past_key_values`` warns, and goes in 5.40), ``past_key_values`` before and in models not yet
    renamed. Passing the wrong one would not fail: it would vanish into ``**kwargs`` and drop the cache.
    A model is given the transformers cache a `PositionCache` holds; the kit's forwards take the `PositionCache`."""
    if isinstance(cache, PositionCache) and isinstance(model, torch.nn.Module):
        cache = cache.cache
    return {_cache_argument(getattr(type(model), "forward", None) or type(model).__call__): cache}


def last_hidden(out) -> torch.Tensor:
    """The last hidden states ``[B, T, H]`` of an ``output_hidden_states=True`` pass: after the final norm,
    the input of the head (transformers 4.x and 5.x alike; read here only, for drafts that use them)."""
    return out.hidden_states[-1]


def new_cache(model) -> DynamicCache:
    """An empty cache for ``model`` (its config lets transformers pick per-layer types)."""
    return DynamicCache(config=model.config)


def new_static_cache(model, max_length: int) -> StaticCache:
    """transformers' own static cache of ``max_length`` preallocated positions (the kit's forwards use `StaticKV`)."""
    return StaticCache(config=model.config, max_cache_len=max_length)


def plain_static_layers(model) -> bool:
    """Whether ``model``'s static cache has only plain full-attention layers (no sliding window, no recurrent state):
    the layers a position can roll back. (Building the cache allocates nothing: its layers allocate on first use.)"""
    try:
        return all(type(layer) is StaticLayer for layer in new_static_cache(model, 1).layers)
    except Exception:  # noqa: BLE001 - any model transformers cannot give a static cache: no static layers
        return False


def cache_length(cache) -> int:
    """Number of positions the cache holds (0 for ``None``)."""
    return 0 if cache is None else int(cache.get_seq_length())


def rollback(cache, kept) -> None:
    """Roll ``cache`` back to the positions the text keeps: THE rollback, which every decode loop calls (chain, tree,
    tree sampling, batch, the drafts, the benchmarks). It dispatches once, on the cache's kind.

    ``kept`` is one of:

    - an int ``n``: keep the first ``n`` positions (after a rejection: the text plus the accepted draft). A static
      cache moves its position back (nothing is copied; attention never reads the rows beyond); a dynamic one
      drops the rest.
    - a 1-D index (a list or a LongTensor) of the positions to keep, in that order: a token tree's prefix plus the
      kept branch, whose nodes are scattered through the tree. ``0 .. n - 1`` is the int case.
    - a 2-D LongTensor ``[B, C']``: row ``b`` keeps positions ``kept[b]`` (batched decoding packs each row's live
      positions together once rejected ones pile up).

    ``cache=None`` (a loop that keeps no cache): nothing to roll back.
    """
    if cache is None:
        return
    kept = kept if type(kept) is int else _as_kept(kept)  # the chain loops' int, or what it stands for
    if isinstance(cache, PositionCache):  # `lean.StaticKV`
        cache.keep(kept)
    elif isinstance(cache, StaticCache):
        _static_cache_keep(cache, kept)
    elif isinstance(cache, DynamicCache):
        _dynamic_keep(cache, kept)
    else:
        raise TypeError(
            f"rollback knows a DynamicCache, a StaticCache and the kit's StaticKV, not {type(cache).__name__}"
        )


def crop_cache(cache: DynamicCache | StaticCache, length: int) -> None:
    """Keep the first ``length`` positions, dropping the rest: `rollback` ``(cache, length)``, under the name the
    graded cells (PA3's) use."""
    rollback(cache, length)


def _as_kept(kept) -> int | torch.Tensor:
    """``kept`` as an int or a LongTensor of positions (1-D or [B, C']), or the error that says what to pass.
    Positions ``0 .. n - 1`` are the int ``n``."""
    if isinstance(kept, bool) or not isinstance(kept, (Integral, list, tuple, torch.Tensor)):
        raise TypeError(
            f"rollback keeps an int (the first n positions), a list or 1-D LongTensor of positions, or a "
            f"[B, C'] LongTensor of positions per row; got {type(kept).__name__}"
        )
    if isinstance(kept, torch.Tensor) and kept.dim() == 0:
        return int(kept)
    if isinstance(kept, Integral):
        return int(kept)
    index = torch.as_tensor(kept, dtype=torch.long)
    if index.dim() not in (1, 2):
        raise ValueError(
            f"rollback got positions shaped {list(index.shape)}: pass [C'] positions for every row, or "
            "[B, C'] (one list of positions per batch row)"
        )
    if index.dim() == 1 and torch.equal(index.cpu(), torch.arange(index.numel())):
        return index.numel()  # the kept positions are a prefix: a crop
    return index


def check_prefix(held: int, length: int) -> None:
    """Refuse a rollback to more positions than the cache holds, or fewer than none."""
    if not 0 <= length <= held:
        raise ValueError(
            f"cannot crop a cache of {held} positions to {length}: a rollback keeps between 0 and the "
            f"{held} positions it holds (count the kept text, prompt included)"
        )


def _static_cache_keep(cache: StaticCache, kept) -> None:
    """transformers' static cache: each layer writes at its ``cumulative_length`` counter, and the causal mask hides
    whatever lies beyond the query, so moving every counter back is the whole rollback."""
    if not isinstance(kept, int):
        raise NotImplementedError(
            "a static cache keeps the first n positions only; token trees and batches roll back dynamic caches"
        )
    check_prefix(cache_length(cache), kept)
    if any(type(layer) is not StaticLayer for layer in cache.layers):
        raise NotImplementedError("only plain full-attention static caches can be rolled back (no sliding window)")
    for layer in cache.layers:
        layer.cumulative_length.fill_(kept)


def _dynamic_keep(cache: DynamicCache, kept) -> None:
    """A dynamic cache drops what the text no longer holds: the tail (an int), all but a tree's kept positions (1-D),
    or all but each batch row's live positions (2-D)."""
    # transformers 5.x: a DynamicCache is a list of per-layer objects (``cache.layers``), each with ``keys``/``values``
    # shaped [batch, kv_heads, seq, head_dim]. Sliding-window, recurrent, indexed and quantized layers keep more than
    # plain rows of K/V, so a row gather would silently corrupt them: refused.
    held = cache_length(cache)
    if isinstance(kept, int):
        check_prefix(held, kept)
        if kept < held:
            cache.crop(kept - held)  # transformers 5.x: a negative count of tokens to drop
        return
    if kept.dim() == 1:
        if kept.numel() and (int(kept.min()) < 0 or int(kept.max()) >= held):
            raise ValueError(
                f"positions {kept.tolist()} outside a cache of {held} positions: keep positions 0 .. {held - 1}"
            )
        check_plain_layers(cache, "keeping scattered positions (token trees)")
        gather = lambda keys, rows: keys.index_select(-2, rows)
    else:
        check_plain_layers(cache, "packing a batched cache")
        for layer in cache.layers:
            if layer.is_initialized and layer.keys.numel() and kept.shape[0] != layer.keys.shape[0]:
                raise ValueError(
                    f"rollback got positions for {kept.shape[0]} rows, but the cache holds "
                    f"{layer.keys.shape[0]}: pass one row of positions per batch row ([B, C'])"
                )

        def gather(keys, rows):
            return keys.gather(2, rows[:, None, :, None].expand(-1, keys.shape[1], -1, keys.shape[-1]))

    for layer in cache.layers:
        if layer.is_initialized and layer.keys.numel():
            rows = kept.to(layer.keys.device)
            layer.keys, layer.values = gather(layer.keys, rows), gather(layer.values, rows)


def keep_cache_rows(cache: DynamicCache, rows: torch.Tensor) -> None:
    """Keep only the batch rows ``rows`` (in that order) of every layer: batched decoding drops the rows
    that finished (EOS or their budget) so that later passes stop paying for them."""
    cache.batch_select_indices(torch.as_tensor(rows, dtype=torch.long))


def check_plain_layers(cache: DynamicCache, what: str) -> None:
    """Refuse caches whose layers hold more than plain rows of K/V (sliding window, recurrent state,
    quantized): cropping and masking positions per row would silently corrupt them."""
    layers = getattr(cache, "layers", None)
    if layers is None:
        raise NotImplementedError(
            f"{type(cache).__name__} has no per-layer list (transformers < 5?); {what} needs transformers 5.x"
        )
    for layer in layers:
        if type(layer) is not DynamicLayer:
            raise NotImplementedError(
                f"{what} needs plain full-attention KV caches, and this model's cache has a "
                f"{type(layer).__name__} layer (sliding window, recurrent or quantized state); decode its "
                "prompts one at a time"
            )
