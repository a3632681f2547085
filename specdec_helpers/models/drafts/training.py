"""What both trained drafts (`distill`, `eagle`) are built from and trained with.

Layers and a final norm cut from the target (`truncated_body`), an output head over the tokens the target
used (`VocabSubsetHead`), the shared training loop (`fit`), and saving a trained draft next to the
target's fingerprint so that it is never loaded for another target. Getting the text they train on is
`training_text`'s job; each draft's own model and loss stay in its module.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import torch

from specdec_helpers.models.store import atomic_folder


class VocabSubsetHead(torch.nn.Module):
    """An output head over a subset of the vocabulary whose logits come out full-size.

    ``token_ids`` are the rows kept; every other token gets -inf, so it is never proposed. The kept
    rows go through an ordinary ``nn.Linear`` (which `cpu_kernels` can speed up).
    """

    def __init__(self, weight: torch.Tensor, token_ids: torch.Tensor, vocab_size: int):
        super().__init__()
        token_ids = torch.as_tensor(token_ids, dtype=torch.long)
        if (
            token_ids.dim() != 1
            or token_ids.numel() == 0
            or int(token_ids.max()) >= vocab_size
            or int(token_ids.min()) < 0
        ):
            raise ValueError(f"token_ids must be a non-empty 1-D list of ids below vocab_size={vocab_size}")
        self.vocab_size = vocab_size
        self.out_features = vocab_size  # what the rest of the kit reads as the head's width
        self.register_buffer("token_ids", token_ids)
        self.linear = torch.nn.Linear(weight.shape[1], token_ids.numel(), bias=False)
        with torch.no_grad():
            self.linear.weight.copy_(weight[token_ids])

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        subset = self.linear(hidden)
        logits = subset.new_full((*subset.shape[:-1], self.vocab_size), float("-inf"))
        return logits.index_copy_(-1, self.token_ids, subset)

    def subset_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits over ``token_ids`` only (for training: no -inf columns)."""
        return self.linear(hidden)


def _llama_parts(model):
    """``(embeddings, layers, final_norm)`` of a LLaMA-style causal LM, or a clear error."""
    inner = getattr(model, "model", None)
    parts = [getattr(inner, name, None) for name in ("embed_tokens", "layers", "norm")]
    if inner is None or any(p is None for p in parts):
        raise TypeError(
            f"distilling a truncated draft needs a LLaMA-style model (model.embed_tokens, model.layers, model.norm); "
            f"got {type(model).__name__}. Use draft='int8' or a hub draft instead."
        )
    return parts


def truncated_body(target, layers):
    """The target's inner model cut down to its ``layers`` (copied) and its final norm (copied); the
    embeddings are the target's own (shared, not copied)."""
    embeddings, target_layers, norm = _llama_parts(target)
    layers = tuple(int(i) for i in layers)
    if not layers or any(not 0 <= i < len(target_layers) for i in layers):
        raise ValueError(f"layers must be indices of the target's {len(target_layers)} layers, got {layers}")
    config = copy.deepcopy(target.config)
    config.num_hidden_layers = len(layers)
    config.tie_word_embeddings = False
    if getattr(config, "layer_types", None):
        config.layer_types = [config.layer_types[i] for i in layers]
    body = type(target.model)(config).to(dtype=embeddings.weight.dtype)
    for mine, index in zip(body.layers, layers):
        mine.load_state_dict(target_layers[index].state_dict())
    body.norm.load_state_dict(norm.state_dict())
    body.embed_tokens = embeddings
    return body.to(embeddings.weight.device)


def _right_padded(sequences) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(ids) for ids in sequences)
    input_ids = torch.zeros(len(sequences), width, dtype=torch.long)
    mask = torch.zeros_like(input_ids)
    for row, ids in enumerate(sequences):
        input_ids[row, : len(ids)] = ids
        mask[row, : len(ids)] = 1
    return input_ids, mask


# --------------------------------------------------------------------------- training


def fit(
    model, params, n_items: int, recipe, loss_of, desc: str, progress: bool, clip: float | None = None
) -> list[float]:
    """The training loop both trained drafts share: AdamW with a one-cycle schedule over ``recipe.epochs``
    shuffled passes (``recipe.seed``) in batches of ``recipe.batch_size`` item indices; ``loss_of(indices)``
    gives a batch's loss. Returns the mean loss of each epoch."""
    from tqdm.auto import tqdm

    optimizer = torch.optim.AdamW(params, lr=recipe.lr, weight_decay=0.0)
    generator = torch.Generator().manual_seed(recipe.seed)
    steps = recipe.epochs * -(-n_items // recipe.batch_size)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=recipe.lr, total_steps=steps, pct_start=0.1)
    losses = []
    model.train()
    bar = tqdm(total=steps, desc=desc, disable=not progress, unit="step")
    for _ in range(recipe.epochs):
        order = torch.randperm(n_items, generator=generator).tolist()
        total, count = 0.0, 0
        for first in range(0, n_items, recipe.batch_size):
            loss = loss_of(order[first : first + recipe.batch_size])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(params, clip)
            optimizer.step()
            schedule.step()
            total, count = total + loss.item(), count + 1
            bar.update()
            bar.set_postfix(loss=f"{total / count:.3f}")
        losses.append(total / count)
    bar.close()
    model.eval()
    return losses


def subset_labels(head: VocabSubsetHead) -> torch.Tensor:
    """Token id -> its row in ``head`` (-100, ignored by cross-entropy, for tokens outside the subset)."""
    to_subset = torch.full((head.vocab_size,), -100, dtype=torch.long)
    to_subset[head.token_ids.cpu()] = torch.arange(head.token_ids.numel())
    return to_subset


# --------------------------------------------------------------------------- saving


def _fingerprint(target) -> dict:
    """Enough of the target to notice a draft saved for another one (shapes and an embedding checksum)."""
    weight = target.get_input_embeddings().weight.detach()
    return dict(
        vocab_size=int(weight.shape[0]),
        hidden_size=int(weight.shape[1]),
        layers=len(_llama_parts(target)[1]),
        embedding_checksum=round(float(weight[:64].double().abs().sum()), 3),
    )


def save_draft(folder: Path, state: dict, meta: dict) -> None:
    """A trained draft's weights and how it was made, written atomically into ``folder``."""
    from safetensors.torch import save_file

    with atomic_folder(Path(folder), is_saved) as tmp:
        save_file({k: v.detach().contiguous() for k, v in state.items()}, tmp / "draft.safetensors")
        (tmp / "draft.json").write_text(json.dumps(meta, indent=1))


def is_saved(folder: Path) -> bool:
    """Whether ``folder`` holds a whole draft written by `save_draft`."""
    return (Path(folder) / "draft.safetensors").is_file()


def read_draft(target, folder: Path, kind: str) -> tuple[dict, dict]:
    """``(meta, state)`` of a draft saved by `save_draft`, refusing one trained for another target."""
    from safetensors.torch import load_file

    meta = json.loads((Path(folder) / "draft.json").read_text())
    if meta.get("target") != _fingerprint(target):
        raise ValueError(
            f"the {kind} draft in {folder} was trained from another target ({meta.get('target')}, this one "
            f"is {_fingerprint(target)}): delete that folder, or run "
            f"`python -m specdec_helpers distill --draft {kind} --force`"
        )
    return meta, load_file(Path(folder) / "draft.safetensors")
