"""What a grading is worth: one `Result` per test and performance item, the `Report` (the table students
read, Gradescope's ``results.json``), points split and added in exact thousandths, and the performance
items scored from a `speed.Measurement`. `grader` runs the tests and the measurement; this module only counts."""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from specdec_helpers.assignment.grading.speed import Measurement

EXTRA_CREDIT = ("bonus",)
LABELS = {
    "init": "1 initialization",
    "draft": "2 drafting",
    "verify": "3 verification",
    "decode": "4 decode loop",
    "speedup": "speedup",
    "acceptance": "acceptance",
    "bonus": "bonus (extra credit)",
}


# --------------------------------------------------------------------------- results


@dataclass
class Result:
    item: str  # exercise or performance item
    name: str
    score: float
    max_score: float
    status: str  # passed | failed | not implemented | error | skipped
    feedback: str = ""
    hidden: bool = False
    test_id: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "passed"


@dataclass
class Report:
    results: list[Result]
    source: str = ""
    seconds: float = 0.0
    measurement: dict = field(default_factory=dict)

    @property
    def score(self) -> float:
        return float(exact_sum([r.score for r in self.results]))

    @property
    def max_score(self) -> float:
        return float(exact_sum([r.max_score for r in self.results if r.item not in EXTRA_CREDIT]))

    def by_item(self) -> dict[str, list[Result]]:
        items: dict[str, list[Result]] = {}
        for r in self.results:
            items.setdefault(r.item, []).append(r)
        return items

    def find(self, test_id: str) -> Result:
        return next(r for r in self.results if r.test_id == test_id)

    def table(self, show_passed: bool = False) -> str:
        """One line per exercise and item, then the feedback of every test that did not pass."""
        lines = [f"{'item':<24}{'score':>12}  verdict", "-" * 64]
        for item, results in self.by_item().items():
            got, best = sum(r.score for r in results), sum(r.max_score for r in results)
            if item in EXTRA_CREDIT:
                best = sum(r.max_score for r in results)
            statuses = {r.status for r in results}
            verdict = (
                "✅ all tests pass"
                if statuses == {"passed"}
                else "⏳ not implemented yet"
                if statuses == {"not implemented"}
                else "– not measured"
                if statuses == {"skipped"}
                else f"❌ {sum(not r.passed for r in results)} of {len(results)} tests fail"
            )
            lines.append(f"{LABELS.get(item, item):<24}{got:>6.1f} / {best:<4g}  {verdict}")
        lines.append("-" * 64)
        lines.append(f"{'total':<24}{self.score:>6.1f} / {self.max_score:<4g}")
        notes = [r for r in self.results if show_passed or not r.passed]
        if notes:
            lines.append("")
        for r in notes:
            mark = {"passed": "✅", "not implemented": "⏳", "skipped": "–"}.get(r.status, "❌")
            lines.append(f"{mark} [{r.item}] {r.name}" + (f"\n     {r.feedback}" if r.feedback else ""))
        return "\n".join(lines)

    def gradescope(self) -> dict:
        """Gradescope's ``results.json``: hidden tests are shown after the due date. An item that was not
        measured (the bonus on a CPU preset) is not a failure: Gradescope has no "skipped" status, so it gets
        none and says why in its name and output."""

        def status(r):
            return {} if r.status == "skipped" else {"status": "passed" if r.passed else "failed"}

        return {
            "score": self.score,
            "max_score": self.max_score,
            "execution_time": round(self.seconds, 1),
            "output": self.table(),
            "tests": [
                {
                    "name": f"{LABELS.get(r.item, r.item)}: {r.name}"
                    + (" (not measured)" if r.status == "skipped" else ""),
                    "score": round(r.score, 3),
                    "max_score": round(r.max_score, 3),
                    "output": r.feedback or r.status,
                    "visibility": "after_due_date" if r.hidden else "visible",
                    **status(r),
                }
                for r in self.results
            ],
        }


# --------------------------------------------------------------------------- points


def split_points(points: float, weights: list[int]) -> list[float]:
    """``points`` shared by ``weights``, in thousandths that add up exactly (largest remainders get the
    odd thousandths): a part split in thirds still sums to its points, on Gradescope too, which shows
    each test's score with three decimals."""
    total = sum(weights)
    if not total:
        return [0.0] * len(weights)
    shares = [Fraction(round(points * 1000)) * w / total for w in weights]
    milli = [int(share) for share in shares]
    order = sorted(range(len(weights)), key=lambda i: shares[i] - milli[i], reverse=True)
    for i in order[: round(points * 1000) - sum(milli)]:
        milli[i] += 1
    return [m / 1000 for m in milli]


