"""Find, on any device, the operations of a model step that a CUDA graph capture cannot record.

Why: a capture records kernel launches. An operation that needs a device tensor's value on the host (``.item()``,
``int(t)``, ``bool(t)``, ``.tolist()``, ``torch.equal``, a copy to the host) or sizes its output by the data
(``nonzero``, boolean-mask indexing, ``unique``, ...) must wait for the device, which a capture refuses (OPT's step,
which sizes a mask by the cache's 0-d length tensor, failed so on an H200). `host_reads` runs a step once under a
dispatch-level spy and names each such operation, its kind and the innermost model line that called it.

Which tensors are "on the device": in a run with CUDA tensors, exactly those (CPU tensors there really are on the
host). On a CPU every tensor is a host tensor, so the spy *rehearses* the device: a tensor that existed before the
step (weights, the cache and its counters, the input) is on the device, and so is what an operation makes from one;
a factory (``torch.arange``, ``torch.tensor``, ``torch.ones``) makes a device tensor only when it names a device
(``device=x.device``, which on a GPU is the GPU), else a host tensor, as ``torch.tensor([1, 2])`` is on a GPU machine
too. A `TorchDispatchMode` sees the operators, a `TorchFunctionMode` the factories' own arguments. Not fake CUDA
tensors: they carry no values, so a step stops at its first read and hides every later one; here the step runs for
real, to the end. Blind spots: ``torch.device("cpu")`` looks like ``device=x.device``; tensors made outside torch's
operators (``torch.from_numpy``) count as device tensors; code that picks its path by device type runs the CPU path.

`rehearse_step` runs a model's n-token step as `graphs.StaticForward` captures it. `HOST_READING_FAMILIES` (kept true
by tests/test_capture_rehearsal.py) are the families whose step reads the host: the kit runs them eagerly by rule.
"""

from __future__ import annotations

import os
import sys
import threading

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.weak import WeakTensorKeyDictionary

from specdec_helpers.core.cache import BLOCK, cache_kwargs
from specdec_helpers.core.lean import StaticKV

# config.model_type of the families (of those tests/test_capture_rehearsal.py sweeps) whose static-cache step reads
# the host in transformers 5.24, at every pass size: OPT and BioGPT size a mask by the cache's 0-d length tensor,
# XGLM makes positions from it (and compares it), MPT compares it, JetMoE routes its experts through ``.tolist()``.
HOST_READING_FAMILIES = frozenset({"biogpt", "jetmoe", "mpt", "opt", "xglm"})
_PATCH = threading.Lock()  # `host_reads` patches torch.cuda.is_current_stream_capturing: one rehearsal at a time

# Operators by name (their overload packet's), as a mode sees them: under ``torch.inference_mode`` it sees composites
# (``item``, ``is_nonzero``, ``where``) before they decompose, elsewhere their parts (``_local_scalar_dense``).
_READS = {"_local_scalar_dense", "item", "is_nonzero", "equal", "allclose"}  # the value comes to the host
_SHAPED_BY_DATA = {
    "nonzero",
    "nonzero_numpy",
    "argwhere",
    "masked_select",
    "unique",
    "_unique",
    "_unique2",
    "unique_dim",
    "unique_consecutive",
    "unique_dim_consecutive",
    "bincount",
}  # sized by the data
_MASKED = {"index", "index_put", "index_put_", "_index_put_impl_"}  # data-dependent with a boolean mask
_HOST_METHODS = {"tolist": "host read", "numpy": "host read", "cpu": "host copy"}  # seen at the Python level
_SKIP = (os.path.dirname(torch.__file__) + os.sep, os.path.abspath(__file__))


def _where() -> str:
    """The innermost Python frame outside torch and this module (the model's own line), as ``file:line (function)``."""
    frame = sys._getframe(1)
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(_SKIP):
        frame = frame.f_back
    path = frame.f_code.co_filename
    if path.startswith(os.getcwd() + os.sep):
        path = os.path.relpath(path)
    for marker in (os.sep + "transformers" + os.sep, os.sep + "site-packages" + os.sep):
        if marker in path:  # transformers/models/opt/modeling_opt.py, not the whole environment's path
            path = path[path.rindex(marker) + 1 :]
            break
    return f"{path}:{frame.f_lineno} ({frame.f_code.co_name})"


class _Spy:
    """What one run found, and which CPU tensors stand for device tensors in the rehearsal."""

    def __init__(self):
        self.made_here = WeakTensorKeyDictionary()  # tensor -> on the (rehearsed) device, for tensors the step made
        self.real, self.rehearsed = [], []  # findings on accelerator tensors; on rehearsed CPU tensors
        self.accelerator = False  # an accelerator tensor took part: then CPU tensors are real host tensors
        self.quiet = False  # inside a Python-level call already flagged (``.tolist()`` copies, then reads)

    def on_device(self, t: torch.Tensor) -> bool:  # made before the step (a weight, the cache, the input): yes
        return t.device.type != "cpu" or self.made_here.get(t, True)

    def flag(self, kind: str, op: str, tensors) -> None:
        tensors = [t for t in tensors if isinstance(t, torch.Tensor)]
        real = any(t.device.type != "cpu" for t in tensors)
        if not self.quiet and (real or any(self.on_device(t) for t in tensors)):
            (self.real if real else self.rehearsed).append(f"{kind}: {op} at {_where()}")


def _tensors(tree) -> list[torch.Tensor]:
    return [t for t in tree_leaves(tree) if isinstance(t, torch.Tensor)]


