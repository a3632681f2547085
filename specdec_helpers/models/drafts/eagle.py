"""A draft that reads the target's own features (after EAGLE, Li et al. 2024), trained here on the CPU.

Why: a small draft that sees only tokens must re-derive what the target "thinks" from scratch. The
target has already computed that: its last hidden state at position ``i`` (the *feature* ``f_i``,
from which its head reads the token at ``i + 1``), and every verify pass produces these features
anyway. So this draft reads them beside the tokens:

    input at position i:  fc([f_i, embedding(token i+1)])  ->  the target's first layer(s), copied
                          ->  its final norm  ->  f'_{i+1}
    draft token i + 2:    head(f'_{i+1})            (the target's output rows over a vocabulary subset)

Drafting several tokens feeds the draft's predicted feature back in place of the target's. After
verification the kept positions are fed again with the target's true features: the draft's KV cache
keeps only positions computed from true features. ``fc`` starts as ``[0 | I]``, so training starts
from a truncated copy of the target (as `distill` does) and learns how to use the feature.

Training (`eagle_train`): the text the target wrote (`training_text`, cached, shared with `distill`), the target's features and greedy
choices on it (one batched pass), then cross-entropy against the greedy choice plus a small
regression of the predicted feature, for each of ``EagleRecipe.steps`` drafting steps unrolled as
decoding runs them (`unrolled`, EAGLE-3's "training-time test"): trained on true features alone, the
draft's second token, read from its own predicted feature, agreed with the target 12% of the time;
unrolled, about half the time. The text (~74k tokens of 640 template answers) is too small for its first
token to agree with the target often, so alone it loses to prompt lookup; behind it, drafting where no
n-gram matches (``"hybrid:eagle"``, `HYBRID_TOKENS`), it adds tokens per target call but, on 2 CPU cores,
no speed (benchmarks/RESULTS.md has the agreement and speedups measured on SmolLM2-135M).

Or, teacher-forced on existing text (`eagle_train.train_eagle_corpus`, EAGLE's own way, and what the kit ships): the
target reads chunks of the kit's corpus (`corpus`: Python's documentation and docstrings, chat-formatted in
part) in one prefill pass each, no generation, plus its own answers above (written once, cached), for its
features and greedy choices (cached: `feature_data.cached_features`); the head is the target's own rows over the tokens it
chose most often (frozen, not saved). The kit ships that draft for SmolLM2 in fp16 with a sha256 manifest
(`shipped_dir`), so ``draft="eagle"`` loads it (`eagle_train.eagle_drafter`) instead of training on first use.

Speculative decoding stays lossless whatever this draft proposes: the target verifies every token.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import torch

from specdec_helpers.core.cache import cache_kwargs, cache_length, new_cache, rollback
from specdec_helpers.core.drafters import (
    GREEDY,
    Proposal,
    check_threshold,
    unsure,
)
from specdec_helpers.core.sampling import Sampler
from specdec_helpers.core.token_tree import TokenTree, TreeDrafter, grow_level, tree_attention_mask
from specdec_helpers.core.timing import spread, timed
from specdec_helpers.models.drafts.feature_data import target_features
from specdec_helpers.models.drafts.training import VocabSubsetHead, read_draft, truncated_body
from specdec_helpers.models.store import cache_root

EAGLE_VERSION = 4  # bump when anything below changes the trained result: it names the cache folder
# Tokens the feature draft proposes behind n-gram lookup (`pairs.load_pair(draft="hybrid:eagle")`): two.
# Trained unrolled (`unrolled`), its second token agrees about half the time; on smollm2-135m two tokens beat
# one and three, though every count stayed within noise of lookup alone on 2 cores (benchmarks/RESULTS.md).
HYBRID_TOKENS = 2


@dataclass(frozen=True)
class EagleRecipe:
    """Everything that decides the trained feature draft (with the text recipe it trains on)."""

    layers: tuple[int, ...] = (0,)  # target layers the draft starts from
    epochs: int = 4
    batch_size: int = 8
    lr: float = 1e-3
    feature_weight: float = 0.1  # regression of the predicted feature, beside the token's cross-entropy
    steps: int = 2  # drafting steps trained, each on the previous step's predicted feature (`unrolled`)
    seed: int = 0


class FeatureDraft(torch.nn.Module):
    """fc + a few decoder layers copied from the target + its final norm + a `VocabSubsetHead`.

    ``fc`` starts as ``[0 | I]``: the layers first see just the token's embedding, as they did in the
    target, so training starts from a truncated copy of the target and learns how much of the
    target's feature to mix in."""

    def __init__(self, target, token_ids: torch.Tensor, layers=(0,)):
        super().__init__()
        body = truncated_body(target, layers)
        embeddings, body.embed_tokens = body.embed_tokens, None  # the body reads inputs_embeds only
        self.embed = [embeddings]  # the target's, shared and frozen (a list: not a submodule, not saved)
        hidden, dtype = body.config.hidden_size, embeddings.weight.dtype
        self.fc = torch.nn.Linear(2 * hidden, hidden, bias=True, dtype=dtype)
        with torch.no_grad():
            self.fc.weight.zero_()
            self.fc.weight[:, hidden:].copy_(torch.eye(hidden))
            self.fc.bias.zero_()
        self.body = body
        self.layers = tuple(int(i) for i in layers)
        self.lm_head = VocabSubsetHead(
            target.get_output_embeddings().weight.detach(), token_ids, body.config.vocab_size
        )
        self.config = body.config
        self.to(embeddings.weight.device, embeddings.weight.dtype)

    def forward(
        self, features: torch.Tensor, next_tokens: torch.Tensor, cache=None, attention_mask=None, position_ids=None
    ):
        """Predicted features ``[B, T, H]`` of the positions after those of ``features``."""
        # detach: the target's embeddings are read, never trained (and get no gradient).
        x = self.fc(torch.cat([features, self.embed[0](next_tokens).detach()], dim=-1))
        out = self.body(
            inputs_embeds=x,
            attention_mask=attention_mask,
            **cache_kwargs(self.body, cache),
            use_cache=cache is not None,
            position_ids=position_ids,
        )
        return out.last_hidden_state


