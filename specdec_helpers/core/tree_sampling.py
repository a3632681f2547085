"""Tree speculation with sampling: multi-draft rejection sampling over a token tree, lossless.

A tree node may have several children: several drafts of the same next token. Verifying them one by
one keeps the target's distribution exactly (SpecInfer, Miao et al. 2023, "multi-step speculative
sampling"). With ``p`` the target's warped distribution at the node and ``Q_i`` the distribution the
i-th child ``x_i`` was drawn from:

    for each child, in the order it was drawn:
        accept x_i with probability min(1, p(x_i) / Q_i(x_i))   -> go down to x_i and repeat there
        else p <- norm(max(p - Q_i, 0))                           (the residual)
    no child accepted: the token is drawn from the last p        (the correction)
    at a leaf: the token is drawn from its p                     (the bonus)

Each step is ordinary rejection sampling of target ``p`` with proposal ``Q_i``; on a rejection its
output follows the residual, whatever was rejected, so by induction a node emits exactly ``p``.
Two ways to draw a node's children from the draft's ``q``:

- ``"specinfer"``: independently (with replacement), so every ``Q_i = q``. Equal draws share one node
  but each counts as a draw.
- ``"sequoia"`` (Chen et al. 2024): without replacement, so ``x_i`` comes from ``q`` with ``x_1 ..
  x_{i-1}`` removed; after a rejection also ``q <- norm(q with q[x_i] = 0)``. No draw is wasted on a
  token already rejected.

What keeps it exact: each draw comes from its ``Q_i`` given everything drawn before it. So children
are never chosen by value (keeping the best of many draws would be biased), while *how many* a node
gets may depend on the tree above it. A deterministic draft (n-gram lookup) is a draw from a one-hot q.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from specdec_helpers.core.cache import cache_length, rollback
from specdec_helpers.core.sampling import Sampler, residual_distribution
from specdec_helpers.core.token_tree import TokenTree, tree_forward
from specdec_helpers.core.verify import _match_vocab

RULES = ("specinfer", "sequoia")


def check_rule(rule) -> str:
    if rule not in RULES:
        raise ValueError(
            f"tree_sampling must be one of {RULES} (children drawn with replacement, SpecInfer; or "
            f"without, Sequoia), got {rule!r}"
        )
    return rule


@dataclass
class SampledTree:
    """A `TokenTree` plus, for each node (-1: the root), its draws in the order they were made:
    ``(child node, q it was drawn from)``, ``q = None`` for a deterministic (one-hot) draft."""

    tree: TokenTree = field(default_factory=TokenTree)
    draws: dict = field(default_factory=dict)  # parent -> [(node, q | None)]

    def draw(self, token: int, parent: int, q: torch.Tensor | None, first: bool = False) -> int:
        node = self.tree.add(int(token), parent)
        entries = self.draws.setdefault(parent, [])
        entries.insert(0 if first else len(entries), (node, q))
        return node


# --------------------------------------------------------------------------- verification


def accept_at_node(
    p: torch.Tensor, draws, tokens, rule: str, sampler: Sampler, residual=residual_distribution
) -> tuple[int, int]:
    """One node of the walk: ``(accepted child node, its token)``, or ``(-1, token drawn from the residual)``.

    ``p`` is the target's warped distribution ``[V]`` at the node; ``draws`` its ``(node, q)`` list;
    ``tokens[node]`` the node's token. ``residual`` is the step the notebook's exercise writes.
    """
    rejected = []  # sampled tokens already rejected here: Sequoia's draft no longer proposes them
    for node, q in draws:
        x = tokens[node]
        if q is None:
            q = torch.zeros_like(p)
            q[x] = 1.0
        else:
            q = _match_vocab(q.to(p.device, p.dtype), p.shape[-1])
            if rule == "sequoia" and rejected:
                q = q.clone()
                q[rejected] = 0.0
                q = q / q.sum()
            rejected.append(x)
        # Accept iff u < p/q, written as u * q < p so that q == 0 cannot divide by zero.
        if float(sampler.uniform(1, p.device)) * float(q[x]) < float(p[x]):
            return node, x
        p = residual(p, q)
    return -1, int(sampler.sample(p.unsqueeze(0)))


def sampled_walk(sampled: SampledTree, logits: torch.Tensor, rule: str, sampler: Sampler) -> tuple[list[int], int]:
    """Walk the tree from the root: ``(kept nodes, the target's own last token)``.

    ``logits`` are the target's rows of one tree pass: row 0 judges the root's children, row ``1 + i``
    node ``i``'s (the tree's off-by-one, see `core.tree`).
    """
    p = sampler.probs(logits)
    tokens = sampled.tree.tokens
    path, node = [], -1
    while True:
        child, token = accept_at_node(p[node + 1], sampled.draws.get(node, ()), tokens, rule, sampler)
        if child < 0:
            return path, token
        path.append(child)
        node = child


# --------------------------------------------------------------------------- drafting


def draw_children(q: torch.Tensor, n: int, rule: str, sampler: Sampler) -> list[int]:
    """``n`` tokens from ``q``: independent (SpecInfer), or one by one without replacement (Sequoia)."""
    if rule == "specinfer":
        return sampler.sample(q.expand(n, -1)).tolist()
    n = min(n, int((q > 0).sum()))
    tokens, q = [], q.clone()
    for _ in range(n):
        x = int(sampler.sample(q.unsqueeze(0)))
        tokens.append(x)
        q[x] = 0.0  # multinomial renormalises
    return tokens


def _allocate(width: int, scores: torch.Tensor) -> list[int]:
    """Draws per frontier node: ``width`` spread evenly, the most likely paths (by draft score) first."""
    n = scores.numel()
    counts = [width // n] * n
    for rank in scores.argsort(descending=True)[: width % n].tolist():
        counts[rank] += 1
    return counts


def draft_sampled_tree(model, cache, context: torch.Tensor, widths, vocab_limit, sampler: Sampler, rule: str):
    """Grow a tree level by level, *sampling* each node's children from the draft's warped ``q``.

    ``widths[d]`` draws at depth ``d + 1``, spread over the nodes of depth ``d`` (most likely paths
    first: their number is decided before anything is drawn, which keeps verification exact). Each
    level is one draft pass, as in the greedy `tree.draft_tree`. Returns (SampledTree, nodes in the
    draft cache, passes); the last level is never fed.
    """
    sampled = SampledTree()
    tree = sampled.tree
    length = context.shape[1]
    if cache_length(cache) >= length:  # the last text token must be fed: its logits give depth 1
        rollback(cache, length - 1)
    frontier, scores, first, passes = [-1], torch.zeros(1), 0, 0
    for width in widths:
        logits = tree_forward(model, cache, context, tree, first, len(tree), logits_to_keep=len(frontier))
        passes += 1
        q = sampler.probs(logits[-len(frontier) :, :vocab_limit])
        first, new_scores = len(tree), {}
        for row, n in enumerate(_allocate(width, scores)):
            for x in draw_children(q[row], n, rule, sampler) if n else ():
                node = sampled.draw(x, frontier[row], q[row])
                new_scores.setdefault(node, float(scores[row]) + float(q[row, x].log()))
        if len(tree) == first:
            break
        frontier = list(range(first, len(tree)))
        scores = torch.tensor([new_scores[i] for i in frontier])
    return sampled, first, passes


def add_lookup_branch(sampled: SampledTree, tokens) -> None:
    """Merge an n-gram lookup's proposal as deterministic draws, tried first at each node it passes."""
    parent = -1
    for token in tokens:
        parent = sampled.draw(int(token), parent, None, first=True)


