"""A cheap draft distilled from the target, here, on the CPU (``draft="distilled"``); and the target's own
text that this draft and the feature draft (`eagle`) are trained on, cached once for both.

Why: a draft pays only if one of its steps costs a small fraction of a target step *and* it agrees
with the target often. An int8 copy of SmolLM2-135M agrees often but costs ~0.6 of a target step;
a draft trained from scratch would need far more data than a CPU can make. So the draft starts as
a *truncated copy* of the target (a few of its layers, its embeddings and final norm) and is then
trained to predict the target's own greedy tokens on text the target wrote itself:

1. data: the target answers `DISTILL_PROMPTS` greedily (instructions built from templates and
   topics; none of them is a benchmark prompt);
2. the draft's output head covers only the tokens the target actually used in that text (a few
   thousand of 49k), so its most expensive layer shrinks ~10x; `VocabSubsetHead` scatters its
   logits back into the full vocabulary (other tokens get -inf: never proposed), so the draft is
   an ordinary causal LM to `speculative_decode` and to HF assisted generation alike;
3. training: cross-entropy against the target's greedy token at every position it wrote.

Deterministic for a given seed and thread count; cached in a versioned folder like the toy pair.
Speculative decoding stays lossless whatever the draft proposes: the target verifies every token.
"""
from __future__ import annotations

import copy
import json
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from specdec_helpers.models.store import atomic_folder, cache_root

DISTILL_VERSION = 1  # bump when anything below changes the trained result: it names the cache folder

_TEMPLATES = [
    "Write a short story about {}.",
    "Explain {} to a ten-year-old.",
    "Write a poem about {}.",
    "What are three interesting facts about {}?",
    "Give me some practical tips about {}.",
    "Write a short blog post about {}.",
    "Describe {} in a few sentences.",
    "Write a friendly email to a colleague about {}.",
]
_TOPICS = [
    "the ocean", "a lighthouse keeper", "volcanoes", "learning to cook", "the moon landing", "honey bees",
    "a city at night", "friendship", "rainforests", "the history of bread", "mountain climbing", "trains",
    "a lost dog finding its way home", "saving money", "the water cycle", "chess", "a dragon who is afraid of fire",
    "gardening in spring", "the human heart", "recycling", "a rainy afternoon", "photosynthesis", "sleep",
    "a small bakery", "the planets of the solar system", "kindness", "winter holidays", "dinosaurs",
    "time management", "a trip to the mountains", "electric cars", "a wizard's apprentice", "the Roman Empire",
    "coffee", "bicycles", "a haunted house", "healthy breakfasts", "birds that migrate", "public libraries",
    "a first day at a new school",
]
_QUESTIONS = [
    "How does {} work?",
    "Why is {} important?",
    "List five things everyone should know about {}.",
    "What is the history of {}?",
    "Write a dialogue between two friends about {}.",
    "Summarize the main ideas of {} in one paragraph.",
    "What are the pros and cons of {}?",
    "Write a product description for something related to {}.",
]
_SUBJECTS = [
    "a refrigerator", "vaccines", "the stock market", "solar panels", "the internet", "democracy", "composting",
    "a violin", "earthquakes", "public transport", "yoga", "the printing press", "weather forecasts", "soap",
    "a compass", "remote work", "the immune system", "museums", "rainbows", "board games", "airplanes",
    "tea ceremonies", "glaciers", "podcasts", "the Olympic Games", "volunteering", "a microwave oven", "forests",
    "learning a second language", "traffic lights", "the printing of money", "jazz music", "a camera",
    "ancient Egypt", "running a marathon", "video calls", "bridges", "the postal service", "bees and flowers",
    "a telescope",
]
# Two families of 320 instructions (answers in the target's own words); the benchmark prompts are not among them.
DISTILL_PROMPTS = ([template.format(topic) for topic in _TOPICS for template in _TEMPLATES]
                   + [question.format(subject) for subject in _SUBJECTS for question in _QUESTIONS])


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


class VocabSubsetHead(torch.nn.Module):
    """An output head over a subset of the vocabulary whose logits come out full-size.

    ``token_ids`` are the rows kept; every other token gets -inf, so it is never proposed. The kept
    rows go through an ordinary ``nn.Linear`` (which `cpu_kernels` can speed up).
    """

    def __init__(self, weight: torch.Tensor, token_ids: torch.Tensor, vocab_size: int):
        super().__init__()
        token_ids = torch.as_tensor(token_ids, dtype=torch.long)
        if token_ids.dim() != 1 or token_ids.numel() == 0 or int(token_ids.max()) >= vocab_size or int(token_ids.min()) < 0:
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


# --------------------------------------------------------------------------- data


