"""The honest speedup: medians, the spread over interleaved rounds, and the warnings people see."""

import pytest

from specdec_helpers.measure.speedup import in_words, pooled_speedup, speedup


def test_median_of_round_ratios_with_the_rounds_range():
    s = speedup([2.0, 2.2, 2.1], [1.0, 1.1, 1.05], tokens_per_call=3.0)
    assert s.ratio == pytest.approx(2.0)
    assert (s.low, s.high) == pytest.approx((2.0, 2.0))
    assert s.rounds == 3 and s.trusted and s.spread_pct == pytest.approx(0.0)
    assert "±0%" in str(s) and "over 3 interleaved rounds" in str(s)


def test_the_ratio_pairs_rounds_instead_of_pairing_medians():
    """Ratio of medians would pair round 1's baseline with round 3's method: 1.5x, outside every round."""
    s = speedup([1.0, 1.5, 3.0], [1.0, 1.5, 2.0])
    assert s.ratio == pytest.approx(1.0) and s.low <= s.ratio <= s.high


def test_many_rounds_show_their_middle_half():
    """One round slowed by another job does not widen the spread of nine."""
    s = speedup([1.2] * 8 + [3.0], [1.0] * 9)
    assert s.quartiles and (s.low, s.high) == pytest.approx((1.2, 1.2)) and s.trusted
    assert "middle half of 9 interleaved rounds" in str(s)


def test_a_speedup_above_tokens_per_call_is_called_broken():
    """The issue's case: 6.13x from a run that made 2.78 tokens per target call."""
    s = speedup([6.13, 6.2, 6.0], [1.0, 1.0, 1.0], tokens_per_call=2.78)
    assert not s.trusted
    assert any(w.startswith("measurement broken") and "2.78 tokens per target call" in w for w in s.warnings)


def test_wide_spread_and_too_few_rounds_are_warned_about():
    noisy = speedup([1.0, 3.0, 1.0], [1.0, 1.0, 1.0])
    assert any("too noisy to trust" in w for w in noisy.warnings)
    single = speedup([2.0], [1.0])
    assert any("only 1 timed round" in w for w in single.warnings)
    straddles = speedup([1.0, 1.1, 0.95], [1.0, 1.0, 1.0])
    assert any("within the noise" in w for w in straddles.warnings)


def test_slowdown_is_worded_as_a_slowdown():
    assert in_words(0.72) == "0.72x: 39% slower"
    assert in_words(1.25) == "1.25x: 20% less time"


def test_pooled_rounds_sum_over_prompts():
    s = pooled_speedup([[1.0, 1.0, 1.0], [3.0, 3.0, 3.0]], [[0.5, 0.5, 0.5], [1.5, 1.5, 1.5]])
    assert s.ratio == pytest.approx(2.0) and s.rounds == 3 and s.trusted


def test_no_timings_is_an_error():
    with pytest.raises(ValueError, match="at least one timing"):
        speedup([], [1.0])
