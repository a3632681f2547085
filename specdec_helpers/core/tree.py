"""Tree speculation: verify several draft branches in ONE target pass.

A chain loses everything after its first wrong token. A token tree hedges: at each depth the draft
offers a few candidates, and the target scores all of them at once (`token_tree.tree_forward`: an
attention mask lets each node see the prefix and its own ancestors only).

The off-by-one, tree edition: the logits of a node predict its *children*. Row 0 of the target's
output belongs to the last verified token (the tree's root) and judges the depth-1 nodes; row
``1 + i`` belongs to node ``i`` and judges node ``i``'s children. Greedy: the kept branch is the
longest path whose every node equals the target's argmax at its parent; the argmax at the last kept
node is the correction (or bonus) token, free as in a chain. Sampling: the children are drawn from
the draft and verified by multi-draft rejection sampling (`tree_sampling`), which keeps the target's
distribution exactly.

Both KV caches then hold the prefix plus every node; `cache.rollback` gathers the prefix
and the kept branch, which is exactly the cache a chain over the kept text would have. A drafter that
keeps its own cache (a feature draft) rolls itself back in ``update``, as in the chain loop.
"""

from __future__ import annotations

import contextlib
import itertools
import time
import weakref
from dataclasses import dataclass

import torch

from specdec_helpers.core import checks, reference_loop
from specdec_helpers.core.cache import cache_kwargs, cache_length, new_cache, rollback
from specdec_helpers.core.drafters import (
    Drafter,
    HybridDrafter,
    ModelDrafter,
    PromptLookupDrafter,
    as_drafter,
    exclusive,
)
from specdec_helpers.core.decode import Text
from specdec_helpers.core.rounds import DecodeOutput
from specdec_helpers.core.sampling import Sampler
from specdec_helpers.core.timing import sync_device
from specdec_helpers.core.tree_sampling import (
    SampledTree,
    add_lookup_branch,
    check_rule,
    draft_chains,
    draft_sampled_tree,
    sampled_walk,
)
from specdec_helpers.core.token_tree import (  # noqa: F401  (re-exported: the tree's public names live here too)
    TokenTree,
    TreeDrafter,
    TreeStep,
    grow_level,
    tree_attention_mask,
    tree_forward,
)

DEFAULT_TREE = (3, 2, 2, 1, 1)  # widths per depth: 9 nodes, 5 deep


class TreeUnsupportedError(ValueError):
    """The model cannot run a tree pass (its attention ignores custom 4D masks, or its cache cannot be
    gathered). Raised before decoding starts, never as silently wrong output."""


# --------------------------------------------------------------------------- can this model do it?

_SUPPORTED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def check_tree_support(model, role: str = "target", exact: bool = True) -> None:
    """Raise `TreeUnsupportedError` unless a tree pass on ``model`` equals a chain pass (checked once).

    An empirical probe, because support depends on the attention implementation, not the family:
    flash-attention kernels only know causal masks, and some models rebuild positions themselves.
    Two siblings at depth 1 must each see only the root; then the cache is gathered to one branch.
    ``exact=False`` (the draft) only requires that the pass and the gather *run*: a draft's numbers
    may differ (int8 dynamic quantization scales activations over the whole input, so a token's
    output depends on what else is in the pass); that costs acceptance, never correctness.
    """
    impl = model.config._attn_implementation
    known = _SUPPORTED.get(model)  # (attn implementation, passed exactly)
    if known is not None and known[0] == impl and (known[1] or not exact):
        return
    problem = _probe(model)
    if problem and (exact or problem[2]):
        reason, fix, _ = problem
        raise TreeUnsupportedError(
            f"the {role} ({type(model).__name__}, attn_implementation={impl!r}) cannot run token trees: "
            f"{reason}. {fix}, or decode with a chain (speculative_decode)."
        )
    _SUPPORTED[model] = (impl, problem is None)