def _generate_data(target, tokenizer, prompts, recipe: DistillRecipe, progress: bool) -> list[tuple[torch.Tensor, int]]:
    """``(ids, start)`` per prompt: the chat-formatted prompt and the target's greedy answer from ``start``."""
    from tqdm.auto import tqdm

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else target.generation_config.eos_token_id
    eos = target.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos])
    encoded = [
        tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                      return_tensors="pt", return_dict=True)["input_ids"][0]
        for p in prompts
    ]
    data = []
    batches = range(0, len(encoded), recipe.generate_batch)
    for start in tqdm(batches, desc="target writes the training text", disable=not progress, unit="batch"):
        group = encoded[start : start + recipe.generate_batch]
        width = max(len(ids) for ids in group)
        # Left padding: every prompt ends where generation starts.
        input_ids = torch.full((len(group), width), pad, dtype=torch.long)
        mask = torch.zeros_like(input_ids)
        for row, ids in enumerate(group):
            input_ids[row, width - len(ids):] = ids
            mask[row, width - len(ids):] = 1
        with torch.inference_mode():
            out = target.generate(input_ids.to(target.device), attention_mask=mask.to(target.device), do_sample=False,
                                  max_new_tokens=recipe.max_new_tokens, pad_token_id=pad)
        for row, ids in enumerate(group):
            answer = out[row, width:].cpu().tolist()
            ends = [i for i, t in enumerate(answer) if t in eos]
            answer = answer[: ends[0] + 1] if ends else answer
            data.append((torch.cat([ids, torch.tensor(answer, dtype=torch.long)]), len(ids)))
    return data


def _text_key(target, recipe: DistillRecipe, prompts) -> dict:
    """What decides the target's text: the target, the prompts and how it wrote them."""
    import hashlib

    digest = hashlib.sha256("\n".join(prompts).encode()).hexdigest()[:16]
    return dict(target=_fingerprint(target), prompts=len(prompts), prompts_sha256=digest,
                max_new_tokens=recipe.max_new_tokens, generate_batch=recipe.generate_batch)


def text_dir(name: str) -> Path:
    return cache_root() / f"{name}-target-text-v{DISTILL_VERSION}"


def target_text(target, tokenizer, *, recipe: DistillRecipe, prompts, folder: Path,
                progress: bool = True) -> list[tuple[torch.Tensor, int]]:
    """`_generate_data`, cached in ``folder`` (the slow part: the target writes every answer), so
    every draft trained on the target's text (`distill`, `eagle`) pays for it once."""
    from safetensors.torch import load_file, save_file


    folder, key = Path(folder), _text_key(target, recipe, prompts)
    meta_file = folder / "text.json"
    if not (meta_file.is_file() and json.loads(meta_file.read_text()).get("key") == key):
        start = time.perf_counter()
        data = _generate_data(target, tokenizer, prompts, recipe, progress)
        meta = dict(key=key, generate_s=round(time.perf_counter() - start, 1), threads=torch.get_num_threads(),
                    tokens_written=sum(len(ids) - begin for ids, begin in data))
        shutil.rmtree(folder, ignore_errors=True)  # text of other prompts or another target
        with atomic_folder(folder, lambda f: (f / "text.json").is_file()) as tmp:
            save_file({"ids": torch.cat([ids for ids, _ in data]), "lengths": torch.tensor([len(ids) for ids, _ in data]),
                       "starts": torch.tensor([begin for _, begin in data])}, tmp / "text.safetensors")
            (tmp / "text.json").write_text(json.dumps(meta, indent=1))
    tensors = load_file(folder / "text.safetensors")
    pieces = torch.split(tensors["ids"], tensors["lengths"].tolist())
    return [(ids.clone(), int(begin)) for ids, begin in zip(pieces, tensors["starts"])]


def text_meta(folder: Path) -> dict:
    """How the cached text was made (its cost included)."""
    return json.loads((Path(folder) / "text.json").read_text())


def _token_subset(data, tokenizer) -> torch.Tensor:
    """Every token the target wrote (the draft may only propose these), plus the special tokens."""
    used = set()
    for ids, start in data:
        used.update(ids[start:].tolist())
    used.update(i for i in tokenizer.all_special_ids if i is not None)
    return torch.tensor(sorted(used), dtype=torch.long)


def _right_padded(sequences) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(ids) for ids in sequences)
    input_ids = torch.zeros(len(sequences), width, dtype=torch.long)
    mask = torch.zeros_like(input_ids)
    for row, ids in enumerate(sequences):
        input_ids[row, : len(ids)] = ids
        mask[row, : len(ids)] = 1
    return input_ids, mask


# --------------------------------------------------------------------------- training


def fit(model, params, n_items: int, recipe, loss_of, desc: str, progress: bool, clip: float | None = None) -> list[float]:
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
        logits = torch.cat([head.subset_logits(hidden[row, start - 1 : len(ids) - 1])
                            for row, (ids, start) in enumerate(batch)])
        labels = torch.cat([to_subset[ids[start:]] for ids, start in batch]).to(device)
        return F.cross_entropy(logits, labels, ignore_index=-100)

    return fit(draft, params, len(data), recipe, loss_of, "training the draft", progress)


