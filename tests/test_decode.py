"""Greedy speculative decoding must equal the target's own greedy output, token for token."""

from __future__ import annotations

import functools
import time

import pytest
import torch
from tiny_models import VOCAB, hf_greedy, perturbed_copy, tiny_model

import specdec_helpers as sd
from specdec_helpers.core.cache import cache_length

DRAFTS = ["same", "unrelated", "perturbed", "prompt_lookup", "growing_hybrid"]


def make_draft(kind, target, family):
    if kind == "same":
        return target
    if kind == "unrelated":
        return tiny_model(family, seed=7)
    if kind == "perturbed":
        return perturbed_copy(target, scale=0.05)
    if kind == "growing_hybrid":  # lookup whose proposals grow with the match, else one model token
        return sd.HybridDrafter(perturbed_copy(target, scale=0.05), min_ngram=1, model_tokens=1)
    return sd.PromptLookupDrafter()


def prompt(length, seed=3):
    return torch.randint(1, VOCAB, (1, length), generator=torch.Generator().manual_seed(seed))


@functools.lru_cache(maxsize=None)
def hf_greedy_of(family: str, prompt_length: int, max_new: int) -> torch.Tensor:
    """The target's own greedy text, computed once per case and shared by every draft and k (a fresh model:
    the tests' copies are never trusted to be unchanged)."""
    return hf_greedy(tiny_model(family), prompt(prompt_length), max_new)


def _tier(k, draft_kind):
    """The fast tier: k = 4 with every draft, and k = 1 with the two drafts that are accepted only sometimes
    (the rollbacks); the other cases run in the slow tier."""
    fast = k == 4 or (k == 1 and draft_kind in ("perturbed", "prompt_lookup"))
    return pytest.param(k, draft_kind, marks=[] if fast else pytest.mark.slow)


@pytest.mark.parametrize("k, draft_kind", [_tier(k, d) for k in (1, 2, 4, 7) for d in DRAFTS])
def test_equals_hf_greedy(family, draft_kind, k):
    target = tiny_model(family)
    draft = make_draft(draft_kind, target, family)
    for prompt_length, max_new in [(1, 23), (6, 17)]:
        ids = prompt(prompt_length)
        expected = hf_greedy_of(family, prompt_length, max_new)
        for use_cache in (True, False):
            out = sd.speculative_decode(
                target, draft, ids, max_new_tokens=max_new, num_speculative_tokens=k, use_cache=use_cache
            )
            assert out.sequences.shape == expected.shape
            assert torch.equal(out.sequences, expected), (family, draft_kind, k, prompt_length, use_cache)
            assert out.stats.new_tokens == max_new


def test_acceptance_matches_draft_kind():
    target = tiny_model("gpt_neox")
    ids = prompt(5)
    rates = {
        kind: sd.speculative_decode(
            target, make_draft(kind, target, "gpt_neox"), ids, max_new_tokens=40, num_speculative_tokens=4
        ).stats.acceptance_rate
        for kind in ("same", "unrelated", "perturbed")
    }
    assert rates["same"] == 1.0
    assert rates["unrelated"] < 0.2
    assert 0.2 < rates["perturbed"] < 1.0, rates  # a mixed draft exercises both outcomes


def test_greedy_decode_equals_hf(family):
    target = tiny_model(family)
    ids = prompt(4)
    expected = hf_greedy(target, ids, 20)
    for use_cache in (True, False):
        out = sd.greedy_decode(target, ids, max_new_tokens=20, use_cache=use_cache)
        assert torch.equal(out.sequences, expected)
        assert out.stats.target_calls == 20 and out.stats.proposed == 0


def eos_candidates(target, ids, n=30):
    """Tokens the target generates after the first one: using one as EOS stops generation mid-way."""
    return hf_greedy(target, ids, n)[0, ids.shape[1] + 1 :].tolist()


@pytest.mark.parametrize("k", [2, 5])
def test_eos_inside_accepted_block_stops_there(family, k):
    target = tiny_model(family)
    ids = prompt(5)
    for eos in dict.fromkeys(eos_candidates(target, ids)[:6]):
        expected = hf_greedy(target, ids, 30, eos_token_id=eos)
        assert expected.shape[1] < ids.shape[1] + 30
        for draft in (target, perturbed_copy(target, scale=0.05)):
            out = sd.speculative_decode(
                target, draft, ids, max_new_tokens=30, num_speculative_tokens=k, eos_token_id=eos
            )
            assert torch.equal(out.sequences, expected), eos
            assert out.sequences[0, -1] == eos


def test_eos_list_and_generation_config_default():
    target = tiny_model("llama")
    ids = prompt(5)
    eos_a, eos_b = eos_candidates(target, ids)[3:5]
    expected = hf_greedy(target, ids, 30, eos_token_id=[eos_a, eos_b])
    out = sd.speculative_decode(target, target, ids, max_new_tokens=30, eos_token_id=[eos_a, eos_b])
    assert torch.equal(out.sequences, expected)
    target.generation_config.eos_token_id = eos_a  # None -> the target's generation_config, as in HF
    out = sd.speculative_decode(target, target, ids, max_new_tokens=30)
    assert torch.equal(out.sequences, hf_greedy(target, ids, 30))
    assert out.sequences[0, -1] == eos_a


def test_eos_in_prompt_does_not_stop():
    target = tiny_model("gpt2")
    ids = prompt(6)
    eos = int(ids[0, 2])
    out = sd.speculative_decode(target, target, ids, max_new_tokens=12, eos_token_id=eos)
    expected = hf_greedy(target, ids, 12, eos_token_id=eos)
    assert torch.equal(out.sequences, expected)
    assert out.stats.new_tokens >= 1


