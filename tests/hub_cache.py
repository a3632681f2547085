"""A local Hugging Face hub cache for every hub preset: tiny random models under the real repository ids.

Laid out as ``huggingface_hub`` lays out its cache (``models--ORG--NAME/{blobs,refs/main,snapshots/<rev>}``,
each snapshot file a relative symlink to its blob), so that ``from_pretrained("EleutherAI/pythia-160m-deduped")``
with ``HF_HUB_OFFLINE=1`` and ``HF_HUB_CACHE`` pointing here finds it exactly as it would find a download.
huggingface_hub has no API that writes a cache without a server, so this writes the layout its readers expect
(``try_to_load_from_cache``, ``scan_cache_dir``; `test_hub_presets` checks the latter reads it back).

Each repository has its family's architecture class and configuration quirks at tiny sizes (OPT-350m's
projected embeddings and post-norm layers, Llama 3's llama3 RoPE scaling and tied embeddings, Pythia's
padded vocabulary), its tokenizer files in the form the hub ships them (tokenizer.json, or vocab.json +
merges.txt for OPT), trained on the spot with `tokenizers`, and weights in the hub's dtype.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

CORPUS = [
    "Once upon a time there was a little robot who wanted to learn how to speak.",
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "Speculative decoding lets a small draft model propose tokens that a large target model verifies.",
    "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n",
    "In the beginning the universe was created. This has made a lot of people very angry.",
    "The capital of France is Paris, and the capital of Germany is Berlin.",
] * 20

#: Per family: special tokens (first ids), the tokenizer files the hub ships, tokenizer_config.json, weight dtype.
FAMILIES = {
    "gpt_neox": dict(
        special=["<|endoftext|>", "<|padding|>"],
        files="json",
        dtype=torch.float16,
        tokenizer_config={
            "tokenizer_class": "GPTNeoXTokenizer",
            "bos_token": "<|endoftext|>",
            "eos_token": "<|endoftext|>",
            "unk_token": "<|endoftext|>",
            "add_prefix_space": False,
        },
    ),
    "opt": dict(
        special=["<s>", "<pad>", "</s>", "<unk>"],
        files="bpe",
        dtype=torch.float16,
        tokenizer_config={
            "tokenizer_class": "GPT2Tokenizer",
            "add_bos_token": True,
            "bos_token": "</s>",
            "eos_token": "</s>",
            "unk_token": "</s>",
            "pad_token": "<pad>",
            "errors": "replace",
            "add_prefix_space": False,
        },
    ),
    "gpt2": dict(
        special=["<|endoftext|>"], files="both", dtype=torch.float32, tokenizer_config={"model_max_length": 1024}
    ),
    "llama": dict(
        special=["<|begin_of_text|>", "<|end_of_text|>"],
        files="json",
        dtype=torch.bfloat16,
        tokenizer_config={
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": "<|begin_of_text|>",
            "eos_token": "<|end_of_text|>",
            "model_max_length": 131072,
        },
    ),
}


def family_of(repo_id: str) -> str:
    """The architecture family of a hub preset's repository id (a new family must be added here)."""
    for prefix, family in [
        ("EleutherAI/pythia", "gpt_neox"),
        ("facebook/opt", "opt"),
        ("openai-community/gpt2", "gpt2"),
        ("meta-llama/Llama", "llama"),
    ]:
        if repo_id.startswith(prefix):
            return family
    raise ValueError(f"no tiny stand-in for {repo_id!r}: add its family to tests/hub_cache.py")


