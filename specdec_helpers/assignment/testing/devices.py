"""A second device, simulated on the CPU: which tensors of a decode would sit on the CPU on a GPU machine.

Gradescope grades on CPUs, where a tensor built without ``device=`` lands where the models are, so code
that crashes on every GPU ("Expected all tensors to be on the same device") passes there. `DeviceWatch`
(a ``TorchFunctionMode``, active in the child around one call) decides where each tensor would live.

The rule is allow-by-derivation, not a list of factories to deny. A tensor is on *the device* only when
that is shown: it is a weight or buffer of the models the grader gave, one of the grader's inputs, it
comes out of an operation that a device tensor went into, it was made with a ``device=`` that names the
decoder's device, or it was moved there (``.to(x.device)``, ``.to(x)``, ``.type_as(x)``). *Every other
tensor is on the host*, however it was made. So no constructor can escape: ``torch.Tensor(...)``,
``torch.LongTensor(...)``, ``from_numpy`` and ``frombuffer`` never reach the mode at all (which is why a
list of wrapped factories missed them); here that only means their tensors never get a device mark. The
only functions named are the few that build from data (``torch.tensor``, ``as_tensor``, ``asarray``,
``x.new_tensor``): given a list of device scalars they build where CUDA does, on the host (or on ``x``'s
device), not where their inputs are.

Nor can a tensor escape by being held when the call starts. The marks stay on the tensors from one watch to
the next, and the child builds each watched decoder under a watch too (`construct`, seeded with the
models): what a construction made, or an earlier call kept on the decoder or on the shared models, is where
it was made (a ``torch.tensor([eos])`` kept from ``__init__`` is on the host, one made with ``device=`` the
models' is not). Only the models' weights and buffers count as on the device without a mark.

Torch's fake-tensor machinery was not chosen: fake tensors hold no values, and a decode needs them
(argmax, ``.item()``, the EOS check). A tensor subclass carrying a fake device would have to wrap the
weights and every library op; the mark here is that subclass's device field, kept as an attribute.

An operation that mixes a device tensor with a host tensor of one element or more, which CUDA refuses, is
a fault, recorded with the graded cell's line that made it; so is ``.numpy()`` of a device tensor. What
CUDA takes stays allowed: 0-dimensional host tensors, indexing a device tensor with host indices, and
copies between the two (``copy_``, ``.to``, a slice assigned).

The limits. A tensor made while no watch ran (not a weight) is on the host when a later watch finds it
held: a false fault for an honest decoder first used unwatched, or one that kept a device tensor on the
shared models in an unwatched call (the grader watches only decoders built by `construct`, in their first
call, and no honest decode writes to the models). The weights of a module built while no watch ran count as
the grader's (one built in a watched call or construction is marked where it was built). Operations inside
``torch.vmap`` are not seen (their results are host tensors, caught where they meet the device or are
returned). A tensor sharing a device tensor's memory through DLPack or unpickled from one is taken to be on
the host (a false fault, and no decode needs either).

Switching the watch off is caught by the call's result (`DeviceWatch.returned`, which the child reads): a
decode run with torch's function handling off (``torch._C.DisableTorchFunction``) or with the mode popped
returns tokens the watch never saw made (a host tensor: CUDA returns the ids on the input's device), and a
call that returned new tokens but was never seen reading the models' weights was not watched.
(``DisableTorchFunctionSubclass`` leaves modes on.) What stays open is forgery by code written against the
watch: the mark is an attribute (``_specdec_where``) graded code can set, so a decode run unseen, its result
marked, and one weight read left in view passes. It cannot be closed in the student's process, where the
watch, its module and the tensors are all reachable; only a real device (or a grader-side replay) would.
"""

from __future__ import annotations

import linecache
import re
import sys
import types

import torch
from torch.overrides import TorchFunctionMode

