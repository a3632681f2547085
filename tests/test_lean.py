"""The lean Llama forward (`core/lean.py`): bitwise the model's own logits and last hidden states, over a static
cache that rolls back by moving a position; chosen by the decode loop for a Llama on the CPU, refused where it
would differ."""

from __future__ import annotations

import copy

import pytest
import torch
from tiny_models import hf_greedy, perturbed_copy, tiny_model
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

import specdec_helpers as sd
from specdec_helpers.core import backends, lean
from specdec_helpers.core.cache import cache_kwargs, cache_length, rollback
from specdec_helpers.core.cpu_kernels import use_onednn_linears
from specdec_helpers.core.drafters import as_drafter


def ids(length, seed=3, vocab=64):
    return torch.randint(1, vocab, (1, length), generator=torch.Generator().manual_seed(seed))


def mha_llama():
    """Every head its own keys (no grouped-query attention): the attention's other branch."""
    torch.manual_seed(1)
    cfg = LlamaConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        intermediate_size=64,
        vocab_size=64,
        max_position_embeddings=256,
        initializer_range=0.5,
    )
    return LlamaForCausalLM(cfg).eval()


def models():
    yield "gqa", tiny_model("llama")
    yield "mha", mha_llama()
    yield "onednn", use_onednn_linears(tiny_model("llama", seed=2))
    for dtype in (torch.float16, torch.bfloat16):
        yield str(dtype), tiny_model("llama", seed=4).to(dtype)


@pytest.mark.parametrize("name,model", list(models()), ids=lambda v: v if isinstance(v, str) else "")
@torch.inference_mode()
def test_logits_and_hidden_states_are_bitwise_the_models_through_passes_and_rollbacks(name, model):
    forward = backends.lean_forward(model)
    assert isinstance(forward, lean.LeanForward), name
    text = ids(60, seed=7)
    theirs, ours = DynamicCache(config=model.config), forward.new_cache(60)
    # A 1-token prefill, then passes of every size a verify makes, each partly rejected and rolled back.
    position = 0
    for n, keep in [(1, 1), (7, 5), (1, 1), (3, 0), (12, 4), (2, 2), (16, 9)]:
        chunk = text[:, position : position + n]
        expected = model(
            input_ids=chunk, **cache_kwargs(model, theirs), use_cache=True, logits_to_keep=n, output_hidden_states=True
        )
        got = forward(input_ids=chunk, cache=ours, use_cache=True, logits_to_keep=n, output_hidden_states=True)
        assert torch.equal(got.logits, expected.logits), (name, n)
        assert torch.equal(got.hidden_states[-1], expected.hidden_states[-1]), (name, n)
        position += keep
        rollback(theirs, position)
        rollback(ours, position)
        assert cache_length(ours) == cache_length(theirs) == position


@pytest.mark.parametrize("k", [1, 3, 8])
def test_decoding_through_the_lean_forward_equals_hf_greedy(k):
    target = tiny_model("llama", eos_token_id=5)
    with backends.backend(target, as_drafter(target, target), ids(4), 10, k) as run:
        assert isinstance(run.target, lean.LeanForward) and run.name == "lean"  # the loop's target on a CPU
        assert isinstance(run.drafter, backends.StaticModelDrafter)  # a plain Llama draft drafts through its own
    draft = perturbed_copy(target, scale=0.2)
    for prompt, max_new in [(ids(1), 30), (ids(9, seed=5), 40), (ids(30, seed=6), 25)]:
        expected = hf_greedy(target, prompt, max_new)
        assert torch.equal(sd.greedy_decode(target, prompt, max_new_tokens=max_new).sequences, expected)
        for drafter in (draft, sd.PromptLookupDrafter(), target):
            out = sd.speculative_decode(target, drafter, prompt, max_new_tokens=max_new, num_speculative_tokens=k)
            assert torch.equal(out.sequences, expected), type(drafter).__name__


