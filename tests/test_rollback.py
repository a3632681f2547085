"""One rollback (`cache.rollback`): the first n positions, scattered positions (a tree's branch), or positions per
batch row; every loop calls it, and nothing else in the library crops a cache."""

import re
from pathlib import Path

import pytest
import torch
from tiny_models import tiny_model

from specdec_helpers.core.cache import cache_kwargs, cache_length, new_cache, new_static_cache, rollback
from specdec_helpers.core.drafters import HybridDrafter, ModelDrafter, as_drafter

PACKAGE = Path(__file__).resolve().parents[1] / "specdec_helpers"


def filled(model, ids):
    cache = new_cache(model)
    model(input_ids=ids, **cache_kwargs(model, cache), use_cache=True)
    return cache


def next_logits(model, cache, token):
    return model(input_ids=torch.tensor([[token]]), **cache_kwargs(model, cache), use_cache=True).logits[0, -1]


def plain(model, ids):
    return model(input_ids=torch.tensor([ids])).logits[0, -1]


@torch.inference_mode()
def test_rollback_keeps_the_first_n_positions_in_a_dynamic_and_a_static_cache():
    model = tiny_model("llama")
    ids = torch.tensor([[3, 4, 5, 6, 7, 8]])
    cache = filled(model, ids)
    rollback(cache, 4)
    assert cache_length(cache) == 4
    assert torch.allclose(next_logits(model, cache, 9), plain(model, [3, 4, 5, 6, 9]), atol=1e-5)
    static = new_static_cache(model, 16)
    model(input_ids=ids, **cache_kwargs(model, static), use_cache=True)
    rollback(static, torch.tensor(3))  # a 0-d tensor counts as an int; the position moves, nothing is copied
    assert cache_length(static) == 3
    rollback(None, 5)  # a loop without a cache: nothing to roll back


@torch.inference_mode()
def test_rollback_keeps_scattered_positions_and_positions_per_row():
    model = tiny_model("llama")
    cache = filled(model, torch.tensor([[3, 4, 5, 6, 7]]))
    before = [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]
    rollback(cache, [0, 1, 3])  # a tree branch: the prefix 3, 4 and the node 6 (which keeps its position's rows)
    assert cache_length(cache) == 3
    for (keys, values), layer in zip(before, cache.layers):
        assert torch.equal(layer.keys, keys[:, :, [0, 1, 3]]) and torch.equal(layer.values, values[:, :, [0, 1, 3]])
    rollback(cache, [0, 1])  # a prefix: a crop
    assert cache_length(cache) == 2
    batch = new_cache(model)
    model(input_ids=torch.tensor([[3, 4, 5, 6], [7, 8, 9, 10]]), **cache_kwargs(model, batch), use_cache=True)
    before = [layer.keys.clone() for layer in batch.layers]
    rollback(batch, torch.tensor([[0, 2], [1, 3]]))
    for old, layer in zip(before, batch.layers):
        assert torch.equal(layer.keys[0], old[0][:, [0, 2]]) and torch.equal(layer.keys[1], old[1][:, [1, 3]])


@torch.inference_mode()
def test_a_bad_rollback_says_what_to_pass():
    model = tiny_model("llama")
    cache = filled(model, torch.tensor([[3, 4, 5]]))
    with pytest.raises(ValueError, match="cannot crop a cache of 3 positions to 5"):
        rollback(cache, 5)
    with pytest.raises(ValueError, match="between 0 and the 3 positions"):
        rollback(cache, -1)
    with pytest.raises(ValueError, match=r"outside a cache of 3 positions: keep positions 0 \.\. 2"):
        rollback(cache, [0, 7])
    with pytest.raises(ValueError, match="positions for 2 rows, but the cache holds 1"):
        rollback(cache, torch.tensor([[0], [1]]))
    with pytest.raises(ValueError, match=r"shaped \[1, 1, 1\]"):
        rollback(cache, torch.zeros(1, 1, 1, dtype=torch.long))
    with pytest.raises(TypeError, match="rollback keeps an int"):
        rollback(cache, 2.0)
    with pytest.raises(TypeError, match="rollback keeps an int"):
        rollback(cache, True)
    assert cache_length(cache) == 3


def test_nothing_but_rollback_crops_a_cache():
    """The loops (core/), the drafts (models/) and the benchmarks (measure/) roll back through `cache.rollback` only:
    no ``.crop(``, ``crop_cache`` (the graded cells' name for it) or layer gather of their own."""
    own = re.compile(r"\.crop\(|crop_cache\(|keys\.(index_select|gather)\(")
    found = [
        f"{path.relative_to(PACKAGE)}:{number}"
        for layer in ("core", "models", "measure")
        for path in sorted((PACKAGE / layer).rglob("*.py"))
        if path.name not in ("cache.py", "graphs.py")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if own.search(line)
    ]
    assert not found, found


def test_as_drafter_caps_a_copy_and_leaves_the_callers_vocab_limit_alone():
    target, draft = tiny_model("llama"), tiny_model("llama", 1, layers=1)
    mine = ModelDrafter(draft)
    capped = as_drafter(mine, target)
    assert mine.vocab_limit is None and capped.vocab_limit == target.config.vocab_size and capped is not mine
    hybrid = HybridDrafter(draft)
    used = as_drafter(hybrid, target)
    assert hybrid.model_drafter.vocab_limit is None and used.model_drafter.vocab_limit == target.config.vocab_size
    limited = ModelDrafter(draft, vocab_limit=7)
    assert as_drafter(limited, target) is limited  # a limit of its own: used as it is
