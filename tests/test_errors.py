"""Bad input gets a clear ValueError/TypeError that names the problem and the fix."""

from __future__ import annotations

import pytest
import torch
from tiny_models import tiny_model

import specdec_helpers as sd


@pytest.fixture(scope="module")
def target():
    return tiny_model("gpt_neox")


IDS = torch.tensor([[1, 2, 3]])


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"num_speculative_tokens": 0}, ValueError, "num_speculative_tokens must be >= 1"),
        ({"num_speculative_tokens": -3}, ValueError, "num_speculative_tokens must be >= 1"),
        ({"num_speculative_tokens": 2.5}, TypeError, "num_speculative_tokens must be an int"),
        ({"num_speculative_tokens": True}, TypeError, "num_speculative_tokens must be an int"),
        ({"max_new_tokens": -1}, ValueError, "max_new_tokens must be >= 0"),
        ({"max_new_tokens": "10"}, TypeError, "max_new_tokens must be an int"),
        ({"temperature": -0.5}, ValueError, "temperature must be a number >= 0"),
        ({"temperature": float("nan")}, ValueError, "temperature must be a number >= 0"),
        ({"temperature": 1.0, "top_p": 0.0}, ValueError, r"top_p must be in \(0, 1\]"),
        ({"temperature": 1.0, "top_p": 1.5}, ValueError, r"top_p must be in \(0, 1\]"),
        ({"temperature": 1.0, "top_k": -1}, ValueError, "top_k must be an int >= 0"),
        ({"eos_token_id": "eos"}, TypeError, "eos_token_id must be an int or a list of ints"),
        ({"eos_token_id": [1, 2.0]}, TypeError, "eos_token_id must be an int or a list of ints"),
        ({"generator": 42}, TypeError, "generator must be a torch.Generator"),
        ({"max_new_tokens": 500}, ValueError, "more than the target's context of 256"),
    ],
)
def test_bad_arguments(target, kwargs, error, message):
    with pytest.raises(error, match=message):
        sd.speculative_decode(target, target, IDS, **kwargs)


@pytest.mark.parametrize(
    "ids, error, message",
    [
        (torch.tensor([[]], dtype=torch.long), ValueError, "the prompt is empty"),
        ([], ValueError, "the prompt is empty"),  # once: "must hold integer token ids, got dtype torch.float32"
        ([[1, 2], [], [3]], ValueError, "prompt 1 of the 3 is empty"),  # a list of prompts: names the empty one
        (torch.tensor([[1.0, 2.0]]), TypeError, "must hold integer token ids"),
        ("hello", TypeError, "must be a torch tensor of token ids"),
        (torch.tensor([[1, 2, 64]]), ValueError, r"token id 64 is outside the target's vocabulary \[0, 64\)"),
        (torch.tensor([[1, -2]]), ValueError, "token id -2 is outside"),
        (torch.tensor([[1, 2], [3, 64]]), ValueError, "token id 64 is outside"),  # a batch: each row is checked
        (torch.ones(1, 1, 2, dtype=torch.long), ValueError, "shape"),
        (torch.ones(1, 300, dtype=torch.long), ValueError, r"prompt \(300 tokens\).*context of 256"),
    ],
)
def test_bad_prompts(target, ids, error, message):
    with pytest.raises(error, match=message):
        sd.speculative_decode(target, target, ids, max_new_tokens=5)
    with pytest.raises(error, match=message):
        sd.greedy_decode(target, ids, max_new_tokens=5)


def test_one_dimensional_prompt_is_accepted(target):
    out = sd.speculative_decode(target, target, torch.tensor([1, 2, 3]), max_new_tokens=4)
    assert out.sequences.shape == (1, 7)


def test_draft_with_smaller_vocabulary(target):
    small = tiny_model("gpt_neox", vocab=32)
    with pytest.raises(ValueError, match="draft cannot represent the target's tokens"):
        sd.speculative_decode(target, small, torch.tensor([[1, 40, 3]]), max_new_tokens=4)


def test_draft_with_padded_vocabulary_is_fine(target):
    padded = tiny_model("gpt_neox", vocab=80)
    out = sd.speculative_decode(target, padded, IDS, max_new_tokens=12, num_speculative_tokens=3)
    reference = sd.greedy_decode(target, IDS, max_new_tokens=12)
    assert torch.equal(out.sequences, reference.sequences)
    assert all(t < 64 for s in out.steps for t in s.draft)  # padding rows are never proposed


def test_wrong_draft_and_target_types(target):
    with pytest.raises(TypeError, match="draft must be a Hugging Face causal LM or a Drafter"):
        sd.speculative_decode(target, "EleutherAI/pythia-160m", IDS)
    with pytest.raises(TypeError, match="target must be a Hugging Face causal LM"):
        sd.speculative_decode(torch.nn.Linear(2, 2), target, IDS)


def test_training_mode_target_is_refused():
    model = tiny_model("gpt2").train()
    with pytest.raises(ValueError, match=r"call target.eval\(\)"):
        sd.speculative_decode(model, model, IDS)


def test_prompt_lookup_arguments():
    with pytest.raises(ValueError, match="min_ngram"):
        sd.PromptLookupDrafter(max_ngram=1, min_ngram=2)
    with pytest.raises(TypeError, match="max_ngram must be an int"):
        sd.PromptLookupDrafter(max_ngram="3")