def test_other_models_keep_their_own_forward():
    neox = tiny_model("gpt_neox")
    assert lean.supported(neox) == "not a LlamaForCausalLM" and backends.lean_forward(neox) is None
    with backends.backend(neox, as_drafter(neox, neox), ids(4), 10, 3) as run:
        assert run.target is neox and isinstance(run.cache, DynamicCache) and run.name == "dynamic"
        assert "not a LlamaForCausalLM" in run.reason
    eager = tiny_model("llama")
    eager.config._attn_implementation = "eager"
    assert "variant" in lean.supported(eager) and backends.lean_forward(eager) is None
    training = copy.deepcopy(tiny_model("llama")).train()
    assert backends.lean_forward(training) is None
    hooked = tiny_model("llama")  # a hook on any of its modules sees every pass of the model's own forward
    handle = hooked.model.layers[1].mlp.register_forward_hook(lambda *args: None)
    assert "hooks" in lean.supported(hooked) and backends.lean_forward(hooked) is None
    handle.remove()
    assert backends.lean_forward(hooked) is not None
    # transformers' own output capturing (hooks installed by an output_hidden_states=True call) is no such hook
    hooked(input_ids=ids(3), output_hidden_states=True)
    assert lean.supported(hooked) is None and backends.lean_forward(hooked) is not None


def test_a_forward_that_would_differ_is_refused(monkeypatch):
    """The check compares with the model's own forward: a model whose forward computes something else (here its
    logits scaled) gets no lean forward, and decoding keeps the model's."""
    model = tiny_model("llama", seed=9)
    original = type(model).forward

    def scaled(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        out.logits = out.logits * 1.0001
        return out

    monkeypatch.setattr(type(model), "forward", scaled)
    assert backends.lean_forward(model) is None
    with backends.backend(model, as_drafter(model, model), ids(4), 10, 3) as run:
        assert run.target is model and "logits differ" in run.reason


def test_the_cache_moves_a_position_and_names_its_limits():
    model = tiny_model("llama")
    forward = backends.lean_forward(model)
    cache = forward.new_cache(8)
    forward(ids(6), cache)
    rollback(cache, 2)
    assert cache_length(cache) == 2
    with pytest.raises(ValueError, match="cannot crop a cache of 2 positions to 3"):
        rollback(cache, 3)
    with pytest.raises(NotImplementedError, match="first n positions only"):
        rollback(cache, [0, 2])  # scattered positions: trees roll back dynamic caches
    with pytest.raises(ValueError, match="overflow a cache of 8 positions"):
        forward(ids(8), cache)
    with pytest.raises(ValueError, match="one text"):
        forward(torch.cat([ids(2), ids(2)]), forward.new_cache(4))


def test_layers_changed_after_the_check_are_the_ones_used():
    """The check runs once per model; what changes later (weights packed again after a cast or a load, Linear layers
    unpacked and edited, another activation) is read at each pass, so decoding still equals HF's."""
    from specdec_helpers.core.cpu_kernels import use_plain_linears

    model = use_onednn_linears(tiny_model("llama", seed=11))
    prompt = ids(7, seed=2)
    assert torch.equal(sd.greedy_decode(model, prompt, max_new_tokens=12).sequences, hf_greedy(model, prompt, 12))
    model.to(torch.bfloat16).float()  # every OneDNNLinear packs its weight again
    with torch.no_grad():
        model.model.layers[0].self_attn.q_proj.weight.mul_(1.5)
        model.model.layers[0].self_attn.q_proj.to(torch.float32)  # ... packed once more, from the edited weight
    assert torch.equal(sd.greedy_decode(model, prompt, max_new_tokens=12).sequences, hf_greedy(model, prompt, 12))
    use_plain_linears(model)
    with torch.no_grad():
        model.model.layers[1].mlp.up_proj.weight.mul_(2)
    assert torch.equal(sd.greedy_decode(model, prompt, max_new_tokens=12).sequences, hf_greedy(model, prompt, 12))
    for layer in model.model.layers:
        layer.mlp.act_fn = torch.nn.GELU()
    assert torch.equal(sd.greedy_decode(model, prompt, max_new_tokens=12).sequences, hf_greedy(model, prompt, 12))
