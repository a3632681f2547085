"""Training the feature draft (`eagle.FeatureDraft`), and the drafter that trains one on first use.

Two ways, both against the target's greedy choices and its features (`feature_data`):
- `train_eagle`: on the text the target wrote for `distill` (cached, shared), unrolled over
  ``EagleRecipe.steps`` drafting steps as decoding runs them (`eagle.unrolled`).
- `train_eagle_corpus`: teacher-forced on existing text (`corpus`), EAGLE's own way and what the kit ships
  (`eagle.shipped_dir`, fp16, with a sha256 manifest); the head is the target's own rows (not saved).
`teacher_forced_agreement` says how often the draft's tokens would be kept, without decoding.
"""

from __future__ import annotations

import hashlib
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F

from specdec_helpers.core.checks import eos_ids
from specdec_helpers.models.drafts.corpus import corpus_meta
from specdec_helpers.models.drafts.distill import DistillRecipe
from specdec_helpers.models.drafts.eagle import (
    _HEAD_WEIGHT,
    EAGLE_VERSION,
    EagleRecipe,
    FeatureDraft,
    FeatureDrafter,
    eagle_dir,
    load_eagle,
    manifest_problems,
    shipped_dir,
    unrolled,
)
from specdec_helpers.models.drafts.feature_data import (
    _feature_data,
    choice_subset,
    corpus_features,
    own_text_features,
    training_batch,
)
from specdec_helpers.models.drafts.training import (
    _fingerprint,
    fit,
    is_saved,
    save_draft,
    subset_labels,
)
from specdec_helpers.models.drafts.training_text import (
    DISTILL_PROMPTS,
    _token_subset,
    start_training,
    text_dir,
    text_meta,
)


@torch.inference_mode()
def teacher_forced_agreement(
    draft: FeatureDraft, data, features, eos: set[int], steps: int = 3, batch_size: int = 8
) -> dict:
    """How often the draft's tokens equal the target's greedy choices, teacher-forced on ``data`` (`unrolled`:
    each step sees what it would in decoding).

    ``step_rates[s]``: drafted token s + 1 is the target's choice, counted where the chain's earlier tokens
    were right and the text goes on as the target would (so the chain is the one decoding would draft).
    ``accepted_k{steps}``: the draft tokens a round of k = ``steps`` keeps on average, by those rates."""
    to_subset = subset_labels(draft.lm_head)
    hits, totals = [0] * steps, [0] * steps
    for first in range(0, len(data), batch_size):
        indices = list(range(first, min(first + batch_size, len(data))))
        feats, tokens, mask, labels, _, _ = training_batch(
            data, features, indices, to_subset, eos, draft.fc.weight.dtype
        )
        full_labels = torch.full_like(labels, -100)  # the target's choice as a full-vocabulary id
        for row, i in enumerate(indices):
            n = len(data[i][0]) - 1
            full_labels[row, :n] = features[i][1][1:].cpu()  # a token outside the head's subset: always a miss
            if int(data[i][0][-1]) in eos:
                full_labels[row, n - 1] = -100  # after an EOS: nothing to draft
        chain_ok = None
        for step, predicted in enumerate(unrolled(draft, feats, tokens, mask, steps)):
            length = predicted.shape[1]
            wanted = full_labels[:, step : step + length]
            right = draft.lm_head(predicted).argmax(-1) == wanted
            valid = wanted != -100
            if step:  # the earlier tokens were right, and the text fed this step is the one drafted before
                valid &= chain_ok[:, :length] & (
                    tokens[:, step : step + length] == full_labels[:, step - 1 : step - 1 + length]
                )
            hits[step] += int((right & valid).sum())
            totals[step] += int(valid.sum())
            chain_ok = right & valid
    rates = [h / t if t else 0.0 for h, t in zip(hits, totals)]
    accepted, running = 0.0, 1.0
    for rate in rates:
        running *= rate
        accepted += running
    return {
        "step_rates": [round(r, 4) for r in rates],
        f"accepted_k{steps}": round(accepted, 4),
        "positions": totals[0],
    }


