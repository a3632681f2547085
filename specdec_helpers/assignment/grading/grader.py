"""Grade a submission: ``python -m specdec_helpers grade <folder | zip of notebooks>`` (see `cli.grade`).

Implementation points come from the tests in `suite` / `suite_decode`, run from this process against
the graded cells running in a child process (`sandbox.Child`, `child`), on a tiny world seeded at
grade time. Performance points come from `speed.measure`: the student's decoder and the reference
solution timed side by side in two children on the course's pair, outputs checked against greedy
decoding and acceptance replayed by the grader. This process never runs student code, and it
alone writes ``results.json`` (Gradescope's format).

Points default to PA3's scheme (init 5, draft 5, verify 5, decode 10, speed 10, acceptance 10, bonus
5 as extra credit). On CPU presets speed and acceptance are relative to the reference solution
(``relative_speed``, ``relative_acceptance``), and so are the offline pairs on a GPU; PA3's absolute bars
(1.0x / 75%, bonus 1.7x / 85%) apply to hub presets (PA3's Pythia pairs) on a GPU, where the speed item times
greedy decoding too (``performance.baseline``: 'auto', or 'greedy' / 'reference' to choose). Change them with ``--config points.toml|.json`` or ``--points decode=12
--threshold relative_speed=0.9``.
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable

import torch

from specdec_helpers.assignment.parts.cells import is_stub, kit_references
from specdec_helpers.assignment.grading.sandbox import Child, ChildFailed, Delegated
from specdec_helpers.assignment.testing.wire import StudentError
from specdec_helpers.assignment.testing.cases import EXERCISES, Ctx, TestCase
from specdec_helpers.assignment.testing import suite, suite_decode
from specdec_helpers.assignment.testing.world import Mistake, grading_seed
from specdec_helpers.core.timing import child_threads
from specdec_helpers.assignment.grading.scoring import LABELS, Report, Result, performance_results, split_points
from specdec_helpers.assignment.grading.scoring import exact_sum  # noqa: F401 - the tests add scores as grader.exact_sum
from specdec_helpers.assignment.grading.speed import Measurement, baseline_of

DEFAULT_CONFIG = {
    "points": {"init": 5, "draft": 5, "verify": 5, "decode": 10, "speedup": 10, "acceptance": 10, "bonus": 5},
    # speedup >= min_speedup; acceptance > min_acceptance; bonus: speedup > and acceptance > both.
    "thresholds": {
        "speedup": 1.0,
        "acceptance": 0.75,
        "bonus_speedup": 1.7,
        "bonus_acceptance": 0.85,
        "relative_speed": 0.7,
        "relative_acceptance": 0.9,
    },
    "performance": {
        "preset": "toy",
        "max_new_tokens": 64,
        "repeats": 7,
        "warmup": 1,
        "num_speculative_tokens": 0,
        "baseline": "auto",
    },
    "test_timeout_s": 60,
}
# PA3's absolute thresholds assume Pythia-1.4b/160m on a GPU; CPU presets are graded relative to the
# reference solution (relative_speed, relative_acceptance). On the toy pair speculation gains only ~1.2x
# over HF greedy on a CPU, and paired timings of the reference against itself spread by +-20% on a
# shared 2-core machine, so time alone cannot tell a non-speculating decoder (~0.85x the reference)
# apart: the speed item also requires rounds the grader replays as speculation (`replay.check_rounds`), and
# the time bar (0.7) only catches a decoder far slower than the reference. Overrides: a config file
# or --threshold.
PRESET_THRESHOLDS: dict = {}
TESTS: tuple[TestCase, ...] = suite.TESTS + suite_decode.TESTS  # the implementation tests, as data


# --------------------------------------------------------------------------- configuration


def load_config(
    path=None, points: dict | None = None, thresholds: dict | None = None, preset: str | None = None
) -> dict:
    """PA3's defaults (with the graded preset's own thresholds), updated from a .json or .toml file,
    then from CLI overrides."""
    config = copy.deepcopy(DEFAULT_CONFIG)
    data = {}
    if path:
        path = Path(path)
        if path.suffix == ".toml":
            import tomllib

            data = tomllib.loads(path.read_text())
        else:
            data = json.loads(path.read_text())
        unknown = set(data) - set(config)
        if unknown:
            raise ValueError(f"{path}: unknown sections {sorted(unknown)}; known: {sorted(config)}")
        for key, value in data.items():
            if isinstance(value, dict):
                config[key].update(value)
            else:
                config[key] = value
    if preset:
        config["performance"]["preset"] = preset
    for key, value in PRESET_THRESHOLDS.get(config["performance"]["preset"], {}).items():
        if key not in data.get("thresholds", {}):
            config["thresholds"][key] = value
    config["points"].update(points or {})
    config["thresholds"].update(thresholds or {})
    bad = set(config["points"]) - set(LABELS)
    if bad:
        raise ValueError(f"unknown point items {sorted(bad)}; known: {', '.join(LABELS)}")
    baseline_of(config["performance"], "cpu")  # a misspelt baseline fails here, not after the tests ran
    return config


# --------------------------------------------------------------------------- running tests


def run_test(t: TestCase, ctx: Ctx) -> tuple[str, str]:
    """``(status, feedback)`` of one test; never raises. The child's death is reported, not raised."""
    try:
        t.body(ctx)
        return "passed", ""
    except NotImplementedError:
        return "not implemented", "not implemented yet (a method it needs still raises NotImplementedError)"
    except Mistake as mistake:
        return "failed", str(mistake)
    except (ChildFailed, Delegated) as error:
        return "failed", str(error)
    except StudentError as error:
        return "error", f"crashed with {error}"
    except Exception as error:  # noqa: BLE001 - a malformed answer: say what it was
        return "error", f"crashed with {type(error).__name__}: {error}"


