"""Tree speculation: verify several draft branches in ONE target pass.

A chain loses everything after its first wrong token. A token tree hedges: at each depth the draft
offers a few candidates, and the target scores all of them at once. The trick is the attention mask:
every tree node sees the verified prefix and its own ancestors only, and its position id is its
depth, so each node's logits are exactly what a separate chain pass along its branch would give.

The off-by-one, tree edition: the logits of a node predict its *children*. Row 0 of the target's
output belongs to the last verified token (the tree's root) and judges the depth-1 nodes; row
``1 + i`` belongs to node ``i`` and judges node ``i``'s children. The kept branch is the longest
path whose every node equals the target's argmax at its parent; the argmax at the last kept node is
the correction (or bonus) token, free as in a chain.

Both KV caches then hold the prefix plus every node; `cache.keep_cache_positions` gathers the prefix
and the kept branch, which is exactly the cache a chain over the kept text would have.

Greedy only: with sampling, verifying a tree needs multi-draft rejection sampling (SpecInfer), which
this kit does not teach.
"""
from __future__ import annotations

import itertools
import weakref
from dataclasses import dataclass, field

import torch

from specdec_helpers.core import checks
from specdec_helpers.core.cache import (
    cache_kwargs,
    cache_length,
    crop_cache,
    keep_cache_positions,
    new_cache,
)
from specdec_helpers.core.drafters import (
    HybridDrafter,
    ModelDrafter,
    PromptLookupDrafter,
    as_drafter,
)
from specdec_helpers.core.rounds import DecodeOutput, Step, Text, run_rounds

DEFAULT_TREE = (3, 2, 2, 1, 1)  # widths per depth: 9 nodes, 5 deep


class TreeUnsupportedError(ValueError):
    """The model cannot run a tree pass (its attention ignores custom 4D masks, or its cache cannot be
    gathered). Raised before decoding starts, never as silently wrong output."""


# --------------------------------------------------------------------------- the tree


