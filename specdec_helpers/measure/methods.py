"""The decoding methods a benchmark times, as ``fn(input_ids, max_new_tokens) -> MethodOutput``: HF greedy,
ours (greedy, speculative with and without a cache, compiled), and HF assisted generation with the same
draft at the same constant k, where HF can express that draft. Given a ``decoder`` (an object with PA3's
``SpeculativeDecoder`` interface, e.g. the one a student wrote), the speculative methods run it instead of
the kit's loop (`observed.decoder_method`)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import torch

from specdec_helpers.core import checks
from specdec_helpers.core.decode import greedy_decode, speculative_decode
from specdec_helpers.core.drafters import GREEDY, Drafter, HybridDrafter, ModelDrafter, PromptLookupDrafter
from specdec_helpers.core.tree import tree_speculative_decode
from specdec_helpers.measure.observed import decoder_method
from specdec_helpers.measure.results import COMPILED_METHODS

METHODS = ("hf_greedy", "greedy", "spec_vectorized", "spec_cached", "hf_assisted")


@dataclass
class MethodOutput:
    sequences: torch.Tensor
    stats: dict | None = None  # DecodeStats.as_dict() for our methods
    steps: list | None = None  # per-round Step trace for our speculative methods


class Skip(str):
    """A method that cannot run for this draft (the string says why)."""


def _hf_assistant(draft):
    """The model HF assisted generation can draft with: a plain draft model's. None for drafts HF cannot
    express (a hybrid drafts by lookup first; a feature drafter reads the target's features)."""
    if isinstance(draft, torch.nn.Module):
        return draft
    return draft.model if isinstance(draft, ModelDrafter) else None


class TreeDraft(Drafter):
    """A drafter the benchmarks decode as a token tree of shape ``widths`` (`tree_speculative_decode`), its
    n-gram branch (if a hybrid) up to k long. The harness unwraps it; the drafter methods below serve only
    `sweep.measure_costs`, which times one step of the drafter behind the lookup, as for a hybrid."""

    def __init__(self, drafter: Drafter, widths, label: str | None = None):
        self.drafter, self.widths = drafter, checks.check_tree_shape(widths)
        self.stepper = drafter.model_drafter if isinstance(drafter, HybridDrafter) else drafter
        self.needs_target_features = self.stepper.needs_target_features
        self.label = label or f"tree:{'x'.join(map(str, self.widths))}:{draft_label(drafter)}"

    @property
    def model(self):
        return self.drafter.model

    def propose(self, input_ids, k, sampler=GREEDY):
        return self.stepper.propose(input_ids, k, sampler)

    def update(self, n_kept: int, target_features=None) -> None:
        self.stepper.update(n_kept, target_features)


def draft_label(draft) -> str:
    """A short name for tables: the drafter's declared label, else its model's ('int8', a hub name)."""
    if isinstance(draft, Drafter) and draft.label:
        return draft.label
    model = draft if isinstance(draft, torch.nn.Module) else draft.model
    if model is None:
        return type(draft).__name__
    if any("quantized" in type(m).__module__ for m in model.modules()):
        return "int8"
    # Hub ids name themselves ("pythia-160m-deduped"); a local folder named just "draft" (the toy's) does not.
    name = Path(model.config.name_or_path or "").name
    if name and name != "draft":
        return name
    return f"{model.config.model_type}-{sum(p.numel() for p in model.parameters()) // 1000}k"


def _generate_kwargs(target, input_ids, max_new_tokens, eos_token_id):
    kwargs = dict(attention_mask=torch.ones_like(input_ids), do_sample=False, max_new_tokens=max_new_tokens)
    if eos_token_id is not None:
        kwargs["eos_token_id"] = eos_token_id
    if target.generation_config.pad_token_id is None:  # quiets generate()'s per-call warning (batch of one: unused)
        eos = checks.eos_ids(target, eos_token_id)
        kwargs["pad_token_id"] = eos[0] if eos else 0
    return kwargs


def build_methods(target, draft, k: int, names=METHODS, eos_token_id=None, decoder=None) -> dict:
    """``{name: fn(input_ids, max_new_tokens) -> MethodOutput}``, or a `Skip` note where a method
    cannot express this draft (e.g. HF assisted generation with a custom Drafter). With ``decoder``,
    ``spec_cached`` / ``spec_vectorized`` are its ``generate_ids(use_cache=True / False)`` and the
    compiled speculative method is skipped (it is the kit's loop), and ``greedy`` runs as the decoder does: eagerly,
    the model itself over transformers' cache (no CUDA graphs, no lean forward)."""
    methods = {}

    def hf_greedy(ids, n):
        return MethodOutput(target.generate(ids, **_generate_kwargs(target, ids, n, eos_token_id)))

    # Next to a decoder of one's own (the model itself, eagerly, over transformers' cache), our greedy runs the same
    # way: no graphs, no lean forward; else its speed-up would price the backend, not the speculation.
    same_way = {} if decoder is None else dict(graphs=False, lean=False)

    def greedy(compile):
        def run(ids, n):
            out = greedy_decode(target, ids, max_new_tokens=n, eos_token_id=eos_token_id, compile=compile, **same_way)
            return MethodOutput(out.sequences, out.stats.as_dict())

        return run

    def speculative(use_cache, compile=False):
        if decoder is not None:
            if compile:
                return Skip("the compiled loop is the kit's; it does not run a decoder you pass")
            observe = decoder_method(decoder, k, use_cache)

            def run_decoder(ids, n):
                out = observe(ids, n)
                return MethodOutput(out.sequences, out.stats.as_dict(), out.steps)

            return run_decoder

        if isinstance(draft, TreeDraft):
            if not use_cache or compile:
                return Skip("tree decoding runs with the KV cache, eager")

            def run_tree(ids, n):
                out = tree_speculative_decode(
                    target,
                    draft.drafter,
                    ids,
                    max_new_tokens=n,
                    tree=draft.widths,
                    lookup_tokens=k,
                    eos_token_id=eos_token_id,
                )
                return MethodOutput(out.sequences, out.stats.as_dict(), out.steps)

            return run_tree

        def run(ids, n):
            out = speculative_decode(
                target,
                draft,
                ids,
                max_new_tokens=n,
                num_speculative_tokens=k,
                eos_token_id=eos_token_id,
                use_cache=use_cache,
                compile=compile,
            )
            return MethodOutput(out.sequences, out.stats.as_dict(), out.steps)

        return run

    def assisted(ids, n):
        kwargs = _generate_kwargs(target, ids, n, eos_token_id)
        if isinstance(draft, PromptLookupDrafter):
            kwargs.update(prompt_lookup_num_tokens=k, max_matching_ngram_size=draft.max_ngram)
            return MethodOutput(target.generate(ids, **kwargs))
        assistant = _hf_assistant(draft)
        with _constant_k(assistant, k):
            return MethodOutput(target.generate(ids, assistant_model=assistant, **kwargs))

    available = {
        "hf_greedy": hf_greedy,
        "greedy": greedy(False),
        "spec_vectorized": speculative(False),
        "spec_cached": speculative(True),
        "hf_assisted": assisted,
        "greedy_compiled": greedy(True),
        "spec_compiled": speculative(True, compile=True),
    }
    for name in names:
        if name not in available:
            raise ValueError(f"unknown method {name!r}; choose from {', '.join(METHODS + COMPILED_METHODS)}")
        if name == "hf_assisted" and not (isinstance(draft, PromptLookupDrafter) or _hf_assistant(draft) is not None):
            methods[name] = Skip(f"HF assisted generation cannot express a {type(draft).__name__}")
        elif (
            name == "hf_assisted"
            and isinstance(draft, PromptLookupDrafter)
            and (draft.min_ngram > 1 or draft.grow_with_match)
        ):
            methods[name] = Skip("HF's prompt lookup always falls back to single-token matches and proposes k tokens")
        else:
            methods[name] = available[name]
    return methods


@contextlib.contextmanager
def _constant_k(assistant, k: int):
    """Make HF assisted generation draft exactly ``k`` tokens every round, for one call.

    transformers 5.x reads the draft length from the *assistant's* generation config, not from the
    ``num_assistant_tokens=`` given to ``generate`` (unset, it drafts 20), and it stops drafting early
    when the assistant's top probability falls below ``assistant_confidence_threshold`` (0.4 by
    default). Both sides then draft k tokens a round, and the comparison measures the loops, not
    two drafting policies. The assistant's config is restored afterwards."""
    config = assistant.generation_config
    wanted = dict(num_assistant_tokens=k, num_assistant_tokens_schedule="constant", assistant_confidence_threshold=0.0)
    saved = {name: getattr(config, name, None) for name in wanted}
    for name, value in wanted.items():
        setattr(config, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(config, name, value)


@contextlib.contextmanager
def _quiet_transformers():
    """HF generate warns on every assisted call (deprecations); keep benchmark output readable."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
