"""The target's own text, which the trained drafts (`distill`, `eagle`) learn from, written once and cached.

Why: a draft agrees with the target most where it learned from text the target wrote itself, greedily,
as decoding will. The target answers `DISTILL_PROMPTS` (instructions built from templates and topics;
none of them is a benchmark prompt); writing that text is the slow part of training a draft, so it is
cached in a folder keyed by the target, the prompts and how they were answered, and both drafts share it.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import torch

from specdec_helpers.models.drafts.training import _fingerprint, _llama_parts
from specdec_helpers.models.store import atomic_folder, cache_root

TEXT_VERSION = 1  # bump when anything below changes the text written: it names the cache folder

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
    "the ocean",
    "a lighthouse keeper",
    "volcanoes",
    "learning to cook",
    "the moon landing",
    "honey bees",
    "a city at night",
    "friendship",
    "rainforests",
    "the history of bread",
    "mountain climbing",
    "trains",
    "a lost dog finding its way home",
    "saving money",
    "the water cycle",
    "chess",
    "a dragon who is afraid of fire",
    "gardening in spring",
    "the human heart",
    "recycling",
    "a rainy afternoon",
    "photosynthesis",
    "sleep",
    "a small bakery",
    "the planets of the solar system",
    "kindness",
    "winter holidays",
    "dinosaurs",
    "time management",
    "a trip to the mountains",
    "electric cars",
    "a wizard's apprentice",
    "the Roman Empire",
    "coffee",
    "bicycles",
    "a haunted house",
    "healthy breakfasts",
    "birds that migrate",
    "public libraries",
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
    "a refrigerator",
    "vaccines",
    "the stock market",
    "solar panels",
    "the internet",
    "democracy",
    "composting",
    "a violin",
    "earthquakes",
    "public transport",
    "yoga",
    "the printing press",
    "weather forecasts",
    "soap",
    "a compass",
    "remote work",
    "the immune system",
    "museums",
    "rainbows",
    "board games",
    "airplanes",
    "tea ceremonies",
    "glaciers",
    "podcasts",
    "the Olympic Games",
    "volunteering",
    "a microwave oven",
    "forests",
    "learning a second language",
    "traffic lights",
    "the printing of money",
    "jazz music",
    "a camera",
    "ancient Egypt",
    "running a marathon",
    "video calls",
    "bridges",
    "the postal service",
    "bees and flowers",
    "a telescope",
]
# Two families of 320 instructions (answers in the target's own words); the benchmark prompts are not among them.
DISTILL_PROMPTS = [template.format(topic) for topic in _TOPICS for template in _TEMPLATES] + [
    question.format(subject) for subject in _SUBJECTS for question in _QUESTIONS
]


def _generate_data(target, tokenizer, prompts, recipe, progress: bool) -> list[tuple[torch.Tensor, int]]:
    """``(ids, start)`` per prompt: the chat-formatted prompt and the target's greedy answer from ``start``."""
    from tqdm.auto import tqdm

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else target.generation_config.eos_token_id
    eos = target.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos])
    encoded = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": p}], add_generation_prompt=True, return_tensors="pt", return_dict=True
        )["input_ids"][0]
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
            input_ids[row, width - len(ids) :] = ids
            mask[row, width - len(ids) :] = 1
        with torch.inference_mode():
            out = target.generate(
                input_ids.to(target.device),
                attention_mask=mask.to(target.device),
                do_sample=False,
                max_new_tokens=recipe.max_new_tokens,
                pad_token_id=pad,
            )
        for row, ids in enumerate(group):
            answer = out[row, width:].cpu().tolist()
            ends = [i for i, t in enumerate(answer) if t in eos]
            answer = answer[: ends[0] + 1] if ends else answer
            data.append((torch.cat([ids, torch.tensor(answer, dtype=torch.long)]), len(ids)))
    return data


def _text_key(target, recipe, prompts) -> dict:
    """What decides the target's text: the target, the prompts and how it wrote them."""
    import hashlib

    digest = hashlib.sha256("\n".join(prompts).encode()).hexdigest()[:16]
    return dict(
        target=_fingerprint(target),
        prompts=len(prompts),
        prompts_sha256=digest,
        max_new_tokens=recipe.max_new_tokens,
        generate_batch=recipe.generate_batch,
    )


def text_dir(name: str) -> Path:
    return cache_root() / f"{name}-target-text-v{TEXT_VERSION}"


def target_text(
    target, tokenizer, *, recipe, prompts, folder: Path, progress: bool = True
) -> list[tuple[torch.Tensor, int]]:
    """`_generate_data`, cached in ``folder`` (the slow part: the target writes every answer), so
    every draft trained on the target's text (`distill`, `eagle`) pays for it once. ``recipe``: a
    `distill.DistillRecipe`, whose ``max_new_tokens`` and ``generate_batch`` decide the text."""
    from safetensors.torch import load_file, save_file

    folder, key = Path(folder), _text_key(target, recipe, prompts)
    meta_file = folder / "text.json"
    if not (meta_file.is_file() and json.loads(meta_file.read_text()).get("key") == key):
        start = time.perf_counter()
        data = _generate_data(target, tokenizer, prompts, recipe, progress)
        meta = dict(
            key=key,
            generate_s=round(time.perf_counter() - start, 1),
            threads=torch.get_num_threads(),
            tokens_written=sum(len(ids) - begin for ids, begin in data),
        )
        shutil.rmtree(folder, ignore_errors=True)  # text of other prompts or another target
        with atomic_folder(folder, lambda f: (f / "text.json").is_file()) as tmp:
            save_file(
                {
                    "ids": torch.cat([ids for ids, _ in data]),
                    "lengths": torch.tensor([len(ids) for ids, _ in data]),
                    "starts": torch.tensor([begin for _, begin in data]),
                },
                tmp / "text.safetensors",
            )
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
