"""Notebook 01 §6 in words: the width-against-depth experiment's plan, its measurement with a verdict on the
student's prediction, and the pair's c, eager and as the decode runs it (`measure.step_cost` measures)."""

from __future__ import annotations

import math

from specdec_helpers.measure.theory import expected_speedup

NEAR = 1.25  # a prediction within this factor of the measured ratio is close
NOISY = 1.3  # a ratio whose quartiles differ by more than this factor is noise: rerun

RUN_WORDS = {"eager": "eagerly (transformers' forward)", "decode": "as the decode runs it"}


def regime(ratio: float, calls: float, bytes_: float) -> str:
    """Which cost model a ratio follows: ``"calls"`` (time ~ layers: a cost per kernel), ``"bytes"`` (memory-bound) or
    ``"between"``, by where it lies between the two predictions on a log scale (thirds)."""
    if ratio <= 0 or calls <= 0 or bytes_ <= 0 or math.isclose(calls, bytes_, rel_tol=0.05):
        return "between"
    where = math.log(ratio / calls) / math.log(bytes_ / calls)
    return "calls" if where < 1 / 3 else "bytes" if where > 2 / 3 else "between"


REGIME_WORDS = {
    "calls": "time ~ layers (a cost per kernel: its launch, Python, or a replayed kernel's minimum run time)",
    "bytes": "time ~ bytes (memory-bound)",
    "between": "between the two (part per-kernel cost, part bytes)",
}


def noise_advice(threads: int, device: str) -> str:
    """What to do when the rounds disagree: rerun; on a CPU with several threads, first go down to one."""
    advice = (
        "The rounds disagree by more than 30% (the quartiles): another program had the machine. Rerun the cell: "
        "the jumps move, the trend stays."
    )
    if device.startswith("cpu") and threads > 1:
        advice += (
            f" With {threads} threads on a busy CPU the threads also wait on each other: run torch.set_num_threads(1) "
            "in a cell (or start Jupyter with SPECDEC_THREADS=1), then rerun the measurement."
        )
    return advice


def threads_line(threads: int, device: str, clock: str | None = None) -> str:
    """The clock and the thread count the timings ran on, and how to change the count on a CPU."""
    timed = f"Clock: {clock}. " if clock else ""
    if not device.startswith("cpu"):
        return f"{timed}Timed on {device}; the host runs PyTorch on {threads} thread(s)."
    if threads == 1:
        return f"{timed}Timed on 1 torch thread (the other cells keep torch.get_num_threads())."
    return (
        f"{timed}Timed on {threads} torch threads. On a shared or busy machine set SPECDEC_THREADS=1 before "
        "starting Jupyter (or call torch.set_num_threads(1)) for steadier numbers."
    )


def describe_plan(plan: dict) -> str:
    """The three shapes and what each cost model predicts, before any timing: what the prediction is made from."""
    shapes, calls, bytes_ = plan["shapes"], plan["predicted"]["calls"], plan["predicted"]["bytes"]
    lines = [f"Random Llamas on {plan['device']} ({plan['dtype']}); a decode runs their steps as: {plan['runs_as']}."]
    for name in ("base", "deep", "wide"):
        s = shapes[name]
        lines.append(f"  {name:4s}: {s['layers']:3d} layers, width {s['width']:5d}, a step reads {s['mb']:8.1f} MB")
    lines.append("Predicted step time against base:")
    lines.append(f"  if time ~ layers (a cost per kernel): deep {calls['deep']:.2f}x, wide {calls['wide']:.2f}x")
    lines.append(f"  if time ~ bytes read:                 deep {bytes_['deep']:.2f}x, wide {bytes_['wide']:.2f}x")
    lines.append("Only the wide model tells the two apart.")
    return "\n".join(lines)


def _ratio_text(s: dict, unit: str = "x") -> str:
    return f"{s['median']:.2f}{unit} (quartiles {s['q1']:.2f}-{s['q3']:.2f})"


def noisy(s: dict) -> bool:
    return s["q1"] > 0 and s["q3"] / s["q1"] > NOISY


