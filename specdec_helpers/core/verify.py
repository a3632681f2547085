"""Verification: one target pass scores every draft token, then greedy matching or rejection sampling.

The off-by-one, once: a causal LM's logits at position ``i`` predict the token at ``i + 1``.
Draft token ``j`` sits at position ``start + j`` (``start`` = length of the verified text), so the
target's opinion about it is in the logits at position ``start - 1 + j``, never ``start + j``.
Comparing with ``start + j`` checks each draft token against the target's guess for the *next*
token, and acceptance collapses to about 1/vocabulary (PA3 students saw ~1/k).
In the chain loops `score_draft` is the only function that does this indexing (the tree and batch loops,
`core/token_tree.py` and `core/batch.py`, index their own layouts). It is the heart of notebook 03, so the
student edition holds none (``release`` scans for one): there `speculative_decode(..., score=...)` samples with
the student's own scoring pass (notebook 06: ``nb.your_scoring(decoder)``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from specdec_helpers.core.cache import cache_kwargs, cache_length
from specdec_helpers.core.checks import (  # checks imports nothing from here
    StudentEditionError,  # noqa: F401 - raised by the student edition's score_draft
    check_input_ids,
    student_edition,  # noqa: F401 - raised by the student edition (`release` keeps only its STUDENT EDITION parts)
)
from specdec_helpers.core.sampling import Sampler


def score_draft(target, input_ids: torch.Tensor, draft_tokens: torch.Tensor, cache=None, features: bool = False):
    """Logits ``[k + 1, vocab]`` from ONE target pass; row ``j`` judges draft token ``j``.

    Rows ``0..k-1`` are the target's distribution for draft positions ``0..k-1``; row ``k`` is the
    distribution for the token after the whole draft (the bonus token). ``input_ids`` is the
    verified text ``[1, start]``; with a ``cache``, only the positions it does not hold yet are fed.
    ``features=True`` returns ``(logits, hidden)`` instead: the target's last hidden states of every
    fed position ``[1, fed, H]`` (the last ``fed`` positions of text + draft), for drafts that read them.
    """
    ### BEGIN INSTRUCTOR ONLY
    k = draft_tokens.numel()
    fed = input_ids[:, cache_length(cache):]
    if k:
        fed = torch.cat([fed, draft_tokens.view(1, -1).to(fed.device)], dim=1)
    # The last k + 1 positions are start - 1 .. start + k - 1: exactly the off-by-one shift.
    out = target(input_ids=fed, **cache_kwargs(target, cache), use_cache=cache is not None, logits_to_keep=k + 1,
                 output_hidden_states=features)
    logits = out.logits[0, -(k + 1):]
    return (logits, last_hidden(out)) if features else logits
    ### STUDENT EDITION
    # raise StudentEditionError(
    #     "the target's scoring pass (score_draft) is not in the student edition of the kit: it is what you write in "
    #     "notebook 03 (`verify_tokens_vectorized`: one target pass, the k + 1 rows of logits that judge the draft). "
    #     "To sample with the kit's loop, pass yours: decoder = nb.your_decoder(\"06\", pair), then "
    #     "sd.speculative_decode(..., temperature=T, score=nb.your_scoring(decoder)) (notebook 06 does).")
    ### END INSTRUCTOR ONLY


def last_hidden(out) -> torch.Tensor:
    """The last hidden states ``[B, T, H]`` of an ``output_hidden_states=True`` pass: after the final norm,
    the input of the head (transformers 4.x and 5.x alike; read here only, for drafts that use them)."""
    return out.hidden_states[-1]


@dataclass
class VerifyResult:
    """What one verification pass decided.

    ``tokens`` = the ``num_accepted`` accepted draft tokens followed by one token from the target:
    the *correction* at the first mismatch, or the *bonus* token when every draft token passed.
    """

    tokens: torch.Tensor  # LongTensor [num_accepted + 1]
    num_accepted: int
    num_proposed: int
    token_list: list[int] | None = field(default=None, repr=False, compare=False)  # ``tokens`` on the host, when already read

    @property
    def is_bonus(self) -> bool:
        return self.num_accepted == self.num_proposed

    # PA3 returned (accepted_tokens, accepted_position); keep that spelling available.
    @property
    def accepted_tokens(self) -> torch.Tensor:
        return self.tokens[: self.num_accepted]

    @property
    def accepted_position(self) -> int:
        return self.num_accepted


def accept_greedy(logits: torch.Tensor, draft_tokens: torch.Tensor) -> VerifyResult:
    """Keep the longest prefix where draft == target argmax, plus the target's next token."""
    ### BEGIN INSTRUCTOR ONLY
    choices = logits.argmax(-1)  # [k + 1]
    k = draft_tokens.numel()
    matches = (choices[:k] == draft_tokens.to(choices.device)).int()
    # The round's one host-device synchronisation: the accepted count and the target's choices come back
    # together (tests/test_sync_count.py); the count decides everything after it.
    n, *host = torch.cat([matches.cumprod(0).sum().view(1), choices]).tolist()
    # draft[:n] == choices[:n], so the kept tokens are simply choices[: n + 1].
    return VerifyResult(choices[: n + 1], n, k, host[: n + 1])
    ### STUDENT EDITION
    # raise student_edition("greedy acceptance (accept_greedy)", "03", "accept_draft")
    ### END INSTRUCTOR ONLY


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


def verify(logits, draft_tokens, draft_probs, sampler: Sampler) -> VerifyResult:
    """Greedy matching when the sampler is greedy, rejection sampling otherwise."""
    if sampler.greedy:
        return accept_greedy(logits, draft_tokens)
    return accept_sampled(logits, draft_tokens, draft_probs, sampler)


@torch.inference_mode()
def verify_tokens_vectorized(target, input_ids: torch.Tensor, draft_tokens: torch.Tensor) -> VerifyResult:
    """Greedy verification with no cache: one target pass over prompt + draft."""
    ### BEGIN INSTRUCTOR ONLY
    input_ids = check_input_ids(target, input_ids)
    draft_tokens = torch.as_tensor(draft_tokens, device=input_ids.device).view(-1)
    logits = score_draft(target, input_ids, draft_tokens)
    return accept_greedy(logits, draft_tokens)
    ### STUDENT EDITION
    # raise student_edition("greedy verification (verify_tokens_vectorized)", "03", "verify_tokens_vectorized")
    ### END INSTRUCTOR ONLY
