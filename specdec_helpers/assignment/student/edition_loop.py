"""The student edition of `core/reference_loop.py`: greedy speculative decoding of one prompt is what the students
write (notebooks 02-04), so it is refused here, and the greedy baseline is Hugging Face's ``generate`` (no decode
loop of the kit's own). What is left to the kit's loop here samples with the student's own scoring pass
(``score=``), which reads no cache: the target re-reads the text every round.

Never imported where it lies: `release`, the grader's view and the student kit's `check` put it in place of
``core/reference_loop.py`` (``grading/editions.SWAPS``), so it imports only what that module may import.
"""

from __future__ import annotations

import time

import torch

from specdec_helpers.core import checks
from specdec_helpers.core.rounds import DecodeOutput, DecodeStats, Step, cut_at_eos
from specdec_helpers.core.timing import sync_device

__all__ = ["check_batch", "check_decoding", "check_tree", "greedy_baseline", "keep_target_cache"]


def check_decoding(temperature, top_k) -> None:
    """Greedy and near-greedy speculative decoding are refused (notebook 04)."""
    if temperature < checks.STUDENT_MIN_TEMPERATURE or top_k == 1:  # near-greedy sampling is greedy decoding
        raise checks.student_edition(
            f"speculative decoding at temperature={temperature}, top_k={top_k} (greedy or "
            f"nearly so; the student edition samples at temperature >= "
            f"{checks.STUDENT_MIN_TEMPERATURE})",
            "04",
            "generate_ids",
        )


def check_tree(sampler, model, widths) -> None:
    """A greedy chain-shaped tree is notebook 04's graded decode loop: refused."""
    if sampler.temperature < checks.STUDENT_MIN_TEMPERATURE and (model is None or max(widths) == 1):
        raise checks.student_edition(
            "greedy tree decoding of a chain (every width 1, or a drafter that proposes chains)", "04", "generate_ids"
        )


def check_batch(draft, prompts, samplers) -> None:
    """One prompt, greedy, with a draft is notebook 04's graded decode loop: refused."""
    if draft is not None and len(prompts) == 1 and samplers[0].temperature < checks.STUDENT_MIN_TEMPERATURE:
        raise checks.student_edition("greedy speculative decoding of one prompt", "04", "generate_ids")


def keep_target_cache(target_cache, n_kept: int) -> None:
    """Notebook 04's rollback is yours: the kit's loop here verifies with your scoring pass, which reads no cache."""


def greedy_baseline(decode, no_draft, target, input_ids, **options):
    """Greedy decoding by Hugging Face's ``generate``; a batch (notebook 08's baseline: no draft, nothing graded)
    goes to the batched loop. (``use_cache``, ``compile`` and ``graphs`` have no say over ``generate``.)"""
    max_new_tokens, eos_token_id = options.get("max_new_tokens", 100), options.get("eos_token_id")
    attention_mask = options.get("attention_mask")
    if checks.is_batch(input_ids, attention_mask):
        return decode(
            target,
            no_draft,
            input_ids,
            attention_mask=attention_mask,
            max_new_tokens=max_new_tokens,
            eos_token_id=eos_token_id,
        )
    return _generate_greedy(target, input_ids, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id)


@torch.inference_mode()
def _generate_greedy(target, input_ids, *, max_new_tokens: int = 100, eos_token_id=None) -> DecodeOutput:
    """Greedy decoding by Hugging Face ``generate``, with the same output and counters as the kit's loop."""
    input_ids, max_new_tokens, eos = checks.decode_args(target, input_ids, max_new_tokens, eos_token_id)
    sync_device(input_ids.device)
    start = time.perf_counter()
    out = target.generate(
        input_ids,
        attention_mask=torch.ones_like(input_ids),
        do_sample=False,
        max_new_tokens=max_new_tokens,
        eos_token_id=eos or None,
        pad_token_id=eos[0] if eos else 0,
    )
    sync_device(input_ids.device)
    seconds = time.perf_counter() - start
    new = cut_at_eos(out[0, input_ids.shape[1] :].tolist(), set(eos))[:max_new_tokens]
    stats = DecodeStats(new_tokens=len(new), wall_time_s=seconds)
    for _ in new:  # one target pass per token, each a round that drafted nothing
        stats.record_round(0, 0, 0)
    sequences = torch.cat([input_ids, input_ids.new_tensor([new])], dim=1)
    return DecodeOutput(sequences, stats, [Step([], 0, [token]) for token in new])