def _train(draft: FeatureDraft, data, features, recipe: EagleRecipe, eos: set[int], progress: bool) -> list[float]:
    """Cross-entropy against the target's greedy token + feature regression (see `training_batch`), for each of
    ``recipe.steps`` drafting steps unrolled as decoding runs them (`unrolled`; EAGLE-3's training-time test):
    a draft trained on true features only meets its own predicted ones from the second token on."""
    to_subset = subset_labels(draft.lm_head)
    device, dtype = draft.fc.weight.device, draft.fc.weight.dtype

    def loss_of(indices):
        batch = training_batch(data, features, indices, to_subset, eos, dtype)
        feats, tokens, mask, labels, true_next, has_next = (t.to(device) for t in batch)
        loss = 0.0
        for step, predicted in enumerate(unrolled(draft, feats, tokens, mask, recipe.steps)):
            width = predicted.shape[1]
            logits = draft.lm_head.subset_logits(predicted)
            loss = loss + F.cross_entropy(
                logits.flatten(0, 1), labels[:, step : step + width].flatten(), ignore_index=-100
            )
            keep = has_next[:, step : step + width]
            loss = loss + recipe.feature_weight * F.smooth_l1_loss(
                predicted * keep, true_next[:, step : step + width] * keep
            )
        return loss / recipe.steps

    params = [p for p in draft.parameters() if p.requires_grad]
    return fit(draft, params, len(data), recipe, loss_of, "training the feature draft", progress, clip=1.0)


