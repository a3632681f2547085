"""The kit's own greedy building blocks, the ones students write in notebooks 02-03: the target's scoring pass
(`score_draft`), greedy acceptance (`accept_greedy`), uncached greedy verification (`verify_tokens_vectorized`),
the draft model's cache rollback (`keep_draft_cache`) and greedy drafting (`check_drafting` lets it run).

The student edition replaces this module whole (``grading/editions.SWAPS``: `release`, the grader's view and the
student kit's `check` all swap in ``assignment/student/edition_parts.py``): there each part raises
`StudentEditionError` naming the notebook that writes it, and the draft re-reads the text every round.
Nothing else in ``core/`` differs between the editions; `verify` and `drafters` call these.

The off-by-one, once: a causal LM's logits at position ``i`` predict the token at ``i + 1``. Draft token ``j``
sits at position ``start + j`` (``start`` = length of the verified text), so the target's opinion about it is in
the logits at position ``start - 1 + j``, never ``start + j``. Comparing with ``start + j`` checks each draft
token against the target's guess for the *next* token, and acceptance collapses to about 1/vocabulary (PA3
students saw ~1/k). In the chain loops `score_draft` is the only function that does this indexing (the tree and
batch loops, `core/token_tree.py` and `core/batch.py`, index their own layouts).
"""

from __future__ import annotations

import torch

from specdec_helpers.core.cache import cache_kwargs, cache_length, last_hidden, rollback
from specdec_helpers.core.checks import check_input_ids
from specdec_helpers.core.rounds import VerifyResult
from specdec_helpers.core.sampling import Sampler

__all__ = ["accept_greedy", "check_drafting", "keep_draft_cache", "score_draft", "verify_tokens_vectorized"]


def score_draft(target, input_ids: torch.Tensor, draft_tokens: torch.Tensor, cache=None, features: bool = False):
    """Logits ``[k + 1, vocab]`` from ONE target pass; row ``j`` judges draft token ``j``.

    Rows ``0..k-1`` are the target's distribution for draft positions ``0..k-1``; row ``k`` is the
    distribution for the token after the whole draft (the bonus token). ``input_ids`` is the
    verified text ``[1, start]``; with a ``cache``, only the positions it does not hold yet are fed.
    ``features=True`` returns ``(logits, hidden)`` instead: the target's last hidden states of every
    fed position ``[1, fed, H]`` (the last ``fed`` positions of text + draft), for drafts that read them.
    """
    k = draft_tokens.numel()
    fed = input_ids[:, cache_length(cache) :]
    if k:
        fed = torch.cat([fed, draft_tokens.view(1, -1).to(fed.device)], dim=1)
    # The last k + 1 positions are start - 1 .. start + k - 1: exactly the off-by-one shift.
    out = target(
        input_ids=fed,
        **cache_kwargs(target, cache),
        use_cache=cache is not None,
        logits_to_keep=k + 1,
        output_hidden_states=features,
    )
    logits = out.logits[0, -(k + 1) :]
    return (logits, last_hidden(out)) if features else logits


def accept_greedy(logits: torch.Tensor, draft_tokens: torch.Tensor) -> VerifyResult:
    """Keep the longest prefix where draft == target argmax, plus the target's next token."""
    choices = logits.argmax(-1)  # [k + 1]
    k = draft_tokens.numel()
    matches = (choices[:k] == draft_tokens.to(choices.device)).int()
    # The round's one host-device synchronisation: the accepted count and the target's choices come back
    # together (tests/test_sync_count.py); the count decides everything after it.
    n, *host = torch.cat([matches.cumprod(0).sum().view(1), choices]).tolist()
    # draft[:n] == choices[:n], so the kept tokens are simply choices[: n + 1].
    return VerifyResult(choices[: n + 1], n, k, host[: n + 1])


@torch.inference_mode()
def verify_tokens_vectorized(target, input_ids: torch.Tensor, draft_tokens: torch.Tensor) -> VerifyResult:
    """Greedy verification with no cache: one target pass over prompt + draft."""
    input_ids = check_input_ids(target, input_ids)
    draft_tokens = torch.as_tensor(draft_tokens, device=input_ids.device).view(-1)
    logits = score_draft(target, input_ids, draft_tokens)
    return accept_greedy(logits, draft_tokens)


def keep_draft_cache(drafter, n_kept: int) -> None:
    """A `ModelDrafter`'s rollback (its `update`): drop the rejected draft tokens from its cache (and the last one,
    never fed back), so the next round feeds only what the draft has not seen."""
    if cache_length(drafter.cache) > n_kept:
        rollback(drafter.cache, n_kept)


def check_drafting(sampler: Sampler) -> None:
    """Greedy drafting (`ModelDrafter.propose`) runs here; the student edition refuses it (notebook 02)."""
