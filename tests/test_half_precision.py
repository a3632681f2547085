"""Equality with greedy decoding in half precision: accepted only at a numerical near-tie of the
target (`core.checks.greedy_divergence`), and a wrong implementation still fails. fp16 and bf16
tiny models on CPU."""

from __future__ import annotations

import pytest
import torch

import specdec_helpers as sd
from specdec_helpers.core.checks import NEAR_TIE, greedy_divergence
from tiny_models import perturbed_copy, tiny_model


VOCAB = 512  # a wider vocabulary: more close logits, so half precision's rounding can flip an argmax


def half_pair(dtype, seed=0):
    target = tiny_model("llama", seed=seed, vocab=VOCAB)
    draft = perturbed_copy(target, 0.3, seed + 1)
    return target.to(dtype).eval(), draft.to(dtype).eval()


@pytest.mark.slow  # 15 half-precision decodes and their checks per dtype: slow on a CPU (the fast tier keeps fp32)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_kit_decoder_passes_and_a_wrong_token_fails(dtype):
    target, draft = half_pair(dtype)
    g = torch.Generator().manual_seed(0)
    ties = 0
    for trial in range(5):
        prompt = torch.randint(1, VOCAB, (1, 8), generator=g)
        for k in (1, 4, 8):
            out = sd.speculative_decode(target, draft, prompt, max_new_tokens=32, num_speculative_tokens=k)
            new = out.sequences[0, prompt.shape[1] :].tolist()
            ok, message = greedy_divergence(target, prompt, new)
            assert ok, (trial, k, message)
            ties += "near-tie" in message
        # A wrong token where the target is sure (largest top-2 gap) must fail, with the gap shown.
        with torch.inference_mode():
            logits = (
                target(torch.cat([prompt, torch.tensor([new[:-1]])], dim=1)).logits[0, prompt.shape[1] - 1 :].float()
            )
        gaps = logits.topk(2).values.diff().abs().squeeze(-1)
        i = int(gaps.argmax())
        wrong = list(new)
        wrong[i] = int(logits[i].argsort()[-3])  # the third choice: never a tie's other side
        ok, message = greedy_divergence(target, prompt, wrong)
        assert not ok and "not a near-tie" in message, message
    if dtype == torch.bfloat16:  # seeded, CPU: this pair diverges from HF greedy once, at a near-tie
        assert ties >= 1, "the bf16 divergence did not reproduce: the test no longer exercises the tolerance"


def test_fp32_is_exact():
    target, _ = half_pair(torch.float32)
    prompt = torch.arange(1, 9).view(1, -1)
    new = target.generate(
        prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=12, pad_token_id=0
    )[0, 8:].tolist()
    assert greedy_divergence(target, prompt, new) == (True, "identical to greedy decoding")
    assert NEAR_TIE[torch.float32] < 1e-3
    assert not greedy_divergence(target, prompt, new[:-1], want=new)[0]  # one token short