def draft_chains(drafter, context: torch.Tensor, chains: int, depth: int, sampler: Sampler, rule: str):
    """A tree of whole chains from any `Drafter` (e.g. a feature draft): its own ``propose``, repeated.

    SpecInfer: ``chains`` independent proposals merged along shared prefixes; a node's draws are the
    next tokens of the chains through it (given the tree above, independent draws from its q).
    Sequoia: proposals whose first tokens differ (a repeated first token is drawn again, which
    draws without replacement), so chains share only the root. A deterministic proposal (no
    ``probs``, e.g. an n-gram hit) is made once. Returns (SampledTree, draft passes).
    """
    sampled, calls, seen = SampledTree(), 0, set()
    length = context.shape[1]
    tries = 0
    while len(seen) < chains and tries < 4 * chains:
        tries += 1
        if tries > 1:  # forget the last proposal: as after a round that kept the text but its last token
            drafter.update(length - 1)
        proposal = drafter.propose(context, depth, sampler)
        calls += proposal.forward_calls
        tokens = proposal.tokens.tolist()
        if not tokens:
            break
        if rule == "sequoia" and tokens[0] in seen:
            continue
        seen.add(tokens[0] if rule == "sequoia" else tries)
        parent = -1
        for j, token in enumerate(tokens):
            parent = sampled.draw(token, parent, None if proposal.probs is None else proposal.probs[j])
        if proposal.probs is None or sampler.greedy:
            break
    return sampled, calls