def train_tokenizer(family: str) -> Tokenizer:
    """A byte-level BPE (as GPT-2, GPT-NeoX, OPT and Llama 3 use) with the family's special tokens first."""
    spec = FAMILIES[family]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=spec["special"],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS, trainer)
    if family == "llama":  # Llama 3 prepends <|begin_of_text|> in its post-processor
        bos = spec["special"][0]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.token_to_id(bos))]
        )
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def _config(family: str, repo_id: str, tok: Tokenizer, draft: bool):
    from transformers import GPT2Config, GPTNeoXConfig, LlamaConfig, OPTConfig

    size = tok.get_vocab_size()
    padded = -(-size // 64) * 64  # Pythia/OPT/Llama pad their embeddings past the tokenizer
    ids = {t: tok.token_to_id(t) for t in FAMILIES[family]["special"]}
    layers = 2  # drafts too: a perturbed copy of their target agrees often (`_copy_and_perturb`)
    common = dict(num_hidden_layers=layers, initializer_range=0.5)  # well-separated logits: no argmax near-ties
    if family == "gpt_neox":
        e = ids["<|endoftext|>"]
        return GPTNeoXConfig(
            vocab_size=padded,
            hidden_size=32,
            num_attention_heads=4,
            intermediate_size=64,
            rotary_pct=0.25,
            use_parallel_residual=True,
            max_position_embeddings=2048,
            tie_word_embeddings=False,
            bos_token_id=e,
            eos_token_id=e,
            **common,
        )
    if family == "opt":  # opt-350m projects 16 -> 32 and normalises after each block; opt-125m does neither
        big = not draft and "350m" in repo_id
        return OPTConfig(
            vocab_size=padded,
            hidden_size=32,
            word_embed_proj_dim=16 if big else 32,
            do_layer_norm_before=not big,
            ffn_dim=64,
            num_attention_heads=4,
            max_position_embeddings=2048,
            bos_token_id=ids["</s>"],
            eos_token_id=ids["</s>"],
            pad_token_id=ids["<pad>"],
            prefix="</s>",
            **common,
        )
    if family == "gpt2":
        e = ids["<|endoftext|>"]
        return GPT2Config(
            vocab_size=size,
            n_embd=32,
            n_layer=layers,
            n_head=4,
            n_positions=1024,
            bos_token_id=e,
            eos_token_id=e,
            initializer_range=0.5,
        )
    return LlamaConfig(
        vocab_size=padded,
        hidden_size=32,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        max_position_embeddings=131072,
        tie_word_embeddings=True,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 32.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        bos_token_id=ids["<|begin_of_text|>"],
        eos_token_id=ids["<|end_of_text|>"],
        **common,
    )


def _write_tokenizer(family: str, tok: Tokenizer, folder: Path) -> None:
    spec = FAMILIES[family]
    if spec["files"] in ("json", "both"):
        tok.save(str(folder / "tokenizer.json"))
    if spec["files"] in ("bpe", "both"):
        tok.model.save(str(folder))  # vocab.json + merges.txt
    (folder / "tokenizer_config.json").write_text(json.dumps(spec["tokenizer_config"], indent=2))
    special = {k: v for k, v in spec["tokenizer_config"].items() if k.endswith("_token")}
    if special:
        (folder / "special_tokens_map.json").write_text(json.dumps(special, indent=2))


def _store(cache: Path, repo_id: str, staging: Path) -> Path:
    """Move ``staging``'s files into the cache as the hub client does: blobs named by hash, snapshot symlinks."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    revision = hashlib.sha1(repo_id.encode()).hexdigest()  # a commit hash, stable across sessions
    snapshot = repo / "snapshots" / revision
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    for file in sorted(staging.rglob("*")):
        if not file.is_file():
            continue
        data = file.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = snapshot / file.relative_to(staging)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    return snapshot


def _is_draft(repo_id: str) -> bool:
    return any(s in repo_id for s in ("70m", "125m", "160m", "410m", "-1B")) or repo_id.endswith("/gpt2")


@torch.no_grad()
def _copy_and_perturb(source, model, scale: float = 0.1) -> None:
    """Give ``model`` the weights it shares by name and shape with ``source`` (all of it where the
    architectures agree), plus noise: like a real draft, it mostly agrees with the target, not always."""
    theirs = source.state_dict()
    for name, tensor in model.state_dict().items():
        if name in theirs and theirs[name].shape == tensor.shape and tensor.is_floating_point():
            tensor.copy_(theirs[name] + scale * theirs[name].std() * torch.randn_like(tensor))


def build_hub_cache(cache: Path, repo_ids) -> dict[str, Path]:
    """Write a tiny stand-in of each repository into the hub cache folder ``cache``; returns their snapshots.

    Repositories of one family share one tokenizer (as target and draft must); each model has its own seed.
    """
    from transformers import AutoModelForCausalLM

    cache = Path(cache)
    tokenizers, first = {}, {}
    snapshots = {}
    repo_ids = sorted(set(repo_ids), key=lambda r: (_is_draft(r), r))  # each family's first model is a target
    for seed, repo_id in enumerate(repo_ids):
        family = family_of(repo_id)
        tok = tokenizers.setdefault(family, train_tokenizer(family))
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(_config(family, repo_id, tok, _is_draft(repo_id)))
        if family in first:  # a draft that agrees with its target often enough to accept tokens (and to reject)
            _copy_and_perturb(first[family], model)
        first.setdefault(family, model)
        with tempfile.TemporaryDirectory() as staging:
            model.to(FAMILIES[family]["dtype"]).save_pretrained(staging)
            _write_tokenizer(family, tok, Path(staging))
            snapshots[repo_id] = _store(cache, repo_id, Path(staging))
    return snapshots