def part_status(sources: dict) -> dict[str, str]:
    """Per part: ``ok``, ``not implemented`` (missing or the released stub) or why it earns nothing."""
    status = {}
    for part in EXERCISES:
        source = sources.get(part)
        if source is None or is_stub(source):
            status[part] = "not implemented"
        elif kit_references(source):
            status[part] = (
                f"delegates to the kit's own implementation ({kit_references(source)[0]}): a graded part "
                "must be your own code; only specdec_helpers.core.cache may be imported"
            )
        else:
            status[part] = "ok"
    return status


def run_suite(
    sources: dict,
    points: dict,
    *,
    hidden: bool = True,
    timeout: float = 60,
    only=None,
    seed: int | None = None,
    child_factory: Callable | None = None,
    ids: set[str] | None = None,
) -> list[Result]:
    """Run the implementation tests against the graded cells ``sources`` (``{part: source}``), the
    student's code in a child process; each part's points are split over its tests by weight. ``ids``: only
    these tests (the mistake catalog's check of one test), sharing their parts' points. ``hidden=False`` (a check
    cell, ``check``, ``grade --visible-only``): only what the student kit holds, no hidden test and no hidden part of
    a visible one."""
    seed = grading_seed(seed)
    status = part_status(sources)
    runnable = {part: src for part, src in sources.items() if status.get(part) == "ok"}
    start = child_factory or (lambda: Child(runnable, ready_timeout=max(timeout, 10)))
    child, start_error = None, ""
    tests = [
        t
        for t in TESTS
        if (hidden or not t.hidden) and (only is None or t.part in only) and (ids is None or t.id in ids)
    ]
    results = []
    for exercise in EXERCISES:
        group = [t for t in tests if t.part == exercise]
        for t, best in zip(group, split_points(points.get(exercise, 0), [t.weight for t in group])):
            if status[exercise] != "ok":
                state = "not implemented" if status[exercise] == "not implemented" else "failed"
                feedback = "not implemented yet" if state == "not implemented" else status[exercise]
                results.append(Result(exercise, t.name, 0.0, best, state, feedback, t.hidden, t.id))
                continue
            if not start_error and (child is None or not getattr(child, "alive", lambda: True)()):
                try:  # (re)start after a test ended the child; a child that cannot load is not retried
                    child = start()
                except ChildFailed as error:
                    child, start_error = None, f"your graded cells could not be loaded: {error}"
            if child is None:
                state, feedback = "failed", start_error
            elif (child.ready or {}).get(exercise, "ok").startswith("error"):
                state, feedback = "error", f"your graded cell does not run: {child.ready[exercise][7:]}"
            else:
                with torch.random.fork_rng():
                    state, feedback = run_test(t, Ctx(child, seed, timeout, hidden))
            if (
                state != "passed"
                and exercise == "decode"
                and any(not r.passed for r in results if r.item in ("draft", "verify"))
            ):
                feedback += " [the drafting or verification part fails its own tests: fix that first]"
            results.append(
                Result(exercise, t.name, best if state == "passed" else 0.0, best, state, feedback, t.hidden, t.id)
            )
    if child is not None:
        child.close()
    return results


