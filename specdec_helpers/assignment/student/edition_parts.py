"""The student edition of `core/reference_parts.py`: the kit's greedy building blocks are what the students write
(notebooks 02-03), so here each raises `StudentEditionError` naming its notebook, and the draft model re-reads
the text every round (no draft-cache rollback: notebook 02's exercise).

Never imported where it lies: `release`, the grader's view and the student kit's `check` put it in place of
``core/reference_parts.py`` (``grading/editions.SWAPS``), so it imports only what that module may import.
"""

from __future__ import annotations

import torch

from specdec_helpers.core.cache import new_cache
from specdec_helpers.core.checks import StudentEditionError, student_edition
from specdec_helpers.core.rounds import VerifyResult
from specdec_helpers.core.sampling import Sampler

__all__ = ["accept_greedy", "check_drafting", "keep_draft_cache", "score_draft", "verify_tokens_vectorized"]


def score_draft(target, input_ids: torch.Tensor, draft_tokens: torch.Tensor, cache=None, features: bool = False):
    """The target's scoring pass: not in the student edition (notebook 03)."""
    raise StudentEditionError(
        "the target's scoring pass (score_draft) is not in the student edition of the kit: it is what you write in "
        "notebook 03 (`verify_tokens_vectorized`: one target pass, the k + 1 rows of logits that judge the draft). "
        'To sample with the kit\'s loop, pass yours: decoder = nb.your_decoder("06", pair), then '
        "sd.speculative_decode(..., temperature=T, score=nb.your_scoring(decoder)) (notebook 06 does)."
    )


def accept_greedy(logits: torch.Tensor, draft_tokens: torch.Tensor) -> VerifyResult:
    """Greedy acceptance: not in the student edition (notebook 03)."""
    raise student_edition("greedy acceptance (accept_greedy)", "03", "accept_draft")


@torch.inference_mode()
def verify_tokens_vectorized(target, input_ids: torch.Tensor, draft_tokens: torch.Tensor) -> VerifyResult:
    """Greedy verification: not in the student edition (notebook 03)."""
    raise student_edition("greedy verification (verify_tokens_vectorized)", "03", "verify_tokens_vectorized")


def keep_draft_cache(drafter, n_kept: int) -> None:
    """No draft-cache rollback here (notebook 02's exercise): each round re-reads the text."""
    drafter.cache = new_cache(drafter.model)


def check_drafting(sampler: Sampler) -> None:
    """Greedy drafting is notebook 02's exercise: refused."""
    if sampler.greedy:
        raise student_edition("greedy drafting (ModelDrafter)", "02", "generate_draft_tokens")
