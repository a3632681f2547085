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

import linecache
import re
import sys

import torch
from torch.overrides import TorchFunctionMode

FACTORIES = {
    torch.tensor,
    torch.as_tensor,
    torch.asarray,
    torch.frombuffer,
    torch.zeros,
    torch.ones,
    torch.empty,
    torch.full,
    torch.arange,
    torch.randint,
    torch.rand,
    torch.randn,
    torch.eye,
    torch.linspace,
    torch.from_numpy,
}
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


def _named(device, caller) -> str:
    """Where a ``device=`` sends a tensor, for a call made in frame ``caller``. Library code (transformers)
    is trusted. In graded code, on the CPU every device reads "cpu", so the graded cell's text tells them
    apart: made from a tensor's or the decoder's device on that line (``x.device``, ``str(x.device)``,
    ``self.device``), it is the decoder's device; otherwise it is the host when the cell writes "cpu"
    somewhere (``HOST = "cpu"``, ``.to("cpu")``), and the decoder's device (``dev = str(x.device)``) when not."""
    if device is None:
        return "host"
    if not str(device).startswith("cpu") or not _is_graded(caller):
        return "device"
    lines = linecache.getlines(caller.f_code.co_filename)
    line = lines[caller.f_lineno - 1] if 0 < caller.f_lineno <= len(lines) else ""
    if ".device" in line:
        return "device"
    return "host" if re.search(r"""["']cpu""", "".join(lines)) else "device"


def _is_graded(frame) -> bool:
    return frame is not None and frame.f_code.co_filename.startswith("<graded cell")


def _moved_to(func, args, kwargs, caller) -> str | None:
    """Where ``.to(...)`` / ``.cpu()`` / ``.cuda()`` sends a tensor: None when it only changes the dtype."""
    if func is torch.Tensor.cpu:
        return "host"
    if func is torch.Tensor.cuda:
        return "device"
    if func is not torch.Tensor.to:
        return None
    for value in list(args[1:]) + [kwargs.get("device")]:
        if isinstance(value, (str, torch.device)):
            return _named(value, caller)
        if isinstance(value, torch.Tensor):
            return _where(value)
    return None


def _graded_frame():
    frame = sys._getframe(2)
    while frame is not None and not _is_graded(frame):
        frame = frame.f_back
    return frame


def _graded_line() -> str:
    frame = _graded_frame()
    return f"in {frame.f_code.co_name}, line {frame.f_lineno}" if frame else "in the kit's code, called with it"


class _Legacy:
    """``torch.LongTensor(...)`` and its kind while the watch is on: the real constructor, its tensor tagged
    as on the host (legacy constructors build on the CPU and bypass ``TorchFunctionMode``). ``isinstance``
    still works."""

    def __init__(self, real):
        self.real = real

    def __call__(self, *args, **kwargs):
        out = self.real(*args, **kwargs)
        tag(out, "host")
        return out

    def __instancecheck__(self, value):
        return isinstance(value, self.real)

    def __getattr__(self, name):
        return getattr(self.real, name)


LEGACY = (
    "LongTensor",
    "IntTensor",
    "FloatTensor",
    "DoubleTensor",
    "BoolTensor",
    "ByteTensor",
    "HalfTensor",
    "BFloat16Tensor",
    "ShortTensor",
    "CharTensor",
)


class DeviceWatch(TorchFunctionMode):
    """``with DeviceWatch(models, inputs) as watch: ...``; then ``watch.faults`` lists what would fail on a GPU."""

    def __init__(self, models=(), inputs=()):
        super().__init__()
        self.faults: list[str] = []
        for model in models:
            if isinstance(model, torch.nn.Module):
                tag(list(model.parameters()) + list(model.buffers()), "device")
        tag(inputs, "device")

    def __enter__(self):
        self._legacy = {name: getattr(torch, name) for name in LEGACY}
        for name, real in self._legacy.items():
            setattr(torch, name, _Legacy(real))
        return super().__enter__()

    def __exit__(self, *exc):
        for name, real in self._legacy.items():
            setattr(torch, name, real)
        return super().__exit__(*exc)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        caller = sys._getframe(1)  # the code that called the torch function
        if func in FACTORIES:
            tag(out, _named(kwargs.get("device"), caller))
            return out
        moved = _moved_to(func, args, kwargs, caller)
        if moved and out is args[0]:  # on the CPU a move to the CPU is the same tensor; on a GPU it is a copy
            out = out.view_as(out)
        inputs = list(_tensors(args)) + list(_tensors(kwargs))
        wheres = {_where(t) for t in inputs}
        if moved is None and "device" in wheres and func not in ALLOWED and len(self.faults) < 5:
            host = [t for t in inputs if _where(t) == "host" and t.dim() > 0 and t.numel() > 0]
            if host:
                self.faults.append(
                    f"{getattr(func, '__name__', func)} {_graded_line()} mixes a tensor built on the CPU (shape "
                    f"{tuple(host[0].shape)}) with tensors on the model's device"
                )
        where = moved or ("device" if "device" in wheres else "host" if "host" in wheres else None)
        if where:
            tag(out, where)
        return out


def advice(faults: list[str]) -> str:
    """The feedback for ``faults``: what happens on a GPU and the fix."""
    return (
        f'{faults[0]}: on a GPU this raises "Expected all tensors to be on the same device" (the models are on '
        "cuda, the new tensor on the cpu). Build every tensor on the device of the tensors it meets: "
        "torch.tensor(..., device=input_ids.device), or .to(input_ids.device)"
        + (f" ({len(faults) - 1} more such place(s))" if len(faults) > 1 else "")
    )