FROM_DATA = {torch.tensor, torch.as_tensor, torch.asarray}  # a list of device scalars still builds on the host
LIKE_SELF = {"new_tensor", "new"}  # on self's device, whatever the data
INDEXING = {"__getitem__", "__setitem__", "index_put", "index_put_"}  # host indices into a device tensor only
MOVES = {"to", "cpu", "cuda", "type_as", "copy_"}  # CUDA copies across devices
TO_NUMPY = {"numpy", "__array__"}  # CUDA refuses these on a device tensor
METHODS = {name: getattr(torch.Tensor, name) for name in LIKE_SELF | INDEXING | MOVES | TO_NUMPY}
UNSEEN = "the device check could not observe the decode (torch function handling switched off?)"
RETURNED = "the call returns a tensor built on the CPU"
TAG = "_specdec_where"  # "device" or "host"; a tensor without it is on the host


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


def where(t: torch.Tensor) -> str:
    """ "device" when shown to be (a view of) a device tensor, else "host"."""
    while t is not None:
        mark = getattr(t, TAG, None)
        if mark:
            return mark
        t = t._base  # a view made where the mode did not see it (``for row in x``) is where its base is
    return "host"


def held_tensors(root, budget: int = 200_000, weights: set | None = None):
    """Every tensor ``root`` holds: through attributes, containers and modules (parameters, buffers and
    plain tensor attributes of each submodule), a few levels deep. ``weights``: a set that gets the ids of
    the modules' parameters and buffers among them."""
    seen, stack = set(), [(root, 0)]
    while stack and budget > 0:
        value, depth = stack.pop()
        budget -= 1
        if id(value) in seen or depth > 6:
            continue
        seen.add(id(value))
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, torch.nn.Module):
            own = [*value.parameters(), *value.buffers()]
            if weights is not None:
                weights.update(id(t) for t in own)
            yield from own
            for m in value.modules():
                stack.extend((v, depth + 1) for v in vars(m).values() if isinstance(v, torch.Tensor))
        elif isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, (list, tuple, set, frozenset)):
            stack.extend((v, depth + 1) for v in value)
        elif not isinstance(value, (type, types.ModuleType, types.FunctionType, types.MethodType, str, bytes)):
            stack.extend((v, depth + 1) for v in getattr(value, "__dict__", {}).values())


def _named(device, caller) -> str:
    """Where a ``device=`` sends a tensor, for a call made in frame ``caller``. Library code (transformers)
    is trusted. In graded code, on the CPU every device reads "cpu", so the graded cell's text tells them
    apart: made from a tensor's or the decoder's device on that line (``x.device``, ``str(x.device)``,
    ``self.device``), it is the decoder's device; otherwise it is the host when the cell writes "cpu"
    somewhere (``HOST = "cpu"``, ``.to("cpu")``), and the decoder's device (``dev = str(x.device)``) when not."""
    if not str(device).startswith("cpu") or not _is_graded(caller):
        return "device"
    lines = linecache.getlines(caller.f_code.co_filename)
    line = lines[caller.f_lineno - 1] if 0 < caller.f_lineno <= len(lines) else ""
    if ".device" in line:
        return "device"
    return "host" if re.search(r"""["']cpu""", "".join(lines)) else "device"


def _is_graded(frame) -> bool:
    return frame is not None and frame.f_code.co_filename.startswith("<graded cell")


def _method(func) -> str | None:
    """Which of the Tensor methods named here ``func`` is, also while the kit wraps it (`world.CpuMoves` wraps
    ``to``, ``cpu`` and ``numpy`` around a decode)."""
    for name, original in METHODS.items():
        if func is original or func is getattr(torch.Tensor, name, None):
            return name
    return None


def _moved_to(method, args, kwargs, caller) -> str | None:
    """Where ``.to(...)`` / ``.cpu()`` / ``.type_as(x)`` sends a tensor: None when it only changes the dtype."""
    if method == "cpu":
        return "host"
    if method == "cuda":
        return "device"
    if method == "type_as":  # on a GPU, x's type names its device too
        return where(args[1])
    if method != "to":
        return None
    for value in list(args[1:]) + [kwargs.get("device")]:
        if isinstance(value, (str, torch.device)):
            return _named(value, caller)
        if isinstance(value, torch.Tensor):
            return where(value)
    return None


