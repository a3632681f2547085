"""The assignment's tiny world: small random models (seconds to build, CPU), built the same way from a
seed in the grader and in the child that runs student code, plus the child's instrumentation
(forward-pass counters, a recording subclass).

The grader picks the seed at grade time (`grading_seed`), so no test input can be known in advance; the
tests and a regrade fix it with ``$SPECDEC_GRADE_SEED`` or ``grade --seed`` (each grading names its world).
"""

from __future__ import annotations

import atexit
import copy
import functools
import os
import secrets
import shutil
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch


class Mistake(AssertionError):
    """A test found wrong behaviour; the message is the feedback the student sees."""


@functools.lru_cache(maxsize=1)
def course_pair():
    """The course's own pair (``toy``) as plain HF models ``(target, draft, tokenizer)``, loaded once per
    process: the world is built from it."""
    from specdec_helpers.models.toy import load_toy

    return load_toy(progress=False)


def as_timed(model):
    """``model`` with the CPU kernels `load_pair` gives the timed pair (`use_onednn_linears`): a test
    model's layers are of the same classes as the timed model's."""
    from specdec_helpers.core.cpu_kernels import use_onednn_linears

    return use_onednn_linears(copy.deepcopy(model)).eval()


SEED_ENV = "SPECDEC_GRADE_SEED"


def grading_seed(seed: int | None = None) -> int:
    """The seed of a grading's test world: ``seed``, else ``$SPECDEC_GRADE_SEED`` (CI, a regrade: the same
    inputs every run), else drawn now, so a submission cannot know its inputs in advance. (The timed prompts
    are drawn apart: the child learns the world's seed, and must not learn them from it.)"""
    if seed is not None:
        return seed
    value = os.environ.get(SEED_ENV, "").strip()
    if not value:
        return secrets.randbelow(10**6)
    try:
        return int(value)
    except ValueError:
        raise ValueError(
            f"{SEED_ENV}={value!r} is not a whole number: set it to one to grade in a fixed world "
            "(tests, a regrade), or unset it to draw a fresh world per grading"
        ) from None


def perturbed_copy(model, scale: float = 0.15, seed: int = 1):
    """``model`` with seeded noise on every weight: a model of the same shape that behaves like it, often
    but not always (the world's draft), or with a large scale, hardly at all."""
    torch.manual_seed(seed)
    draft = copy.deepcopy(model)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn_like(p) * scale * p.std().clamp_min(1e-3))
    return draft.eval()


def _quiet(model):
    """No EOS of its own: the tests say when a decoder has one (``eos=``)."""
    model.generation_config.eos_token_id = None
    return model


@dataclass
class Pair:
    target: torch.nn.Module
    draft: torch.nn.Module
    tokenizer: object
    device: torch.device = torch.device("cpu")
    num_speculative_tokens: int = 4


class World:
    """The course pair's shapes, tokenizer and config, with weights the grader perturbed at grade time:
    a target, drafts that agree often / always / rarely, and random prompts. Nothing a decoder can read
    (config, vocabulary, tokenizer, model classes) tells it from the pair it is timed on."""

    def __init__(self, seed: int = 0):
        target, draft, tokenizer = course_pair()
        self.seed = seed
        self.tokenizer = copy.deepcopy(tokenizer)
        self.vocab = int(target.config.vocab_size)
        self._plain = {
            "target": _quiet(perturbed_copy(target, 0.1, seed)),  # saved for the init tests
            "draft": _quiet(perturbed_copy(draft, 0.1, seed + 1)),
        }
        self.target = as_timed(self._plain["target"])
        self.draft = as_timed(self._plain["draft"])  # agrees often, not always
        self.same = as_timed(self._plain["target"])  # agrees always: every round ends with a bonus token
        self.other = as_timed(_quiet(perturbed_copy(draft, 3.0, seed + 7)))  # unrelated: nearly every token rejected
        g = torch.Generator().manual_seed(seed + 3)
        self.prompts = [torch.randint(3, self.vocab, (1, n), generator=g) for n in (6, 11, 32)]
        self._folders = None
        self._greedy: dict = {}

    def variant(self, name: str):
        """A draft by name: ``draft`` (agrees often), ``same`` (always), ``other`` (rarely); ``deep`` is ``same``
        with `deep` as the target, ``live-other`` is ``other`` with `live` as the target (`named_pair`)."""
        if name not in ("draft", "same", "other", "deep", "live-other"):
            raise ValueError(f"unknown draft {name!r}")
        return {"deep": self.same, "live-other": self.other}.get(name) or getattr(self, name)

    def pair(self, draft=None) -> Pair:
        return Pair(self.target, self.draft if draft is None else draft, self.tokenizer)

    def named_pair(self, name: str) -> Pair:
        """The pair a test asks for by its draft's name (`variant`): the target, `deep` for ``deep``, `live` for
        ``live-other``."""
        target = getattr(self, {"deep": "deep", "live-other": "live"}.get(name, "target"))  # built only when asked for
        return Pair(target, self.variant(name), self.tokenizer)

    @functools.cached_property
    def deep(self):
        """The target with many more layers that add nothing (`deepened`): several times the cost of a pass, so
        that a draft pass (`same`, which always agrees) costs little beside a target pass. The CPU time a decode
        takes then tells, from outside the student's process, how many target passes it really ran."""
        return as_timed(deepened(self._plain["target"], times=12))

    @functools.cached_property
    def live(self):
        """The target deepened as `deep` is, but each extra layer adds a little (seeded layer norms, `deepened`): other
        logits. A zero layer can be found and skipped (red team, 2026-11-27); one of these, not without changing the
        output, which the checks of cost that use it compare with the grader's own (`outside`). Six times the target's
        layers, not twelve as `deep`: a hidden second pass still costs about twice one (PA3's loop on 16 tokens: 2.15
        at 12x, 2.10 at 6x), for half the CPU of a grading's checks of cost (stop 54)."""
        return as_timed(deepened(self._plain["target"], times=6, live_seed=self.seed + 13))

    def folders(self) -> tuple[str, str]:
        """Target and draft saved with the tokenizer, as local model folders for the init exercise. The
        tokenizer there has no pad token, as a hub base model's (Pythia's): setting one is part of it."""
        if self._folders is None:
            root = Path(tempfile.mkdtemp(prefix="specdec-grade-"))
            atexit.register(shutil.rmtree, root, True)  # ~17 MB a grading (a class's forked gradings: their folder)
            tokenizer = copy.deepcopy(self.tokenizer)
            tokenizer.pad_token = None
            for name, model in self._plain.items():
                model.save_pretrained(root / name)
                tokenizer.save_pretrained(root / name)
            self._folders = (str(root / "target"), str(root / "draft"))
        return self._folders

    def greedy(self, which: str, prompt_index: int, n: int = 24) -> list[int]:
        """The ``n`` greedy tokens of model ``which`` after prompt ``prompt_index`` (no eos), computed once per
        world (kept on the world, not in an lru_cache on the method, which would keep every world alive)."""
        key = (which, prompt_index, n)
        if key not in self._greedy:
            self._greedy[key] = greedy_tokens(getattr(self, which), self.prompts[prompt_index], n)
        return self._greedy[key]


