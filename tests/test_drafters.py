"""Drafters on their own: what they propose and how their caches roll back."""

from __future__ import annotations

import pytest
import torch
from tiny_models import VOCAB, hf_greedy, perturbed_copy, tiny_model

import specdec_helpers as sd
from specdec_helpers.core.cache import cache_length


def test_prompt_lookup_proposes_what_followed_the_latest_match():
    drafter = sd.PromptLookupDrafter(max_ngram=2)
    ids = torch.tensor([[7, 8, 9, 1, 7, 8, 5, 6, 2, 7, 8]])
    assert drafter.propose(ids, 3).tokens.tolist() == [5, 6, 2]  # latest "7 8" is followed by 5 6 2
    assert drafter.propose(ids, 10).tokens.tolist() == [5, 6, 2, 7, 8]  # never past the end
    assert drafter.propose(torch.tensor([[1, 2, 3]]), 3).tokens.numel() == 0  # no match, no proposal
    assert drafter.propose(torch.tensor([[4]]), 3).tokens.numel() == 0


def test_prompt_lookup_falls_back_to_shorter_ngrams():
    drafter = sd.PromptLookupDrafter(max_ngram=3, min_ngram=1)
    assert drafter.propose(torch.tensor([[5, 9, 4, 2, 3, 9]]), 2).tokens.tolist() == [4, 2]


def test_prompt_lookup_grows_its_proposal_with_the_match():
    growing = sd.PromptLookupDrafter(max_ngram=3, min_ngram=2, grow_with_match=True)
    # "12 13" matched, and the token before differs (11 vs 20): a 2-token match proposes 4 tokens.
    short = torch.tensor([[10, 11, 12, 13, 14, 15, 16, 20, 12, 13]])
    assert growing.propose(short, 10).tokens.tolist() == [14, 15, 16, 20]
    assert sd.PromptLookupDrafter(3, 2).propose(short, 10).tokens.tolist() == [14, 15, 16, 20, 12, 13]
    # "5 10 11 12" repeats (a 4-token match, past max_ngram): up to 8 tokens, and k still caps it.
    long = torch.tensor([[5, 10, 11, 12, 13, 14, 15, 16, 17, 18, 5, 10, 11, 12]])
    assert growing.propose(long, 16).tokens.tolist() == [13, 14, 15, 16, 17, 18, 5, 10]
    assert growing.propose(long, 3).tokens.tolist() == [13, 14, 15]
    # A match longer than k (counted only up to k) proposes k tokens.
    longer = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8, 20, 21, 1, 2, 3, 4, 5, 6]])
    assert growing.propose(longer, 4).tokens.tolist() == [7, 8, 20, 21]
    # The earlier copy may overlap the text's end ("1 2 1 2 ..."): never past the end of the text.
    periodic = torch.tensor([[9, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2]])
    assert growing.propose(periodic, 16).tokens.tolist() == [1, 2]


def test_hybrid_caps_the_model_but_not_the_lookup():
    model = tiny_model("gpt2")
    hybrid = sd.HybridDrafter(model, model_tokens=2)
    no_match = torch.tensor([[3, 1, 4, 1, 5]])
    proposal = hybrid.propose(no_match, 6)
    assert hybrid.last_source == "model" and proposal.forward_calls == 2
    assert torch.equal(proposal.tokens, hf_greedy(model, no_match, 2)[0, 5:])
    repeated = torch.tensor([[7, 8, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9]])  # "7 8 9" matched: lookup, 6 tokens
    assert hybrid.propose(repeated, 6).tokens.tolist() == [1, 2, 3, 4, 5, 6] and hybrid.last_source == "ngram"
    two = torch.tensor([[3, 8, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9]])  # only "8 9" matched: its lookup grows, 4 tokens
    assert hybrid.propose(two, 6).tokens.tolist() == [1, 2, 3, 4] and hybrid.last_source == "ngram"
    with pytest.raises(ValueError, match="model_tokens"):
        sd.HybridDrafter(model, model_tokens=0)


def test_model_drafter_proposes_its_own_greedy_continuation_and_rolls_back():
    model = tiny_model("gpt2")
    drafter = sd.ModelDrafter(model)
    ids = torch.tensor([[3, 1, 4, 1, 5]])
    proposal = drafter.propose(ids, 4)
    expected = hf_greedy(model, ids, 4)[0, 5:]
    assert torch.equal(proposal.tokens, expected) and proposal.forward_calls == 4
    assert cache_length(drafter.cache) == 5 + 3  # the last draft token has not been fed
    drafter.update(6)
    assert cache_length(drafter.cache) == 6
    # Continue from a text that keeps one draft token and adds a different one: still exact.
    text = torch.cat([ids, expected[:1].view(1, 1), torch.tensor([[9]])], dim=1)
    assert torch.equal(drafter.propose(text, 3).tokens, hf_greedy(model, text, 3)[0, 7:])