@dataclass
class TokenTree:
    """Draft tokens as a tree. Node ``i`` has ``tokens[i]``, ``parents[i]`` (-1: the root, i.e. the last
    verified token) and ``depths[i]`` (1 = a candidate for the next token). A parent always comes
    before its children, so the nodes can be fed (and cached) in index order."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    depths: list[int] = field(default_factory=list)
    _children: dict = field(default_factory=dict, repr=False)  # (parent, token) -> node

    def __len__(self) -> int:
        return len(self.tokens)

    def add(self, token: int, parent: int = -1) -> int:
        """Add a node (or return the existing one: siblings never repeat a token)."""
        found = self._children.get((parent, token))
        if found is not None:
            return found
        self.tokens.append(int(token))
        self.parents.append(parent)
        self.depths.append(1 if parent < 0 else self.depths[parent] + 1)
        self._children[(parent, int(token))] = len(self.tokens) - 1
        return len(self.tokens) - 1

    def add_branch(self, tokens, parent: int = -1) -> None:
        """Merge a chain (e.g. an n-gram lookup's proposal) into the tree, sharing common prefixes."""
        for token in tokens:
            parent = self.add(int(token), parent)

    def child(self, parent: int, token: int) -> int | None:
        return self._children.get((parent, int(token)))

    def ancestry(self) -> torch.Tensor:
        """``[N, N]`` bool: row ``i`` marks node ``i`` and its ancestors (what node ``i`` may attend to)."""
        n = len(self)
        seen = torch.zeros(n, n, dtype=torch.bool)
        for i, parent in enumerate(self.parents):
            if parent >= 0:
                seen[i] = seen[parent]
            seen[i, i] = True
        return seen

    def branch_from(self, node: int) -> list[int]:
        """Tokens from the root down to ``node``, then on along first children (the draft's favourites)."""
        path = []
        while node >= 0:
            path.append(node)
            node = self.parents[node]
        path.reverse()
        node = path[-1] if path else -1
        while True:
            first = next((i for i in range(node + 1, len(self)) if self.parents[i] == node), None)
            if first is None:
                return [self.tokens[i] for i in path]
            path.append(first)
            node = first


@dataclass
class TreeStep(Step):
    """A chain `Step` (``draft`` = the branch the walk ended on) plus the whole tree of the round."""

    tree: TokenTree | None = None


# --------------------------------------------------------------------------- one masked pass


def tree_attention_mask(tree: TokenTree, prefix_length: int, cached: int, first: int, last: int, dtype) -> torch.Tensor:
    """Additive ``[1, 1, q, kv]`` mask for feeding the uncached prefix tail and nodes ``first:last``.

    The cache holds ``cached`` positions (``prefix_length`` of text, then nodes ``0:first``); the text
    tail is causal; each node sees the whole prefix, its ancestors and itself. A *float* mask (0 or the
    dtype's minimum) on purpose: eager attention in transformers 5.x adds the mask to the scores, so a
    bool mask would be added as 0/1 and silently ignored, while sdpa accepts both.
    """
    tail = prefix_length - cached if first == 0 else 0
    q = tail + last - first
    kv = prefix_length + last  # == cached + q
    allow = torch.zeros(q, kv, dtype=torch.bool)
    if tail:
        allow[:tail, : cached + tail] = torch.ones(tail, cached + tail, dtype=torch.bool).tril(cached)
    allow[tail:, :prefix_length] = True
    allow[tail:, prefix_length:] = tree.ancestry()[first:last, :last]
    mask = torch.zeros(1, 1, q, kv, dtype=dtype)
    return mask.masked_fill_(~allow, torch.finfo(dtype).min)


def tree_forward(model, cache, context: torch.Tensor, tree: TokenTree, first: int = 0, last: int | None = None,
                 logits_to_keep: int = 0) -> torch.Tensor:
    """One pass feeding the uncached tail of ``context`` (``[1, L]``) and nodes ``first:last``.

    Position ids: text at its index, node at ``L - 1 + depth``. Returns the last ``logits_to_keep``
    rows (all when 0). With ``first > 0`` the cache must already hold the text and nodes ``0:first``.
    """
    last = len(tree) if last is None else last
    length = context.shape[1]
    cached = cache_length(cache)
    if first and cached != length + first:
        raise ValueError(f"cache holds {cached} positions, expected the text ({length}) plus {first} nodes")
    device = context.device
    tail = context[:, cached:] if first == 0 else context[:, :0]
    nodes = torch.tensor(tree.tokens[first:last], dtype=torch.long, device=device).view(1, -1)
    positions = list(range(length - tail.shape[1], length)) + [length - 1 + d for d in tree.depths[first:last]]
    dtype = next(model.parameters()).dtype
    if not dtype.is_floating_point:
        dtype = torch.float32
    mask = tree_attention_mask(tree, length, cached, first, last, dtype).to(device)
    out = model(
        input_ids=torch.cat([tail, nodes], dim=1),
        attention_mask=mask,
        position_ids=torch.tensor([positions], device=device),
        **cache_kwargs(model, cache),
        use_cache=True,
        logits_to_keep=logits_to_keep,
    )
    return out.logits[0]


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
    attention_fix = ("Load it with attn_implementation='sdpa' or 'eager' (from_pretrained(..., "
                     "attn_implementation='sdpa') or model.set_attn_implementation('sdpa'))")
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
        keep_cache_positions(cache, [0, 2])
        got = model(input_ids=torch.tensor([[d]], device=device), **cache_kwargs(model, cache), use_cache=True).logits[0, -1]
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


def _draft_parts(draft, target):
    """(draft model or None, its vocab limit, n-gram lookup or None), from what the drafter declares."""
    drafter = as_drafter(draft, target)
    if drafter.needs_target_features:
        raise TypeError(f"tree drafting needs a draft model or an n-gram lookup; this {type(draft).__name__} reads the "
                        "target's features, which a tree pass does not give: use a HybridDrafter over a model, "
                        "or speculative_decode")
    model_drafter, lookup = drafter, None
    if isinstance(drafter, HybridDrafter):
        model_drafter, lookup = drafter.model_drafter, drafter.lookup
    elif isinstance(drafter, PromptLookupDrafter):
        model_drafter, lookup = None, drafter
    if model_drafter is not None and not isinstance(model_drafter, ModelDrafter):
        raise TypeError(
            "tree drafting needs a Hugging Face causal LM, a ModelDrafter, a HybridDrafter or a PromptLookupDrafter "
            f"as draft, got {type(draft).__name__}"
        )
    vocab = checks.vocab_size(target)
    if model_drafter is None:
        return None, vocab, lookup
    checks.check_model(model_drafter.model, "draft")
    limit = model_drafter.vocab_limit
    return model_drafter.model, vocab if limit is None else min(limit, vocab), lookup


def draft_tree(model, cache, context: torch.Tensor, widths, vocab_limit: int | None = None):
    """Grow a tree level by level with the draft, keeping the ``widths[d]`` best paths at depth ``d + 1``.

    Each level is one draft pass over the previous level (tree mask again), so depth D costs D passes,
    like a chain of D tokens. Paths are ranked by their total draft log-probability, each parent
    offering its own top ``widths[d]``. Returns (tree, nodes now in the draft cache, passes). The last
    level is never fed: nobody needs its draft logits.
    """
    tree = TokenTree()
    length = context.shape[1]
    if cache_length(cache) >= length:  # the last text token must be fed: its logits give depth 1
        crop_cache(cache, length - 1)
    frontier, scores = [-1], torch.zeros(1)
    first = 0
    for width in widths:
        logits = tree_forward(model, cache, context, tree, first, len(tree), logits_to_keep=len(frontier))
        logp = torch.log_softmax(logits[-len(frontier):, :vocab_limit].float(), dim=-1).cpu()
        top = logp.topk(min(width, logp.shape[-1]), dim=-1)
        paths = (scores[:, None] + top.values).flatten()
        best = paths.topk(min(width, paths.numel())).indices  # sorted: best first
        first = len(tree)
        new_frontier = []
        for flat in best.tolist():
            row, col = divmod(flat, top.indices.shape[1])
            new_frontier.append(tree.add(int(top.indices[row, col]), frontier[row]))
        frontier, scores = new_frontier, paths[best]
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
    lookup_tokens: int | None = None,
) -> DecodeOutput:
    """Greedy speculative decoding with a token tree; ``sequences`` equals ``target.generate(do_sample=False)``.

    ``tree`` = widths per depth (``(1,) * k`` is a chain). ``draft``: an HF model or `ModelDrafter` (grows
    the tree), a `PromptLookupDrafter` (one n-gram branch), or a `HybridDrafter` (both: the n-gram
    branch is merged into the model's tree, at most ``lookup_tokens`` long, default the tree's depth).
    Stats: ``proposed`` counts tree nodes, ``accepted`` the kept branch; ``mean_accepted_length`` is
    tokens per target call.
    """
    input_ids, max_new_tokens, eos = checks.decode_args(target, input_ids, max_new_tokens, eos_token_id)
    widths = checks.check_tree_shape(tree)
    if temperature is None or float(temperature) != 0.0:
        raise ValueError(
            f"tree_speculative_decode is greedy only (temperature=0), got temperature={temperature}; "
            "for sampling use speculative_decode, whose rejection sampling keeps the target's distribution"
        )
    model, vocab_limit, lookup = _draft_parts(draft, target)
    lookup_tokens = checks.check_positive_int(len(widths) if lookup_tokens is None else lookup_tokens,
                                              "lookup_tokens", 1)
    check_tree_support(target, "target")
    checks.check_draft_model(model, input_ids, max_new_tokens)
    if model is not None:
        check_tree_support(model, "draft", exact=False)
    return _tree_loop(target, model, vocab_limit, lookup, input_ids, max_new_tokens, widths, lookup_tokens, eos)


