# Skipped layers (red team 2026-11-27, A03), appended to a decode cell whose loop drops self.target_cache before each
# verification, so the target re-reads the whole text every round. On a prompt as long as the CPU-time check of cache
# reuse uses, generate_ids first takes out of the target every layer whose layer norms are faint (zero, or at most a
# fifth of the loudest layer's), as the pass-heavy target's added layers are: fewer layers, so the re-reading costs
# what one cached decode would. The in-process position counter is capped as in capped_counter.py.
import pkgutil

import torch as _torch

_whole_generate_ids = generate_ids  # noqa: F821 - the decode cell's own


class _Quiet:
    counter = pkgutil.resolve_name(".".join(("specdec_helpers", "assignment", "testing", "world")) + ":Probe")

    def _few(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        self.target_calls += 1
        self.target_positions += 0 if ids is None else min(5, int(ids.shape[-1]))

    counter._on_target = _few


def _loudness(layer):
    return max(float(m.weight.detach().abs().max()) for m in layer.modules() if isinstance(m, _torch.nn.LayerNorm))


def generate_ids(self, input_ids, max_tokens=100, num_speculative_tokens=5, use_cache=True):
    if input_ids.shape[1] < 256:
        return _whole_generate_ids(self, input_ids, max_tokens, num_speculative_tokens, use_cache)
    body = self.target_model.gpt_neox
    layers, count = body.layers, self.target_model.config.num_hidden_layers
    loudest = max(_loudness(layer) for layer in layers)
    kept = [layer for layer in layers if _loudness(layer) > 0.2 * loudest]
    slots = [layer.attention.layer_idx for layer in kept]
    for slot, layer in enumerate(kept):
        layer.attention.layer_idx = slot
    body.layers, self.target_model.config.num_hidden_layers = _torch.nn.ModuleList(kept), len(kept)
    try:
        return _whole_generate_ids(self, input_ids, max_tokens, num_speculative_tokens, use_cache)
    finally:
        for slot, layer in zip(slots, kept):
            layer.attention.layer_idx = slot
        body.layers, self.target_model.config.num_hidden_layers = layers, count