def greedy_tokens(model, ids, n, eos=None) -> list[int]:
    with torch.inference_mode():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=n,
            eos_token_id=eos,
            pad_token_id=0 if eos is None else eos,
        )
    return out[0, ids.shape[1] :].tolist()


def deepened(model, times: int, live_seed: int | None = None):
    """``model`` (GPT-NeoX) with ``times`` as many layers: its own, then copies of them that read nothing: their
    layer norms scale by zero and every bias is zero, so each adds exactly zero to the residual stream (the
    logits stay bit-identical, and the model itself, as a draft, always agrees) while its weights still cost
    a layer's work. With ``live_seed``, each copy's layer norms keep a seeded tenth or less of their scale: each
    adds a little, so no copy can be skipped without changing the logits (and the greedy text)."""
    deep = copy.deepcopy(model).eval()  # copies, not a fresh model: no random initialisation of dozens of layers
    layers = deep.gpt_neox.layers
    count = len(layers)
    g = torch.Generator().manual_seed(live_seed or 0)
    for index in range(count, count * times):
        layer = copy.deepcopy(layers[index % count])
        layer.attention.layer_idx = index  # its own slot in the KV cache
        with torch.no_grad():
            for norm in (layer.input_layernorm, layer.post_attention_layernorm):
                if live_seed is None:
                    norm.weight.zero_()
                else:
                    norm.weight.mul_(0.1 * torch.rand(norm.weight.shape, generator=g))
                norm.bias.zero_()
            for linear in (
                layer.attention.query_key_value,
                layer.attention.dense,
                layer.mlp.dense_h_to_4h,
                layer.mlp.dense_4h_to_h,
            ):
                linear.bias.zero_()
        layers.append(layer)
    deep.config.num_hidden_layers = len(layers)
    return deep


@functools.lru_cache(maxsize=4)
def world(seed: int = 0) -> World:
    return World(seed)


# --------------------------------------------------------------------------- instrumentation


class Probe:
    """Counts what a decoder does: target passes, positions fed to the draft, draft and verify calls.

    The target's hook also stops a loop that makes no progress (``limit`` passes), so a broken
    decode loop fails its test instead of hanging the grader.
    """

    def __init__(self, target, draft, limit: int = 400):
        self.target_calls = 0
        self.target_positions = 0
        self.draft_positions = 0
        self.draft_calls = 0
        self.limit = limit
        # On the input embeddings: every forward pass goes through them, also one that calls the model's inner
        # modules (model.gpt_neox(...)) to avoid a hook on the model itself.
        self.handles = [_entry(target).register_forward_pre_hook(self._on_target, with_kwargs=True)]
        if isinstance(draft, torch.nn.Module):
            self.handles.append(_entry(draft).register_forward_pre_hook(self._on_draft, with_kwargs=True))

    def _on_target(self, module, args, kwargs):
        ids = kwargs.get("input_ids", kwargs.get("input", args[0] if args else None))
        self.target_calls += 1
        self.target_positions += 0 if ids is None else int(ids.shape[-1])
        if self.target_calls > self.limit:
            raise Mistake(
                f"no progress: the target ran {self.limit} times without the loop finishing; each round "
                "must append at least one token (the target's correction/bonus token)"
            )

    def _on_draft(self, module, args, kwargs):
        ids = kwargs.get("input_ids", kwargs.get("input", args[0] if args else None))
        self.draft_calls += 1
        self.draft_positions += 0 if ids is None else int(ids.shape[-1])

    def close(self):
        for handle in self.handles:
            handle.remove()