@torch.inference_mode()
def _probe(model) -> tuple[str, str, bool] | None:
    """None if fine, else (what went wrong, how to fix it, whether it failed outright)."""
    attention_fix = (
        "Load it with attn_implementation='sdpa' or 'eager' (from_pretrained(..., "
        "attn_implementation='sdpa') or model.set_attn_implementation('sdpa'))"
    )
    cache_fix = "Use a model with full attention in every layer"
    vocab = checks.vocab_size(model)
    a, b, c, d = (t % vocab for t in (1, 2, 3, 4))
    device = model.device
    dtype = next(model.parameters()).dtype
    tol = 1e-3 if dtype in (torch.float32, torch.float64) or not dtype.is_floating_point else 3e-2

    def close(x, y):
        return bool((x.float() - y.float()).abs().max() <= tol * (1 + y.float().abs().max()))

    try:
        tree = TokenTree()
        tree.add(b)
        tree.add(c)
        cache = new_cache(model)
        got = tree_forward(model, cache, torch.tensor([[a]], device=device), tree, logits_to_keep=1)[-1]
        ref = model(input_ids=torch.tensor([[a, c]], device=device)).logits[0, -1]
        if not close(got, ref):
            reason = "a custom 4D attention mask (with position_ids) changed nothing or the wrong thing"
            return reason, attention_fix, False
        rollback(cache, [0, 2])
        got = model(input_ids=torch.tensor([[d]], device=device), **cache_kwargs(model, cache), use_cache=True).logits[
            0, -1
        ]
        ref = model(input_ids=torch.tensor([[a, c, d]], device=device)).logits[0, -1]
        if not close(got, ref):
            reason = "its KV cache gathered to one branch does not match a fresh pass over that branch"
            return reason, cache_fix, False
    except NotImplementedError as error:
        return str(error), cache_fix, True
    except (TypeError, ValueError, RuntimeError, IndexError) as error:
        return f"a tree-masked pass failed ({type(error).__name__}: {error})", attention_fix, True
    return None


# --------------------------------------------------------------------------- drafting a tree


@dataclass
class _DraftParts:
    """Where a round's tree comes from: a draft model grown level by level (plus an n-gram branch), or
    any other drafter's whole chains (`tree_sampling.draft_chains`), e.g. a feature draft."""

    model: torch.nn.Module | None = None
    vocab_limit: int | None = None
    lookup: PromptLookupDrafter | None = None
    chains: Drafter | None = None  # proposes whole chains; reads the target's features if it says so
    input_vocab: int | None = None  # ids the draft model can read, when the target can emit more
    grower: TreeDrafter | None = None  # grows the greedy tree itself (`chains`, or the drafter behind its lookup)

    def draft_context(self, context: torch.Tensor) -> torch.Tensor:
        """The text as the draft model reads it: an id beyond its embeddings (one of the target's extra ids,
        sampled) is read as 0, as `ModelDrafter` does; the guesses get worse, nothing else changes."""
        return context if self.input_vocab is None else torch.where(context < self.input_vocab, context, 0)


def _draft_parts(draft, target) -> _DraftParts:
    drafter = as_drafter(draft, target)
    model_drafter, lookup = drafter, None
    if isinstance(drafter, HybridDrafter):
        model_drafter, lookup = drafter.model_drafter, drafter.lookup
    elif isinstance(drafter, PromptLookupDrafter):
        model_drafter, lookup = None, drafter
    if isinstance(model_drafter, TreeDrafter):  # e.g. a feature draft, or a hybrid over one
        return _DraftParts(lookup=lookup, chains=drafter, grower=model_drafter)
    if model_drafter is not None and not isinstance(model_drafter, ModelDrafter):
        return _DraftParts(chains=drafter)  # any other drafter: whole chains
    vocab = checks.vocab_size(target)
    if model_drafter is None:
        return _DraftParts(None, vocab, lookup)
    checks.check_model(model_drafter.model, "draft")
    limit = model_drafter.vocab_limit
    readable = model_drafter.input_vocab if model_drafter.input_vocab < vocab else None
    return _DraftParts(model_drafter.model, vocab if limit is None else min(limit, vocab), lookup, None, readable)