@pytest.mark.parametrize("max_new", [0, 1, 2, 5, 11])
def test_never_overshoots_max_new_tokens(max_new):
    target = tiny_model("gpt_neox")
    ids = prompt(3)
    out = sd.speculative_decode(target, target, ids, max_new_tokens=max_new, num_speculative_tokens=4)
    assert out.sequences.shape[1] == 3 + max_new
    assert torch.equal(out.sequences, ids if max_new == 0 else hf_greedy(target, ids, max_new))


def count_calls(model):
    """Record (cached positions, fed positions) for every forward pass of ``model``."""
    calls = []

    def hook(module, args, kwargs):
        cache = kwargs.get("cache", kwargs.get("past_key_values"))  # the name depends on transformers' version
        calls.append((cache_length(cache), kwargs["input_ids"].shape[1]))

    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    return calls, handle


@pytest.mark.parametrize("arch", ["llama", "gpt_neox"])
def test_the_cache_goes_in_under_the_name_the_model_takes(arch, recwarn):
    """transformers 5.24 renamed ``past_key_values`` to ``cache`` (the old name warns, and goes in 5.40); a
    wrong name would vanish into ``**kwargs``. Decoding passes the cache under the model's own name: no
    deprecation warning, and every pass after the prefill feeds only the new positions."""
    target = tiny_model(arch)
    draft = perturbed_copy(target, scale=0.05)  # before the hook: a copy would carry it
    calls, handle = count_calls(target)
    try:
        out = sd.speculative_decode(target, draft, prompt(4), max_new_tokens=12, num_speculative_tokens=3)
    finally:
        handle.remove()
    assert torch.equal(out.sequences, hf_greedy(target, prompt(4), 12))
    assert [str(w.message) for w in recwarn if "past_key_values" in str(w.message)] == []
    assert all(cached > 0 for cached, _ in calls[1:])


def test_one_target_pass_per_round_and_cache_invariant():
    target = tiny_model("gpt_neox")
    draft = perturbed_copy(target, scale=0.05)
    ids = prompt(4)
    calls, handle = count_calls(target)
    try:
        out = sd.speculative_decode(target, draft, ids, max_new_tokens=40, num_speculative_tokens=3)
    finally:
        handle.remove()
    stats = out.stats
    assert stats.target_calls == len(out.steps) == len(calls)  # correction/bonus never cost an extra pass
    assert 0 < stats.accepted < stats.proposed
    length = ids.shape[1]
    for (cached, fed), step in zip(calls, out.steps):
        # Before each round the cache holds every verified token except the last one.
        assert cached == (0 if cached == 0 and length == ids.shape[1] else length - 1)
        assert fed == length - cached + len(step.draft)
        length += len(step.emitted)
    assert sum(len(s.emitted) for s in out.steps) == stats.new_tokens == 40
    assert stats.accepted_per_step == [s.accepted for s in out.steps]
    assert stats.mean_accepted_length == pytest.approx(40 / stats.target_calls)
    assert stats.acceptance_rate == pytest.approx(stats.accepted / stats.proposed)


def test_model_drafter_never_reprefills():
    target = tiny_model("llama")
    draft = perturbed_copy(target, scale=0.05)
    ids = prompt(9)
    calls, handle = count_calls(draft)
    try:
        out = sd.speculative_decode(target, draft, ids, max_new_tokens=30, num_speculative_tokens=4)
    finally:
        handle.remove()
    assert calls[0] == (0, 9)  # the prompt is fed once
    # Afterwards each pass feeds only what the draft has not seen: at most the kept draft token
    # of a fully accepted block plus the target's token.
    assert all(fed <= 2 for _, fed in calls[1:])
    assert out.stats.draft_calls == len(calls)


def test_cached_and_vectorized_agree_on_steps():
    target = tiny_model("opt")
    draft = perturbed_copy(target, scale=0.05)
    ids = prompt(5)
    a = sd.speculative_decode(target, draft, ids, max_new_tokens=25, use_cache=True)
    b = sd.speculative_decode(target, draft, ids, max_new_tokens=25, use_cache=False)
    assert torch.equal(a.sequences, b.sequences)
    assert [s.accepted for s in a.steps] == [s.accepted for s in b.steps]


def test_steps_describe_kinds():
    target = tiny_model("gpt_neox")
    out = sd.speculative_decode(target, target, prompt(3), max_new_tokens=13, num_speculative_tokens=4)
    assert {s.target_token_kind for s in out.steps[:-1]} == {"bonus"}
    out = sd.speculative_decode(target, tiny_model("gpt_neox", seed=9), prompt(3), max_new_tokens=6)
    assert all(s.target_token_kind == "correction" and s.rejected == s.draft for s in out.steps[:-1])
    assert out.steps[-1].target_token_kind == "target"  # one token left: nothing worth drafting


def test_stats_dict_and_timing():
    target = tiny_model("gpt2")
    start = time.perf_counter()
    out = sd.speculative_decode(target, target, prompt(3), max_new_tokens=10)
    elapsed = time.perf_counter() - start
    d = out.stats.as_dict()
    assert d["new_tokens"] == 10 and 0 < d["wall_time_s"] <= elapsed  # the call's own time, in seconds
    assert d["tokens_per_s"] == d["new_tokens"] / d["wall_time_s"]
    assert torch.equal(out.new_tokens, out.sequences[0, 3:])
