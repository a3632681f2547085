"""Draft names: one table from the names ``load_pair(draft=...)`` and ``ModelPair.with_draft`` take to the
factories that make those drafts. A name may carry an argument after a colon ('prompt-lookup:2',
'hybrid:eagle'); anything not named here is a hub id or a folder, which `models.pairs` loads.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Callable

import torch

from specdec_helpers.core.drafters import HybridDrafter, PromptLookupDrafter
from specdec_helpers.models.drafts.distill import distilled_draft
from specdec_helpers.models.drafts.eagle import HYBRID_TOKENS
from specdec_helpers.models.drafts.eagle_train import eagle_drafter
from specdec_helpers.models.drafts.int8 import int8_copy


@dataclass(frozen=True)
class DraftRequest:
    """What a factory may use: the pair's target and tokenizer, the name's argument (after the colon),
    the draft a hybrid wraps when none is named (``base()``), and a loader for other names and hub ids."""

    target: torch.nn.Module
    tokenizer: object
    argument: str | None
    base: Callable[[], object]
    load: Callable[[str], object]
    name: str  # what the target's cached drafts are filed under
    progress: bool = True


@dataclass(frozen=True)
class DraftKind:
    make: Callable[[DraftRequest], object]
    help: str
    announce: bool = False  # say what is being made (it takes a while)


def _prompt_lookup(request: DraftRequest):
    if request.argument is None:  # HF's prompt lookup: n-grams of 1-3 tokens, k tokens proposed
        return PromptLookupDrafter()
    n = request.argument  # the kit's: n-grams of N to max(3, N) tokens, proposals grow with the match
    if not n.isdigit() or int(n) < 1:
        raise ValueError(
            f"draft='prompt-lookup:{n}': write 'prompt-lookup:N' with N >= 1 the shortest n-gram to "
            "match, e.g. 'prompt-lookup:2'"
        )
    return PromptLookupDrafter(max_ngram=max(3, int(n)), min_ngram=int(n), grow_with_match=True)


def _hybrid(request: DraftRequest):
    """N-gram lookup first, then the named draft (or the pair's): its model or its feature drafter."""
    inner = request.load(request.argument) if request.argument else request.base()
    if isinstance(inner, HybridDrafter):  # never a lookup before a lookup
        inner = inner.model_drafter
    if not isinstance(inner, torch.nn.Module) and inner.needs_target_features:
        return HybridDrafter(inner, model_tokens=HYBRID_TOKENS)
    model = inner if isinstance(inner, torch.nn.Module) else inner.model
    if model is None:
        raise ValueError(
            f"draft='hybrid' puts n-gram lookup before a draft model, but this pair's draft is a "
            f"{type(inner).__name__} with no model: load a model draft first"
        )
    return HybridDrafter(model)


def _no_argument(name: str, make: Callable[[DraftRequest], object]) -> Callable[[DraftRequest], object]:
    def checked(request: DraftRequest):
        if request.argument is not None:
            raise ValueError(f"draft='{name}:{request.argument}': '{name}' takes no argument; write draft='{name}'")
        return make(request)

    return checked


DRAFTS: dict[str, DraftKind] = {
    "prompt-lookup": DraftKind(
        _prompt_lookup,
        "n-gram lookup in the text so far, no model, as HF's; 'prompt-lookup:N' "
        "matches N tokens or more and proposes up to twice as many as matched",
    ),
    "int8": DraftKind(
        _no_argument("int8", lambda r: int8_copy(r.target)),
        "an int8 dynamic-quantized copy of the target, for the CPU",
        announce=True,
    ),
    "eagle": DraftKind(
        _no_argument("eagle", lambda r: eagle_drafter(r.target, r.tokenizer, r.name, progress=r.progress)),
        "a layer reading the target's features, after EAGLE: shipped for smollm2-135m (trained on "
        "existing text), else trained here on first use",
        announce=True,
    ),
    "distilled": DraftKind(
        _no_argument("distilled", lambda r: distilled_draft(r.target, r.tokenizer, r.name, progress=r.progress)),
        "a truncated copy of the target distilled on its own text, trained here on first use",
        announce=True,
    ),
    "hybrid": DraftKind(_hybrid, "n-gram lookup first, else the preset's draft; 'hybrid:<name>': else that draft"),
}


def split_name(spec) -> tuple[str, str | None] | None:
    """``'prompt-lookup:2'`` -> ``('prompt-lookup', '2')``; None when ``spec`` names no draft in `DRAFTS`."""
    if not isinstance(spec, str):
        return None
    name, colon, argument = spec.partition(":")
    return (name, argument if colon else None) if name in DRAFTS else None


def make_draft(spec: str, request: DraftRequest):
    """The draft a registered name stands for."""
    name, _ = split_name(spec)
    if request.progress and DRAFTS[name].announce:
        print(f"draft: {DRAFTS[name].help}", file=sys.stderr, flush=True)
    return DRAFTS[name].make(request)


def draft_names_help() -> str:
    """The draft names and what each makes, for command-line help."""
    return "; ".join(f"'{name}': {kind.help}" for name, kind in DRAFTS.items())
