"""``python -m specdec_helpers demo``: one prompt, decoded speculatively and greedily, side by side.

Shows which tokens the draft got right (accepted), where the target overruled it (correction) and
where every draft token passed so the target's extra token came free (bonus), then how much faster
that was than plain greedy decoding, and that the text is identical.
"""

from __future__ import annotations

import os
import sys

import torch

from specdec_helpers.core.checks import greedy_divergence
from specdec_helpers.core.decode import greedy_decode, speculative_decode
from specdec_helpers.measure.speedup import speedup
from specdec_helpers.models.toy import TOY_PROMPTS

PA3_PROMPT = "The future of Artificial Intelligence is"

# ANSI styles per span kind (see widgets.KINDS); the plain-text markers are for logs and pipes.
ANSI = {
    "prompt": "\033[2m",
    "accepted": "\033[32m",
    "rejected": "\033[9;31m",
    "correction": "\033[33;1m",
    "bonus": "\033[34;1m",
    "target": "",
}
MARKERS = {"accepted": "[]", "rejected": "~~", "correction": "{}", "bonus": "<>"}
LEGEND = {
    "accepted": "accepted draft tokens",
    "correction": "correction (target)",
    "bonus": "bonus (target)",
    "rejected": "rejected draft tokens",
}
RESET = "\033[0m"


# PA3's third prompt: a chat model writes the song's repeating lines, where n-gram lookup (smollm2-135m's draft) shines.
PA3_LYRICS_PROMPT = "Write the lyrics to the song 'Happy Birthday'."


def default_prompt(preset: str | None) -> str:
    if preset == "toy":
        return TOY_PROMPTS[0]
    if preset == "smollm2-135m":
        return PA3_LYRICS_PROMPT
    return PA3_PROMPT


def use_color(choice: str, stream=sys.stdout) -> bool:
    if choice != "auto":
        return choice == "always"
    return stream.isatty() and "NO_COLOR" not in os.environ


def render(spans, color: bool, show_rejected: bool = False) -> str:
    """Text with each run of same-kind tokens of one round wrapped in its colour or marker."""
    groups: list[list] = []
    for span in spans:
        if span.kind == "rejected" and not show_rejected:
            continue
        if groups and (groups[-1][0].kind, groups[-1][0].step) == (span.kind, span.step):
            groups[-1].append(span)
        else:
            groups.append([span])
    parts = []
    for group in groups:
        kind, text = group[0].kind, "".join(s.text for s in group)
        if color and ANSI[kind]:
            parts.append(f"{ANSI[kind]}{text}{RESET}")
        elif not color and kind in MARKERS:
            parts.append(MARKERS[kind][0] + text + MARKERS[kind][-1])
        else:
            parts.append(text)
    return "".join(parts)


def legend(color: bool, show_rejected: bool) -> str:
    kinds = [k for k in LEGEND if show_rejected or k != "rejected"]
    if color:
        return "  ".join(f"{ANSI[k]}{LEGEND[k]}{RESET}" for k in kinds)
    return "  ".join(f"{MARKERS[k][0]}{LEGEND[k]}{MARKERS[k][-1]}" for k in kinds)


def summary_table(spec, greedy, identical: bool | str, speedup=None) -> str:
    """The demo's table. ``identical``: True/False, or the near-tie check's verdict as text
    (`core.checks.greedy_divergence`). ``speedup``: a `measure.speedup.Speedup` from interleaved repeats
    (its median times and spread are shown); without one, the single run's times (no spread: say so)."""
    s, g = spec.stats, greedy.stats
    if speedup is None:
        ratio = g.wall_time_s / s.wall_time_s if s.wall_time_s > 0 else float("nan")
        speed = f"{ratio:.2f}x (one run: no spread)"
    else:
        speed = f"{speedup.ratio:.2f}x ±{speedup.spread_pct:.0f}%"
    rows = [
        ("", "speculative", "greedy"),
        ("new tokens", f"{s.new_tokens}", f"{g.new_tokens}"),
        ("target calls", f"{s.target_calls}", f"{g.target_calls}"),
        ("tokens per target call", f"{s.mean_accepted_length:.2f}", "1.00"),
        ("time (s, median)" if speedup else "time (s)", f"{s.wall_time_s:.2f}", f"{g.wall_time_s:.2f}"),
        ("tokens/s", f"{s.tokens_per_s:.1f}", f"{g.tokens_per_s:.1f}"),
        ("acceptance rate", f"{s.acceptance_rate:.0%} ({s.accepted}/{s.proposed})", ""),
        ("speedup vs greedy", speed, ""),
        ("identical to greedy", "yes" if identical is True else "NO" if identical is False else "see below", ""),
    ]
    table = "\n".join(f"{a:<24}{b:>18}  {c:>8}" for a, b, c in rows)
    if isinstance(identical, str):
        table += f"\nidentical to greedy: {identical}"
    if speedup is not None:
        table += f"\n\nspeedup: {speedup}"
        table += "".join(f"\nwarning: {w}" for w in speedup.warnings)
    return table


# The demo's timed rounds: at least 5, more while under 10 s of timing, at most 15. Three rounds of the toy
# pair (under a second each) gave 1.13x-1.57x over five runs on an idle machine; the median of more
# rounds, with their middle half as the spread, holds still (benchmarks/RESULTS.md).
DEMO_ROUNDS = (5, 10.0, 15)


def timed_rounds(pair, input_ids, n: int, k: int, rounds=DEMO_ROUNDS):
    """Greedy and speculative decoding of ``n`` tokens, interleaved (a busy second slows both), after a warm-up.

    ``rounds`` is (at least, seconds of timing, at most). Returns the median greedy and speculative runs,
    whether every output was identical to greedy (a string when it holds only up to fp16/bf16 near-ties,
    or says where it broke), and the speedup with its spread (`measure.speedup`).
    """
    least, budget, most = rounds
    # Warm-up: the first calls pay one-off costs (allocations, kernel selection) that are no part of either method.
    greedy_decode(pair.target, input_ids, max_new_tokens=4)
    speculative_decode(pair.target, pair.draft, input_ids, max_new_tokens=4, num_speculative_tokens=k)
    greedys, specs, timed = [], [], 0.0
    while len(greedys) < least or (timed < budget and len(greedys) < most):
        greedys.append(greedy_decode(pair.target, input_ids, max_new_tokens=n))
        specs.append(speculative_decode(pair.target, pair.draft, input_ids, max_new_tokens=n, num_speculative_tokens=k))
        timed += greedys[-1].stats.wall_time_s + specs[-1].stats.wall_time_s
    greedy, spec = (sorted(runs, key=lambda r: r.stats.wall_time_s)[len(runs) // 2] for runs in (greedys, specs))
    identical = all(torch.equal(s.sequences, greedy.sequences) for s in specs + greedys)
    measured = speedup(
        [g.stats.wall_time_s for g in greedys],
        [s.stats.wall_time_s for s in specs],
        tokens_per_call=spec.stats.mean_accepted_length,
    )
    if not identical:  # in fp16/bf16 a divergence is right only at a numerical near-tie of the target
        start = input_ids.shape[1]
        ok, why = greedy_divergence(
            pair.target, input_ids, spec.sequences[0, start:], want=greedy.sequences[0, start:].tolist()
        )
        identical = f"yes, up to near-ties ({why})" if ok else f"NO: {why}"
    return greedy, spec, identical, measured
