"""An honest speedup: the median of per-round ratios, their spread, and warnings.

One timed run of each side is not a measurement: on a shared CPU the same command gave 1.01x, then
6.13x, then 1.12x. So every speedup shown to a person (demo, bench, report) comes from here. Round r
times the baseline and the method back to back, so the same slow second hits both; the speedup is
the median of the rounds' ratios (a ratio of the two sides' medians can pair a lucky baseline round
with an unlucky one, and came out at the edge of the rounds' range). The spread shown is the range of
the rounds' ratios, or from ``QUARTILES_FROM`` rounds on their middle half (the extremes of many
rounds on a shared CPU say more about the other jobs than about the method), with warnings when it cannot be trusted: too few rounds, a spread
too wide, or a ratio above what the measured tokens per target call allow. Speculative decoding
makes ``tokens per target call`` tokens for each target pass, and a verify pass costs at least a
decode step, so it cannot beat its own greedy decoding by more than that: a larger ratio means the
timings are broken (another process ran during the baseline), not that the method is that good.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

MIN_ROUNDS = 3
QUARTILES_FROM = 5  # rounds from which the spread is the interquartile range, not the whole range
MAX_SPREAD = 0.25  # (highest - lowest round ratio) / ratio above this: too noisy to trust the ratio
BOUND_SLACK = 1.05  # timer noise allowed above the tokens-per-call bound before calling it broken


@dataclass
class Speedup:
    """``ratio`` = the median per-round ratio (baseline time / time); ``low``/``high``: the rounds' range, or
    their quartiles from `QUARTILES_FROM` rounds on (``quartiles``)."""

    ratio: float
    low: float
    high: float
    rounds: int
    tokens_per_call: float | None = None
    quartiles: bool = False
    warnings: list[str] = field(default_factory=list)

    @property
    def spread_pct(self) -> float:
        """Half the range of the per-round ratios, in % of the ratio (the '±' shown)."""
        return 50.0 * (self.high - self.low) / self.ratio if self.ratio else float("nan")

    @property
    def trusted(self) -> bool:
        return not self.warnings

    @property
    def rounds_words(self) -> str:
        """Which rounds the spread covers: 'over 3 interleaved rounds', 'middle half of 9 interleaved rounds'."""
        return f"{'middle half of' if self.quartiles else 'over'} {self.rounds} interleaved rounds"

    def __str__(self) -> str:
        return f"{in_words(self.ratio)} (±{self.spread_pct:.0f}%: {self.low:.2f}-{self.high:.2f}x, {self.rounds_words})"

    def as_dict(self) -> dict:
        return dict(
            speedup=self.ratio,
            speedup_low=self.low,
            speedup_high=self.high,
            speedup_rounds=self.rounds,
            speedup_spread_pct=self.spread_pct,
            speedup_rounds_words=self.rounds_words,
            speedup_warnings=list(self.warnings),
        )


def in_words(ratio: float) -> str:
    """'1.32x: 24% less time' or '0.72x: 39% slower': a slowdown is worded as one."""
    if not ratio or ratio != ratio:
        return "n/a"
    if ratio >= 1:
        return f"{ratio:.2f}x: {(1 - 1 / ratio) * 100:.0f}% less time"
    return f"{ratio:.2f}x: {(1 / ratio - 1) * 100:.0f}% slower"


def speedup(baseline_times, times, tokens_per_call: float | None = None, max_spread: float = MAX_SPREAD) -> Speedup:
    """The speedup of ``times`` over ``baseline_times`` (seconds, one per interleaved round, same
    order), with its spread and warnings. ``tokens_per_call``: new tokens per target call of the
    method (mean accepted length + 1 bonus), the most it can gain over the same target's greedy."""
    baseline_times, times = list(baseline_times), list(times)
    if not baseline_times or not times:
        raise ValueError("speedup needs at least one timing of each side")
    per_round = [b / t for b, t in zip(baseline_times, times)] or [
        statistics.median(baseline_times) / statistics.median(times)
    ]
    ratio = statistics.median(per_round)
    quartiles = len(per_round) >= QUARTILES_FROM
    low, high = (
        statistics.quantiles(per_round, n=4, method="inclusive")[::2] if quartiles else (min(per_round), max(per_round))
    )
    result = Speedup(ratio, low, high, len(per_round), tokens_per_call, quartiles)
    warn = result.warnings.append
    if len(per_round) < MIN_ROUNDS:
        warn(f"only {len(per_round)} timed round(s): run at least {MIN_ROUNDS} (--repeats) to see the noise")
    if (result.high - result.low) / ratio > max_spread:
        warn(
            f"the rounds disagree ({result.low:.2f}x to {result.high:.2f}x{', middle half' if quartiles else ''}): too noisy to trust the ratio; "
            "another process may be using the CPU. Close it, or run more repeats"
        )
    elif result.low < 1 < result.high:
        warn("some rounds were faster and some slower than the baseline: the difference is within the noise")
    if tokens_per_call is not None and ratio > tokens_per_call * BOUND_SLACK:
        warn(
            f"measurement broken: {ratio:.2f}x is more than the {tokens_per_call:.2f} tokens per target call allow; "
            "the baseline was slowed by something else (another process, a first-call cost). Measure again"
        )
    return result


def ratio_words(baseline_times, times, ratio: float | None = None) -> str:
    """A timed comparison as a sentence that says when its number is noise (what notebooks print): ``ratio``
    (default: the median per-round ratio ``baseline / time``, `speedup`) with the rounds' range; "within noise"
    when that range straddles 1, "noisy" when it is wider than `MAX_SPREAD`, "not a result" from a single round.
    ``baseline_times``, ``times``: seconds, one per interleaved round."""
    s = speedup(baseline_times, times)
    ratio = s.ratio if ratio is None else ratio
    if s.rounds < 2:
        return f"{ratio:.2f}x from a single round: its noise is unknown, so it is not a result (time more rounds)"
    span = f"{s.low:.2f}x to {s.high:.2f}x, {s.rounds_words}"
    if s.low <= 1 <= s.high:
        return f"within noise: {ratio:.2f}x, but the rounds ranged from {span}: no difference this run can show"
    if (s.high - s.low) / ratio > MAX_SPREAD:
        return f"{in_words(ratio)}, but noisy: the rounds ranged from {span} (other work on the machine?)"
    return f"{in_words(ratio)} (the rounds ranged from {span})"


def pooled_speedup(baseline_runs: list[list[float]], runs: list[list[float]], tokens_per_call=None) -> Speedup:
    """`speedup` over several prompts: round r's times summed over the prompts (each prompt's rounds are
    interleaved on their own, so round r of every prompt is one comparison)."""
    rounds = min(len(r) for r in baseline_runs + runs)
    return speedup(
        [sum(r[i] for r in baseline_runs) for i in range(rounds)],
        [sum(r[i] for r in runs) for i in range(rounds)],
        tokens_per_call,
    )