# --------------------------------------------------------------------------- cache


def _fingerprint(target) -> dict:
    """Enough of the target to notice a draft saved for another one (shapes and an embedding checksum)."""
    weight = target.get_input_embeddings().weight.detach()
    return dict(vocab_size=int(weight.shape[0]), hidden_size=int(weight.shape[1]),
                layers=len(_llama_parts(target)[1]), embedding_checksum=round(float(weight[:64].double().abs().sum()), 3))


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
        raise ValueError(f"the {kind} draft in {folder} was trained from another target ({meta.get('target')}, this one "
                         f"is {_fingerprint(target)}): delete that folder, or run "
                         f"`python -m specdec_helpers distill --draft {kind} --force`")
    return meta, load_file(Path(folder) / "draft.safetensors")


def distilled_dir(name: str) -> Path:
    return cache_root() / f"{name}-distilled-draft-v{DISTILL_VERSION}"


def draft_folders(folder: Path | None, default: Path, name: str) -> tuple[Path, Path]:
    """``(draft folder, text folder)``: the named cache folders, or, for a draft saved elsewhere, its text beside it."""
    if folder is None:
        return default, text_dir(name)
    folder = Path(folder)
    return folder, folder.with_name(folder.name + "-text")


def start_training(target, tokenizer, *, name, seed, text_recipe, prompts, folder, default, what, progress):
    """What training any draft here starts with: its folders, a line saying what comes, the seed, and the
    target's text (cached). Returns ``(folder, text_folder, data, say)``."""
    _llama_parts(target)  # a clear error now, not after minutes of text generation
    folder, text_folder = draft_folders(folder, default, name)
    say = (lambda m: print(m, file=sys.stderr, flush=True)) if progress else (lambda m: None)
    say(f"{name}: {what} -> {folder}")
    torch.manual_seed(seed)
    data = target_text(target, tokenizer, recipe=text_recipe, prompts=prompts, folder=text_folder, progress=progress)
    return folder, text_folder, data, say


def distill_draft(target, tokenizer, *, name: str, recipe: DistillRecipe = DistillRecipe(),
                  prompts=DISTILL_PROMPTS, progress: bool = True, folder: Path | None = None) -> Path:
    """Have ``target`` write text (cached), train a truncated draft on it, save it (atomically); returns the folder."""
    start = time.perf_counter()
    folder, text_folder, data, say = start_training(
        target, tokenizer, name=name, seed=recipe.seed, text_recipe=recipe, prompts=prompts, folder=folder,
        default=distilled_dir(name), progress=progress,
        what=f"distilling a draft from the target ({len(prompts)} prompts, {recipe.epochs} epochs; about 15 minutes "
             "on 2 CPU cores, once)")
    text_s = time.perf_counter() - start  # the target writing it, or reading it from the cache
    token_ids = _token_subset(data, tokenizer)
    draft = truncated_copy(target, recipe.layers, token_ids)
    with torch.enable_grad():
        losses = _train(draft, data, recipe, progress)
    meta = dict(
        version=DISTILL_VERSION, target=_fingerprint(target), recipe=asdict(recipe), prompts=len(prompts),
        tokens_written=sum(len(ids) - begin for ids, begin in data), vocab_subset=int(token_ids.numel()),
        epoch_losses=losses, text=text_meta(text_folder), text_s=round(text_s, 1), total_s=round(time.perf_counter() - start, 1),
        threads=torch.get_num_threads(),
    )
    save_draft(folder, {k: v for k, v in draft.state_dict().items() if not k.startswith("model.embed_tokens")}, meta)
    say(f"{name}: draft distilled in {meta['total_s']:.0f} s (the target's text {text_s:.0f} s of it); "
        f"{meta['tokens_written']} tokens, head over {meta['vocab_subset']} token ids, losses {[round(x, 3) for x in losses]}")
    return folder


def load_distilled(target, folder: Path) -> torch.nn.Module:
    """The draft saved in ``folder``, rebuilt around ``target`` (whose embeddings it shares)."""
    meta, state = read_draft(target, folder, "distilled")
    draft = truncated_copy(target, meta["recipe"]["layers"], state["lm_head.token_ids"])
    missing, unexpected = draft.load_state_dict(state, strict=False)
    if unexpected or any(not k.startswith("model.embed_tokens") for k in missing):
        raise ValueError(f"{folder} does not match this target: missing {missing}, unexpected {unexpected}")
    draft.meta = meta
    draft.config.name_or_path = "distilled"  # its name in tables (`measure.bench.draft_label`), as load_pair's
    return draft.eval()


def distilled_draft(target, tokenizer, name: str, progress: bool = True, **kwargs) -> torch.nn.Module:
    """The cached distilled draft for ``name``, trained first if it is not cached yet."""
    folder = distilled_dir(name)
    if not is_saved(folder):
        distill_draft(target, tokenizer, name=name, progress=progress, **kwargs)
    return load_distilled(target, folder)
