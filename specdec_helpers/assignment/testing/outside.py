"""CPU time read from outside the student's process, held against the grader's own: the verdicts no counter in
the child can forge (`suite._one_pass_outside`, `suite_decode._cache_reused_outside`, `_one_pass_outside`).

CPU seconds move with the machine's load even for the same work (a busy sibling hyperthread, a cold cache), and the
child and the grader are timed at different moments. So a bound is tried up to ``TRIES`` times, each time timing
the child again and the grader afresh, and only a decoder over the bound on every try fails: an honest decoder
(ratio about 1) must be unlucky ``TRIES`` times in a row, a mistake (twice the passes or more) is over it each
time. Only failing decoders pay for the extra tries."""

from __future__ import annotations

from collections.abc import Callable

TRIES = 3


def within(
    child_seconds: Callable[[], float], own_seconds: Callable[[bool], float], margin: float, slack: float
) -> tuple[bool, float, float]:
    """``(ok, used, own)``: whether the child's time stayed under ``margin * own + slack`` on some try, with the
    last try's times. ``own_seconds(fresh)`` is the grader's time: cached on the first try, measured again after."""
    for attempt in range(TRIES):
        used = child_seconds()
        own = own_seconds(attempt > 0)
        if used <= margin * own + slack:
            return True, used, own
    return False, used, own
