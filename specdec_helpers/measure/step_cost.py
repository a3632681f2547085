"""Why a decoding step costs what it costs (notebook 01 §6): one-token steps of random models shaped like a target,
twice as deep and twice as wide, timed interleaved, eagerly and as the decode runs them; and the pair's own c.

A step that waits on memory costs what it reads (its weights' bytes); a step that waits on launches or Python costs
what it calls (a few kernels per layer, whatever their width). Doubling the depth doubles both; doubling the width
multiplies the bytes (about 4x a layer) but not the calls. So the wide model's step tells the two apart.
"""

from __future__ import annotations

import gc
import time
from contextlib import contextmanager

import torch

from specdec_helpers.core.backends import choose, decode_forward
from specdec_helpers.core.cache import cache_kwargs, new_cache, rollback
from specdec_helpers.core.drafters import as_drafter
from specdec_helpers.core.timing import spread, sync_device

PREFIX = 16  # cached positions before the timed one-token step
SHAPES = ("base", "deep", "wide")


def step_bytes(model) -> int:
    """Bytes of weights one decoding step reads: every parameter once, but of the input embedding only a row (its
    table counts where the output head shares it)."""
    table = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    tied = head is not None and head.weight is table
    unique = {p.data_ptr(): p for p in model.parameters()}.values()
    total = sum(p.numel() * p.element_size() for p in unique)
    return total if tied else total - table.numel() * table.element_size()