def _tree_loop(target, model, vocab_limit, lookup, input_ids, max_new_tokens, widths, lookup_tokens, eos):
    target_cache = new_cache(target)
    draft_cache = new_cache(model) if model is not None else None

    def one_round(text: Text) -> None:
        context, length, room = text.context, text.length, text.room
        tree, in_draft_cache, calls = TokenTree(), 0, 0
        if model is not None and room:
            tree, in_draft_cache, calls = draft_tree(model, draft_cache, context, widths[:room], vocab_limit)
        if lookup is not None and room:
            tree.add_branch(lookup.propose(context, min(lookup_tokens, room)).tokens.tolist())

        # One target pass: row 0 judges depth-1 nodes, row 1 + i judges node i's children.
        choices = tree_forward(target, target_cache, context, tree, logits_to_keep=len(tree) + 1).argmax(-1).tolist()
        path, node = [], -1
        while (child := tree.child(node, choices[node + 1])) is not None:
            path.append(child)
            node = child
        emitted = text.append([tree.tokens[i] for i in path] + [choices[node + 1]])

        # Keep the text plus the kept branch; the new last token is fed next round, as in the chain loop.
        prefix = list(range(length))
        keep_cache_positions(target_cache, prefix + [length + i for i in path])
        if calls:  # the draft fed the text this round; only non-leaf nodes are in its cache
            cached = itertools.takewhile(lambda i: i < in_draft_cache, path)
            keep_cache_positions(draft_cache, prefix + [length + i for i in cached])
        text.record(TreeStep(tree.branch_from(node), len(path), emitted, tree), len(tree), calls)

    return run_rounds(input_ids, max_new_tokens, eos, one_round)