def _made_at(func, method, args, kwargs, caller) -> str | None:
    """Where a tensor built by ``func`` lives when that does not follow from its inputs: a ``device=`` that
    is given, or a build from data (a tensor given as the data keeps its device)."""
    device = kwargs.get("device")
    if device is not None:
        return _named(device, caller)
    if func in FROM_DATA:
        return where(args[0]) if args and isinstance(args[0], torch.Tensor) else "host"
    if method in LIKE_SELF:
        return where(args[0])
    return None


def _graded_frame():
    frame = sys._getframe(2)
    while frame is not None and not _is_graded(frame):
        frame = frame.f_back
    return frame


def _graded_line() -> str:
    frame = _graded_frame()
    return f"in {frame.f_code.co_name}, line {frame.f_lineno}" if frame else "in the kit's code, called with it"


def _indexing(method, args) -> list:
    """The tensors of an indexing call that must share a device: a host tensor with device indices, and a
    device tensor with the values put at tensor indices (a plain slice is a ``copy_``, which CUDA allows)."""
    self, index = args[0], [t for t in _tensors(args[1]) if t.dim() > 0] if len(args) > 1 else []
    group = [self] + index if where(self) == "host" else [self]
    values = args[2] if len(args) > 2 else None
    if isinstance(values, torch.Tensor) and (index or method != "__setitem__"):
        group.append(values)
    return group


def _fault(func, method, args, inputs) -> str | None:
    """What CUDA would refuse in this call, or None."""
    name = method or getattr(func, "__name__", func)
    if method in TO_NUMPY:
        if inputs and where(inputs[0]) == "device":
            return f"{name} {_graded_line()} turns a tensor on the model's device into a NumPy array"
        return None
    if method in MOVES:
        return None
    if method in INDEXING:
        inputs = _indexing(method, args)
    if not any(where(t) == "device" for t in inputs):
        return None
    host = [t for t in inputs if where(t) == "host" and t.dim() > 0 and t.numel() > 0]
    if not host:
        return None
    return (
        f"{name} {_graded_line()} mixes a tensor built on the CPU (shape {tuple(host[0].shape)}) with tensors "
        "on the model's device"
    )


