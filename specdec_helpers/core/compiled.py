"""Opt-in: the target's forward compiled with ``torch.compile`` over a static KV cache (gpt-fast's recipe).

Why try it: in eager mode a decoder pays per call for Python, a growing cache (``torch.cat`` per layer)
and kernels it cannot fuse (norms, rotary embeddings, GQA heads copied out for masked attention). Our
loop owns its cache, so it can keep it static and roll it back by moving one counter (`cache.rollback`);
HF's assisted generation cannot. Why it is off by default: compiling takes minutes per graph on a
CPU (two graphs: one token, several), and on a CPU the several-token graph (dynamic shapes) can
verify less efficiently than eager oneDNN linears (`cpu_kernels`), so speculative decoding may gain
nothing (benchmarks/RESULTS.md has what ``perf --compile`` measured here). On a GPU it is worth
measuring. Logits differ from eager in the last bits (fused kernels), as with any kernel change.
"""

from __future__ import annotations

import copy
import weakref
from types import SimpleNamespace

import torch

from specdec_helpers.core.cache import BLOCK, cache_kwargs
from specdec_helpers.core.lean import StaticKV
from specdec_helpers.core.cpu_kernels import use_plain_linears, uses_onednn

_FORWARDS: "weakref.WeakKeyDictionary[torch.nn.Module, CompiledForward]" = weakref.WeakKeyDictionary()


class CompiledForward:
    """The forward protocol (``forward(input_ids, cache)``, ``new_cache(n)``) over a `StaticKV`, compiled.

    Built once per model by `compiled_forward`. The model must not change afterwards: on a CPU the
    compiled graph holds its own packed copy of the weights (inductor's ``freezing``).
    """

    def __init__(self, model):
        self.model = model
        self.config, self.device = model.config, model.device
        # Inductor packs CPU weights itself (freezing); it cannot trace our pre-packed oneDNN layers.
        source = use_plain_linears(copy.deepcopy(model)) if uses_onednn(model) else model

        def logits(input_ids, cache, cache_position):
            # All fed positions' logits: one graph for every draft length (slicing happens outside).
            return source(
                input_ids=input_ids,
                **cache_kwargs(source, cache),
                use_cache=True,
                cache_position=cache_position,
                logits_to_keep=0,
            ).logits

        options = {"freezing": True} if self.device.type == "cpu" else None
        self._logits = torch.compile(logits, dynamic=True, options=options)

    def get_input_embeddings(self):
        return self.model.get_input_embeddings()

    def new_cache(self, max_length: int) -> StaticKV:
        # Rounded up, so texts of different lengths share one cache shape (and one compiled graph).
        return StaticKV(self.model, -(-max(int(max_length), 1) // BLOCK) * BLOCK)

    @torch.inference_mode()
    def __call__(
        self, input_ids, cache: StaticKV, use_cache=True, logits_to_keep: int = 0, output_hidden_states: bool = False
    ):
        if output_hidden_states:
            raise ValueError(
                "a compiled target does not return hidden states: drafts that read the target's "
                "features (eagle) need compile=False"
            )
        start, n = cache.position, input_ids.shape[1]
        try:
            if start == 0:
                # The prefill runs eagerly: it allocates the cache once, and the graphs then only ever see a
                # ready cache (one graph for a single token, one for several, instead of a third for the prefill).
                logits = self.model(
                    input_ids=input_ids,
                    **cache_kwargs(self.model, cache),
                    use_cache=True,
                    logits_to_keep=logits_to_keep,
                ).logits
            else:
                positions = torch.arange(start, start + n, device=input_ids.device)
                # A fresh inference tensor with standard strides: other strides, or a tensor made outside inference
                # mode, would each cost a recompile.
                fresh = input_ids.new_empty(input_ids.shape).copy_(input_ids)
                logits = self._logits(fresh, cache.cache, positions)
                logits = logits[:, -logits_to_keep:] if logits_to_keep else logits
        except BaseException:
            cache.move_to(start)  # the layers may have counted part of the pass
            raise
        cache.move_to(start + n)
        return SimpleNamespace(logits=logits)


def compiled_forward(model) -> CompiledForward:
    """The model's `CompiledForward`, made on first use and kept as long as the model lives."""
    forward = _FORWARDS.get(model)
    if forward is None:
        forward = _FORWARDS[model] = CompiledForward(model)
    return forward