def draft_tree(model, cache, context: torch.Tensor, widths, vocab_limit: int | None = None):
    """Grow a tree level by level with the draft, keeping the ``widths[d]`` best paths at depth ``d + 1``.

    Each level is one draft pass over the previous level (tree mask again), so depth D costs D passes,
    like a chain of D tokens. Paths are ranked by their total draft log-probability, each parent
    offering its own top ``widths[d]``. Returns (tree, nodes now in the draft cache, passes). The last
    level is never fed: nobody needs its draft logits.
    """
    tree = TokenTree()
    length = context.shape[1]
    if cache_length(cache) >= length:  # for direct callers (the loop leaves length - 1): the last token gives depth 1
        rollback(cache, length - 1)
    frontier, scores = [-1], torch.zeros(1)
    first = 0
    for width in widths:
        logits = tree_forward(model, cache, context, tree, first, len(tree), logits_to_keep=len(frontier))
        first = len(tree)
        frontier, scores = grow_level(tree, frontier, scores, logits[-len(frontier) :, :vocab_limit], width)
    return tree, first, len(widths)


# --------------------------------------------------------------------------- the decode loop


@torch.inference_mode()
def tree_speculative_decode(
    target,
    draft,
    input_ids,
    *,
    max_new_tokens: int = 100,
    tree=DEFAULT_TREE,
    eos_token_id=None,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    tree_sampling: str = "specinfer",
    lookup_tokens: int | None = None,
) -> DecodeOutput:
    """Speculative decoding with a token tree, lossless like `speculative_decode`.

    Greedy (``temperature=0``): ``sequences`` equals ``target.generate(do_sample=False)``. Sampling:
    tokens follow the target's distribution warped by ``temperature``/``top_k``/``top_p``, exactly;
    ``tree_sampling`` picks how each node's children are drawn from the draft, ``"specinfer"`` (with
    replacement) or ``"sequoia"`` (without), see `tree_sampling`.
    ``tree`` = widths per depth (``(1,) * k`` is a chain; with sampling, ``widths[d]`` draws at depth
    ``d + 1``). ``draft``: an HF model or `ModelDrafter` (grows the tree), a `PromptLookupDrafter` (one
    n-gram branch), a `HybridDrafter` over a model (both: the n-gram branch, at most ``lookup_tokens``
    long, default the tree's depth, is merged into the model's tree), a `TreeDrafter` (e.g. a feature
    draft) or a hybrid over one (greedy: it grows the tree itself, EAGLE-2 style, plus the n-gram branch;
    sampling: as any other drafter), or any other `Drafter`: it proposes ``tree[0]`` whole chains (one when
    greedy), ``len(tree)`` deep.
    Stats: ``proposed`` counts tree nodes, ``accepted`` the kept branch; ``mean_accepted_length`` is
    tokens per target call.
    """
    input_ids, max_new_tokens, eos = checks.decode_args(target, input_ids, max_new_tokens, eos_token_id)
    widths = checks.check_tree_shape(tree)
    sampler = Sampler(temperature, top_k, top_p, generator)
    rule = check_rule(tree_sampling)
    parts = _draft_parts(draft, target)
    reference_loop.check_tree(sampler, parts.model, widths)  # (the student edition: a greedy chain is theirs)
    lookup_tokens = checks.check_positive_int(
        len(widths) if lookup_tokens is None else lookup_tokens, "lookup_tokens", 1
    )
    check_tree_support(target, "target")
    if parts.model is not None:
        checks.check_draft_model(parts.model, input_ids, max_new_tokens)
        check_tree_support(parts.model, "draft", exact=False)
    elif parts.chains is not None:
        checks.check_draft_model(parts.chains.model, input_ids, max_new_tokens)
    return _tree_loop(target, parts, input_ids, max_new_tokens, widths, lookup_tokens, eos, sampler, rule)