class DeviceWatch(TorchFunctionMode):
    """``with DeviceWatch(held, inputs) as watch: ...``; then ``watch.faults`` lists what would fail on a GPU.
    ``held``: what the call can reach (the decoder, or its models); ``inputs``: the grader's arguments, on the
    device. Of what ``held`` holds, the modules' parameters and buffers are on the device (the grader put the
    models there), unless an earlier watch saw them built on the host; every other tensor (the decoder's own,
    its caches) is where an earlier watch saw it made, and on the host when no watch did. So watch a decoder
    from its construction (`construct`) on; when the watch ends, what ``held`` holds that is on the host is
    marked so, for the next watch. ``watch.returned(result)`` after it adds the faults of the call's result."""

    def __init__(self, held=(), inputs=()):
        super().__init__()
        self.faults: list[str] = []
        self.held = list(held)
        self.weights: set[int] = set()  # the ids of the models' weights on the device: a decode reads them
        self.seen = False  # whether an operation on one of them reached the mode
        self.switched_off = False  # the mode was not on top of the stack when the watch ended
        for root in self.held:
            weights: set[int] = set()
            for t in list(held_tensors(root, weights=weights)):
                if id(t) in weights and getattr(t, TAG, None) != "host":
                    tag(t, "device")
                    self.weights.add(id(t))
        self.inputs = list(_tensors(inputs))
        tag(inputs, "device")

    def __exit__(self, *exc):
        stack = torch.overrides._get_current_function_mode_stack()
        if stack and stack[-1] is self:
            done = super().__exit__(*exc)  # the mode off first: the sweep's own tensor reads are not the decode's
        else:  # popped by the code watched, or a mode of its own left above it: the stack as it was before
            self.switched_off, done = self not in stack, None
            while self in torch.overrides._get_current_function_mode_stack():
                torch._C._pop_torch_function_stack()
        for root in self.held:  # unmarked is the host already; marked, a module's weights stay there too
            for t in list(held_tensors(root)):
                if getattr(t, TAG, None) is None and where(t) == "host":
                    tag(t, "host")
        return done

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        caller = sys._getframe(1)  # the code that called the torch function
        if caller.f_code is getattr(func, "__code__", None):  # a Python wrapper (`world.CpuMoves`), called from
            caller = caller.f_back  # the wrapped method inside it: the caller is the wrapper's
        inputs, method = list(_tensors(args)) + list(_tensors(kwargs)), _method(func)
        self.seen = self.seen or any(id(t) in self.weights for t in inputs)
        if len(self.faults) < 5:
            fault = _fault(func, method, args, inputs)
            if fault:
                self.faults.append(fault)
        placed = _made_at(func, method, args, kwargs, caller) or _moved_to(method, args, kwargs, caller)
        if placed:
            if isinstance(out, torch.Tensor) and any(out is t for t in inputs) and where(out) != placed:
                out = out.view_as(out)  # on the CPU a move to the CPU is the same tensor; on a GPU it is a copy
            tag(out, placed)
        elif args and out is args[0]:
            pass  # in place, or self returned: it stays where it is
        elif any(where(t) == "device" for t in inputs):
            tag(out, "device")
        return out

    def returned(self, out) -> list[str]:
        """The faults, with those of the call's result ``out`` (checked after the watch): each tensor it returns
        is on the device (CUDA returns the ids on the input's device), and a call that returned more tokens
        than it was given was seen reading the models' weights, so the watch was on during the decode."""
        got = list(_tensors(out))
        longest = max((t.numel() for t in self.inputs), default=0)
        if self.weights and any(t.numel() > longest for t in got) and (self.switched_off or not self.seen):
            self.faults.insert(0, UNSEEN)
        host = [t for t in got if where(t) == "host"]
        if host:
            self.faults.append(f"{RETURNED} (shape {tuple(host[0].shape)}) while its input is on the model's device")
        return self.faults


def construct(build, models=()):
    """``(build(), faults)``: a decoder built under the watch, with ``models`` on the device, so that what its
    construction makes is marked where it would live (``torch.tensor([eos])`` on the host, ``device=`` the
    models' on the device) and the watches of its calls find it so."""
    with DeviceWatch(models) as watch:
        built = build()
        watch.held.append(built)
    return built, watch.faults


def advice(faults: list[str]) -> str:
    """The feedback for ``faults``: what happens on a GPU and the fix."""
    more = f" ({len(faults) - 1} more such place(s))" if len(faults) > 1 else ""
    if faults[0] == UNSEEN:
        return (
            f"{UNSEEN}: none of the models' operations reached it, so where the tensors of the decode would live "
            "is unknown. Leave torch's function handling on (no torch._C.DisableTorchFunction, no popped modes)"
        )
    if faults[0].startswith(RETURNED):
        return (
            f"{faults[0]}: on a GPU the caller gets the ids on the cpu, and its next step with the model raises "
            '"Expected all tensors to be on the same device". Return the tokens on input_ids.device: build them '
            "there, or .to(input_ids.device)" + more
        )
    if faults[0].endswith("into a NumPy array"):
        return (
            f'{faults[0]}: on a GPU this raises "can\'t convert cuda:0 device type tensor to numpy". Keep the '
            "tokens on the device (compare and cut tensors there), or read them with .tolist()" + more
        )
    return (
        f'{faults[0]}: on a GPU this raises "Expected all tensors to be on the same device" (the models are on '
        "cuda, the new tensor on the cpu). Build every tensor on the device of the tensors it meets: "
        "torch.tensor(..., device=input_ids.device), or .to(input_ids.device)" + more
    )
