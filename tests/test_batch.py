"""Batched speculative decoding (core/batch.py): every row equals its prompt's own decoding.

Greedy: each row of a random batch (1-16 prompts of mixed lengths, k in 0..6, an EOS that ends some rows
early, per-row budgets) equals ``greedy_decode`` of that prompt alone (batch of 1, the chain loop), over
four model families. In fp32 a batch's logits may differ from one row's by rounding (other matmul
shapes); where a token differs, `checks.greedy_divergence` must show a numerical near-tie (top-2 logit
gap <= 1e-4), or the test fails. Sampling: a chi-square test of the first two tokens of batched rows
against the target's exact distribution, with a deliberately wrong acceptance rule as a control.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from test_sampling import fit, lossy_argmax
from tiny_models import FAMILIES, perturbed_copy, tiny_model

import specdec_helpers as sd
from specdec_helpers.core import batch
from specdec_helpers.core.checks import greedy_divergence
from specdec_helpers.core.sampling import Sampler

ALPHA = 1e-3


def random_case(family: str, seed: int, max_batch: int = 16):
    """A target, a draft (a perturbed copy, or prompt lookup), prompts of mixed lengths, per-row budgets, an EOS
    that the target's greedy text reaches early for the first prompt, and k."""
    rng = random.Random(seed)
    target = tiny_model(family, seed=seed)
    draft = (
        perturbed_copy(target, scale=rng.choice([0.05, 0.3]), seed=seed)
        if rng.random() < 0.75
        else sd.PromptLookupDrafter(max_ngram=2)
    )
    size = rng.randint(1, max_batch)
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(1, 64, (rng.randint(1, 12),), generator=g) for _ in range(size)]
    budgets = [rng.choice([0, 1, 5, 12, 24]) if rng.random() < 0.3 else 24 for _ in range(size)]
    first = sd.greedy_decode(target, prompts[0].view(1, -1), max_new_tokens=24, eos_token_id=[]).new_tokens.tolist()
    eos = first[rng.randint(2, 10)]  # the first prompt ends early at this EOS (and likely others too)
    return target, draft, prompts, budgets, eos, rng.randint(0, 6)


def assert_rows_are_greedy(target, prompts, budgets, eos, out):
    """Each row equals its prompt's own greedy decoding; a differing token must be a numerical near-tie."""
    ended_early = 0
    for b, (prompt, budget) in enumerate(zip(prompts, budgets)):
        got = out.new_tokens[b].tolist()
        want = sd.greedy_decode(target, prompt.view(1, -1), max_new_tokens=budget, eos_token_id=eos).new_tokens.tolist()
        if got != want:
            ok, message = greedy_divergence(target, prompt, got)
            assert ok, f"row {b}: {message}"
            # A near-tie may change where the text ends; it must still end at EOS or at the budget, not before.
            assert eos not in got[:-1] and (len(got) == budget or got[-1] == eos), f"row {b} ends wrongly: {got}"
            print(f"row {b}: {message}")
        ended_early += len(got) < budget
        assert torch.equal(out.row(b)[0, : prompt.numel()], prompt)
    assert out.stats.new_tokens == sum(n.numel() for n in out.new_tokens)
    return ended_early


def check_case(family, seed, max_batch=16):
    target, draft, prompts, budgets, eos, k = random_case(family, seed, max_batch)
    out = sd.speculative_decode(
        target, draft, prompts, max_new_tokens=budgets, num_speculative_tokens=k, eos_token_id=eos
    )
    assert isinstance(out, batch.BatchDecodeOutput)
    return assert_rows_are_greedy(target, prompts, budgets, eos, out)


@pytest.mark.parametrize(
    "family", [pytest.param(f, marks=[] if f in ("gpt2", "llama") else pytest.mark.slow) for f in FAMILIES]
)  # the other two in the slow tier
def test_batched_rows_equal_their_own_greedy_decoding(family):
    ended = sum(check_case(family, seed) for seed in range(3))
    assert ended, "no row ended early at EOS: the EOS case went untested"


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_batched_rows_equal_greedy_many_cases(family):
    for seed in range(3, 23):
        check_case(family, seed)


@pytest.mark.parametrize("k", [k if k == 4 else pytest.param(k, marks=pytest.mark.slow) for k in range(1, 7)])
def test_every_k_on_a_batch_of_16(k):
    target = tiny_model("llama", seed=3)
    draft = perturbed_copy(target, scale=0.1, seed=4)
    g = torch.Generator().manual_seed(k)
    prompts = [torch.randint(1, 64, (n,), generator=g) for n in range(1, 17)]
    out = sd.speculative_decode(target, draft, prompts, max_new_tokens=16, num_speculative_tokens=k, eos_token_id=[])
    assert_rows_are_greedy(target, prompts, [16] * 16, [], out)
    assert min(s.target_calls for s in out.row_stats) < 16, "no row finished early: nothing speculative was tested"
    first_round = {s.accepted_per_step[0] for s in out.row_stats}
    assert len(first_round) > 1, "every row accepted the same count: per-row rollback went untested"