def unrolled(draft: FeatureDraft, feats: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor, steps: int):
    """The draft's predicted features for ``steps`` drafting steps from every position at once, as decoding
    would compute them (EAGLE-3's "training-time test").

    Step 1 is the teacher-forced pass (position j reads ``f_j`` and token ``j + 1``). Step s >= 2 of the chain
    that started at j reads the chain's own predicted feature and token ``j + s``, sits at position
    ``j + s - 1``, and attends to what it would see in decoding: the true positions ``0..j`` and its own chain's
    earlier steps, never another chain's (an additive 4D mask over a cache of the earlier steps). Returns one
    ``[B, T - s + 1, H]`` tensor per step; its column j predicts the token the text's ``labels[:, j + s - 1]`` holds.
    """
    width = tokens.shape[1]
    predicted = [draft(feats, tokens, cache := new_cache(draft.body), attention_mask=mask)]
    starts = []  # where each step's block (from step 2 on) starts in the cache: after all earlier blocks
    for step in range(2, steps + 1):
        length = width - step + 1
        if length < 1:
            break
        starts.append(cache_length(cache))
        chain = torch.arange(length)
        allow = torch.zeros(length, starts[-1] + length, dtype=torch.bool)
        allow[:, :width] = chain[:, None] >= torch.arange(width)[None, :]  # true positions 0..j
        for start in starts:  # the chain's own earlier steps, and this one
            allow[chain, start + chain] = True
        dtype = feats.dtype
        additive = torch.zeros(1, 1, *allow.shape, dtype=dtype).masked_fill_(~allow, torch.finfo(dtype).min)
        positions = (chain + step - 1).to(feats.device).expand(tokens.shape[0], -1)
        predicted.append(
            draft(
                predicted[-1][:, :length],
                tokens[:, step - 1 :],
                cache,
                attention_mask=additive.to(feats.device),
                position_ids=positions,
            )
        )
    return predicted


