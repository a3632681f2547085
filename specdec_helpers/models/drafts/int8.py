"""A draft with no training: the target itself, its Linear layers quantized to int8 (CPU only)."""

from __future__ import annotations

import copy
import warnings

import torch

from specdec_helpers.core.cpu_kernels import use_plain_linears


def int8_copy(model):
    """A copy of ``model`` with every Linear layer (the output head too) dynamically quantized to
    int8, for the CPU. It agrees with the target often, but a step still costs most of a target step
    (dynamic quantization also quantizes activations, which costs agreement too), so it rarely pays
    as a draft (benchmarks/RESULTS.md).
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