def test_padded_tensor_with_mask_equals_list_of_prompts():
    target = tiny_model("gpt2", seed=5)
    draft = perturbed_copy(target, seed=6)
    prompts = [torch.tensor([5, 6, 7]), torch.tensor([9, 8, 7, 6, 5, 4]), torch.tensor([11])]
    listed = sd.speculative_decode(target, draft, prompts, max_new_tokens=10, num_speculative_tokens=3)
    left = listed.sequences[:, :6]  # left padded, as a tokenizer with padding_side="left" gives
    mask = (torch.arange(6) >= torch.tensor([3, 0, 5])[:, None]).long()
    padded = sd.speculative_decode(
        target, draft, left, attention_mask=mask, max_new_tokens=10, num_speculative_tokens=3
    )
    assert [n.tolist() for n in padded.new_tokens] == [n.tolist() for n in listed.new_tokens]
    one = sd.speculative_decode(
        target,
        draft,
        prompts[1].view(1, -1),
        attention_mask=torch.ones(1, 6),
        max_new_tokens=10,
        num_speculative_tokens=3,
    )  # a mask sends even 1 row here
    assert isinstance(one, batch.BatchDecodeOutput) and torch.equal(one.row(0), listed.row(1))
    greedy = sd.greedy_decode(target, left, attention_mask=mask, max_new_tokens=10)
    assert [n.tolist() for n in greedy.new_tokens] == [n.tolist() for n in listed.new_tokens]
    assert greedy.stats.proposed == 0 and greedy.stats.target_calls == 10


def test_hf_generate_with_left_padding_agrees():
    """The batched rows also match HF's own batched greedy generate (independent of our single-row loop)."""
    target = tiny_model("opt", seed=8)
    prompts = [torch.tensor([3, 4, 5, 6]), torch.tensor([7, 8])]
    ids = torch.tensor([[3, 4, 5, 6], [0, 0, 7, 8]])
    mask = torch.tensor([[1, 1, 1, 1], [0, 0, 1, 1]])
    hf = target.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=8, pad_token_id=0)
    ours = sd.speculative_decode(target, perturbed_copy(target), prompts, max_new_tokens=8, num_speculative_tokens=4)
    assert torch.equal(ours.sequences, hf)


@pytest.mark.parametrize("draft", ["hybrid", "auto"])
def test_unsupported_batches_are_refused_clearly(draft):
    target = tiny_model("llama")
    prompts = [torch.tensor([1, 2]), torch.tensor([3])]
    if draft == "hybrid":
        with pytest.raises(TypeError, match="PromptLookupDrafter"):
            sd.speculative_decode(target, sd.HybridDrafter(perturbed_copy(target)), prompts)
    else:
        with pytest.raises(TypeError, match="int num_speculative_tokens"):
            sd.speculative_decode(target, perturbed_copy(target), prompts, num_speculative_tokens="auto")
    with pytest.raises(ValueError, match="one per row"):
        sd.speculative_decode(target, perturbed_copy(target), prompts, max_new_tokens=[3, 4, 5])
    with pytest.raises(ValueError, match="use_cache=True"):
        sd.speculative_decode(target, perturbed_copy(target), prompts, use_cache=False)


# ----------------------------------------------------------------------------- sampling


def exact_two(target, prompt, sampler) -> np.ndarray:
    """P(first two new tokens = (a, b)) for ``prompt``, from the target's warped distributions."""
    vocab = target.config.vocab_size
    first = sampler.probs(target(input_ids=prompt.view(1, -1)).logits[0, -1:])[0]
    joint = np.zeros((vocab, vocab))
    for a in range(vocab):
        ids = torch.cat([prompt, torch.tensor([a])]).view(1, -1)
        joint[a] = float(first[a]) * sampler.probs(target(input_ids=ids).logits[0, -1:])[0].numpy()
    return joint


def sampled_pairs(target, draft, prompts, runs, size=16, seed=0):
    """Counts of the first two tokens, per prompt, over ``runs`` batches that alternate ``prompts``."""
    g = torch.Generator().manual_seed(seed)
    vocab = target.config.vocab_size
    counts = [np.zeros((vocab, vocab)) for _ in prompts]
    rows = [prompts[i % len(prompts)] for i in range(size)]
    for _ in range(runs):
        out = sd.speculative_decode(
            target,
            draft,
            rows,
            max_new_tokens=3,
            num_speculative_tokens=2,
            temperature=1.0,
            generator=g,
            eos_token_id=[],
        )
        for i, new in enumerate(out.new_tokens):
            counts[i % len(prompts)][new[0], new[1]] += 1
    return counts


