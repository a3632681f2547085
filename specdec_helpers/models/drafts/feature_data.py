"""What the feature draft (`eagle`) trains on: the target's features and greedy choices over some text.

Why a module of its own: getting the data (the corpus, the target's own answers, one teacher-forced target
pass over them, cached) is a different job from the draft and its training loop, and the slow part.
"""

from __future__ import annotations

import hashlib
import os

import torch

from specdec_helpers.core.verify import last_hidden
from specdec_helpers.models.drafts.corpus import HELD_OUT_EVERY, corpus_chunks
from specdec_helpers.models.drafts.distill import DistillRecipe
from specdec_helpers.models.drafts.training_text import DISTILL_PROMPTS, target_text, text_dir
from specdec_helpers.models.drafts.training import _fingerprint, _right_padded
from specdec_helpers.models.store import cache_root


def target_features(target, input_ids: torch.Tensor, attention_mask=None, logits_to_keep: int = 0):
    """``(logits, features)`` from one target pass; features are its last hidden states ``[B, T, H]``."""
    out = target(
        input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True, logits_to_keep=logits_to_keep
    )
    return out.logits, last_hidden(out)


def _feature_data(target, data, batch_size: int, progress: bool):
    """Per text: the target's features ``[T, H]`` and its greedy choice at every position ``[T]``."""
    from tqdm.auto import tqdm

    out = []
    device = target.get_input_embeddings().weight.device
    for first in tqdm(range(0, len(data), batch_size), desc="target features", disable=not progress, unit="batch"):
        batch = [ids for ids, _ in data[first : first + batch_size]]
        input_ids, mask = _right_padded(batch)
        with torch.inference_mode():
            logits, features = target_features(target, input_ids.to(device), mask.to(device))
        for row, ids in enumerate(batch):
            out.append((features[row, : len(ids)].clone(), logits[row, : len(ids)].argmax(-1)))
    return out


def training_batch(data, features, indices, to_subset: torch.Tensor, eos: set[int], dtype=torch.float32):
    """The tensors of one training batch, right-padded to the longest text minus one position.

    Row r, position j reads the target's feature ``f_j`` and the token ``j + 1``; it learns to predict
    ``f_{j+1}`` (``true_next``, where ``has_next``) and the target's greedy choice at ``j + 1`` (``labels``,
    the token at ``j + 2``; -100 where ignored). The last position's label is the target's choice after
    the text: kept for texts cut at the length limit, dropped after an EOS (decoding stops there).
    Returns ``feats, tokens, mask, labels, true_next, has_next``.
    """
    width = max(len(data[i][0]) for i in indices) - 1
    hidden = features[indices[0]][0].shape[-1]
    feats = torch.zeros(len(indices), width, hidden, dtype=dtype)
    tokens = torch.zeros(len(indices), width, dtype=torch.long)
    mask = torch.zeros(len(indices), width, dtype=torch.long)
    labels = torch.full((len(indices), width), -100, dtype=torch.long)
    true_next = torch.zeros_like(feats)
    has_next = torch.zeros(len(indices), width, 1, dtype=torch.bool)
    for row, i in enumerate(indices):
        ids, n = data[i][0], len(data[i][0]) - 1
        f, choice = features[i]
        feats[row, :n], tokens[row, :n], mask[row, :n] = f[:n], ids[1:], 1
        labels[row, :n] = to_subset[choice[1:].cpu()]
        if int(ids[-1]) in eos:
            labels[row, n - 1] = -100
        true_next[row, :n], has_next[row, :n] = f[1:], True
    return feats, tokens, mask, labels, true_next, has_next


def corpus_data(tokenizer, held_out: bool = False, max_chunks: int | None = None) -> list[tuple[torch.Tensor, int]]:
    """The corpus (`corpus`) as ``(ids, 0)`` items, as `_feature_data` and `training_batch` take them."""
    return [
        (torch.tensor(ids, dtype=torch.long), 0) for ids in corpus_chunks(tokenizer, held_out, max_chunks=max_chunks)
    ]


def cached_features(target, data, progress: bool = True):
    """The target's `_feature_data` on ``data``, cached (fp16) under `cache_root` by a sha256 of the token ids and
    the target's fingerprint: the teacher-forced pass is most of the training time (~12 minutes for the whole
    corpus on 2 cores), and another recipe trained on the same text and target reuses it."""
    digest = hashlib.sha256(repr(_fingerprint(target)).encode())
    for ids, _ in data:
        digest.update(ids.numpy().astype("int64").tobytes() + b"|")
    path = cache_root() / f"eagle-features-{digest.hexdigest()[:16]}.pt"
    if path.is_file():
        saved = torch.load(path)
        dtype = target.get_input_embeddings().weight.dtype
        return [(f.to(dtype), c) for f, c in zip(saved["features"], saved["choices"])]
    features = _feature_data(target, data, 8, progress)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    torch.save(dict(features=[f.half().cpu() for f, _ in features], choices=[c.cpu() for _, c in features]), tmp)
    tmp.replace(path)
    # as read back (rounded to fp16): a first run trains on exactly what a rerun reads from the cache
    return [(f.half().to(f.dtype), c) for f, c in features]


def corpus_features(target, tokenizer, held_out: bool = False, max_chunks: int | None = None, progress: bool = True):
    """`corpus_data` and the target's features on it (`cached_features`)."""
    data = corpus_data(tokenizer, held_out, max_chunks)
    return data, cached_features(target, data, progress)


def own_text_features(
    target, tokenizer, name: str, text_recipe: DistillRecipe = DistillRecipe(), prompts=None, progress: bool = True
):
    """``(train, held_out)``, each ``(data, features)``: the text the target wrote for `distill` (its chat answers
    to `DISTILL_PROMPTS`, cached; ~5 minutes to write once on 2 cores) and its features. Every `HELD_OUT_EVERY`-th prompt
    is held out. The corpus is documentation; this is the instruct model's own register, which it decodes."""
    data = target_text(
        target,
        tokenizer,
        recipe=text_recipe,
        prompts=DISTILL_PROMPTS if prompts is None else prompts,
        folder=text_dir(name),
        progress=progress,
    )
    split = [[item for n, item in enumerate(data) if (n % HELD_OUT_EVERY == 0) == held] for held in (False, True)]
    return [(part, cached_features(target, part, progress)) for part in split]


def choice_subset(features, size: int, tokenizer) -> torch.Tensor:
    """The ``size`` tokens the target chose most often (ties: the lower id), plus the special tokens."""
    counts = torch.bincount(torch.cat([choice for _, choice in features]).cpu())
    order = sorted(range(len(counts)), key=lambda t: (-int(counts[t]), t))
    kept = {t for t in order[:size] if counts[t] > 0} | {i for i in tokenizer.all_special_ids if i is not None}
    return torch.tensor(sorted(kept), dtype=torch.long)
