"""The offline ``toy`` pair: a small GPT-NeoX target and a smaller draft, trained on CPU, shipped.

Why it exists: notebooks, tests and graders must run with no model hub, and give the same tokens on
every machine. So the package ships the trained pair itself (``data/toy``: fp16 weights, about
8 MB, with a sha256 manifest) and :func:`load_toy` just loads it (under a second). The recipe that
made it stays here, reproducible: a fixed corpus (CPython's pydoc topic texts, PSF licence, see
``data/NOTICE``), a byte-level BPE tokenizer and the two models trained on it deterministically
(fixed seed, data order and step count) by :func:`train_toy`; ``specdec train-toy`` retrains and
rewrites the shipped folder (:func:`ship_toy`). Bump TOY_VERSION when the recipe changes.

The draft is trained on the same batches as the target, its loss moving from the corpus to the
target's own next-token distribution (distillation): agreement with the target is what makes a
draft useful, not its own perplexity.
"""

from __future__ import annotations

import gzip
import json
import math
import shutil
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path

import torch
import torch.nn.functional as F

from specdec_helpers.models.store import folder_problem, open_permissions, write_manifest

__all__ = [
    "TOY_PROMPTS",
    "TOY_VERSION",
    "build_tokenizer",
    "load_toy",
    "retrain_toy",
    "ship_toy",
    "shipped_toy",
    "toy_corpus",
    "toy_documents",
    "train_toy",
]

# Bump TOY_VERSION whenever anything below changes the trained result (it is recorded in toy.json).
TOY_VERSION = 1
EOS_TOKEN = "<|endoftext|>"
PAD_TOKEN = "<|pad|>"
VOCAB_SIZE = 2048
MAX_POSITIONS = 1024
TARGET_SHAPE = {"num_hidden_layers": 4, "hidden_size": 256}
DRAFT_SHAPE = {"num_hidden_layers": 1, "hidden_size": 128}
TRAIN_STEPS = 260
BATCH_SIZE = 8
SEQ_LEN = 128
TARGET_LR = 3e-3
DRAFT_LR = 5e-3
DISTILL_WEIGHT = 0.8  # final weight of the KL-to-target term in the draft's loss (ramped from 0)
EXPECTED_SECONDS = 90  # to train, on 2 CPU cores; shown by `specdec train-toy`

_CORPUS_FILE = "pydoc_topics.txt.gz"

# Prompts that open like passages of the corpus: the toy pair is at home here.
TOY_PROMPTS = [
    'The "if" statement is used for',
    "Assignment statements are used to",
    "A class definition defines a",
    "Exceptions are a means of",
    'The "for" statement is used to',
]


def shipped_toy():
    """The package's own toy pair folder (``data/toy``): fp16 weights, tokenizer, manifest."""
    return resources.files("specdec_helpers") / "data" / "toy"


def toy_corpus() -> str:
    """The shipped training text; documents are separated by the EOS marker."""
    data = resources.files("specdec_helpers") / "data" / _CORPUS_FILE
    return gzip.decompress(data.read_bytes()).decode("utf-8")


def toy_documents() -> list[str]:
    """The corpus split into its documents (one pydoc topic each)."""
    return [doc.strip() + "\n" for doc in toy_corpus().split(EOS_TOKEN) if doc.strip()]


