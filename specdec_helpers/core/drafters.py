"""Draft sources. A drafter proposes up to k tokens that continue the text; the target verifies them.

One small interface (like HF's candidate generators) so a model, an n-gram lookup or a mix can all
feed the same decode loop.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from specdec_helpers.core import reference_parts  # the draft's rollback and greedy drafting: see there
from specdec_helpers.core.cache import cache_kwargs, cache_length, new_cache
from specdec_helpers.core.checks import check_positive_int, vocab_size
from specdec_helpers.core.sampling import Sampler

GREEDY = Sampler()


@dataclass
class Proposal:
    """Draft tokens and, when they were sampled, the distribution ``q`` each was drawn from."""

    tokens: torch.Tensor  # LongTensor [m], m <= k (may be empty: nothing to propose)
    probs: torch.Tensor | None = None  # [m, vocab]; None means deterministic (one-hot q)
    forward_calls: int = 0  # draft model passes spent on this proposal


@runtime_checkable
class Drafter(Protocol):
    """What the decode loops need from a draft source: two methods and three declarations (HF's candidate
    generator in miniature: ``get_candidates`` is `propose`, ``update_candidate_strategy`` is `update`).

    A round: ``propose`` on the text, one target pass, then ``update(n_kept)``: the loop's only word on what
    survived (``n_kept``: the length of the text kept, prompt included). A drafter with state (a KV cache) rolls
    it back there and nowhere else; ``propose`` trusts it. (The tree loop drives a drafter's ``model`` itself.)
    Subclass it for the declarations' defaults (a plain draft: no target features, no HF model), or
    declare them yourself; the loops read them and never guess from attributes.
    """

    # Reads the target's hidden states: the loop passes them to every `update` (``target_features``).
    needs_target_features: bool = False
    # The HF causal LM that drafts, or None: checked against the target's vocabulary and context,
    # grown into trees, timed by the benchmark.
    model: torch.nn.Module | None = None
    # A short name for tables, or None: named after its model.
    label: str | None = None

    def propose(self, input_ids: torch.Tensor, k: int, sampler: Sampler = GREEDY) -> Proposal:
        """Up to ``k`` tokens continuing ``input_ids`` ``[1, L]`` (the text the last `update` left, plus the
        tokens appended since)."""

    def update(self, n_kept: int, target_features: torch.Tensor | None = None) -> None:
        """Learn from the round: only the first ``n_kept`` tokens of the text are valid now (the next text has
        one more: the target's own token, never seen by the draft). ``update(0)``: a new text starts.
        ``target_features`` (only when ``needs_target_features``): ``[1, F, H]``, the target's features of
        positions ``n_kept - F .. n_kept - 1``."""


def check_threshold(threshold: float | None) -> float | None:
    if threshold is not None and not 0 <= threshold <= 1:
        raise ValueError(f"confidence_threshold must be in [0, 1] (None disables it), got {threshold!r}")
    return threshold


def unsure(logits: torch.Tensor, prob: torch.Tensor | None, threshold: float | None) -> bool:
    """Whether to stop drafting after this token: its distribution's top probability is below ``threshold``."""
    if threshold is None:
        return False
    top = prob.max() if prob is not None else torch.softmax(logits.float(), -1).max()
    return float(top) < threshold


class ModelDrafter(Drafter):
    """A small causal LM drafting token by token with its own KV cache.

    The cache survives across rounds: each round feeds only the tokens the draft has not seen (the
    kept draft tokens are already cached), so the prefix is never re-processed, and no
    ``generate()`` call with its per-call set-up cost is made.

    ``confidence_threshold`` (like HF's ``assistant_confidence_threshold``): stop drafting early, after
    a token whose distribution's top probability is below it (the draft is unsure; later tokens would
    likely be rejected). The decision depends only on the text before that token, so rejection
    sampling stays exact.
    """

    def __init__(self, model, vocab_limit: int | None = None, confidence_threshold: float | None = None):
        self.model = model
        # Draft logits beyond the target's vocabulary (padding rows) must never be proposed.
        self.vocab_limit = vocab_limit
        self.confidence_threshold = check_threshold(confidence_threshold)
        # Ids the draft can read; the target may emit more (its padding ids) when the draft's table is narrower.
        embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
        self.input_vocab = getattr(embeddings, "num_embeddings", None) or vocab_size(model)
        self.forward = model  # what runs the draft's passes: the model, or its static-cache forward (`graphs`)
        self.cache = self.new_cache()

    def new_cache(self):
        """An empty cache for a new text (`backends.StaticModelDrafter` hands out its static one instead)."""
        return new_cache(self.model)

    def update(self, n_kept: int, target_features=None) -> None:
        if n_kept == 0:  # a new text
            self.cache = self.new_cache()
        reference_parts.keep_draft_cache(self, n_kept)  # drop the rejected draft tokens (and the last, never fed)

    @torch.inference_mode()
    def propose(self, input_ids: torch.Tensor, k: int, sampler: Sampler = GREEDY) -> Proposal:
        reference_parts.check_drafting(sampler)
        # Feed what the cache has not seen; the last context token is always among it: its logits give the
        # first draft token. `update` left the cache at the kept text, which is shorter than this one.
        cached = cache_length(self.cache)
        if cached >= input_ids.shape[1]:
            raise ValueError(
                f"the draft's cache holds {cached} positions but the text has only {input_ids.shape[1]}: "
                "propose was called again without update in between (or update's n_kept counted more "
                "than the kept text); call drafter.update(n_kept) after each round (update(0) for a "
                "new text)"
            )
        fed = input_ids[:, cached:]
        # A token the draft cannot read (one of the target's padding ids, sampled) is read as id 0: the
        # guesses get worse, but q is still what the draft tokens were drawn from, so nothing else changes.
        fed = torch.where(fed < self.input_vocab, fed, 0)
        tokens, probs = [], []
        for _ in range(k):
            out = self.forward(
                input_ids=fed, **cache_kwargs(self.forward, self.cache), use_cache=True, logits_to_keep=1
            )
            logits = out.logits[0, -1:, : self.vocab_limit]
            token, prob = sampler.choose(logits)
            tokens.append(token)
            probs.append(prob)
            fed = token.view(1, 1)
            if unsure(logits, prob, self.confidence_threshold):
                break
        if not tokens:
            return Proposal(input_ids.new_empty(0))
        return Proposal(torch.cat(tokens), None if sampler.greedy else torch.cat(probs), forward_calls=len(tokens))


class PromptLookupDrafter(Drafter):
    """Model-free drafting: find the latest earlier occurrence of the text's last n-gram (the longest first,
    ``max_ngram`` down to ``min_ngram`` tokens) and propose what followed it, up to k tokens and no further than the
    text goes. Free to run; pays off when text repeats (code, lyrics, quotes).

    ``grow_with_match``: propose at most twice as many tokens as the text matched, counting the match
    back past ``max_ngram`` (k still caps it). A short match is often a coincidence, a long one
    means a whole passage repeats: with a large k this proposes little on the first and much on the
    second. Off by default, which is HF's prompt lookup (always up to k tokens).
    """

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1, grow_with_match: bool = False):
        self.max_ngram = check_positive_int(max_ngram, "max_ngram", 1)
        self.min_ngram = check_positive_int(min_ngram, "min_ngram", 1)
        if self.min_ngram > self.max_ngram:
            raise ValueError(f"min_ngram ({min_ngram}) must not exceed max_ngram ({max_ngram})")
        self.grow_with_match = bool(grow_with_match)

    @property
    def label(self) -> str:
        """The draft name `models.pairs.load_pair` takes for this lookup ('prompt-lookup', 'prompt-lookup:N')."""
        if self.grow_with_match:
            return f"prompt-lookup:{self.min_ngram}"
        return "prompt-lookup" if self.min_ngram == 1 else f"prompt-lookup (min_ngram={self.min_ngram})"

    def update(self, n_kept: int, target_features=None) -> None:
        pass  # stateless: each proposal looks up in the text it is given

    def propose(self, input_ids: torch.Tensor, k: int, sampler: Sampler = GREEDY) -> Proposal:
        ids = input_ids[0]
        length = ids.numel()
        for n in range(min(self.max_ngram, length - 1), self.min_ngram - 1, -1):
            # Windows that start early enough to have at least one token after them.
            windows = ids[: length - 1].unfold(0, n, 1)
            hits = (windows == ids[length - n :]).all(dim=1).nonzero()
            if hits.numel():
                start = int(hits[-1]) + n
                if self.grow_with_match:
                    k = min(k, 2 * _match_length(ids, start, length, n, limit=k))
                return Proposal(ids[start : start + k].clone())
        return Proposal(ids.new_empty(0))


def _match_length(ids: torch.Tensor, start: int, length: int, n: int, limit: int) -> int:
    """How many tokens before ``start`` equal those before ``length``: the ``n`` matched, or more, up to ``limit``."""
    back = min(limit, start)
    if back <= n:
        return n
    earlier, recent = ids[start - back : start].flip(0), ids[length - back : length].flip(0)
    differ = (earlier != recent).nonzero()
    return int(differ[0]) if differ.numel() else back


_busy: set[int] = set()
_busy_lock = threading.Lock()


@contextlib.contextmanager
def exclusive(drafter):
    """Hold ``drafter`` for one decode. A drafter keeps state between rounds (the draft model's KV cache,
    a feature draft's features), so two decodes sharing one at the same time corrupt each other (from two threads:
    a size mismatch deep inside attention). The second gets a clear error instead; give each thread its
    own drafter (``copy.deepcopy(drafter)``, or ``pair.with_draft(...)`` per thread)."""
    with _busy_lock:
        if id(drafter) in _busy:
            raise RuntimeError(
                f"this {type(drafter).__name__} is already decoding (in another thread): a drafter "
                "keeps a KV cache between rounds, so one decode at a time may use it; give each thread "
                "its own, e.g. copy.deepcopy(drafter)"
            )
        _busy.add(id(drafter))
    try:
        yield drafter
    finally:
        with _busy_lock:
            _busy.discard(id(drafter))


def as_drafter(draft, target) -> Drafter:
    """Wrap an HF model as a `ModelDrafter`; pass drafters through. A `ModelDrafter` without a ``vocab_limit`` (alone
    or inside a `HybridDrafter`) comes back as a shallow copy capped at the target's vocabulary: the caller's drafter
    keeps its own setting (`exclusive` still holds the caller's object, see `decode`)."""
    if isinstance(draft, torch.nn.Module):
        if not hasattr(draft, "get_output_embeddings"):
            raise TypeError(f"draft model {type(draft).__name__} is not a causal LM (no output embeddings)")
        return ModelDrafter(draft, vocab_limit=vocab_size(target))
    if isinstance(draft, Drafter):
        # A ModelDrafter built by hand (alone or inside a hybrid) must not propose the draft's padding
        # ids either: cap it at the target's vocabulary unless it was given a limit.
        inner = draft.model_drafter if isinstance(draft, HybridDrafter) else draft
        if isinstance(inner, ModelDrafter) and inner.vocab_limit is None:
            capped = copy.copy(inner)
            capped.vocab_limit = vocab_size(target)
            if inner is draft:
                return capped
            draft = copy.copy(draft)
            draft.model_drafter = capped
        return draft
    raise TypeError(
        f"draft must be a Hugging Face causal LM or a Drafter (ModelDrafter, PromptLookupDrafter, HybridDrafter, "
        f"eagle.FeatureDrafter, or a subclass of specdec_helpers.Drafter), got {type(draft).__name__}"
    )


class HybridDrafter(Drafter):
    """N-gram lookup first, the draft model (or another drafter, e.g. a feature drafter) only where no n-gram matches.

    Where text repeats (code, quotes, lists) the lookup's proposals are free and long; elsewhere the
    model drafts as usual. The model's KV cache stays consistent either way: it hears every round's
    `update`, and `ModelDrafter.propose` feeds whatever tokens it has not seen, however many rounds the
    lookup answered in between. ``min_ngram`` defaults to 2 because single-token matches are nearly
    always found in long text and would crowd out the (usually better) model draft. The lookup grows
    its proposals with the match (`PromptLookupDrafter`'s ``grow_with_match``), so a large k pays
    where passages repeat (at k <= 4 this changes nothing: a 2-token match already proposes 4);
    ``model_tokens`` caps what the model drafts (None: k), for a draft whose second and later tokens
    are rarely right.
    ``last_source`` says who proposed last ("ngram" or "model"), for tracing.
    Not thread-safe, as no drafter is (it keeps a KV cache): a second decode using it while one runs
    raises a clear RuntimeError (`exclusive`); give each thread its own.
    """

    def __init__(
        self,
        model,
        max_ngram: int = 3,
        min_ngram: int = 2,
        vocab_limit: int | None = None,
        model_tokens: int | None = None,
    ):
        # A model is wrapped in a ModelDrafter; a drafter (e.g. a `FeatureDrafter`) is used as is.
        if isinstance(model, torch.nn.Module) and hasattr(model, "get_output_embeddings"):
            model = ModelDrafter(model, vocab_limit)
        elif not isinstance(model, Drafter):
            raise TypeError(
                f"HybridDrafter needs a causal LM or a Drafter to ask when no n-gram matches, "
                f"got {type(model).__name__}"
            )
        self.model_drafter = model
        self.model_tokens = None if model_tokens is None else check_positive_int(model_tokens, "model_tokens", 1)
        self.lookup = PromptLookupDrafter(max_ngram, min_ngram, grow_with_match=True)
        self.last_source: str | None = None
        # What the model's drafter needs, this hybrid needs: the target's features go straight to it.
        self.needs_target_features = model.needs_target_features

    label = "hybrid"

    @property
    def model(self):
        """The draft model, if any (the decode loop checks its vocabulary and context through this)."""
        return self.model_drafter.model

    def update(self, n_kept: int, target_features=None) -> None:
        self.model_drafter.update(n_kept, target_features)  # every round, whoever proposed: its state stays the text's
        if n_kept == 0:
            self.last_source = None

    def propose(self, input_ids: torch.Tensor, k: int, sampler: Sampler = GREEDY) -> Proposal:
        # Lookup proposals are deterministic (probs=None, a one-hot q), which rejection sampling
        # handles, so mixing sources between rounds keeps sampling exact too.
        found = self.lookup.propose(input_ids, k, sampler) if k else Proposal(input_ids.new_empty(0))
        if found.tokens.numel():
            self.last_source = "ngram"
            return found
        self.last_source = "model"
        return self.model_drafter.propose(
            input_ids, k if self.model_tokens is None else min(k, self.model_tokens), sampler
        )
