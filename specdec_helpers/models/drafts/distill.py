"""A cheap draft distilled from the target, here, on the CPU (``draft="distilled"``).

Why: a draft pays only if one of its steps costs a small fraction of a target step *and* it agrees
with the target often. An int8 copy of SmolLM2-135M agrees often but costs ~0.6 of a target step;
a draft trained from scratch would need far more data than a CPU can make. So the draft starts as
a *truncated copy* of the target (a few of its layers, its embeddings and final norm) and is then
trained to predict the target's own greedy tokens on text the target wrote itself:

1. data: the target answers `DISTILL_PROMPTS` greedily (`training_text`: instructions built from
   templates and topics, none of them a benchmark prompt; cached, and shared with `eagle`);
2. the draft's output head covers only the tokens the target actually used in that text (a few
   thousand of 49k), so its most expensive layer shrinks ~10x; `VocabSubsetHead` scatters its
   logits back into the full vocabulary (other tokens get -inf: never proposed), so the draft is
   an ordinary causal LM to `speculative_decode` and to HF assisted generation alike;
3. training: cross-entropy against the target's greedy token at every position it wrote (the loop,
   the head and saving are shared with `eagle`: `training`).

Deterministic for a given seed and thread count; cached in a versioned folder like the toy pair.
Speculative decoding stays lossless whatever the draft proposes: the target verifies every token.
"""

from __future__ import annotations

import copy
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from specdec_helpers.models.drafts.training_text import DISTILL_PROMPTS, _token_subset, start_training, text_meta
from specdec_helpers.models.drafts.training import (
    VocabSubsetHead,
    _fingerprint,
    _right_padded,
    fit,
    is_saved,
    read_draft,
    save_draft,
    subset_labels,
    truncated_body,
)
from specdec_helpers.models.store import cache_root

DISTILL_VERSION = 1  # bump when anything below changes the trained result: it names the cache folder


@dataclass(frozen=True)
class DistillRecipe:
    """Everything that decides the trained draft (part of the cache key through ``DISTILL_VERSION``)."""

    layers: tuple[int, ...] = (0, 1)  # which target layers the draft starts from
    max_new_tokens: int = 128  # tokens the target writes per prompt
    generate_batch: int = 64  # prompts written at once: 158 tokens/s on 2 cores at 64, 140 at 32
    epochs: int = 6  # held-out agreement 38% (2 layers); 4 layers gave 40% at twice the cost
    batch_size: int = 8
    lr: float = 1e-3
    seed: int = 0


def truncated_copy(target, layers, token_ids) -> torch.nn.Module:
    """A draft made of the target's ``layers`` (copied), its embeddings (shared, frozen), its final norm
    and a `VocabSubsetHead` over ``token_ids`` (initialised from the target's output rows)."""
    body = truncated_body(target, layers)
    draft = type(target)(body.config).to(dtype=body.embed_tokens.weight.dtype)
    draft.model = body
    head = target.get_output_embeddings().weight.detach()
    draft.lm_head = VocabSubsetHead(head, token_ids, body.config.vocab_size)
    draft.generation_config = copy.deepcopy(target.generation_config)
    return draft.to(body.embed_tokens.weight.device, body.embed_tokens.weight.dtype).eval()


