"""The compiled target forward over a static cache (``compile=True``): same tokens, rolled back right.

Compiling costs tens of seconds even for tiny models, so one target per family is compiled once
(module scope) and every test reuses its graphs.
"""

from __future__ import annotations

import pytest
import torch
from tiny_models import hf_greedy, perturbed_copy, tiny_model

import specdec_helpers as sd
from specdec_helpers.core.cache import cache_kwargs, cache_length, crop_cache, new_static_cache
from specdec_helpers.core.cache import BLOCK
from specdec_helpers.core.compiled import compiled_forward
from specdec_helpers.core.cpu_kernels import use_onednn_linears

pytestmark = pytest.mark.slow  # torch.compile: tens of seconds per graph


def prompt(length, seed=3):
    return torch.randint(1, 64, (1, length), generator=torch.Generator().manual_seed(seed))


# Layers per family: every layer of a family runs the same code, and each extra layer costs inductor C++ kernels
# to compile (about 15 CPU s for llama's second). One layer of llama covers its code (GQA, RMSNorm, rotary); two of
# gpt_neox keep a graph over several layers of one `StaticKV` (each layer's length a view of one tensor).
LAYERS = {"llama": 1, "gpt_neox": 2}


@pytest.fixture(scope="module", params=["llama", "gpt_neox"])
def target(request):
    # Packed oneDNN linears, as `load_pair` makes them on a CPU: the compiled copy must undo them.
    return use_onednn_linears(tiny_model(request.param, layers=LAYERS[request.param]))


@pytest.fixture(scope="module")
def draft(target):
    family = target.config.model_type
    return perturbed_copy(tiny_model(family, layers=LAYERS[family]), scale=0.05)  # eager, not packed


@torch.inference_mode()
def test_static_cache_rollback_then_continue_matches_a_fresh_pass():
    model = tiny_model("llama")
    first, second = prompt(10), prompt(10, seed=4)
    cache = new_static_cache(model, 32)
    model(input_ids=first, **cache_kwargs(model, cache), use_cache=True)
    assert cache_length(cache) == 10
    crop_cache(cache, 6)  # drop 4 positions: their rows stay in memory and must never be read again
    assert cache_length(cache) == 6
    # Feed 2 other tokens: positions 8 and 9 still hold the dropped text's keys and values.
    rolled = model(input_ids=second[:, 6:8], **cache_kwargs(model, cache), use_cache=True).logits
    assert cache_length(cache) == 8
    text = torch.cat([first[:, :6], second[:, 6:8]], dim=1)
    fresh = model(input_ids=text, use_cache=False).logits[:, 6:]
    torch.testing.assert_close(rolled, fresh, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="cannot crop"):
        crop_cache(cache, 20)


@torch.inference_mode()
def test_compiled_decode_equals_hf_greedy(target, draft):
    lookup = sd.PromptLookupDrafter()
    for ids, max_new in [(prompt(1), 23), (prompt(6, seed=5), 17)]:
        expected = hf_greedy(target, ids, max_new)
        assert torch.equal(sd.greedy_decode(target, ids, max_new_tokens=max_new, compile=True).sequences, expected)
        for k in (1, 5):  # each k + 1 is a graph to compile: two of them cover rollback and a long draft
            for drafter in (draft, lookup):
                out = sd.speculative_decode(
                    target, drafter, ids, max_new_tokens=max_new, num_speculative_tokens=k, compile=True
                )
                assert torch.equal(out.sequences, expected), (k, type(drafter).__name__)
    # A draft identical to the target gets everything accepted: the cache is never rolled back.
    out = sd.speculative_decode(target, target, prompt(4), max_new_tokens=20, num_speculative_tokens=4, compile=True)
    assert out.stats.acceptance_rate == 1.0 and torch.equal(out.sequences, hf_greedy(target, prompt(4), 20))


@torch.inference_mode()
def test_compiled_decode_stops_at_eos(target):
    ids = prompt(5)
    eos = hf_greedy(target, ids, 30)[0, ids.shape[1] + 4].item()
    expected = hf_greedy(target, ids, 30, eos_token_id=eos)
    out = sd.speculative_decode(
        target, target, ids, max_new_tokens=30, num_speculative_tokens=5, eos_token_id=eos, compile=True
    )
    assert torch.equal(out.sequences, expected) and out.sequences[0, -1] == eos


@torch.inference_mode()
def test_compiled_forward_is_shared_and_its_cache_is_rounded(target):
    forward = compiled_forward(target)
    assert compiled_forward(target) is forward  # compiled once per model
    cache = forward.new_cache(BLOCK + 1)
    assert cache.capacity == cache.cache.layers[0].max_cache_len == 2 * BLOCK
    with pytest.raises(ValueError, match="hidden states"):
        forward(prompt(3), cache, output_hidden_states=True)
    curve = sd.measure_forward_cost(forward, prompt(4), sizes=[1, 3], repeats=1, warmup=0)
    assert curve["sizes"] == [1, 3] and all(t > 0 for t in curve["median_s"])


def test_compile_refuses_what_it_cannot_run():
    target = tiny_model("gpt2")
    with pytest.raises(ValueError, match="use_cache=True"):
        sd.speculative_decode(target, target, prompt(3), max_new_tokens=4, use_cache=False, compile=True)

    class FeatureReader(sd.PromptLookupDrafter):
        needs_target_features = True

    with pytest.raises(ValueError, match="hidden states"):
        sd.speculative_decode(target, FeatureReader(), prompt(3), max_new_tokens=4, compile=True)
