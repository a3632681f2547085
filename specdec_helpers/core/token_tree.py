"""The token tree and the one masked pass that scores all of it (see `core.tree` for the decode loop).

Every tree node sees the verified prefix and its own ancestors only, and its position id is its
depth, so each node's logits are exactly what a separate chain pass along its branch would give.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from specdec_helpers.core.cache import cache_kwargs, cache_length
from specdec_helpers.core.drafters import Drafter
from specdec_helpers.core.rounds import Step
from specdec_helpers.core.verify import last_hidden


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


def grow_level(tree: TokenTree, frontier: list[int], scores: torch.Tensor, logits: torch.Tensor, width: int):
    """One level of EAGLE-2's expansion: of the children every ``frontier`` node (``-1``: the root) could get,
    add the ``width`` paths with the highest total draft log-probability (``scores`` + the child's own; each
    node offers its own top ``width``). ``logits`` ``[len(frontier), V]``: the draft's, at each frontier node.
    Returns the new frontier (best first) and its scores. Tokens the draft gives no probability are never added."""
    logp = torch.log_softmax(logits.float(), dim=-1).cpu()
    top = logp.topk(min(width, logp.shape[-1]), dim=-1)
    paths = (scores[:, None] + top.values).flatten()
    best = paths.topk(min(width, paths.numel())).indices  # sorted: best first
    best = best[paths[best] > float("-inf")]
    new_frontier = []
    for flat in best.tolist():
        row, col = divmod(flat, top.indices.shape[1])
        new_frontier.append(tree.add(int(top.indices[row, col]), frontier[row]))
    return new_frontier, paths[best]


class TreeDrafter(Drafter):
    """A drafter that grows a whole token tree itself when greedy (e.g. a feature draft, EAGLE-2 style).

    `core.tree` asks it for ``propose_tree`` instead of whole chains; when sampling it still proposes chains
    (`propose`), which the multi-draft rejection sampling verifies exactly. After the target's pass the loop
    calls ``update(n_kept, features of the kept text's new positions)``, as after a chain: that is where the
    drafter drops the tree's nodes from its own cache."""

    def propose_tree(self, input_ids: torch.Tensor, widths: tuple[int, ...]) -> tuple[TokenTree, int]:
        """A tree continuing ``input_ids`` ``[1, L]``, at most ``widths[d]`` nodes at depth ``d + 1`` (the shape
        `tree.draft_tree` grows), and the draft passes it cost. An empty tree proposes nothing."""
        raise NotImplementedError


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


def tree_forward(
    model,
    cache,
    context: torch.Tensor,
    tree: TokenTree,
    first: int = 0,
    last: int | None = None,
    logits_to_keep: int = 0,
    features: bool = False,
):
    """One pass feeding the uncached tail of ``context`` (``[1, L]``) and nodes ``first:last``.

    Position ids: text at its index, node at ``L - 1 + depth``. Returns the last ``logits_to_keep``
    rows (all when 0). With ``first > 0`` the cache must already hold the text and nodes ``0:first``.
    ``features=True`` returns ``(logits, hidden)``, ``hidden`` = the last hidden states ``[fed, H]`` of
    every fed position (text tail, then nodes), for drafts that read the target's features.
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
        output_hidden_states=features,
    )
    return (out.logits[0], last_hidden(out)[0]) if features else out.logits[0]
