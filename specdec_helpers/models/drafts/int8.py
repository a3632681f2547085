"""A draft with no training: the target itself, its Linear layers quantized to int8 (CPU only)."""
from __future__ import annotations

import copy
import warnings

import torch

from specdec_helpers.core.cpu_kernels import use_plain_linears


def int8_copy(model):
    """A copy of ``model`` with every Linear layer (the output head too) dynamically quantized to
    int8, for the CPU. SmolLM2-135M on 2 cores: about 45 ms a step against 55-65 ms for the fp32 target
    on oneDNN, agreeing with it on 42-78% of its greedy tokens (int8 activations cost the rest): too
    slow to pay as a draft there (the preset's comment lists what was measured).
    """
    if next(model.parameters()).device.type != "cpu":
        raise ValueError("draft='int8' quantizes for the CPU; on a GPU use draft='prompt-lookup' or a smaller model")
    with warnings.catch_warnings():
        # torch 2.x deprecates torch.ao.quantization in favour of torchao; it still works and needs no extra package.
        warnings.simplefilter("ignore")
        quantized = torch.ao.quantization.quantize_dynamic(
            use_plain_linears(copy.deepcopy(model)).float(), {torch.nn.Linear}, dtype=torch.qint8
        )
    return quantized.eval()