def shaped_llama(model, layers: int, widen: int = 1):
    """A random Llama with ``model``'s width (times ``widen``: heads and MLP widened alike, head size kept), its
    vocabulary, ``layers`` layers, on its device and in its dtype. A Llama everywhere: on a CPU the decode runs a
    Llama through its lean forward, on a GPU through CUDA graphs, so both show what the decode runs."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = model.config
    heads = config.num_attention_heads * widen
    width = config.hidden_size * widen
    llama = LlamaConfig(
        hidden_size=width,
        intermediate_size=getattr(config, "intermediate_size", None) or 4 * config.hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=width // heads,
        vocab_size=config.vocab_size,
        max_position_embeddings=4 * PREFIX,
        tie_word_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
    )
    llama.intermediate_size *= widen
    with torch.random.fork_rng(devices=[]), torch.device(model.device):  # seeded here, the caller's RNG untouched
        torch.manual_seed(0)
        return AutoModelForCausalLM.from_config(llama, dtype=model.dtype).eval()


def three_models_bytes(model, layers: int) -> int:
    """The memory the plan's three random Llamas take (base and deep of ``model``'s width, wide of twice it), from
    their shapes, before building them: 4 w^2 (attention) + 3 w i (MLP) a layer, and the token table and head."""
    config = model.config
    width = config.hidden_size
    inner = getattr(config, "intermediate_size", None) or 4 * width
    tables = 1 if getattr(config, "tie_word_embeddings", False) else 2

    def params(layers: int, w: int, i: int) -> int:
        return layers * (4 * w * w + 3 * w * i + 2 * w) + tables * config.vocab_size * w + w

    total = params(layers, width, inner) + params(2 * layers, width, inner) + params(layers, 2 * width, 2 * inner)
    return total * model.dtype.itemsize


def runs_as(forward, model) -> str:
    """What runs ``model``'s steps in a default decode, in words (``forward`` = `backends.decode_forward`). Asked
    again after the timing: a capture that failed leaves the steps eager, and ``eager_reason`` says why."""
    if forward is model:
        return "the model itself, eagerly"
    if getattr(forward, "graphs", False):
        return "CUDA graphs over a static cache"
    if getattr(forward, "eager_reason", None):
        return f"a static cache, its steps eager (no CUDA graphs: {forward.eager_reason})"
    if hasattr(forward, "eager_reason"):
        return "a static cache, its steps eager"
    return f"{type(forward).__name__} (the lean forward: the model's operations without transformers' Python)"


def free_bytes(device) -> int:
    """Memory free for new models on ``device``. On a GPU: the driver's free memory plus what PyTorch's caching
    allocator holds reserved but unused (it hands that out first). On a CPU: the system's available memory
    (psutil, else /proc/meminfo's MemAvailable); where neither answers, no limit."""
    device = torch.device(device)
    if device.type == "cuda":
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return torch.cuda.mem_get_info(device)[0] + cached
    try:
        import psutil

        return psutil.virtual_memory().available
    except ImportError:
        pass
    try:
        with open("/proc/meminfo") as lines:
            for line in lines:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 62


_BUILT: list[dict] = []  # the models and forwards of the last plan, emptied when the next one is built


def release_previous() -> None:
    """Drop the last plan's models and forwards (also from the dicts a notebook still holds: `measure_plan` shares
    them), so a rerun of the cell builds its three models into freed memory and measures the memory truly free."""
    while _BUILT:
        _BUILT.pop().clear()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def step_clock(device) -> tuple[str, object]:
    """The clock a step is timed with, and its name. On a GPU: wall time between two synchronizations (the GPU's
    work is not CPU time). On a CPU: the CPU time of the timing thread (`time.thread_time`) with torch on that one
    thread (`timing_threads`): other programs on a busy machine barely move it, where wall time would add their
    turns on the cores to every step and push the ratios toward 1. Not the process's CPU time over several torch
    threads: on a busy machine their spin-waits for each other count there and swamp the ratios (measured: wide /
    base quartiles 0.88-2.48 on 2 threads against 2.52-2.76 on one)."""
    if torch.device(device).type == "cpu":
        return "CPU time of the timing thread (time.thread_time)", time.thread_time
    return "wall time, GPU synchronized before and after", time.perf_counter


def steps_threads(device) -> int:
    """The torch threads the timed steps run on (`timing_threads`): one on a CPU, the host's own on a GPU."""
    return 1 if torch.device(device).type == "cpu" else torch.get_num_threads()


@contextmanager
def timing_threads(device):
    """Torch on one thread while a CPU's steps are timed (their clock counts that thread only), restored after; a
    GPU's host keeps its threads. Yields the thread count the steps ran on."""
    if torch.device(device).type != "cpu":
        yield torch.get_num_threads()
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield 1
    finally:
        torch.set_num_threads(before)


def timed_step(step, device, clock=time.perf_counter) -> float:
    """Seconds of one ``step()`` on ``clock``, the device synchronized before and after."""
    sync_device(device)
    start = clock()
    step()
    sync_device(device)
    return clock() - start


class _Stepper:
    """One forward over its own cache, holding ``PREFIX`` positions: ``step()`` is one one-token pass, rolled back."""

    def __init__(self, forward, device):
        self.forward, self.device = forward, device
        self.cache = forward.new_cache(PREFIX + 1) if hasattr(forward, "new_cache") else new_cache(forward)
        if hasattr(forward, "prepare"):  # graphs: captured before any timing, as a decode does
            forward.prepare(self.cache, [1])
        vocab = forward.get_input_embeddings().num_embeddings
        ids = torch.randint(0, vocab, (1, PREFIX + 1), generator=torch.Generator().manual_seed(0)).to(device)
        self.prefix, self.token = ids[:, :PREFIX], ids[:, PREFIX:]
        self.forward(input_ids=self.prefix, **cache_kwargs(forward, self.cache), use_cache=True)

    def step(self) -> None:
        self.forward(input_ids=self.token, **cache_kwargs(self.forward, self.cache), use_cache=True, logits_to_keep=1)
        rollback(self.cache, PREFIX)

    def close(self) -> None:
        if hasattr(self.forward, "release"):
            self.forward.release(self.cache)


@torch.inference_mode()
def interleaved_steps(forwards: dict, device, repeats: int = 21, warmup: int = 2) -> dict[str, list[float]]:
    """Seconds of a one-token step of each forward, round by round: every round times each once (A B C A B C ...),
    so a busy moment of the machine hits all of them alike and the ratios within a round stay fair. Timed on
    `step_clock` (CPU time of one thread on a CPU, wall time on a GPU) on `timing_threads`."""
    steppers = {}
    with timing_threads(device):
        try:
            for name, forward in forwards.items():
                steppers[name] = _Stepper(forward, device)
            for _ in range(warmup):
                for stepper in steppers.values():
                    stepper.step()
            times = {name: [] for name in steppers}
            clock = step_clock(device)[1]
            for _ in range(repeats):
                for name, stepper in steppers.items():
                    times[name].append(timed_step(stepper.step, device, clock))
        finally:
            for stepper in steppers.values():
                stepper.close()
    return times


def ratio_spread(times: dict, over: str, under: str) -> dict:
    """The spread (median, quartiles, min, max) of one ratio taken round by round: ``times[over] / times[under]``."""
    return spread([a / b for a, b in zip(times[over], times[under])])


def width_depth_plan(model) -> dict:
    """The experiment, before any timing: three random Llamas shaped like ``model`` (base: a quarter of its depth,
    at least 4 layers and at most all; deep: twice the layers; wide: twice the width), what each step reads, and
    what each model of the cost predicts for deep / base and wide / base. A quarter keeps the three within a T4's
    memory for a 1.4b target; on a GPU the base has fewer layers where the three would fill more than half of the
    free memory (a CPU's available memory alike); the last plan's models are freed first, so a rerun is safe."""
    release_previous()
    depth = model.config.num_hidden_layers
    layers = min(depth, max(4, depth // 4))
    free = free_bytes(model.device)
    while layers > 1 and three_models_bytes(model, layers) > free / 2:
        layers -= 1
    if three_models_bytes(model, layers) > free / 2:
        raise MemoryError(
            f"The experiment's three random models need {three_models_bytes(model, layers) / 1e9:.1f} GB even with "
            f"one layer, more than half of the {free / 1e9:.1f} GB free on {model.device}: run it with a smaller "
            "preset (toy) or on a machine with more memory."
        )
    models = {
        "base": shaped_llama(model, layers),
        "deep": shaped_llama(model, 2 * layers),
        "wide": shaped_llama(model, layers, widen=2),
    }
    shapes = {
        name: dict(layers=m.config.num_hidden_layers, width=m.config.hidden_size, mb=step_bytes(m) / 1e6)
        for name, m in models.items()
    }
    base = shapes["base"]
    predicted = {
        "calls": {name: shapes[name]["layers"] / base["layers"] for name in ("deep", "wide")},
        "bytes": {name: shapes[name]["mb"] / base["mb"] for name in ("deep", "wide")},
    }
    forwards = {name: decode_forward(m) for name, m in models.items()}
    _BUILT.extend([models, forwards])
    return dict(
        models=models,
        forwards=forwards,
        shapes=shapes,
        predicted=predicted,
        runs_as=runs_as(forwards["base"], models["base"]),
        device=str(model.device),
        dtype=str(model.dtype).removeprefix("torch."),
        threads=torch.get_num_threads(),
    )


def measure_plan(plan: dict, repeats: int = 21) -> dict:
    """Time the plan's three models, eagerly and (where it differs) as the decode runs them, all interleaved.
    Returns the plan with ``ms`` (``{run: {shape: spread}}``) and ``ratios`` (``{run: {"deep"|"wide": spread}}``),
    ``run`` being ``"eager"`` and, where the decode runs something else, ``"decode"``."""
    forwards = {("eager", name): m for name, m in plan["models"].items()}
    forwards.update({("decode", name): f for name, f in plan["forwards"].items() if f is not plan["models"][name]})
    device = plan["models"]["base"].device
    times = interleaved_steps(forwards, device, repeats)
    runs = sorted({run for run, _ in times}, key=["eager", "decode"].index)
    ms = {run: {name: spread([t * 1e3 for t in times[run, name]]) for name in SHAPES} for run in runs}
    ratios = {run: {name: ratio_spread(times, (run, name), (run, "base")) for name in ("deep", "wide")} for run in runs}
    ran = {name: runs_as(plan["forwards"][name], plan["models"][name]) for name in SHAPES}  # after the timing
    ran_as = ran["base"] if len(set(ran.values())) == 1 else "; ".join(f"{name}: {how}" for name, how in ran.items())
    return dict(
        plan,
        ms=ms,
        ratios=ratios,
        repeats=repeats,
        threads=steps_threads(device),
        clock=step_clock(device)[0],
        runs_as=ran_as,
    )


def pair_costs(target, draft, repeats: int = 21) -> dict:
    """c = draft step / target step for a pair, eagerly and as the decode runs them (its backend, `backends.choose`,
    with why), interleaved; next to the ratio of layers (calls) and of bytes read (memory)."""
    eager = {"target": target, "draft": draft}
    decode = {name: decode_forward(m) for name, m in eager.items()}
    forwards = {("eager", name): m for name, m in eager.items()}
    forwards.update({("decode", name): f for name, f in decode.items() if f is not eager[name]})
    times = interleaved_steps(forwards, target.device, repeats)
    runs = sorted({run for run, _ in times}, key=["eager", "decode"].index)
    backend, why = choose(target, as_drafter(draft, target), True, False, None)
    return dict(
        c={run: ratio_spread(times, (run, "draft"), (run, "target")) for run in runs},
        target_ms={run: spread([t * 1e3 for t in times[run, "target"]]) for run in runs},
        layers=draft.config.num_hidden_layers / target.config.num_hidden_layers,
        bytes=step_bytes(draft) / step_bytes(target),
        backend=backend,
        why=why,
        runs_as={name: runs_as(decode[name], eager[name]) for name in eager},  # after the timing: what ran
        repeats=repeats,
        device=str(target.device),
        threads=steps_threads(target.device),
        clock=step_clock(target.device)[0],
    )
