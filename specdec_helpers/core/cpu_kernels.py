"""Faster fp32 Linear layers on the CPU: oneDNN with weights pre-packed once.

Why: on a small CPU, PyTorch's default fp32 matmul (MKL) handles a batch of 2-8 rows poorly: a pass
over a few tokens costs far more than one over a single token, so verifying a draft costs up to
twice a decode step and speculative decoding cannot win. oneDNN with a weight packed ahead of time
(what ``torch.compile`` uses for CPU linears) makes a few-token pass cost little more than one
token: verification becomes nearly free, as it is on a GPU (benchmarks/RESULTS.md has the timings).
Logits change only in the last bits.

This relies on two private PyTorch operators (``torch.ops.mkldnn._reorder_linear_weight`` and
``_linear_pointwise``); they are used here only, and `use_onednn_linears` leaves a model alone when
they are missing, so a new PyTorch can cost speed but never correctness.
"""

from __future__ import annotations

import copy

import torch


def onednn_available() -> bool:
    """Whether this PyTorch has the oneDNN packed-linear operators (CPU builds with mkldnn)."""
    ops = getattr(torch.ops, "mkldnn", None)
    return (
        torch.backends.mkldnn.is_available()
        and hasattr(ops, "_reorder_linear_weight")
        and hasattr(ops, "_linear_pointwise")
    )


def pack_weight(weight: torch.Tensor) -> torch.Tensor:
    """A CPU fp32 ``[out, in]`` weight packed for oneDNN (opaque: it cannot be cast, moved or copied)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach())


def packed_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x @ W.T + bias`` with a weight from `pack_weight`."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


class OneDNNLinear(torch.nn.Module):
    """Drop-in, inference-only replacement of a CPU fp32 ``nn.Linear`` with a pre-packed weight.

    Keeps ``weight``/``bias`` as they were (shared, so tied embeddings stay tied and ``state_dict`` and
    ``save_pretrained`` are unchanged); the packed copy is a non-persistent buffer. Changing the weight
    afterwards (training) does not update the packed copy: pack after loading, for inference. Moving
    the module (``.half()``, ``.to("meta")``, ``.cuda()``) moves the weights and packs them again only
    where they are CPU fp32; elsewhere it computes as a plain ``nn.Linear``.
    """

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias
        self._pack()

    def _pack(self) -> None:
        """Pack the weight where oneDNN serves it (CPU fp32); elsewhere keep none and run as nn.Linear."""
        weight, packed = self.weight, None
        if weight.device.type == "cpu" and weight.dtype == torch.float32:
            with torch.no_grad():
                packed = pack_weight(weight)
        self.register_buffer("packed_weight", packed, persistent=False)

    def _apply(self, fn, recurse=True):
        # .half(), .to(torch.bfloat16), .to("meta"), .cuda(): the packed tensor is opaque (MkldnnCPU) and
        # cannot be cast or moved. Drop it, move the real weights, and pack again if still CPU fp32.
        self._buffers.pop("packed_weight", None)
        super()._apply(fn, recurse)
        self._pack()
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed_weight is None:
            return torch.nn.functional.linear(x, self.weight, self.bias)
        bias = None if self.bias is None else self.bias.detach()
        return packed_linear(x, self.packed_weight, bias)

    def __deepcopy__(self, memo):
        # The packed tensor is opaque (it cannot be deep-copied): copy the weights, pack them again.
        # ``memo`` keeps a tied head tied to the copied embeddings.
        new = OneDNNLinear(copy.deepcopy(self.to_linear(), memo))
        memo[id(self)] = new
        return new

    def to_linear(self) -> torch.nn.Linear:
        """The plain ``nn.Linear`` again, sharing the same weight."""
        linear = torch.nn.Linear(self.in_features, self.out_features, bias=self.bias is not None)
        linear.weight, linear.bias = self.weight, self.bias
        return linear

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def _swap(model: torch.nn.Module, convert) -> None:
    """Replace each submodule for which ``convert`` returns a module (None keeps it)."""
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            new = convert(child)
            if new is not None:
                setattr(module, name, new)


def use_onednn_linears(model: torch.nn.Module) -> torch.nn.Module:
    """Swap every CPU fp32 ``nn.Linear`` of ``model`` for a `OneDNNLinear`, in place; returns ``model``.

    A no-op on GPUs, for other dtypes, and where PyTorch lacks the operators.
    """
    if not onednn_available():
        return model

    def convert(child):
        if type(child) is torch.nn.Linear and child.weight.device.type == "cpu" and child.weight.dtype == torch.float32:
            return OneDNNLinear(child)
        return None

    _swap(model, convert)
    return model


def use_plain_linears(model: torch.nn.Module) -> torch.nn.Module:
    """Undo `use_onednn_linears` in place (e.g. before quantizing or training a copy); returns ``model``."""
    _swap(model, lambda child: child.to_linear() if isinstance(child, OneDNNLinear) else None)
    return model


def uses_onednn(model: torch.nn.Module) -> bool:
    return any(isinstance(m, OneDNNLinear) for m in model.modules())