def build_tokenizer(documents: list[str] | None = None):
    """Train the byte-level BPE tokenizer (any text round-trips: unknown words become bytes)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    documents = toy_documents() if documents is None else documents
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[EOS_TOKEN, PAD_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(documents, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=EOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        model_max_length=MAX_POSITIONS,
    )


def _make_model(shape: dict, tokenizer):
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    width = shape["hidden_size"]
    config = GPTNeoXConfig(
        vocab_size=len(tokenizer),
        hidden_size=width,
        num_hidden_layers=shape["num_hidden_layers"],
        num_attention_heads=max(1, width // 64),
        intermediate_size=4 * width,
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return GPTNeoXForCausalLM(config)


def _token_stream(tokenizer, documents: list[str]) -> torch.Tensor:
    """All documents as one id sequence, each followed by EOS (what the models learn to end on)."""
    ids: list[int] = []
    for enc in tokenizer.backend_tokenizer.encode_batch(documents):
        ids.extend(enc.ids)
        ids.append(tokenizer.eos_token_id)
    return torch.tensor(ids, dtype=torch.long)


def _lr(step: int, steps: int, peak: float) -> float:
    """Linear warm-up over the first 10% of steps, then cosine decay to 10% of the peak."""
    warm = max(1, steps // 10)
    if step < warm:
        return peak * (step + 1) / warm
    progress = (step - warm) / max(1, steps - warm)
    return peak * (0.1 + 0.45 * (1 + math.cos(math.pi * progress)))


@torch.enable_grad()  # callers (notebooks) may have turned autograd off globally
def _train_pair(target, draft, stream, steps, seed, progress):
    """Train both models on the same random windows; the draft also imitates the target."""
    vocab = target.config.vocab_size
    opt_t = torch.optim.AdamW(target.parameters(), lr=TARGET_LR, betas=(0.9, 0.95), weight_decay=0.1)
    opt_d = torch.optim.AdamW(draft.parameters(), lr=DRAFT_LR, betas=(0.9, 0.95), weight_decay=0.1)
    order = torch.Generator().manual_seed(seed)  # the data order depends on the seed only
    target.train()
    draft.train()
    bar = _progress_bar(steps, progress)
    for step in range(steps):
        starts = torch.randint(0, len(stream) - SEQ_LEN - 1, (BATCH_SIZE,), generator=order)
        window = torch.stack([stream[s : s + SEQ_LEN + 1] for s in starts.tolist()])
        x, y = window[:, :-1], window[:, 1:].reshape(-1)

        for group in opt_t.param_groups:
            group["lr"] = _lr(step, steps, TARGET_LR)
        t_logits = target(x).logits.reshape(-1, vocab)
        t_loss = F.cross_entropy(t_logits, y)
        t_loss.backward()
        torch.nn.utils.clip_grad_norm_(target.parameters(), 1.0)
        opt_t.step()
        opt_t.zero_grad(set_to_none=True)

        for group in opt_d.param_groups:
            group["lr"] = _lr(step, steps, DRAFT_LR)
        d_logp = F.log_softmax(draft(x).logits.reshape(-1, vocab), dim=-1)
        t_logp = F.log_softmax(t_logits.detach(), dim=-1)
        kl = F.kl_div(d_logp, t_logp, log_target=True, reduction="batchmean")
        w = DISTILL_WEIGHT * step / steps  # the target is noise at first: lean on the corpus then
        d_loss = (1 - w) * F.nll_loss(d_logp, y) + w * kl
        d_loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt_d.step()
        opt_d.zero_grad(set_to_none=True)

        if bar is not None:
            bar.set_postfix(target_loss=f"{t_loss.item():.2f}", draft_loss=f"{d_loss.item():.2f}")
            bar.update(1)
    if bar is not None:
        bar.close()
    target.eval()
    draft.eval()


def _progress_bar(total: int, enabled: bool):
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc="toy pair", unit="step", file=sys.stderr, leave=False)


def train_toy(out_dir, progress: bool = True, seed: int = 0, steps: int = TRAIN_STEPS) -> Path:
    """Train the toy pair and write ``out_dir/{target,draft}`` (each a model plus tokenizer).

    Same seed and steps give identical weights on one machine (same thread count). Writes into
    ``out_dir`` directly: :func:`load_toy` is the caller that makes the cache write atomic.
    """
    out_dir = Path(out_dir)
    started = time.perf_counter()
    documents = toy_documents()
    tokenizer = build_tokenizer(documents)
    stream = _token_stream(tokenizer, documents)
    with torch.random.fork_rng(devices=[]):  # leave the caller's global RNG untouched
        torch.manual_seed(seed)
        target = _make_model(TARGET_SHAPE, tokenizer)
        draft = _make_model(DRAFT_SHAPE, tokenizer)
        _train_pair(target, draft, stream, steps, seed, progress)
    for name, model in (("target", target), ("draft", draft)):
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        model.save_pretrained(out_dir / name)
        tokenizer.save_pretrained(out_dir / name)
    info = {
        "version": TOY_VERSION,
        "seed": seed,
        "steps": steps,
        "corpus_tokens": len(stream),
        "train_seconds": round(time.perf_counter() - started, 1),
        "torch_threads": torch.get_num_threads(),
        "target": {**TARGET_SHAPE, "params": sum(p.numel() for p in target.parameters())},
        "draft": {**DRAFT_SHAPE, "params": sum(p.numel() for p in draft.parameters())},
    }
    # Written last: its presence marks a complete folder.
    (out_dir / "toy.json").write_text(json.dumps(info, indent=2))
    return out_dir


def ship_toy(trained, out_dir) -> Path:
    """Write what the package ships from a :func:`train_toy` folder: each model's config and fp16
    weights (half the bytes; :func:`load_toy` reads them back as fp32), one tokenizer, ``toy.json``
    and the sha256 manifest that :func:`load_toy` checks. ``specdec train-toy`` runs both steps."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    trained, out_dir = Path(trained), Path(out_dir)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    for name in ("target", "draft"):
        model = AutoModelForCausalLM.from_pretrained(trained / name, dtype=torch.float16)
        model.save_pretrained(out_dir / name)
    AutoTokenizer.from_pretrained(trained / "target").save_pretrained(out_dir / "tokenizer")
    shutil.copy(trained / "toy.json", out_dir / "toy.json")
    write_manifest(out_dir)
    open_permissions(out_dir)
    return out_dir


def retrain_toy(out_dir=None, seed: int = 0, progress: bool = True) -> Path:
    """:func:`train_toy` then :func:`ship_toy` into ``out_dir`` (default: the package's own data/toy)."""
    print(f"training the toy pair (about {EXPECTED_SECONDS} s on 2 cores) ...", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        return ship_toy(train_toy(tmp, progress=progress, seed=seed), out_dir or Path(str(shipped_toy())))


def load_toy(device="cpu", dtype=torch.float32, progress: bool = True):
    """Return ``(target, draft, tokenizer)``: the pair shipped in the package (fp16 on disk, loaded
    as ``dtype``), the same on every machine. Its files are checked against their manifest first.
    ``progress`` is kept for the callers' sake: loading takes well under a second."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with resources.as_file(shipped_toy()) as folder:
        problem = folder_problem(folder)
        if problem is not None:
            raise RuntimeError(
                f"the shipped toy pair is broken: {problem}. Reinstall the package "
                "(pip install --force-reinstall --no-deps specdec_helpers, or git checkout "
                "specdec_helpers/data/toy in a clone), or rebuild it: specdec train-toy"
            )
        tokenizer = AutoTokenizer.from_pretrained(folder / "tokenizer")
        target, draft = (
            AutoModelForCausalLM.from_pretrained(folder / name, dtype=dtype).to(device).eval()
            for name in ("target", "draft")
        )
    return target, draft, tokenizer
