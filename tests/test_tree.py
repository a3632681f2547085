"""Token trees: the masked pass equals chain passes, the cache gather equals a fresh prefill, and tree
decoding is lossless (== target.generate greedy) across families, shapes, budgets, EOS and limits."""

from __future__ import annotations

import pytest
import torch
from tiny_models import hf_greedy, perturbed_copy, tiny_model

from specdec_helpers import speculative_decode
from specdec_helpers.core.cache import cache_kwargs, cache_length, new_cache, rollback
from specdec_helpers.core.drafters import HybridDrafter, ModelDrafter, PromptLookupDrafter
from specdec_helpers.core.tree import (
    TokenTree,
    TreeUnsupportedError,
    check_tree_support,
    tree_forward,
    tree_speculative_decode,
)


_PAIRS = {}


def pair(family):
    if family not in _PAIRS:
        target = tiny_model(family)
        _PAIRS[family] = target, perturbed_copy(target, scale=0.08)
    return _PAIRS[family]


def prompt(seed=0, length=7):
    return torch.randint(1, 64, (1, length), generator=torch.Generator().manual_seed(seed))


def sample_tree():
    """Branches [5, 9, 11], [5, 9, 12], [7, 3], in level order as the draft builds them:
    nodes 0, 1 (depth 1: 5, 7) | 2, 3 (depth 2: 9 under 5, 3 under 7) | 4, 5 (depth 3: 11, 12 under 9)."""
    tree = TokenTree()
    five, seven = tree.add(5), tree.add(7)
    nine = tree.add(9, five)
    tree.add(3, seven)
    tree.add_branch([11], nine)
    tree.add_branch([9, 12], five)  # merges into the existing 5 -> 9
    return tree


def branch(tree, node):
    tokens = []
    while node >= 0:
        tokens.append(tree.tokens[node])
        node = tree.parents[node]
    return tokens[::-1]


def plain_logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits[0]


# --------------------------------------------------------------------------- the masked pass


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_tree_pass_equals_chain_passes(family, attn):
    """Each node's logits (and the root's) equal a plain pass over prefix + that node's branch."""
    model = tiny_model(family)
    model.set_attn_implementation(attn)
    ids, tree = prompt(), sample_tree()
    cache = new_cache(model)
    with torch.no_grad():
        model(input_ids=ids[:, :4], **cache_kwargs(model, cache), use_cache=True)  # part of the prefix cached
        got = tree_forward(model, cache, ids, tree, logits_to_keep=len(tree) + 1)
    assert cache_length(cache) == ids.shape[1] + len(tree)
    torch.testing.assert_close(got[0], plain_logits(model, ids)[-1], atol=1e-4, rtol=1e-4)
    for node in range(len(tree)):
        chain = torch.cat([ids, torch.tensor([branch(tree, node)])], dim=1)
        torch.testing.assert_close(got[1 + node], plain_logits(model, chain)[-1], atol=1e-4, rtol=1e-4)