def verdict(prediction, measured: dict) -> str:
    """The verdict on a predicted wide/base ratio (eager), from `step_cost.measure_plan`'s result: what was measured,
    which cost model it follows, and whether the prediction was near it; unanswered or unusable predictions are
    named, with what to do."""
    calls, bytes_ = measured["predicted"]["calls"]["wide"], measured["predicted"]["bytes"]["wide"]
    wide = measured["ratios"]["eager"]["wide"]
    found = regime(wide["median"], calls, bytes_)
    lines = [f"Measured eagerly, wide / base: {_ratio_text(wide)}: {REGIME_WORDS[found]}."]
    if prediction is None:
        lines.append(
            "You left my_prediction = None: no verdict. Write your guess of the wide / base ratio in the cell above "
            f"(between {calls:.2f}, time ~ layers, and {bytes_:.2f}, time ~ bytes), run it, then run this cell again."
        )
    elif isinstance(prediction, bool) or not isinstance(prediction, (int, float)) or not prediction > 0:
        lines.append(
            f"my_prediction = {prediction!r} is not a ratio: write a positive number such as {calls:.1f} or "
            f"{bytes_:.1f} in the cell above, run it, then run this cell again."
        )
    else:
        guess = float(prediction)
        guessed = regime(guess, calls, bytes_)
        said = f"You predicted {guess:.2f}x ({REGIME_WORDS[guessed]})"
        if noisy(wide):  # as the text promises: no verdict on a measurement that disagrees with itself
            lines.append(f"⏳ {said}: no verdict yet, the rounds disagree too much to judge it (see below).")
        elif abs(math.log(guess / wide["median"])) <= math.log(NEAR):
            lines.append(f"✅ {said}: within 25% of the measurement.")
        elif wide["q1"] <= guess <= wide["q3"]:
            lines.append(f"✅ {said}: within the measurement's quartiles.")
        elif guessed == found:
            lines.append(f"✅ {said}: the same regime as the measurement.")
        elif "between" in (guessed, found):
            lines.append(
                f"🔸 Partly: {said}, and the measurement lies one regime over: both kernels and bytes count here, "
                + (
                    "the bytes more than you thought."
                    if guess < wide["median"]
                    else "the kernels more than you thought."
                )
            )
        else:
            lines.append(
                f"❌ {said}; the measurement says otherwise: "
                + (
                    "doubling the width barely moved the step, so on this machine a step pays per kernel "
                    "(launches, Python, each kernel's minimum run time), not for the weights it reads."
                    if found == "calls"
                    else "the wider step cost about what its bytes cost, so on this machine a step waits on memory."
                )
            )
    if noisy(wide):
        lines.append(noise_advice(measured["threads"], measured["device"]))
    lines.append("")
    lines.append(measured_table(measured))
    lines.append(threads_line(measured["threads"], measured["device"], measured.get("clock")))
    return "\n".join(lines)


def measured_table(measured: dict) -> str:
    """Each run's step times (median, quartiles) and ratios, and which cost model each ratio follows."""
    lines = []
    for run in measured["ms"]:
        words = RUN_WORDS[run] if run == "eager" else f"{RUN_WORDS[run]}: {measured['runs_as']}"
        lines.append(f"{words}, median of {measured['repeats']} interleaved rounds:")
        for name in ("base", "deep", "wide"):
            s = measured["ms"][run][name]
            rate = measured["shapes"][name]["mb"] / s["median"] if s["median"] > 0 else float("nan")
            lines.append(
                f"  {name:4s} step {s['median']:8.3f} ms (quartiles {s['q1']:.3f}-{s['q3']:.3f}), "
                f"{rate:8.1f} MB/ms of weights"
            )
        lines.append(split_line(measured, run))
        for name in ("deep", "wide"):
            s = measured["ratios"][run][name]
            found = regime(s["median"], measured["predicted"]["calls"][name], measured["predicted"]["bytes"][name])
            note = f": {REGIME_WORDS[found]}" if name == "wide" else ""
            flag = " NOISY: the rounds disagree by more than 30%, rerun" if noisy(s) else ""
            lines.append(f"  {name} / base {_ratio_text(s)}{note}{flag}")
    if "decode" not in measured["ms"]:
        lines.append("The decode runs these models eagerly here: the eager numbers are what it pays.")
    return "\n".join(lines)


def split_line(measured: dict, run: str) -> str:
    """The base step split in two from the deep one: its layers cost deep - base (the deep model adds as many
    again), the rest of a step (token row, norm, head, the Python around the layers) costs 2 base - deep."""
    base, deep = measured["ms"][run]["base"]["median"], measured["ms"][run]["deep"]["median"]
    layers = measured["shapes"]["base"]["layers"]
    return (
        f"  the base's {layers} layers cost deep - base = {deep - base:.3f} ms ({(deep - base) / layers:.3f} ms a "
        f"layer); the rest of its step costs 2 base - deep = {2 * base - deep:.3f} ms"
    )


def describe_pair_costs(costs: dict, alpha: float = 0.8, k: int = 4) -> str:
    """The pair's c, eager and as the decode runs it, against the ratios of layers and bytes, the backend, and the
    speed-up each c allows (Leviathan et al.'s formula at ``alpha`` and ``k``, verification costing one step).
    ``alpha`` is assumed, not measured here, and the text says so."""
    lines = [
        f"The decode's backend for this pair: {costs['backend']} ({costs['why']}).",
        f"Its steps run as: target: {costs['runs_as']['target']}; draft: {costs['runs_as']['draft']}.",
        f"If time ~ layers, c = ratio of layers = {costs['layers']:.2f}; if time ~ bytes, c = {costs['bytes']:.2f}.",
    ]
    for run, c in costs["c"].items():
        target = costs["target_ms"][run]
        found = regime(c["median"], costs["layers"], costs["bytes"])
        lines.append(
            f"{RUN_WORDS[run]}: target step {target['median']:.3f} ms, c = {_ratio_text(c, '')}: {REGIME_WORDS[found]}; "
            f"at an assumed acceptance alpha = {alpha} (notebook 05 measures yours) and k = {k}, speculation could "
            f"give at most {expected_speedup(alpha, k, c['median']):.2f}x"
        )
        if noisy(c):
            lines.append(noise_advice(costs["threads"], costs["device"]))
    if "decode" not in costs["c"]:
        lines.append("The decode runs both models eagerly here: the eager c is the one that counts.")
    lines.append(threads_line(costs["threads"], costs["device"], costs.get("clock")))
    return "\n".join(lines)