class FeatureDrafter(TreeDrafter):
    """Drafts with a `FeatureDraft` from the features the target computed while verifying.

    The decode loop hands over the target's features after each pass (`update`); the first
    round, before any target pass, proposes nothing (that pass is the prompt's prefill anyway).
    Cached draft position i read (f_i, token i + 1); it stays valid while f_i is the target's own (not
    predicted) feature and token i + 1 is kept: `update` keeps those and drops the rest, `propose` feeds from there.
    Greedy trees (`propose_tree`) grow EAGLE-2 style: the first level reads the target's true feature, so its
    top few tokens are the draft's best guesses at once, and each level after is one tree-masked pass.
    """

    needs_target_features = True
    label = "eagle"

    def __init__(self, draft: FeatureDraft, confidence_threshold: float | None = None):
        self.draft = draft
        self.confidence_threshold = check_threshold(confidence_threshold)  # as in `ModelDrafter`
        self.update(0)

    def update(self, n_kept: int, target_features: torch.Tensor | None = None) -> None:
        """Only the first ``n_kept`` tokens are valid (0: a new text); ``target_features`` ``[1, F, H]`` are the
        target's features of positions ``n_kept - F .. n_kept - 1``, from its latest pass."""
        if n_kept == 0:
            self.cache = new_cache(self.draft.body)
            # [1, n, H]: the target's features of positions 0 .. n-1 (none yet)
            self.features = self.draft.fc.weight.new_zeros(1, 0, self.draft.fc.in_features // 2)
            self.true_length = 0  # cached draft positions computed from the target's (not predicted) features
        self.features = self.features[:, :n_kept]
        start = n_kept
        if target_features is not None:
            known, width = self.features.shape[1:]
            start = n_kept - target_features.shape[1]
            if target_features.shape[-1] != width:
                raise ValueError(
                    f"the target's features have {target_features.shape[-1]} dimensions but this feature "
                    f"draft reads {width}: it was made for another target; train one for this target"
                )
            if not 0 <= start <= known:
                raise ValueError(
                    f"features from position {start} leave a gap after the {known} positions held: "
                    "pass every position the target computed"
                )
            self.features = torch.cat([self.features[:, :start], target_features.to(self.features.dtype)], dim=1)
        # Rows past the kept text, or read from predicted (or replaced) features, are stale.
        self.true_length = min(self.true_length, start, max(n_kept - 1, 0))
        rollback(self.cache, self.true_length)

    @torch.inference_mode()
    def propose(self, input_ids: torch.Tensor, k: int, sampler: Sampler = GREEDY) -> Proposal:
        length = input_ids.shape[1]
        if k < 1 or self.features.shape[1] < length - 1 or length < 2:
            return Proposal(input_ids.new_empty(0))
        features, fed = self._text_to_feed(input_ids)
        tokens, probs = [], []
        for _ in range(k):
            predicted = self.draft(features, fed, self.cache)[:, -1:]
            logits = self.draft.lm_head(predicted)[0]
            token, prob = sampler.choose(logits)
            tokens.append(token)
            probs.append(prob)
            if unsure(logits, prob, self.confidence_threshold):
                break
            features, fed = predicted, token.view(1, 1)
        return Proposal(torch.cat(tokens), None if sampler.greedy else torch.cat(probs), forward_calls=len(tokens))

    def _text_to_feed(self, input_ids: torch.Tensor):
        """The text's (features, tokens) the draft has not cached from true features (`update` cropped the cache
        to the rest). The last position (length - 2) is always among them: its output gives the first token."""
        length = input_ids.shape[1]
        if self.true_length >= length - 1:
            raise ValueError(
                f"the feature draft's cache holds {self.true_length} positions, all the text it can read: "
                "propose was called again without update in between; call drafter.update(n_kept, "
                "target_features) after each round (update(0) for a new text)"
            )
        features = self.features[:, self.true_length : length - 1]
        fed = input_ids[:, self.true_length + 1 : length]
        self.true_length = length - 1
        return features, fed

    @torch.inference_mode()
    def propose_tree(self, input_ids: torch.Tensor, widths: tuple[int, ...]) -> tuple[TokenTree, int]:
        """A greedy tree grown as EAGLE-2 does (`grow_level`: the ``widths[d]`` paths of highest total draft
        log-probability at depth ``d + 1``). A node reads its parent's predicted feature and its own token at the
        text position before it, seeing the text and its own ancestors (`tree_attention_mask`); the draft's
        positions are the text's shifted by one (position i reads token i + 1), hence prefix ``length - 1``.
        The nodes stay in the draft's cache past ``true_length``: the next `update` crops them. Returns the tree and
        the draft passes (the last level is never fed)."""
        tree, length = TokenTree(), input_ids.shape[1]
        if not widths or self.features.shape[1] < length - 1 or length < 2:
            return tree, 0
        features, fed = self._text_to_feed(input_ids)
        outputs = self.draft(features, fed, self.cache)[:, -1:]  # [1, 1, H]: the root's (the text's last token's)
        row = {-1: 0}  # node -> its row of `outputs`
        frontier, scores, passes = [-1], torch.zeros(1), 1
        for depth, width in enumerate(widths):
            start = len(tree)
            logits = self.draft.lm_head(outputs[0, [row[node] for node in frontier]])
            frontier, scores = grow_level(tree, frontier, scores, logits, width)
            if not frontier or depth + 1 == len(widths):
                break
            # One pass over the new level: each node reads its parent's output and its own token.
            level = range(start, len(tree))
            mask = tree_attention_mask(tree, length - 1, length - 1 + start, start, len(tree), outputs.dtype)
            device = input_ids.device
            outputs = self.draft(
                outputs[:, [row[tree.parents[i]] for i in level]],
                torch.tensor([tree.tokens[start:]], device=device),
                self.cache,
                attention_mask=mask.to(device),
                position_ids=torch.tensor([[length - 1 + depth] * len(level)], device=device),
            )
            row = {node: j for j, node in enumerate(level)}
            passes += 1
        return tree, passes


def measure_draft_step(target, drafter: FeatureDrafter, input_ids: torch.Tensor, repeats: int = 5) -> float:
    """Median seconds of one drafting step (one position through the draft, its head, the choice)."""

    kept = input_ids.shape[1] - 1  # the text but its last token, as after a round
    drafter.update(0)
    with torch.inference_mode():
        drafter.update(kept, target_features(target, input_ids)[1][:, :kept])
        drafter.propose(input_ids, 1)  # fills the draft's cache; each timed call feeds one position
        times = []
        for _ in range(repeats + 1):
            drafter.update(kept)  # forget the last proposal (not timed)
            times.append(timed(lambda: drafter.propose(input_ids, 1), input_ids.device)[1])
        times = times[1:]
    drafter.update(0)
    return spread(times)["median"]


# --------------------------------------------------------------------------- cache


def eagle_dir(name: str) -> Path:
    return cache_root() / f"{name}-eagle-draft-v{EAGLE_VERSION}"


_HEAD_WEIGHT = "lm_head.linear.weight"


def shipped_dir(name: str) -> Path:
    """Where the kit ships a trained feature draft for the target ``name``."""
    return Path(__file__).resolve().parents[2] / "data" / f"{name}-eagle-corpus"


def manifest_problems(folder: Path) -> list[str]:
    """The files of ``folder`` whose sha256 differs from its manifest (empty: all match)."""
    problems = []
    for line in (Path(folder) / "MANIFEST.sha256").read_text().splitlines():
        digest, file = line.split("  ", 1)
        path = Path(folder) / file
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            problems.append(file)
    return problems


def load_eagle(target, folder: Path) -> FeatureDraft:
    """The feature draft saved in ``folder``, rebuilt around ``target`` (whose embeddings it reads)."""
    meta, state = read_draft(target, folder, "eagle")
    draft = FeatureDraft(target, state["lm_head.token_ids"], meta["recipe"]["layers"])
    # A draft whose head is the target's own rows saves no head weight: it keeps the rows copied from the target.
    missing, unexpected = draft.load_state_dict(
        {k: v.to(draft.fc.weight.dtype) if v.is_floating_point() else v for k, v in state.items()}, strict=False
    )
    if unexpected or set(missing) - {_HEAD_WEIGHT}:
        raise ValueError(f"{folder} does not match this feature draft: missing {missing}, unexpected {unexpected}")
    draft.meta = meta
    return draft.eval()
