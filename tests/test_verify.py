"""Verification in isolation: the off-by-one, correction and bonus tokens."""

from __future__ import annotations

import torch
from tiny_models import hf_greedy, tiny_model

import specdec_helpers as sd
from specdec_helpers.core.verify import accept_greedy


def test_vectorized_verification_accepts_targets_own_tokens():
    target = tiny_model("gpt_neox")
    ids = torch.tensor([[5, 9, 2, 33]])
    continuation = hf_greedy(target, ids, 6)[0, 4:]
    result = sd.verify_tokens_vectorized(target, ids, continuation[:5])
    assert result.num_accepted == result.num_proposed == 5  # every draft token passed: the 6th is the bonus
    assert torch.equal(result.tokens, continuation)  # 5 accepted + bonus == 6 greedy tokens
    assert result.accepted_position == 5 and torch.equal(result.accepted_tokens, continuation[:5])


def test_first_mismatch_gives_correction():
    target = tiny_model("llama")
    ids = torch.tensor([[1, 2, 3]])
    continuation = hf_greedy(target, ids, 4)[0, 3:]
    wrong = continuation.clone()
    wrong[2] = (wrong[2] + 1) % 64
    result = sd.verify_tokens_vectorized(target, ids, wrong)
    assert result.num_accepted == 2 and result.num_proposed == 4
    assert torch.equal(result.tokens, continuation[:3])  # the correction is the target's own token


def test_shifted_comparison_would_reject():
    """The classic bug: comparing draft j with the logits at start + j instead of start - 1 + j."""
    target = tiny_model("gpt2")
    ids = torch.tensor([[4, 8, 15, 16]])
    draft = hf_greedy(target, ids, 5)[0, 4:]
    with torch.no_grad():
        logits = target(torch.cat([ids, draft.view(1, -1)], 1)).logits[0]
    right = accept_greedy(logits[3:9], draft)
    shifted = accept_greedy(logits[4:9], draft[:4])
    assert right.num_accepted == 5
    assert shifted.num_accepted < 4


def test_empty_draft_is_a_plain_step():
    target = tiny_model("opt")
    ids = torch.tensor([[3, 1, 4]])
    result = sd.verify_tokens_vectorized(target, ids, torch.tensor([], dtype=torch.long))
    assert result.num_proposed == 0 and result.tokens.tolist() == hf_greedy(target, ids, 1)[0, 3:].tolist()
