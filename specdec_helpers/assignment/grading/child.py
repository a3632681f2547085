"""The child process that runs a student's graded cells: ``python -m specdec_helpers.assignment.grading.child FD``.

Student code never runs in the grader's process. This child reads the graded cells (the first line on
stdin: JSON ``{part: source}``), execs them, builds the decoder class, then answers the grader's requests, one
JSON line each way: requests on stdin, answers on file descriptor ``FD`` (stdout goes to stderr, so
a student's prints cannot be mistaken for answers). It answers with raw observations only (tokens,
counters, cache lengths); every verdict is the grader's. Whatever the student's code does here
(patch timers, exit, loop forever) stays here: the grader times from outside and kills on time-out,
and the child runs in the student's `privilege.Jail` (no rights on the grader, its files or the
reference's process).

Before the cells run, the kit's own implementations of the graded steps are poisoned: a graded part
that calls them records a delegation, which the grader turns into a failed test.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import sys
import traceback
import types

import torch

from specdec_helpers.assignment.parts import decoder as decoder_module
from specdec_helpers.assignment.testing import world as world_module
from specdec_helpers.assignment.testing.devices import DeviceWatch, construct
from specdec_helpers.assignment.grading.packages import mismatch
from specdec_helpers.assignment.testing.wire import decode, encode
from specdec_helpers.assignment.parts.cells import load_functions
from specdec_helpers.assignment.parts.decoder import DecoderBase, build_decoder
from specdec_helpers.core.timing import child_thread_count

DELEGATED: list[str] = []


class KitDelegation(BaseException):
    """Raised by a poisoned kit function (BaseException: a student's ``except Exception`` cannot hide it)."""


def _poisoned(name: str, real):
    """``real``, except when graded code called it: then record a delegation and raise. Kit code calling it
    (a stand-in for a part the student did not write) goes through; `_caller_is_graded` says which."""

    def poisoned(*args, **kwargs):
        if _caller_is_graded(sys._getframe(1)):
            DELEGATED.append(name)
            raise KitDelegation(f"graded code called the kit's own {name}")
        return real(*args, **kwargs)

    return poisoned


def _caller_is_graded(frame) -> bool:
    """Walk up past frames that are neither graded nor the kit's (a stdlib or torch helper the graded code
    passed the function to): the first that is decides. Graded: a graded cell's file name or namespace
    (`cells.exec_cell`). The kit's: code running in a loaded kit module's own namespace, which a function
    built from graded code does not have."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<graded cell") or frame.f_globals.get("__name__") == "__graded__":
            return True
        module = sys.modules.get(frame.f_globals.get("__name__") or "")
        if (
            module is not None
            and module.__name__.startswith("specdec_helpers.")
            and getattr(module, "__dict__", None) is frame.f_globals
        ):
            return False
        frame = frame.f_back
    return False


#: core modules a graded cell may use (`cells.kit_references` allows `core.cache`), or that run inside a model's own
#: forward, which graded code calls through library frames (`cpu_kernels`' linears in the test world's models).
OPEN_CORE = ("specdec_helpers.core.cache", "specdec_helpers.core.cpu_kernels")


def _poison_the_algorithm() -> None:
    """Every other function and method of ``core/`` refuses graded callers too, however reached (``sys.modules``, a
    module's globals): the student edition still ships the tree and batch loops, sampled acceptance and tree drafting
    for the later notebooks, and any of them can stand in for a graded step (a width-1 tree is a chain). In a
    sandboxed grading they are absent from the child's view (`isolation.least_code`) and what is left decodes
    nothing; this guard matters only where the child imports the grader's whole kit (no sandbox), and there a
    closure read gets around it (the trust model: ``grading/__init__``)."""
    import specdec_helpers.core as core

    for found in pkgutil.iter_modules(core.__path__):  # all of them now: one imported later would be unguarded
        importlib.import_module(f"specdec_helpers.core.{found.name}")
    wrapped: dict[int, object] = {}

    def guard(fn, name):  # no functools.wraps: its ``__wrapped__`` would hand graded code the real function
        if id(fn) not in wrapped:
            guarded = wrapped[id(fn)] = _poisoned(name, fn)
            guarded.__name__, guarded.__qualname__, guarded.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
        return wrapped[id(fn)]

    def algorithm(fn) -> bool:
        module = getattr(fn, "__module__", None) or ""
        return (
            isinstance(fn, types.FunctionType)
            and module.startswith("specdec_helpers.core.")
            and module not in OPEN_CORE
        )

    for module_name, module in list(sys.modules.items()):  # the package itself too: it re-exports the decoders
        if (
            module is None
            or module_name in OPEN_CORE
            or not (module_name == "specdec_helpers" or module_name.startswith("specdec_helpers.core."))
        ):
            continue
        for name, value in list(vars(module).items()):
            if algorithm(value):
                setattr(module, name, guard(value, f"{module_name}.{name}"))
            elif isinstance(value, type) and value.__module__ == module_name:
                for attr, member in list(vars(value).items()):
                    if not attr.startswith("__") and algorithm(member):
                        setattr(value, attr, guard(member, f"{module_name}.{value.__name__}.{attr}"))


def poison() -> dict:
    """Guard the kit's implementations of the graded steps (every ``core`` function, `_poison_the_algorithm`) against
    direct calls from graded cells; returns the real stand-ins (for the parts the student did not write)."""
    real = dict(decoder_module.STANDINS)
    _poison_the_algorithm()
    for name, fn in real.items():
        decoder_module.STANDINS[name] = _poisoned(f"stand-in {name}", fn)
        setattr(decoder_module, f"standin_{name}", decoder_module.STANDINS[name])
    return real


def on_device(value, decoder):
    """``value`` (decoded arguments) with every tensor on the decoder's device: the device of its target
    model's weights, where student code meets them (JSON brings tensors to the CPU)."""
    model = getattr(decoder, "target_model", None)
    device = next(model.parameters()).device if isinstance(model, torch.nn.Module) else None
    if device is None or device.type == "cpu":
        return value
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, list):
        return [on_device(v, decoder) for v in value]
    if isinstance(value, dict):
        return {k: on_device(v, decoder) for k, v in value.items()}
    return value


def _where(error: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename.startswith("<graded cell")]
    return f" (in {frames[-1].name}, line {frames[-1].lineno}: {frames[-1].line})" if frames else ""


def error_answer(error: BaseException) -> dict:
    """How an exception in student code is reported (by the child, and by `sandbox.InProcess` alike)."""
    return {"type": type(error).__name__, "message": str(error)[:2000], "where": _where(error)}


class Server:
    def __init__(self, functions: dict, real: dict):
        self.cls = world_module.recording(build_decoder(standins=real, **functions))
        self.objects: dict[int, object] = {}
        self.worlds: dict[int, world_module.World] = {}
        self.pairs: dict[str, object] = {}

    def world(self, seed: int) -> world_module.World:
        if seed not in self.worlds:
            self.worlds[seed] = world_module.World(seed)
        return self.worlds[seed]

    def _keep(self, obj) -> int:
        handle = len(self.objects) + 1
        self.objects[handle] = obj
        return handle

    # -- requests
    def op_new(self, world, draft="draft", eos=None):
        pair = self.world(world).named_pair(draft)
        # built under the simulated GPU, the models on the device: what the decoder holds is where it was made
        decoder, _ = construct(lambda: world_module.make_decoder(self.cls, pair, eos), [pair.target, pair.draft])
        return self._keep(decoder)

    def op_construct(self, world):
        target_dir, draft_dir = self.world(world).folders()
        decoder = self.cls(target_dir, draft_dir, device="cpu")
        decoder.eos_token_id, decoder.log = None, []
        return self._keep(decoder)

    def op_init(self, world, role, device="cpu"):
        folder = self.world(world).folders()[0 if role == "target" else 1]
        blank = self.cls.__new__(self.cls)
        blank.device = torch.device(device)
        result = getattr(blank, f"initialize_{role}_model")(folder)
        model, tokenizer = (list(result) + [None, None])[:2] if isinstance(result, (list, tuple)) else (result, None)
        info = {
            "model": type(model).__name__,
            "is_module": isinstance(model, torch.nn.Module),
            "has_generate": hasattr(model, "generate"),
            "tokenizer": type(tokenizer).__name__,
            "has_vocab": hasattr(tokenizer, "get_vocab"),
            "pad_token": getattr(tokenizer, "pad_token", None) is not None,
        }
        if info["is_module"]:
            p = next(model.parameters())
            info.update(
                training=model.training,
                device=p.device.type,
                dtype=str(p.dtype).removeprefix("torch."),
                vocab_size=getattr(getattr(model, "config", None), "vocab_size", None),
            )
        return info

    def op_call(self, handle, method, args=(), kwargs=None, probe=False, watch=False):
        decoder = self.objects[handle]
        fn = getattr(decoder, method)
        args, kwargs = on_device(decode(list(args)), decoder), on_device(decode(kwargs or {}), decoder)
        if watch:  # where each tensor would live on a GPU (`devices`)
            with DeviceWatch([decoder], (args, kwargs)) as w, torch.inference_mode():
                out = fn(*args, **kwargs)
            return {"result": encode(out), "device_faults": w.returned(out)}
        if probe:
            with world_module.probe(decoder) as p:
                with torch.inference_mode():
                    out = fn(*args, **kwargs)
            return {
                "result": encode(out),
                "target_calls": p.target_calls,
                "draft_positions": p.draft_positions,
                "draft_calls": p.draft_calls,
                "target_positions": p.target_positions,
            }
        with torch.inference_mode():
            return {"result": encode(fn(*args, **kwargs))}

    def op_cache_length(self, handle, which):
        from specdec_helpers.core.cache import cache_length

        cache = getattr(self.objects[handle], f"{which}_cache", None)
        return None if cache is None else cache_length(cache)

    def op_stats(self, handle):
        return encode(getattr(self.objects[handle], "stats", None))

    def op_log(self, handle):
        return encode(getattr(self.objects[handle], "log", []))

    def op_pair(self, preset):
        from specdec_helpers.models.preset_models import load_preset_models  # load_pair's pair, without its drafters

        if preset not in self.pairs:
            self.pairs[preset] = load_preset_models(preset, progress=False)
        pair = self.pairs[preset]
        eos = pair.target.generation_config.eos_token_id
        return self._keep(world_module.make_decoder(self.cls, pair, eos[0] if isinstance(eos, (list, tuple)) else eos))

    def op_where(self, handle):
        """The device the decoder's target sits on (the grader checks it is its own)."""
        return str(next(self.objects[handle].target_model.parameters()).device)

    def op_generate(self, handle, ids, max_tokens, k):
        decoder = self.objects[handle]
        decoder.log = []
        with torch.inference_mode():
            out = decoder.generate_ids(on_device(decode(ids), decoder), max_tokens, k, use_cache=True)
        return {"result": encode(out), "log": encode(decoder.log)}

    def op_greedy(self, handle, ids, max_tokens):
        with torch.inference_mode():
            decoder = self.objects[handle]
            return {"result": encode(DecoderBase.greedy_ids(decoder, on_device(decode(ids), decoder), max_tokens))}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    answers = os.fdopen(int(argv[0]), "w", buffering=1)
    requests = sys.stdin
    sources = json.loads(requests.readline() or "{}")
    sys.stdout = sys.stderr  # prints of student code never reach the answer channel
    torch.set_num_threads(child_thread_count())
    # fixed for the grading: more threads on a busy machine only burn CPU time, which the outside check of the
    # target cache counts (an honest decoder that raised them was taken for one that re-reads the text)
    torch.set_num_threads = lambda n: None

    def send(message):
        answers.write(json.dumps(message) + "\n")
        answers.flush()

    differ = mismatch()  # other torch/transformers/kit than the grader's: stop before grading wrong
    if differ:
        send({"packages": differ})
        return 3
    real = poison()
    status, functions = {}, {}
    for part, source in sources.items():
        try:
            defined = load_functions({part: source})
        except BaseException as error:  # noqa: BLE001 - SystemExit, KeyboardInterrupt, anything: report it
            status[part] = f"error: {type(error).__name__}: {error}{_where(error)}"
            continue
        functions.update(defined)
        status[part] = "ok" if defined else "not implemented"
    server = Server(functions, real)
    send({"ready": status, "delegated": list(DELEGATED)})
    for line in requests:
        request = json.loads(line)
        DELEGATED.clear()
        try:
            answer = {"ok": getattr(server, "op_" + request.pop("op"))(**request)}
        except BaseException as error:  # noqa: BLE001
            answer = {"error": error_answer(error)}
        answer["delegated"] = list(DELEGATED)
        send(answer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