def _train(draft, data, recipe: DistillRecipe, progress: bool) -> list[float]:
    """Cross-entropy of the draft's subset head against the target's greedy token at every position
    the target wrote; returns the mean loss of each epoch. (Distilling the target's whole distribution
    instead, with a KL term, costs a pass for the target's logits and gained almost nothing:
    benchmarks/RESULTS.md.)"""
    head: VocabSubsetHead = draft.lm_head
    to_subset = subset_labels(head)
    params = [p for name, p in draft.named_parameters() if not name.startswith("model.embed_tokens")]
    draft.model.embed_tokens.weight.requires_grad_(False)
    device = head.token_ids.device

    def loss_of(indices):
        batch = [data[i] for i in indices]
        input_ids, mask = _right_padded([ids for ids, _ in batch])
        hidden = draft.model(input_ids=input_ids.to(device), attention_mask=mask.to(device)).last_hidden_state
        # Only the positions where the target wrote: their logits predict its next token.
        logits = torch.cat(
            [head.subset_logits(hidden[row, start - 1 : len(ids) - 1]) for row, (ids, start) in enumerate(batch)]
        )
        labels = torch.cat([to_subset[ids[start:]] for ids, start in batch]).to(device)
        return F.cross_entropy(logits, labels, ignore_index=-100)

    return fit(draft, params, len(data), recipe, loss_of, "training the draft", progress)


def distilled_dir(name: str) -> Path:
    return cache_root() / f"{name}-distilled-draft-v{DISTILL_VERSION}"


def distill_draft(
    target,
    tokenizer,
    *,
    name: str,
    recipe: DistillRecipe = DistillRecipe(),
    prompts=DISTILL_PROMPTS,
    progress: bool = True,
    folder: Path | None = None,
) -> Path:
    """Have ``target`` write text (cached), train a truncated draft on it, save it (atomically); returns the folder."""
    start = time.perf_counter()
    folder, text_folder, data, say = start_training(
        target,
        tokenizer,
        name=name,
        seed=recipe.seed,
        text_recipe=recipe,
        prompts=prompts,
        folder=folder,
        default=distilled_dir(name),
        progress=progress,
        what=f"distilling a draft from the target ({len(prompts)} prompts, {recipe.epochs} epochs; about 15 minutes "
        "on 2 CPU cores, once)",
    )
    text_s = time.perf_counter() - start  # the target writing it, or reading it from the cache
    token_ids = _token_subset(data, tokenizer)
    draft = truncated_copy(target, recipe.layers, token_ids)
    with torch.enable_grad():
        losses = _train(draft, data, recipe, progress)
    meta = dict(
        version=DISTILL_VERSION,
        target=_fingerprint(target),
        recipe=asdict(recipe),
        prompts=len(prompts),
        tokens_written=sum(len(ids) - begin for ids, begin in data),
        vocab_subset=int(token_ids.numel()),
        epoch_losses=losses,
        text=text_meta(text_folder),
        text_s=round(text_s, 1),
        total_s=round(time.perf_counter() - start, 1),
        threads=torch.get_num_threads(),
    )
    save_draft(folder, {k: v for k, v in draft.state_dict().items() if not k.startswith("model.embed_tokens")}, meta)
    say(
        f"{name}: draft distilled in {meta['total_s']:.0f} s (the target's text {text_s:.0f} s of it); "
        f"{meta['tokens_written']} tokens, head over {meta['vocab_subset']} token ids, losses {[round(x, 3) for x in losses]}"
    )
    return folder


def load_distilled(target, folder: Path) -> torch.nn.Module:
    """The draft saved in ``folder``, rebuilt around ``target`` (whose embeddings it shares)."""
    meta, state = read_draft(target, folder, "distilled")
    draft = truncated_copy(target, meta["recipe"]["layers"], state["lm_head.token_ids"])
    missing, unexpected = draft.load_state_dict(state, strict=False)
    if unexpected or any(not k.startswith("model.embed_tokens") for k in missing):
        raise ValueError(f"{folder} does not match this target: missing {missing}, unexpected {unexpected}")
    draft.meta = meta
    draft.config.name_or_path = "distilled"  # its name in tables (`measure.methods.draft_label`), as load_pair's
    return draft.eval()


def distilled_draft(target, tokenizer, name: str, progress: bool = True, **kwargs) -> torch.nn.Module:
    """The cached distilled draft for ``name``, trained first if it is not cached yet."""
    folder = distilled_dir(name)
    if not is_saved(folder):
        distill_draft(target, tokenizer, name=name, progress=progress, **kwargs)
    return load_distilled(target, folder)