@torch.inference_mode()
@pytest.mark.slow  # thousands of batched decodes; the fast tier keeps the exact per-row replay below
@pytest.mark.parametrize("rule", ["exact", "wrong"])
def test_batched_sampling_follows_the_target(rule, monkeypatch):
    """Rows of different lengths, sampled together, each follow their own target distribution; the
    control (keep draft tokens while they equal the target's argmax) must be rejected by the same test."""
    target = tiny_model("llama", seed=1, vocab=8)
    draft = tiny_model("llama", seed=2, vocab=8, layers=1)
    prompts = [torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6, 7, 1, 2, 3])]
    if rule == "wrong":
        monkeypatch.setattr(batch, "accept_sampled", lossy_argmax)
    counts = sampled_pairs(target, draft, prompts, runs=120)
    results = [fit(c.ravel(), exact_two(target, p, Sampler(1.0)).ravel()) for c, p in zip(counts, prompts)]
    if rule == "exact":
        for r in results:
            assert r["impossible"] == 0 and r["pvalue"] > ALPHA, r
    else:
        assert min(r["pvalue"] for r in results) < 1e-6, results


def test_per_row_generators_replay_single_row_sampling():
    """With one generator per row, each row draws what the same prompt alone would with that generator."""
    target = tiny_model("gpt_neox", seed=3)
    draft = perturbed_copy(target, scale=0.3, seed=4)
    prompts = [torch.tensor([5, 6, 7, 8]), torch.tensor([9]), torch.tensor([1, 2, 3, 4, 5, 6, 7])]
    gens = [torch.Generator().manual_seed(s) for s in (10, 11, 12)]
    out = sd.speculative_decode(
        target,
        draft,
        prompts,
        max_new_tokens=[12, 7, 20],
        num_speculative_tokens=3,
        temperature=0.9,
        top_k=20,
        generator=gens,
        eos_token_id=[],
    )
    for b, (p, m, s) in enumerate(zip(prompts, [12, 7, 20], (10, 11, 12))):
        alone = sd.speculative_decode(
            target,
            draft,
            p.view(1, -1),
            max_new_tokens=m,
            num_speculative_tokens=3,
            temperature=0.9,
            top_k=20,
            generator=torch.Generator().manual_seed(s),
            eos_token_id=[],
        )
        assert out.new_tokens[b].tolist() == alone.new_tokens.tolist(), b


def test_sequences_keep_the_padded_input_as_hf_generate_does():
    target = tiny_model("gpt_neox", seed=4)
    ids = torch.tensor([[0, 0, 0, 7, 8, 9], [0, 3, 4, 5, 6, 7]])
    mask = (ids != 0).long()
    out = sd.speculative_decode(
        target,
        perturbed_copy(target),
        ids,
        attention_mask=mask,
        max_new_tokens=6,
        num_speculative_tokens=2,
        eos_token_id=[],
    )
    hf = target.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=6, pad_token_id=0)
    assert torch.equal(out.sequences, hf)


def test_a_missing_rollback_is_caught(monkeypatch):
    """The greedy check can fail: rows that keep their rejected draft positions in the cache go wrong."""
    from specdec_helpers.core import batch_rows

    def keep_everything(self, lengths):
        self.seen = torch.minimum(lengths.to(self.seen.device), self.seen)  # counts rolled back, cache not

    monkeypatch.setattr(batch_rows.RowCache, "keep", keep_everything)
    with pytest.raises(AssertionError):
        check_case("llama", seed=1)


@pytest.mark.parametrize("family", FAMILIES)
def test_packing_the_cache_keeps_rows_greedy(family, monkeypatch):
    """Packing each row's live positions together (normally rare) after every round changes no row."""
    from specdec_helpers.core import batch_rows

    packs = []
    pack = batch_rows.RowCache.pack
    monkeypatch.setattr(batch_rows, "PACK_SLACK", -(10**6))  # pack at every rollback
    monkeypatch.setattr(batch_rows.RowCache, "pack", lambda self: (packs.append(1), pack(self)))
    check_case(family, seed=100)
    assert packs, "the cache was never packed"


def test_a_row_ended_at_eos_is_padded_as_hf_generate_pads_it():
    target = tiny_model("gpt2", seed=3)
    target.generation_config.pad_token_id = None  # HF then pads with the EOS id
    ids = torch.tensor([[0, 0, 9, 10, 11], [3, 4, 5, 6, 7]])
    mask = (torch.arange(5) >= torch.tensor([2, 0])[:, None]).long()
    eos = sd.greedy_decode(target, ids[1:], max_new_tokens=12, eos_token_id=[]).new_tokens.tolist()[3]
    out = sd.speculative_decode(
        target, perturbed_copy(target), ids, attention_mask=mask, max_new_tokens=12, eos_token_id=eos
    )
    hf = target.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=12, eos_token_id=eos)
    assert out.new_tokens[1].numel() == 4 and torch.equal(out.sequences, hf)
