"""Draft sources. A drafter proposes up to k tokens that continue the text; the target verifies them.

One small interface (like HF's candidate generators) so a model, an n-gram lookup or a mix can all
feed the same decode loop.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from .cache import cache_length, crop_cache, new_cache
from .checks import check_positive_int, vocab_size
from .sampling import Sampler

GREEDY = Sampler()


@dataclass
class Proposal:
    """Draft tokens and, when they were sampled, the distribution ``q`` each was drawn from."""

    tokens: torch.Tensor  # LongTensor [m], m <= k (may be empty: nothing to propose)
    probs: torch.Tensor | None = None  # [m, vocab]; None means deterministic (one-hot q)
    forward_calls: int = 0  # draft model passes spent on this proposal


@runtime_checkable
class Drafter(Protocol):
    def reset(self) -> None:
        """Forget everything: a new text starts."""

    def propose(self, input_ids: torch.Tensor, k: int, sampler: Sampler = GREEDY) -> Proposal:
        """Up to ``k`` tokens continuing ``input_ids`` ``[1, L]``."""

    def rollback(self, n_kept: int) -> None:
        """Only the first ``n_kept`` tokens of the last context are still valid."""


class ModelDrafter:
    """A small causal LM drafting token by token with its own KV cache.

    The cache survives across rounds: each round feeds only the tokens the draft has not seen (the
    kept draft tokens are already cached), so the prefix is never re-processed, and no
    ``generate()`` call with its per-call set-up cost is made.
    """

    def __init__(self, model, vocab_limit: int | None = None):
        self.model = model
        # Draft logits beyond the target's vocabulary (padding rows) must never be proposed.
        self.vocab_limit = vocab_limit
        self.cache = new_cache(model)

    def reset(self) -> None:
        self.cache = new_cache(self.model)

    def rollback(self, n_kept: int) -> None:
        if cache_length(self.cache) > n_kept:
            crop_cache(self.cache, n_kept)

    @torch.inference_mode()
    def propose(self, input_ids: torch.Tensor, k: int, sampler: Sampler = GREEDY) -> Proposal:
        # The last context token is always fed, so its logits give the first draft token.
        self.rollback(input_ids.shape[1] - 1)
        fed = input_ids[:, cache_length(self.cache):]
        tokens, probs = [], []
        for _ in range(k):
            out = self.model(input_ids=fed, past_key_values=self.cache, use_cache=True, logits_to_keep=1)
            token, prob = sampler.choose(out.logits[0, -1:, : self.vocab_limit])
            tokens.append(token)
            probs.append(prob)
            fed = token.view(1, 1)
        if not tokens:
            return Proposal(input_ids.new_empty(0))
        return Proposal(torch.cat(tokens), None if sampler.greedy else torch.cat(probs), forward_calls=k)


class PromptLookupDrafter:
    """Model-free drafting: find the latest earlier occurrence of the text's last n-gram and
    propose what followed it. Free to run; pays off when text repeats (code, lyrics, quotes)."""

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1):
        self.max_ngram = check_positive_int(max_ngram, "max_ngram", 1)
        self.min_ngram = check_positive_int(min_ngram, "min_ngram", 1)
        if self.min_ngram > self.max_ngram:
            raise ValueError(f"min_ngram ({min_ngram}) must not exceed max_ngram ({max_ngram})")

    def reset(self) -> None:
        pass

    def rollback(self, n_kept: int) -> None:
        pass

    def propose(self, input_ids: torch.Tensor, k: int, sampler: Sampler = GREEDY) -> Proposal:
        ids = input_ids[0]
        length = ids.numel()
        for n in range(min(self.max_ngram, length - 1), self.min_ngram - 1, -1):
            # Windows that start early enough to have at least one token after them.
            windows = ids[: length - 1].unfold(0, n, 1)
            hits = (windows == ids[length - n:]).all(dim=1).nonzero()
            if hits.numel():
                start = int(hits[-1]) + n
                return Proposal(ids[start : start + k].clone())
        return Proposal(ids.new_empty(0))


def as_drafter(draft, target) -> Drafter:
    """Wrap an HF model as a `ModelDrafter`; pass drafters through."""
    if isinstance(draft, torch.nn.Module):
        if not hasattr(draft, "get_output_embeddings"):
            raise TypeError(f"draft model {type(draft).__name__} is not a causal LM (no output embeddings)")
        return ModelDrafter(draft, vocab_limit=vocab_size(target))
    if isinstance(draft, Drafter):
        return draft
    raise TypeError(
        f"draft must be a Hugging Face causal LM or a Drafter (ModelDrafter, PromptLookupDrafter), "
        f"got {type(draft).__name__}"
    )
