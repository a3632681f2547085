"""Which forward runs the target and the draft, and why: the kit's one decision about speed, made in `choose`.

The static backends (lean, graphs, compiled) speak one protocol: ``forward(input_ids=..., cache=...,
logits_to_keep=...)`` returns ``.logits``, and ``forward.new_cache(n)`` gives an empty `lean.StaticKV` of at least
``n`` positions, which `cache.rollback` rolls back. ``dynamic`` and ``uncached`` run the model itself (a cache, where
one is kept, goes under the keyword `cache.cache_kwargs` finds on its forward).

- ``dynamic``: the model itself over transformers' ``DynamicCache`` (any family, any drafter, trees, batches).
- ``lean``: a Llama on a CPU through `lean.LeanForward` (transformers' operations without its per-layer Python,
  bitwise its logits) over the kit's static cache; a plain Llama draft model drafts through its own.
- ``graphs``: `graphs.StaticForward`, fixed-size steps replayed from CUDA graphs over static caches, for both models
  (emulated on a CPU). The default on a GPU, where an eager step waits on kernel launches.
- ``compiled``: `compiled.CompiledForward`, the target's forward ``torch.compile``-d over a static cache (opt-in).
- ``uncached``: no cache (``use_cache=False``, or a caller's ``score=``, which reads none).

The edition modules (``core/reference_*.py`` and the students' editions) hold no part of this.
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass

import torch

from specdec_helpers.core.cache import cache_kwargs, new_cache, plain_static_layers
from specdec_helpers.core.compiled import compiled_forward
from specdec_helpers.core.drafters import Drafter, ModelDrafter
from specdec_helpers.core.graphs import MAX_K, static_forward
from specdec_helpers.core.lean import LeanForward, supported

CHECK_SIZES = (1, 2, 5, 11, 17)  # the lean forward's passes compared with the model's own (after a prefill of PREFILL)
PREFILL = 9
_CHECKED: "weakref.WeakKeyDictionary[torch.nn.Module, dict]" = weakref.WeakKeyDictionary()


@dataclass
class Backend:
    """What one decode runs on: the target's forward and cache, the drafter (over a static cache of its own where
    the backend has one), the largest k its steps serve (None: any), and the choice with its reason."""

    name: str
    reason: str
    target: object
    cache: object
    drafter: Drafter
    max_k: int | None = None

    def __str__(self) -> str:
        return f"{self.name} ({self.reason})"


def choose(
    target, drafter, use_cache: bool, compile: bool, graphs: bool | None, score=None, lean: bool = True
) -> tuple[str, str]:
    """``(backend name, why)`` for a decode: the caller's explicit wishes first, then the fastest backend that gives
    the target's own logits on this device. ``lean=False`` with ``graphs=False`` runs the model itself, eagerly,
    as a decoder of one's own does (notebook 05 times its greedy baseline so). Where lean is left to decide, the
    first call for a model runs `lean_forward`'s check (its logits against the model's own, then kept)."""
    if not use_cache or score is not None:
        return "uncached", "use_cache=False" if not use_cache else "a caller's score= reads no cache"
    if compile:
        return "compiled", "compile=True"
    if graphs:
        return "graphs", "graphs=True" + ("" if target.device.type == "cuda" else ", emulated on the CPU")
    why_not_graphs = graphs_unfit(target, drafter) if graphs is None else "graphs=False"
    if why_not_graphs is None:
        return "graphs", "a CUDA target: a graph replays a step faster than its kernels launch"
    why_not_lean = "lean=False" if not lean else supported(target)
    why_not_lean = why_not_lean or (None if lean_forward(target) else "its lean forward's logits differ")
    if why_not_lean is None:
        return "lean", "a Llama on the CPU: its forward without transformers' per-layer Python, bitwise its logits"
    return "dynamic", f"no graphs ({why_not_graphs}); no lean forward ({why_not_lean})"


def graphs_unfit(target, drafter) -> str | None:
    """Why ``graphs=None`` leaves CUDA graphs off for this pair, or None where they serve it."""
    if target.device.type != "cuda":
        return "not a CUDA target"
    if drafter.needs_target_features:
        return "the draft reads the target's features"
    if getattr(target, "hf_device_map", None):
        return "a model split over devices"
    if not plain_static_layers(target) or (drafter.model is not None and not plain_static_layers(drafter.model)):
        return "sliding-window or recurrent cache layers"
    return None


def decode_forward(model):
    """The forward a default decode runs ``model``'s passes through (as target or as a plain draft model): its graphs'
    on a CUDA device, its lean forward on a CPU Llama, else the model itself. Cost measurements (c, the bound) time
    this, so that they price what the decode pays."""
    if model.device.type == "cuda" and plain_static_layers(model):
        forward = static_forward(model)
        return forward if forward.graphs else model
    return lean_forward(model) or model


def lean_forward(model) -> LeanForward | None:
    """``model``'s `LeanForward` where it gives bitwise the model's own logits (checked once per dtype), else None."""
    if supported(model) is not None:
        return None
    checked = _CHECKED.setdefault(model, {})
    if model.dtype not in checked:
        fused = LeanForward(model)
        plain = None if _agrees(model, fused) else LeanForward(model, fuse=False)
        checked[model.dtype] = fused if plain is None else plain if _agrees(model, plain) else None
    return checked[model.dtype]


@torch.inference_mode()
def _agrees(model, lean: LeanForward) -> bool:
    """Whether the lean forward's logits and last hidden states equal the model's, for a prefill and each of
    `CHECK_SIZES` after it (a verify pass's sizes), on token ids drawn with a fixed seed."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (1, PREFILL + sum(CHECK_SIZES)), generator=generator)
    ids = ids.to(model.device)
    theirs, ours = new_cache(model), lean.new_cache(ids.shape[1])
    start = 0
    for n in (PREFILL, *CHECK_SIZES):
        chunk = ids[:, start : start + n]
        expected = model(input_ids=chunk, **cache_kwargs(model, theirs), use_cache=True, output_hidden_states=True)
        got = lean(chunk, ours, output_hidden_states=True)
        if not (
            torch.equal(got.logits, expected.logits) and torch.equal(got.hidden_states[-1], expected.hidden_states[-1])
        ):
            return False
        start += n
    return True


@contextlib.contextmanager
def backend(
    target,
    drafter,
    input_ids,
    max_new_tokens: int,
    largest_k: int | None,
    use_cache: bool = True,
    compile: bool = False,
    graphs: bool | None = None,
    score=None,
    lean: bool = True,
):
    """The `Backend` a decode runs on, set up before its timing starts (graphs: the step of every pass a round of up to
    ``largest_k`` draft tokens can verify, captured now; None: any k, capped at `graphs.MAX_K`), and its static caches
    given back after."""
    name, reason = choose(target, drafter, use_cache, compile, graphs, score, lean)
    length = input_ids.shape[1] + max_new_tokens
    if name == "uncached":
        yield Backend(name, reason, target, None, drafter)
    elif name == "dynamic":
        yield Backend(name, reason, target, new_cache(target), drafter)
    elif name == "compiled":
        forward = compiled_forward(target)
        yield Backend(name, reason, forward, forward.new_cache(length), drafter)
    elif name == "lean":
        forward = lean_forward(target)
        draft = lean_forward(drafter.model) if type(drafter) is ModelDrafter else None
        drafter = drafter if draft is None else StaticModelDrafter(drafter, draft, draft.new_cache(length))
        yield Backend(name, reason, forward, forward.new_cache(length), drafter)
    else:
        largest_k = MAX_K if largest_k is None else min(largest_k, MAX_K)
        with _static_pair(target, drafter, length, largest_k) as (forward, cache, drafter):
            if forward.eager_reason:
                reason += f"; steps eager: {forward.eager_reason}"
            yield Backend(name, reason, forward, cache, drafter, max_k=MAX_K)


@contextlib.contextmanager
def _static_pair(target, drafter, length: int, largest_k: int):
    """The target's and (for a plain `ModelDrafter`) the draft's static forwards and caches, steps prepared; other
    drafters (lookups, hybrids) come back as they are. Target and draft may be one model: each gets its own cache."""
    forward = static_forward(target)
    taken = [(forward, forward.new_cache(length))]
    try:
        forward.prepare(taken[0][1], range(1, largest_k + 2))  # the new token and 0 .. k draft tokens
        if type(drafter) is ModelDrafter:
            draft_forward = static_forward(drafter.model)
            taken.append((draft_forward, draft_forward.new_cache(length)))
            draft_forward.prepare(taken[1][1], [1, 2])  # one draft token; a kept draft's last token plus the bonus
            drafter = StaticModelDrafter(drafter, draft_forward, taken[1][1])
        yield forward, taken[0][1], drafter
    finally:
        for owner, kv in taken:
            owner.release(kv)


class StaticModelDrafter(ModelDrafter):
    """A `ModelDrafter` whose passes run through a static forward (graphs' or lean's) over one static cache of its
    own: the same `update`/`propose`, its rollback a moved position (core/cache.py's `rollback`: `StaticKV.keep`)."""

    def __init__(self, base: ModelDrafter, forward, kv):
        self.kv = kv
        super().__init__(base.model, base.vocab_limit, base.confidence_threshold)
        self.label, self.forward = base.label, forward

    def new_cache(self):
        self.kv.move_to(0)
        return self.kv