def _tree_loop(target, parts: _DraftParts, input_ids, max_new_tokens, widths, lookup_tokens, eos, sampler, rule):
    """The rounds, written out: draft a tree, one target pass, walk it, append, keep the branch in the caches.
    The timing and bookkeeping lines repeat `decode._decode_loop`'s, so the whole round reads in one place."""
    target_cache = new_cache(target)
    model, drafter = parts.model, parts.chains
    draft_cache = new_cache(model) if model is not None else None
    features = drafter is not None and drafter.needs_target_features
    text = Text(input_ids, max_new_tokens, eos)
    sync_device(input_ids.device)
    start = time.perf_counter()
    with exclusive(drafter) if drafter is not None else contextlib.nullcontext():  # a drafter keeps state
        if drafter is not None:
            drafter.update(0)  # a new text
        while not text.done:
            context, length = text.context, text.length
            tree, sampled, in_draft_cache, calls = _draft(
                parts, draft_cache, context, text.room, widths, lookup_tokens, sampler, rule
            )

            # One target pass: row 0 judges depth-1 nodes, row 1 + i judges node i's children.
            logits = tree_forward(target, target_cache, context, tree, logits_to_keep=len(tree) + 1, features=features)
            logits, hidden = logits if features else (logits, None)
            if sampled is None:
                path, last = greedy_walk(tree, logits)
            else:
                path, last = sampled_walk(sampled, logits, rule, sampler)
            emitted = text.append([tree.tokens[i] for i in path] + [last])

            # Keep the text plus the kept branch; the new last token is fed next round, as in the chain loop.
            prefix = list(range(length))
            rollback(target_cache, prefix + [length + i for i in path])
            if model is not None and calls:  # the draft fed the text this round; only non-leaf nodes are in its cache
                cached = itertools.takewhile(lambda i: i < in_draft_cache, path)  # noqa: B023 - used up on the next line
                rollback(draft_cache, prefix + [length + i for i in cached])
            if drafter is not None:
                if hidden is not None:  # the target's features of the fed text and of the kept branch
                    tail = hidden.shape[0] - len(tree)
                    hidden = hidden[list(range(tail)) + [tail + i for i in path]].unsqueeze(0)
                drafter.update(length + len(path), hidden)
            node = path[-1] if path else -1
            text.record(TreeStep(tree.branch_from(node), len(path), emitted, tree), len(tree), calls)
    sync_device(input_ids.device)
    return text.finish(time.perf_counter() - start)


def _draft(parts: _DraftParts, draft_cache, context, room, widths, lookup_tokens, sampler, rule):
    """This round's tree: ``(tree, its draws when sampling else None, nodes in the draft model's cache, passes)``."""
    if not room:  # only the target's own token this round (greedy: its argmax; sampling: a draw from p)
        return TokenTree(), (None if sampler.greedy else SampledTree()), 0, 0
    if parts.grower is not None and sampler.greedy:  # e.g. a feature draft's EAGLE-2 tree, plus the lookup's branch
        tree, calls = parts.grower.propose_tree(context, widths[:room])
        if parts.lookup is not None:
            tree.add_branch(parts.lookup.propose(context, min(lookup_tokens, room)).tokens.tolist())
        return tree, None, 0, calls
    if parts.chains is not None:
        chains = 1 if sampler.greedy else widths[0]
        sampled, calls = draft_chains(parts.chains, context, chains, min(len(widths), room), sampler, rule)
        return sampled.tree, (None if sampler.greedy else sampled), 0, calls
    if not sampler.greedy:
        return _draft_sampled(parts, draft_cache, context, room, widths, lookup_tokens, sampler, rule)
    tree, in_cache, calls = TokenTree(), 0, 0
    if parts.model is not None:
        tree, in_cache, calls = draft_tree(
            parts.model, draft_cache, parts.draft_context(context), widths[:room], parts.vocab_limit
        )
    if parts.lookup is not None:
        tree.add_branch(parts.lookup.propose(context, min(lookup_tokens, room)).tokens.tolist())
    return tree, None, in_cache, calls


def _draft_sampled(parts: _DraftParts, draft_cache, context, room, widths, lookup_tokens, sampler, rule):
    """`_draft` when sampling: children drawn from the draft model, the n-gram branch as one-hot draws."""
    sampled, in_cache, calls = SampledTree(), 0, 0
    if parts.model is not None:
        sampled, in_cache, calls = draft_sampled_tree(
            parts.model, draft_cache, parts.draft_context(context), widths[:room], parts.vocab_limit, sampler, rule
        )
    if parts.lookup is not None:
        add_lookup_branch(sampled, parts.lookup.propose(context, min(lookup_tokens, room)).tokens)
    return sampled.tree, sampled, in_cache, calls


def greedy_walk(tree: TokenTree, logits: torch.Tensor) -> tuple[list[int], int]:
    """Follow the child equal to the target's argmax from the root: ``(kept nodes, the argmax after them)``."""
    choices = logits.argmax(-1).tolist()
    path, node = [], -1
    while (child := tree.child(node, choices[node + 1])) is not None:
        path.append(child)
        node = child
    return path, choices[node + 1]