def test_level_by_level_feed_equals_chain_passes():
    """The draft feeds a tree one level at a time (cache holds earlier levels): same logits."""
    model = tiny_model("llama")
    ids, tree = prompt(1), sample_tree()
    assert tree.depths == [1, 1, 2, 2, 3, 3]
    cache = new_cache(model)
    with torch.no_grad():
        tree_forward(model, cache, ids, tree, 0, 2)
        got = tree_forward(model, cache, ids, tree, 2, 4)
    for row, node in enumerate([2, 3]):
        chain = torch.cat([ids, torch.tensor([branch(tree, node)])], dim=1)
        torch.testing.assert_close(got[row], plain_logits(model, chain)[-1], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("family", ["gpt_neox", "llama"])
def test_gathered_cache_equals_fresh_prefill(family):
    """After keeping a scattered branch ([7, 3]: nodes 1 and 3), the next step matches a fresh prefill."""
    model = tiny_model(family)
    ids, tree = prompt(2), sample_tree()
    cache = new_cache(model)
    with torch.no_grad():
        tree_forward(model, cache, ids, tree)
        length = ids.shape[1]
        rollback(cache, list(range(length)) + [length + 1, length + 3])
        assert cache_length(cache) == length + 2
        step = model(input_ids=torch.tensor([[42]]), **cache_kwargs(model, cache), use_cache=True).logits[0, -1]
    fresh = plain_logits(model, torch.cat([ids, torch.tensor([[7, 3, 42]])], dim=1))[-1]
    torch.testing.assert_close(step, fresh, atol=1e-4, rtol=1e-4)


# --------------------------------------------------------------------------- lossless decoding


@pytest.mark.parametrize(
    "family, shape, max_new",
    [
        ("gpt_neox", (3, 2, 2, 1, 1), 30),
        ("gpt_neox", (1, 1, 1), 17),  # a chain is a tree too
        ("gpt_neox", (4,), 12),
        ("llama", (2, 2, 2, 2), 30),
        ("llama", (5, 3), 9),
        ("gpt2", (3, 2, 2, 1, 1), 20),
        ("opt", (2, 4, 2), 20),
    ],
)
def test_greedy_equals_generate(family, shape, max_new):
    target, draft = pair(family)
    for seed in (0, 3):
        ids = prompt(seed)
        out = tree_speculative_decode(target, draft, ids, max_new_tokens=max_new, tree=shape)
        assert torch.equal(out.sequences, hf_greedy(target, ids, max_new))
        stats = out.stats
        assert stats.new_tokens == max_new == sum(len(s.emitted) for s in out.steps)
        assert stats.accepted == sum(s.accepted for s in out.steps) <= stats.proposed
        assert stats.target_calls == len(out.steps)


@pytest.mark.parametrize("max_new", [0, 1, 2, 3, 6])
def test_length_limit_never_overshot(max_new):
    target, draft = pair("gpt_neox")
    ids = prompt(4)
    out = tree_speculative_decode(target, draft, ids, max_new_tokens=max_new, tree=(3, 3, 3, 3, 3))
    assert out.sequences.shape[1] == ids.shape[1] + max_new
    expected = hf_greedy(target, ids, max_new) if max_new else ids  # generate refuses max_new_tokens=0
    assert torch.equal(out.sequences, expected)


@pytest.mark.parametrize("family", ["gpt_neox", "llama"])
def test_stops_at_eos_like_generate(family):
    target, draft = pair(family)
    ids = prompt(5)
    plain = hf_greedy(target, ids, 25)[0, ids.shape[1] :].tolist()
    eos = plain[6]  # a token greedy emits mid-way: generation must stop at its first occurrence
    expected = hf_greedy(target, ids, 25, eos_token_id=eos)
    out = tree_speculative_decode(target, draft, ids, max_new_tokens=25, tree=(3, 2, 2, 1), eos_token_id=eos)
    assert torch.equal(out.sequences, expected)
    assert out.sequences[0, -1].item() == eos


# --------------------------------------------------------------------------- hybrid drafting


REPETITIVE = torch.tensor([[3, 4, 5, 6, 7, 8, 3, 4, 5, 6, 7, 8, 3, 4, 9, 10, 11, 3, 4]])


class _Traced(HybridDrafter):
    def propose(self, input_ids, k, sampler=None):
        proposal = super().propose(input_ids, k) if sampler is None else super().propose(input_ids, k, sampler)
        self.sources.append(self.last_source)
        return proposal


@pytest.mark.parametrize("family", ["gpt_neox", "llama"])
def test_hybrid_drafter_in_chain_is_lossless(family):
    """Both sources get used, and the model's cache stays right across n-gram rounds."""
    target, draft = pair(family)
    drafter = _Traced(draft, vocab_limit=64)
    drafter.sources = []
    out = speculative_decode(target, drafter, REPETITIVE, max_new_tokens=30, num_speculative_tokens=4)
    assert torch.equal(out.sequences, hf_greedy(target, REPETITIVE, 30))
    assert {"ngram", "model"} <= set(drafter.sources)


def test_hybrid_and_lookup_as_tree_branches():
    target, draft = pair("llama")
    expected = hf_greedy(target, REPETITIVE, 24)
    for d in (HybridDrafter(ModelDrafter(draft)), PromptLookupDrafter(), ModelDrafter(draft)):
        out = tree_speculative_decode(target, d, REPETITIVE, max_new_tokens=24, tree=(2, 2, 1))
        assert torch.equal(out.sequences, expected), type(d).__name__


# --------------------------------------------------------------------------- clear errors


def test_attention_that_ignores_4d_masks_gets_a_clear_error():
    """A causal-only kernel (like flash attention) would verify the tree wrongly: refuse before decoding."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    def causal_only(module, query, key, value, attention_mask, **kwargs):
        return sdpa_attention_forward(module, query, key, value, None, **kwargs)

    AttentionInterface.register("causal_only_test", causal_only)
    target = tiny_model("llama")
    target.set_attn_implementation("causal_only_test")
    with pytest.raises(TreeUnsupportedError, match="attn_implementation='sdpa'"):
        tree_speculative_decode(target, pair("llama")[1], prompt(), max_new_tokens=5)
    # As the draft it is allowed: a draft's tree is only a guess, the target still decides every token.
    ids = prompt(6)
    out = tree_speculative_decode(pair("llama")[0], target, ids, max_new_tokens=12, tree=(2, 2))
    assert torch.equal(out.sequences, hf_greedy(pair("llama")[0], ids, 12))
    target.set_attn_implementation("sdpa")
    check_tree_support(target)  # the same model is fine once its attention honours the mask


def test_sliding_window_cache_gets_a_clear_error():
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(0)
    cfg = MistralConfig(
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        sliding_window=4,
    )
    with pytest.raises(TreeUnsupportedError, match="full attention"):
        check_tree_support(MistralForCausalLM(cfg).eval())


def test_bad_arguments():
    target, draft = pair("gpt_neox")
    with pytest.raises(ValueError, match="'specinfer', 'sequoia'"):
        tree_speculative_decode(target, draft, prompt(), temperature=0.7, tree_sampling="beam")
    with pytest.raises(ValueError, match="temperature"):
        tree_speculative_decode(target, draft, prompt(), temperature=-1.0)
    with pytest.raises(ValueError, match="top_p"):
        tree_speculative_decode(target, draft, prompt(), temperature=1.0, top_p=0.0)
    with pytest.raises(TypeError, match="widths per depth"):
        tree_speculative_decode(target, draft, prompt(), tree=4)
    with pytest.raises(ValueError, match=">= 1"):
        tree_speculative_decode(target, draft, prompt(), tree=(2, 0))
    with pytest.raises(TypeError, match="draft"):
        tree_speculative_decode(target, "gpt2", prompt())
