"""A second device, simulated on the CPU: which tensors of a decode would sit on the CPU on a GPU machine.

Gradescope grades on CPUs, where a tensor built without ``device=`` lands where the models are, so code
that crashes on every GPU ("Expected all tensors to be on the same device") passes there. `DeviceWatch`
(a ``TorchFunctionMode``, active in the child around one call) tags every tensor with where it would
live: the models' weights and the grader's inputs on *the device*; a factory called without ``device=``
(``torch.tensor``, ``zeros``, ``arange``...) or ``.cpu()`` on *the host*; everything else where its
inputs are. An operation that mixes a device tensor with a host tensor of one element or more, which
CUDA refuses, is a fault, recorded with the graded cell's line that made it. Indexing with a host tensor
and 0-dimensional host tensors are allowed, as CUDA allows them.
"""
from __future__ import annotations

import sys

import torch
from torch.overrides import TorchFunctionMode

FACTORIES = {torch.tensor, torch.as_tensor, torch.zeros, torch.ones, torch.empty, torch.full, torch.arange,
             torch.randint, torch.rand, torch.randn, torch.eye, torch.linspace, torch.from_numpy}
ALLOWED = {torch.Tensor.__getitem__, torch.Tensor.__setitem__}  # CUDA takes host index tensors
TAG = "_specdec_where"  # "device" or "host"


def _tensors(value, depth: int = 0):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)) and depth < 3:
        for v in value:
            yield from _tensors(v, depth + 1)
    elif isinstance(value, dict) and depth < 3:
        for v in value.values():
            yield from _tensors(v, depth + 1)


def tag(value, where: str) -> None:
    for t in _tensors(value):
        try:
            setattr(t, TAG, where)
        except (AttributeError, RuntimeError):
            pass


def _where(t: torch.Tensor) -> str | None:
    return getattr(t, TAG, None)


def _moved_to(func, args, kwargs) -> str | None:
    """Where ``.to(...)`` / ``.cpu()`` / ``.cuda()`` sends a tensor: None when it only changes the dtype."""
    if func is torch.Tensor.cpu:
        return "host"
    if func is torch.Tensor.cuda:
        return "device"
    if func is not torch.Tensor.to:
        return None
    for value in list(args[1:]) + [kwargs.get("device")]:
        if isinstance(value, str):
            return "host" if value == "cpu" else "device"  # a literal "cpu" is the host on any machine
        if isinstance(value, torch.device):
            return "device"  # self.device, input_ids.device: the decoder's device wherever it runs
        if isinstance(value, torch.Tensor):
            return _where(value)
    return None


def _graded_line() -> str:
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.startswith("<graded cell"):
            return f"in {frame.f_code.co_name}, line {frame.f_lineno}"
        frame = frame.f_back
    return "in the kit's code, called with it"


class DeviceWatch(TorchFunctionMode):
    """``with DeviceWatch(models, inputs) as watch: ...``; then ``watch.faults`` lists what would fail on a GPU."""

    def __init__(self, models=(), inputs=()):
        super().__init__()
        self.faults: list[str] = []
        for model in models:
            if isinstance(model, torch.nn.Module):
                tag(list(model.parameters()) + list(model.buffers()), "device")
        tag(inputs, "device")

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func in FACTORIES:
            device = kwargs.get("device")  # a torch.device is the decoder's (self.device, input_ids.device)
            tag(out, "host" if device is None or device == "cpu" else "device")
            return out
        moved = _moved_to(func, args, kwargs)
        if moved and out is args[0]:  # on the CPU a move to the CPU is the same tensor; on a GPU it is a copy
            out = out.view_as(out)
        inputs = list(_tensors(args)) + list(_tensors(kwargs))
        wheres = {_where(t) for t in inputs}
        if moved is None and "device" in wheres and func not in ALLOWED and len(self.faults) < 5:
            host = [t for t in inputs if _where(t) == "host" and t.dim() > 0 and t.numel() > 0]
            if host:
                self.faults.append(f"{getattr(func, '__name__', func)} {_graded_line()} mixes a tensor built on the CPU (shape "
                                   f"{tuple(host[0].shape)}) with tensors on the model's device")
        where = moved or ("device" if "device" in wheres else "host" if "host" in wheres else None)
        if where:
            tag(out, where)
        return out


def advice(faults: list[str]) -> str:
    """The feedback for ``faults``: what happens on a GPU and the fix."""
    return (f"{faults[0]}: on a GPU this raises \"Expected all tensors to be on the same device\" (the models are on "
            "cuda, the new tensor on the cpu). Build every tensor on the device of the tensors it meets: "
            "torch.tensor(..., device=input_ids.device), or .to(input_ids.device)"
            + (f" ({len(faults) - 1} more such place(s))" if len(faults) > 1 else ""))