class _Ops(TorchDispatchMode):
    """Every operator call: flag the faults, mark what each output is (on the device if any input is)."""

    def __init__(self, spy: _Spy):
        super().__init__()
        self.spy = spy

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name, inputs = func.overloadpacket.__name__, _tensors((args, kwargs))
        self.spy.accelerator |= any(t.device.type != "cpu" for t in inputs)
        if name in _READS:
            self.spy.flag("host read", f"aten.{name}", inputs)
        elif (
            name in _SHAPED_BY_DATA
            or name == "where"
            and func._overloadname == "default"  # where(condition)
            or name == "repeat_interleave"
            and func._overloadname != "self_int"
            and kwargs.get("output_size") is None
        ):
            self.spy.flag("data-dependent shape", f"aten.{name}", inputs)
        elif name in _MASKED and any(t.dtype in (torch.bool, torch.uint8) for t in _tensors(args[1])):
            self.spy.flag("data-dependent shape", f"aten.{name} with a boolean mask", inputs)
        elif name == "copy_" and args[1].device.type == "cpu" and not self.spy.on_device(args[0]):  # real: below
            self.spy.flag("host copy", "aten.copy_ into a host tensor", [args[1]])
        out = func(*args, **kwargs)
        outputs = _tensors(out)
        if any(t.device.type != "cpu" for t in inputs) and any(t.device.type == "cpu" for t in outputs):
            self.spy.flag("host copy", f"aten.{name}", inputs)
        fresh = name in ("lift_fresh", "lift_fresh_copy")  # torch.tensor(data): on the host unless it names a device
        device = not fresh and any(self.spy.on_device(t) for t in inputs)
        for t in outputs:
            if fresh or device or not any(t is i for i in inputs):  # an in-place write keeps its own unless device data
                self.spy.made_here[t] = device
        return out


class _Calls(TorchFunctionMode):
    """Python-level calls: factories that name a device make device tensors; ``.tolist()`` and friends."""

    def __init__(self, spy: _Spy):
        super().__init__()
        self.spy = spy

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        this = args[0] if args and isinstance(args[0], torch.Tensor) else None
        flagged = this is not None and (
            name in _HOST_METHODS
            or name == "to"
            and any(isinstance(a, str) and a.startswith("cpu") for a in (*args[1:], kwargs.get("device")))
        )
        if flagged:
            self.spy.flag(
                _HOST_METHODS.get(name, "host copy"), f"Tensor.{name}" + ("(cpu)" if name == "to" else ""), [this]
            )
        quiet, self.spy.quiet = self.spy.quiet, self.spy.quiet or flagged
        try:
            out = func(*args, **kwargs)
        finally:
            self.spy.quiet = quiet
        device = kwargs.get("device")
        if this is None and device is not None and device != "cpu":  # a factory naming a device, on a CPU
            for t in _tensors(out):
                if t.device.type == "cpu":
                    self.spy.made_here[t] = True
        return out


def _capturing() -> bool:
    return True


def host_reads(fn, *args, **kwargs) -> list[str]:
    """Run ``fn(*args, **kwargs)`` once as a capture would, and describe each operation in it that a CUDA graph
    capture could not record.

    Each entry reads ``"<kind>: <op> at <file>:<line> (<function>)"`` (kinds: host read, host copy, data-dependent
    shape), once per place, with ``" (xN)"`` when it ran N times. Empty: a capture of ``fn`` records everything.
    ``fn`` runs for real (a step advances its cache). Meanwhile ``torch.cuda.is_current_stream_capturing()`` answers
    True, as in a capture, where transformers takes another path (``masking_utils._ignore_causal_mask_sdpa`` reads
    the cache's 0-d length on the host outside a capture, not inside one).
    """
    spy = _Spy()
    with _PATCH:  # one rehearsal at a time: the answer is patched process-wide, and must come back as it was
        was = torch.cuda.is_current_stream_capturing
        torch.cuda.is_current_stream_capturing = _capturing
        try:
            with _Calls(spy), _Ops(spy):
                fn(*args, **kwargs)
        finally:
            torch.cuda.is_current_stream_capturing = was
    found = spy.real if spy.accelerator else spy.rehearsed
    counts = {f: found.count(f) for f in found}
    return [f if n == 1 else f"{f} (x{n})" for f, n in counts.items()]


@torch.inference_mode()
def rehearse_step(model, n: int, prefill: int = 9) -> list[str]:
    """`host_reads` of ``model``'s ``n``-token step after a ``prefill``-token prompt, called as `graphs.StaticForward`
    calls it for a capture: the model over the kit's static cache (`lean.StaticKV`)."""
    if n < 1 or prefill < 1:
        raise ValueError(f"a step follows a prefill: need n >= 1 and prefill >= 1, got n={n}, prefill={prefill}")
    kv = StaticKV(model, -(-(prefill + n) // BLOCK) * BLOCK)
    tokens = torch.randint(model.config.vocab_size, (1, prefill + n), generator=torch.Generator().manual_seed(0))
    tokens = tokens.to(model.device)

    def forward(input_ids):
        return model(input_ids=input_ids, **cache_kwargs(model, kv), use_cache=True, logits_to_keep=0).logits

    forward(tokens[:, :prefill])
    kv.move_to(prefill)
    try:
        return host_reads(forward, tokens[:, prefill:])
    finally:
        kv.move_to(prefill)
