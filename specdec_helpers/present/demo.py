"""``python -m specdec_helpers demo``: one prompt, decoded speculatively and greedily, side by side.

Shows which tokens the draft got right (accepted), where the target overruled it (correction) and
where every draft token passed so the target's extra token came free (bonus), then how much faster
that was than plain greedy decoding, and that the text is identical.
"""
from __future__ import annotations

import os
import sys

from specdec_helpers.models.toy import TOY_PROMPTS

PA3_PROMPT = "The future of Artificial Intelligence is"

# ANSI styles per span kind (see widgets.KINDS); the plain-text markers are for logs and pipes.
ANSI = {"prompt": "\033[2m", "accepted": "\033[32m", "rejected": "\033[9;31m", "correction": "\033[33;1m",
        "bonus": "\033[34;1m", "target": ""}
MARKERS = {"accepted": "[]", "rejected": "~~", "correction": "{}", "bonus": "<>"}
LEGEND = {"accepted": "accepted draft tokens", "correction": "correction (target)", "bonus": "bonus (target)",
          "rejected": "rejected draft tokens"}
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
