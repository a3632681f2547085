"""How many tokens to draft next round: a constant, or adapted to how well the draft has been doing.

HF assisted generation's "heuristic" schedule (``num_assistant_tokens``): after a round where the
target accepted *every* draft token, draft 2 more next time; otherwise draft 1 fewer (never fewer
than 1). Long runs of agreement grow k quickly, and each miss shrinks it slowly. The decode loop only
reads ``schedule.current`` and calls ``schedule.update(num_accepted, num_proposed)`` after each round.

Changing k from round to round keeps both guarantees: greedy output is still the target's own, and
under sampling each round's block length is fixed before its tokens are drawn, so rejection sampling
stays exact. (For early stopping *within* a round, see ``ModelDrafter(confidence_threshold=...)``.)
"""

from __future__ import annotations

from specdec_helpers.core.checks import check_positive_int

AUTO_START = 5  # HF's default num_assistant_tokens


class KSchedule:
    """Number of draft tokens per round. ``adaptive=False``: always ``start``.

    ``adaptive=True``: HF's heuristic, +2 after a fully accepted block, -1 otherwise, kept within
    ``[1, max_k]`` (``max_k=None``: no upper bound, as in HF). Rounds that proposed nothing (a lookup
    drafter found no match) leave k unchanged. One schedule object keeps its state across decode calls
    (HF's "heuristic"); ``num_speculative_tokens="auto"`` makes a fresh one per call ("heuristic_transient").
    """

    def __init__(self, start: int = AUTO_START, adaptive: bool = True, max_k: int | None = None):
        self.start = check_positive_int(start, "start", 1)
        self.max_k = None if max_k is None else check_positive_int(max_k, "max_k", self.start)
        self.adaptive = bool(adaptive)
        self.current = self.start
        self.history: list[int] = []  # k used in each round, for plots

    def update(self, num_accepted: int, num_proposed: int) -> None:
        self.history.append(self.current)
        if not self.adaptive or num_proposed == 0:
            return
        if num_accepted == num_proposed:
            self.current += 2
            if self.max_k is not None:
                self.current = min(self.current, self.max_k)
        else:
            self.current = max(1, self.current - 1)

    @property
    def largest(self) -> int | None:
        """The largest k a round may draft (None: no bound), which the backend prepares for."""
        return self.max_k if self.adaptive else self.start

    def reset(self) -> None:
        self.current = self.start
        self.history = []

    def __repr__(self) -> str:
        kind = "adaptive" if self.adaptive else "constant"
        return f"KSchedule(start={self.start}, {kind}, current={self.current})"


def as_schedule(num_speculative_tokens) -> KSchedule:
    """``int`` -> constant k; ``"auto"`` -> HF's heuristic from k = 5; a `KSchedule` is used as given."""
    if isinstance(num_speculative_tokens, KSchedule):
        return num_speculative_tokens
    if isinstance(num_speculative_tokens, str):
        if num_speculative_tokens == "auto":
            return KSchedule(AUTO_START, adaptive=True)
        raise TypeError(
            f"num_speculative_tokens must be an int >= 1, 'auto' or a KSchedule, got {num_speculative_tokens!r}"
        )
    return KSchedule(check_positive_int(num_speculative_tokens, "num_speculative_tokens", 1), adaptive=False)