def exact_sum(scores) -> float:
    """Scores (thousandths) added without float drift: 45 is 45.0, not 44.99999999999999."""
    return sum(Fraction(round(score * 1000)) for score in scores) / 1000 if scores else 0.0


# --------------------------------------------------------------------------- performance

OFF_GREEDY = (
    "your drafting passed its tests (the draft model's greedy tokens, also after rejections), yet in the timed "
    "runs the rounds your decoder reported verified drafts that are not: either generate_ids drafts from another "
    "text than input_ids, or the rounds reported in the timed runs are not the rounds it ran"
)


def performance_results(
    m: Measurement | None, config: dict, reason: str = "", drafts_right: bool = False
) -> list[Result]:
    """Score the performance items from a measurement (``None``: not measured, with ``reason``).
    ``drafts_right``: the drafting tests all passed, so every draft the timed runs report must be the draft
    model's greedy proposal (as many as the reference's, give or take one: near-ties in half precision); more
    means the decoder told the timed runs apart (or drafts from the wrong text in its loop), and its reported
    rounds void the performance items.

    On a CPU preset speed and acceptance are relative to the reference solution measured side by
    side (``relative_speed``: reference time / student time at least this; ``relative_acceptance``:
    at least this fraction of the reference's acceptance); the bonus needs a GPU preset. On a GPU
    preset PA3's absolute bars apply."""
    points, th = config["points"], config["thresholds"]
    if m is not None and m.detail.get("baseline") == "greedy":  # PA3's bars: speedups over greedy decoding
        items = [
            ("speedup", f"speedup >= {th['speedup']:g}x over greedy decoding", lambda: m.speedup >= th["speedup"]),
            ("acceptance", f"draft acceptance > {th['acceptance']:.0%}", lambda: m.acceptance > th["acceptance"]),
            (
                "bonus",
                f"bonus: speedup > {th['bonus_speedup']:g}x and acceptance > {th['bonus_acceptance']:.0%}",
                lambda: m.speedup > th["bonus_speedup"] and m.acceptance > th["bonus_acceptance"],
            ),
        ]
    else:
        items = [
            (
                "speedup",
                f"speed: at least {th['relative_speed']:.0%} of the reference solution's, timed side by side",
                lambda: m.speedup >= th["relative_speed"],
            ),
            (
                "acceptance",
                f"draft acceptance at least {th['relative_acceptance']:.0%} of the reference's",
                lambda: m.acceptance >= th["relative_acceptance"] * m.reference_acceptance,
            ),
            ("bonus", "bonus (measured on GPU presets only)", None),
        ]
    results = []
    for item, name, ok in items:
        best = float(points.get(item, 0))
        if not best:
            continue
        if m is None or ok is None:
            results.append(
                Result(
                    item,
                    name,
                    0.0,
                    best,
                    "skipped",
                    reason or "not measured on CPU (a GPU preset measures the bonus)",
                    test_id=f"perf.{item}",
                )
            )
            continue
        against = "greedy decoding" if m.detail.get("baseline") == "greedy" else "the reference's speed"
        numbers = (
            f"measured {m.speedup:.2f}x {against}, acceptance {m.acceptance:.1%} "
            f"(reference {m.reference_acceptance:.1%})"
        )
        reported = m.detail.get("reported_acceptance")  # the child's own rounds: shown, never scored
        if reported is not None and abs(reported - m.acceptance) >= 0.0005:
            numbers += f"; the rounds your decoder reported come to {reported:.1%}"
        if m.detail.get("note"):  # drafts off the draft model's greedy proposals: the drafting tests take those points
            numbers += f"; note: {m.detail['note']}"
        if m.error:
            status, feedback = "error", m.error
        elif not m.identical:
            status, feedback = (
                "failed",
                f"{numbers}, but an output differs from greedy decoding: a speedup that "
                "changes the text does not count",
            )
        elif not m.speculates:
            status, feedback = "failed", f"{numbers}; {m.detail.get('problem') or 'the decoder does not speculate'}"
        elif drafts_right and m.detail.get("off_greedy", 0) > m.detail.get("reference_off_greedy", 0) + 1:
            # more than the reference's, on the same prompts and device, and more than one round's near-tie
            status, feedback = "failed", f"{numbers}; {OFF_GREEDY}"
        else:
            status, feedback = ("passed" if ok() else "failed"), numbers
        results.append(
            Result(item, name, best if status == "passed" else 0.0, best, status, feedback, test_id=f"perf.{item}")
        )
    return results