def _entry(model: torch.nn.Module) -> torch.nn.Module:
    """The module every forward pass of ``model`` starts with: its input embeddings where it has them."""
    embeddings = getattr(model, "get_input_embeddings", lambda: None)()
    return embeddings if isinstance(embeddings, torch.nn.Module) else model


@contextmanager
def probe(decoder, limit: int = 400):
    p = Probe(decoder.target_model, decoder.draft_model, limit)
    try:
        yield p
    finally:
        p.close()


class CpuMoves:
    """Counts the graded code's explicit moves of tensors to the CPU (``.cpu()``, ``.numpy()``,
    ``.to("cpu")``) while active. On a CPU they cost nothing; on a GPU each one waits for the device,
    so a loop that moves its new tokens every round throws speculation's gain away. Patching the
    three methods costs nothing elsewhere, so it runs in timed runs too."""

    def __init__(self):
        self.count = 0

    def _wrap(self, real):
        def counted(tensor, *args, **kwargs):
            target = args[0] if args else kwargs.get("device")
            if real.__name__ != "to" or (isinstance(target, str) and target.startswith("cpu")):
                if sys._getframe(1).f_code.co_filename.startswith("<graded cell"):
                    self.count += 1
            return real(tensor, *args, **kwargs)

        return counted

    def __enter__(self):
        self.saved = {name: getattr(torch.Tensor, name) for name in ("cpu", "numpy", "to")}
        for name, real in self.saved.items():
            setattr(torch.Tensor, name, self._wrap(real))
        return self

    def __exit__(self, *exc):
        for name, real in self.saved.items():
            setattr(torch.Tensor, name, real)


def recording(cls):
    """A subclass of the student's class that records what the grader judges rounds by: every draft,
    every verification (method, text length, the draft verified, the result), and per decode the
    target's and the draft's forward passes and the explicit moves to the CPU."""

    class Recorded(cls):
        def generate_draft_tokens(self, input_ids, attention_mask=None, num_speculative_tokens=5):
            out = super().generate_draft_tokens(input_ids, attention_mask, num_speculative_tokens)
            self.log.append(("draft", input_ids.shape[1], num_speculative_tokens, _as_list(out)))
            return out

        def verify_tokens_vectorized(self, input_ids, draft_tokens, attention_mask=None):
            out = super().verify_tokens_vectorized(input_ids, draft_tokens, attention_mask)
            self.log.append(
                (
                    "verify",
                    input_ids.shape[1],
                    draft_tokens.shape[-1],
                    out,
                    "verify_tokens_vectorized",
                    _as_list(draft_tokens),
                )
            )
            return out

        def verify_tokens_cached(self, input_ids, draft_tokens, attention_mask=None):
            out = super().verify_tokens_cached(input_ids, draft_tokens, attention_mask)
            self.log.append(
                (
                    "verify",
                    input_ids.shape[1],
                    draft_tokens.shape[-1],
                    out,
                    "verify_tokens_cached",
                    _as_list(draft_tokens),
                )
            )
            return out

        def generate_ids(self, input_ids, max_tokens=100, num_speculative_tokens=5, use_cache=True):
            with probe(self, limit=10 * max_tokens + 50) as passes, CpuMoves() as moves:
                out = super().generate_ids(input_ids, max_tokens, num_speculative_tokens, use_cache=use_cache)
            self.log.append(("generate", passes.target_calls, passes.draft_calls, moves.count))
            return out

    Recorded.__name__ = Recorded.__qualname__ = cls.__name__
    return Recorded


def _as_list(tokens) -> list[int]:
    if isinstance(tokens, torch.Tensor):
        return tokens.reshape(-1).tolist()
    return [int(t) for t in (tokens[0] if tokens and isinstance(tokens[0], (list, tuple)) else tokens)]


def make_decoder(cls, pair, eos=None, record=False):
    """The student's class around already-loaded models (``from_pair``; else PA3's attribute names)."""
    cls = recording(cls) if record else cls
    if hasattr(cls, "from_pair"):
        decoder = cls.from_pair(pair)
    else:  # a PA3-style class without from_pair: set its attributes the way its __init__ would
        decoder = cls.__new__(cls)
        decoder.device = pair.device
        decoder.target_model, decoder.draft_model = pair.target, pair.draft
        decoder.target_tokenizer = decoder.draft_tokenizer = pair.tokenizer
        decoder.target_cache = decoder.draft_cache = None
        decoder.stats = {}
    decoder.eos_token_id = eos
    decoder.log = []
    return decoder