# --------------------------------------------------------------------------- grading

NO_REFERENCE = (
    "not measured: this copy of the kit holds no reference solution (the student kit), so speed and "
    "acceptance cannot be measured against it; only the instructor's grader awards these points. Your "
    "notebooks' own check cells show whether the decoder speculates"
)


def holds_reference(sources: dict | None) -> bool:
    """Whether ``sources`` are the instructor's solutions: every graded part still carries its solution
    markers. The student kit's notebooks do not (release strips them), so `grade` there never times a
    student's decoder against itself and calls that a pass."""
    return bool(sources) and all("### BEGIN SOLUTION" in (sources.get(part) or "") for part in EXERCISES)


def grade(
    sources: dict,
    config: dict | None = None,
    *,
    reference_sources: dict | None = None,
    measure_fn: Callable | None = None,
    hidden: bool = True,
    source: str = "",
    checks: list | None = None,
    seed: int | None = None,
) -> Report:
    """Grade graded-cell sources ``{part: source}``: the notebooks' check lines (``checks``, 0 points),
    the implementation tests, then performance (only when the cached decode loop is right: the speed
    of wrong output is moot). ``measure_fn(student, reference, performance_config) -> Measurement``
    (default `speed.measure`; ``None`` skips performance)."""
    config = config or load_config()
    start = time.perf_counter()
    results = list(checks or [])
    with child_threads():
        results += run_suite(sources, config["points"], hidden=hidden, timeout=config["test_timeout_s"], seed=seed)
    decode_ok = all(r.passed for r in results if r.test_id in ("decode.decode_cached", "decode.verify_cached"))
    measurement, reason = None, ""
    if measure_fn is None:
        reason = "performance not measured (--no-perf)"
    elif not holds_reference(reference_sources):
        reason = NO_REFERENCE
    elif not decode_ok:
        reason = "needs a correct cached decode loop first (see the decode tests above)"
    else:
        try:
            measurement = measure_fn(sources, reference_sources, config["performance"])
        except Exception as error:  # noqa: BLE001 - the grader's own failure: say it, grade nothing
            measurement = Measurement(0.0, 0.0, error=f"measuring failed: {type(error).__name__}: {error}")
    drafts_right = all(r.passed for r in results if r.item == "draft")  # then every timed draft must be greedy too
    results += performance_results(measurement, config, reason, drafts_right=drafts_right)
    return Report(results, source, time.perf_counter() - start, asdict(measurement) if measurement else {})


def _pairs(values: list[str], what: str) -> dict:
    out = {}
    for value in values or []:
        key, sep, number = value.partition("=")
        if not sep:
            raise SystemExit(f"--{what} expects NAME=NUMBER, got {value!r}")
        out[key.strip()] = float(number)
    return out