def train_eagle(
    target,
    tokenizer,
    *,
    name: str,
    recipe: EagleRecipe = EagleRecipe(),
    text_recipe: DistillRecipe = DistillRecipe(),
    prompts=None,
    progress: bool = True,
    folder: Path | None = None,
) -> Path:
    """Train a `FeatureDraft` on the target's own text and features, save it (atomically); returns the folder."""
    prompts = DISTILL_PROMPTS if prompts is None else prompts
    start = time.perf_counter()
    folder, text_folder, data, say = start_training(
        target,
        tokenizer,
        name=name,
        seed=recipe.seed,
        text_recipe=text_recipe,
        prompts=prompts,
        folder=folder,
        default=eagle_dir(name),
        progress=progress,
        what=f"training a feature draft (EAGLE) on the target's own text ({len(prompts)} prompts; about 8 minutes "
        "on 2 CPU cores, plus 8 once for the text)",
    )
    features = _feature_data(target, data, text_recipe.generate_batch // 8 or 1, progress)
    features_s = time.perf_counter() - start
    draft = FeatureDraft(target, _token_subset(data, tokenizer), recipe.layers)
    with torch.enable_grad():
        losses = _train(draft, data, features, recipe, set(eos_ids(target, None)), progress)
    meta = dict(
        version=EAGLE_VERSION,
        target=_fingerprint(target),
        recipe=asdict(recipe),
        text=text_meta(text_folder),
        vocab_subset=int(draft.lm_head.token_ids.numel()),
        epoch_losses=losses,
        features_s=round(features_s, 1),
        train_s=round(time.perf_counter() - start - features_s, 1),
        threads=torch.get_num_threads(),
    )
    save_draft(folder, draft.state_dict(), meta)
    say(
        f"{name}: feature draft trained in {meta['train_s']:.0f} s (+{features_s:.0f} s for the target's text and "
        f"features); losses {[round(x, 3) for x in losses]}"
    )
    return folder


def train_eagle_corpus(
    target,
    tokenizer,
    *,
    name: str,
    recipe: EagleRecipe = EagleRecipe(),
    vocab: int = 8192,
    max_chunks: int | None = None,
    own_text: bool = True,
    text_recipe: DistillRecipe = DistillRecipe(),
    prompts=None,
    progress: bool = True,
    folder: Path | None = None,
) -> Path:
    """Train a `FeatureDraft` teacher-forced on existing text (`corpus`): one target pass per chunk for
    its features and greedy choices, no generation; with ``own_text``, also on the target's own chat answers
    (`own_text_features`). Saved in fp16 (``folder``, default the kit's shipped copy, `shipped_dir`) with the
    held-out agreement it predicts on each and a sha256 manifest."""
    say = (lambda m: print(m, file=sys.stderr, flush=True)) if progress else (lambda m: None)
    folder = shipped_dir(name) if folder is None else Path(folder)
    say(
        f"{name}: training a feature draft (EAGLE) on the corpus{' and its own text' if own_text else ''}, "
        f"teacher-forced -> {folder}"
    )
    torch.manual_seed(recipe.seed)
    start = time.perf_counter()
    data, features = corpus_features(target, tokenizer, max_chunks=max_chunks, progress=progress)
    held = {"held_out": corpus_features(target, tokenizer, True, max_chunks and max(32, max_chunks // 6), progress)}
    if own_text:
        (text, text_features), held["held_out_own_text"] = own_text_features(
            target, tokenizer, name, text_recipe, prompts, progress
        )
        data, features = data + text, features + text_features
    features_s = time.perf_counter() - start
    draft = FeatureDraft(target, choice_subset(features, vocab, tokenizer), recipe.layers)
    draft.lm_head.linear.weight.requires_grad_(False)  # the target's own rows (as EAGLE's head): not trained, not saved
    eos = set(eos_ids(target, None))
    with torch.enable_grad():
        losses = _train(draft, data, features, recipe, eos, progress)
    train_s = time.perf_counter() - start - features_s
    meta = dict(
        version=EAGLE_VERSION,
        target=_fingerprint(target),
        recipe=asdict(recipe),
        corpus=corpus_meta(tokenizer),
        own_text=text_meta(text_dir(name)) if own_text else None,
        chunks=len(data),
        tokens=sum(len(ids) for ids, _ in data),
        vocab_subset=int(draft.lm_head.token_ids.numel()),
        epoch_losses=losses,
        **{key: teacher_forced_agreement(draft, *part, eos) for key, part in held.items()},
        features_s=round(features_s, 1),
        train_s=round(train_s, 1),
        threads=torch.get_num_threads(),
    )
    save_draft(
        folder,
        {k: v.half() if v.is_floating_point() else v for k, v in draft.state_dict().items() if k != _HEAD_WEIGHT},
        meta,
    )
    write_manifest(folder)
    say(
        f"{name}: feature draft trained in {train_s:.0f} s (+{features_s:.0f} s for the target's features of "
        f"{meta['tokens']} tokens); held-out agreement {meta['held_out']}"
        + (f", on its own text {meta['held_out_own_text']}" if own_text else "")
    )
    return folder


def write_manifest(folder: Path) -> None:
    """``MANIFEST.sha256``: a sha256sum-style line for each file of a shipped draft."""
    lines = [
        f"{hashlib.sha256(f.read_bytes()).hexdigest()}  {f.name}"
        for f in sorted(Path(folder).iterdir())
        if f.name != "MANIFEST.sha256"
    ]
    (Path(folder) / "MANIFEST.sha256").write_text("\n".join(lines) + "\n")


def eagle_drafter(target, tokenizer, name: str, progress: bool = True, **kwargs) -> FeatureDrafter:
    """A `FeatureDrafter` with the feature draft the kit ships for ``name`` (`shipped_dir`), else the cached one,
    trained first if not cached yet."""
    shipped = shipped_dir(name)
    if is_saved(shipped):
        problems = manifest_problems(shipped)
        if problems:
            raise ValueError(
                f"the shipped feature draft in {shipped} does not match its manifest ({problems}): reinstall "
                "the kit, or train it again with `python -m specdec_helpers distill --draft eagle --corpus`"
            )
        return FeatureDrafter(load_eagle(target, shipped))
    folder = eagle_dir(name)
    if not is_saved(folder):
        train_eagle(target, tokenizer, name=name, progress=progress, **kwargs)
    return FeatureDrafter(load_eagle(target, folder))
