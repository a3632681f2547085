"""The results a submission that passes every test would get: each test its share of its part's points
(`grader.split_points` by weight), passed. A plain module, not conftest.py (see tiny_models.py)."""

from __future__ import annotations

from specdec_helpers.assignment.grading import grader


def full_marks(points: dict, ids: bool = False) -> list[grader.Result]:
    """Every test of every part passed with its share of ``points[part]``; ``ids``: with their test ids."""
    return [
        grader.Result(t.part, t.name, best, best, "passed", test_id=t.id if ids else "")
        for part in grader.EXERCISES
        for t, best in zip(
            [t for t in grader.TESTS if t.part == part],
            grader.split_points(points[part], [t.weight for t in grader.TESTS if t.part == part]),
        )
    ]
