"""Why a decoding step costs what it costs (notebook 01 §6): one-token steps of random models shaped like a target,
twice as deep and twice as wide, timed interleaved, eagerly and as the decode runs them; and the pair's own c.

A step that waits on memory costs what it reads (its weights' bytes); a step that waits on launches or Python costs
what it calls (a few kernels per layer, whatever their width). Doubling the depth doubles both; doubling the width
multiplies the bytes (about 4x a layer) but not the calls. So the wide model's step tells the two apart.
"""

from __future__ import annotations

import torch

from specdec_helpers.core.backends import choose, decode_forward
from specdec_helpers.core.cache import cache_kwargs, new_cache, rollback
from specdec_helpers.core.drafters import as_drafter
from specdec_helpers.core.timing import spread, timed

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
    torch.manual_seed(0)
    with torch.device(model.device):
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
    """What runs ``model``'s steps in a default decode, in words (``forward`` = `backends.decode_forward`)."""
    if forward is model:
        return "the model itself, eagerly"
    if getattr(forward, "graphs", False):
        return "CUDA graphs over a static cache"
    return f"{type(forward).__name__} (the lean forward: the model's operations without transformers' Python)"


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
    so a busy moment of the machine hits all of them alike and the ratios within a round stay fair."""
    steppers = {}
    try:
        for name, forward in forwards.items():
            steppers[name] = _Stepper(forward, device)
        for _ in range(warmup):
            for stepper in steppers.values():
                stepper.step()
        times = {name: [] for name in steppers}
        for _ in range(repeats):
            for name, stepper in steppers.items():
                times[name].append(timed(stepper.step, device)[1])
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
    free memory."""
    depth = model.config.num_hidden_layers
    layers = min(depth, max(4, depth // 4))
    if model.device.type == "cuda":
        free = torch.cuda.mem_get_info(model.device)[0]
        while layers > 1 and three_models_bytes(model, layers) > free / 2:
            layers -= 1
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
    times = interleaved_steps(forwards, plan["models"]["base"].device, repeats)
    runs = sorted({run for run, _ in times}, key=["eager", "decode"].index)
    ms = {run: {name: spread([t * 1e3 for t in times[run, name]]) for name in SHAPES} for run in runs}
    ratios = {run: {name: ratio_spread(times, (run, name), (run, "base")) for name in ("deep", "wide")} for run in runs}
    return dict(plan, ms=ms, ratios=ratios, repeats=repeats, threads=torch.get_num_threads())


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
        runs_as={name: runs_as(decode[name], eager[name]) for name in eager},
        repeats=repeats,
        device=str(target.device),
        threads=torch.get_num_threads(),
    )
