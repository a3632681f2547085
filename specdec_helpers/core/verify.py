"""Verification: one target pass scores every draft token (`score_draft`), then greedy matching (`accept_greedy`)
or rejection sampling (`accept_sampled`).

The greedy parts are the kit's own answers to notebooks 02-03, in `reference_parts`. In the student edition that
module is replaced by one whose parts raise (``release`` also scans the kit for any scoring pass), so there
`speculative_decode(..., score=...)` samples with the student's own scoring pass (written in notebook 03, used in 06:
``nb.your_scoring(decoder)``). They are named here for the tree and batch loops and the graded cells; the chain loop
(`decode._rounds`) looks `reference_parts.score_draft` up at each call, so the edition in place is the one that runs.
"""

from __future__ import annotations

import torch

from specdec_helpers.core.cache import last_hidden  # noqa: F401 - re-exported
from specdec_helpers.core.reference_parts import accept_greedy, score_draft, verify_tokens_vectorized  # noqa: F401
from specdec_helpers.core.rounds import VerifyResult
from specdec_helpers.core.sampling import Sampler


def accept_sampled(
    logits: torch.Tensor, draft_tokens: torch.Tensor, draft_probs: torch.Tensor | None, sampler: Sampler
) -> VerifyResult:
    """Rejection sampling (Leviathan et al. 2023, Alg. 1): output follows the target's distribution.

    Draft token ``x_j`` drawn from ``q_j`` is accepted with probability ``min(1, p_j(x)/q_j(x))``; at the
    first rejection the replacement is drawn from ``max(p_j - q_j, 0)`` normalised; if all pass, the
    bonus comes from ``p_k``. ``draft_probs=None`` means a deterministic drafter (one-hot ``q``).
    """
    p = sampler.probs(logits)  # [k + 1, V], warped exactly like the draft's q
    k = draft_tokens.numel()
    x = draft_tokens.to(p.device)
    rows = torch.arange(k, device=p.device)
    p_x = p[rows, x]
    if draft_probs is None:
        q = torch.zeros_like(p[:k])
        q[rows, x] = 1.0
    else:
        q = _match_vocab(draft_probs.to(p.device, p.dtype), p.shape[-1])
    q_x = q[rows, x]
    # Accept iff u < p/q, written as u * q < p so q == 0 cannot divide by zero.
    accepted = sampler.uniform(k, p.device) * q_x < p_x
    n = accepted.int().cumprod(0).sum().view(1)  # stays on the device until the one read below
    # Row n: the residual max(p_n - q_n, 0) after a rejection at n, or p_k (the bonus) when all k passed;
    # picked on the device, so the round reads the host once (tests/test_sync_count.py).
    row = torch.cat([(p[:k] - q).clamp_min(0), p[k:]]).index_select(0, n)
    total = row.sum(-1, keepdim=True)
    # total == 0 only if p == q up to rounding, where rejection has ~zero probability anyway: then p_n itself.
    dist = torch.where(total > 0, row / total.clamp_min(torch.finfo(row.dtype).tiny), p.index_select(0, n))
    last = sampler.sample(dist)
    n, *host = torch.cat([n, x, last]).tolist()
    return VerifyResult(torch.cat([x[:n], last]), n, k, host[:n] + host[k:])


def _match_vocab(probs: torch.Tensor, vocab: int) -> torch.Tensor:
    """Cut or zero-pad the draft's distribution to the target's (padded) vocabulary width."""
    width = probs.shape[-1]
    if width >= vocab:
        return probs[..., :vocab]
    return torch.nn.functional.pad(probs, (0, vocab - width))


def accept(logits, draft_tokens, draft_probs, sampler: Sampler) -> VerifyResult:
    """Greedy matching when the sampler is greedy, rejection sampling otherwise."""
    if sampler.greedy:
        return accept_greedy(logits, draft_tokens)
    return accept_sampled(logits, draft_tokens, draft_probs, sampler)