def test_model_drafter_rolls_back_only_in_update():
    model = tiny_model("gpt2")
    drafter = sd.ModelDrafter(model)
    ids = torch.tensor([[3, 1, 4, 1, 5]])
    drafter.propose(ids, 3)
    # A second proposal on the same text without an update would read a cache that is not the text's.
    with pytest.raises(ValueError, match=r"without update.*drafter.update\(n_kept\)"):
        drafter.propose(ids, 3)
    drafter.update(4)  # all but the last token kept: as the loop says after a round
    assert torch.equal(drafter.propose(ids, 3).tokens, hf_greedy(model, ids, 3)[0, 5:])
    drafter.update(0)  # a new text starts: nothing of the old one is left
    assert cache_length(drafter.cache) == 0
    other = torch.tensor([[9, 2, 6]])
    assert torch.equal(drafter.propose(other, 2).tokens, hf_greedy(model, other, 2)[0, 3:])


def test_hybrid_passes_every_update_to_its_model_drafter():
    model = tiny_model("gpt2")
    hybrid = sd.HybridDrafter(model)
    ids = torch.tensor([[3, 1, 4, 1, 5]])
    assert hybrid.propose(ids, 4).tokens.numel() == 4 and hybrid.last_source == "model"
    hybrid.update(6)
    assert cache_length(hybrid.model_drafter.cache) == 6
    hybrid.update(0)
    assert cache_length(hybrid.model_drafter.cache) == 0 and hybrid.last_source is None


def test_the_loop_tells_the_drafter_what_was_kept_with_the_features_of_those_positions():
    """The contract of `update`: n_kept = the text before the round + its accepted draft tokens, and
    the target's features of positions n_kept - F .. n_kept - 1, with no gap between rounds."""
    target = tiny_model("llama")
    draft = perturbed_copy(target, scale=0.05)

    class Recording(sd.ModelDrafter):
        needs_target_features = True

        def update(self, n_kept, target_features=None):
            updates.append((n_kept, target_features))
            super().update(n_kept)

    updates, ids = [], torch.randint(1, VOCAB, (1, 6), generator=torch.Generator().manual_seed(3))
    out = sd.speculative_decode(target, Recording(draft), ids, max_new_tokens=20, num_speculative_tokens=3)
    assert updates[0] == (0, None)  # a new text
    with torch.inference_mode():
        hidden = target(out.sequences, output_hidden_states=True).hidden_states[-1]
    length, known = ids.shape[1], 0
    for (n_kept, features), step in zip(updates[1:], out.steps):
        assert n_kept == length + step.accepted
        assert n_kept - features.shape[1] == known  # picks up where the last update ended
        assert torch.allclose(features, hidden[:, known:n_kept], atol=1e-4)
        length, known = length + len(step.emitted), n_kept
    assert len(updates) == 1 + len(out.steps) and any(step.accepted < len(step.draft) for step in out.steps)


def test_drafter_protocol():
    assert isinstance(sd.PromptLookupDrafter(), sd.Drafter)
    assert isinstance(sd.ModelDrafter(tiny_model("opt")), sd.Drafter)


def test_drafters_declare_what_they_need():
    model = tiny_model("opt")
    assert sd.ModelDrafter(model).model is model and sd.HybridDrafter(model).model is model
    assert sd.PromptLookupDrafter().model is None
    assert not any(
        d.needs_target_features for d in (sd.ModelDrafter(model), sd.PromptLookupDrafter(), sd.HybridDrafter(model))
    )
    assert sd.PromptLookupDrafter(min_ngram=2, grow_with_match=True).label == "prompt-lookup:2"


def test_an_undeclared_drafter_is_told_how_to_declare():
    class Undeclared:  # the two methods, but none of the declarations the loops read
        def propose(self, input_ids, k, sampler=None): ...
        def update(self, n_kept, target_features=None): ...

    with pytest.raises(TypeError, match="subclass of specdec_helpers.Drafter"):
        sd.speculative_decode(tiny_model("opt"), Undeclared(), torch.tensor([[1, 2, 3]]), max_new_tokens=2)
