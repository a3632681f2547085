"""`selfcheck`: everything an instructor needs to see pass on the course's own hardware before a release.

Sections (each can be skipped): greedy equality, sampling (chi-square), tree decoding, ours vs HF greedy
and HF assisted generation with Leviathan's bound (`measure.device_checks`, on the chosen device and
dtype); the notebooks' check cells run headless (`present.headless`; the notebooks pick their own device,
CUDA when there is a GPU, and ``--dtype``'s dtype, else fp16 on a GPU); and the grader on the reference
solution at the preset in that dtype (on a GPU preset, with PA3's absolute bars). The result is a list of rows and one JSON file.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from specdec_helpers.measure import device_checks
from specdec_helpers.measure.device_checks import FAIL, PASS, SKIP, Row
from specdec_helpers.measure.results import environment
from specdec_helpers.models.pairs import load_pair
from specdec_helpers.present.headless import notebook_paths, run_notebook
from specdec_helpers.present.notebook_help import prompts_for

SECTIONS = ("greedy", "sampling", "tree", "hf", "notebooks", "grader")
DTYPES = {"auto": None, "fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


@dataclass
class Options:
    preset: str = "toy"
    device: str | None = None  # None: CUDA when there is a GPU, else the CPU (as load_pair)
    dtype: str = "auto"
    skip: tuple = ()
    notebooks: str = "auto"  # all on a GPU; on a CPU 01 and 03 (the nbval tier runs them all; see `notebook_choice`)
    prompts: int = 2
    max_new_tokens: int = 32
    samples: int = 2000
    decodes: int = 150
    repeats: int = 2


def notebook_choice(selection: str, device) -> str:
    """``auto``: every notebook on a GPU; on a CPU 01 and 03 (set-up, loading, and the verification checks
    with their near-tie logic), so that a CPU run stays within minutes (all seven take 6-10 minutes there)."""
    if selection != "auto":
        return selection
    cuda = torch.device(device).type == "cuda" if device else torch.cuda.is_available()
    return "all" if cuda else "01,03"


def plan(options: Options) -> list[tuple[str, str]]:
    """``(section, what)`` steps in run order (one per notebook), for the progress bar."""
    steps = []
    for section in SECTIONS:
        if section in options.skip:
            continue
        if section == "notebooks":
            chosen = notebook_paths(notebook_choice(options.notebooks, options.device))
            steps += [(section, path.name) for path in chosen]
        else:
            steps.append((section, section))
    return steps


def run(options: Options, progress=None) -> dict:
    """Run the sections not skipped; returns the JSON-ready result (``passed``: no row FAILed). A ``dtype``
    other than auto reaches the notebooks' kernels and the grader's children too (``$SPECDEC_DTYPE``)."""
    saved = os.environ.get("SPECDEC_DTYPE")
    if options.dtype != "auto" and options.dtype in DTYPES:
        os.environ["SPECDEC_DTYPE"] = options.dtype
    try:
        return _run(options, progress)
    finally:
        os.environ.pop("SPECDEC_DTYPE", None) if saved is None else os.environ.__setitem__("SPECDEC_DTYPE", saved)


def _run(options: Options, progress=None) -> dict:
    unknown = set(options.skip) - set(SECTIONS)
    if unknown:
        raise ValueError(f"--skip {','.join(sorted(unknown))}: unknown section; choose from {', '.join(SECTIONS)}")
    if options.dtype not in DTYPES:
        raise ValueError(f"--dtype {options.dtype!r}: choose one of {', '.join(DTYPES)}")
    start = time.perf_counter()
    steps = plan(options)
    tick = progress(total=len(steps)) if progress else None
    rows: list[Row] = []
    pair = None
    if {"greedy", "sampling", "tree", "hf"} - set(options.skip):
        pair = load_pair(options.preset, device=options.device, dtype=DTYPES[options.dtype], progress=False)
    prompts = prompts_for(pair, options.prompts) if pair is not None else []
    device = pair.device if pair is not None else options.device
    dtype = pair.dtype if pair is not None else DTYPES[options.dtype]
    for section, what in steps:
        if section in ("notebooks", "grader") and pair is not None:
            # Notebook kernels and grader children load the pair themselves: free this copy (a T4 holds
            # Pythia-1.4b/160m in fp16 about four times, not five).
            pair = None
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        if tick:
            tick.set_description(f"selfcheck {what}")
        rows += _section(section, what, pair, prompts, options)
        if tick:
            tick.update(1)
    if tick:
        tick.close()
    return dict(
        selfcheck=1,
        preset=options.preset,
        options={k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(options).items()},
        environment=environment(device, dtype, options.preset),
        seconds=round(time.perf_counter() - start, 1),
        passed=not any(r.failed for r in rows),
        rows=[r.as_dict() for r in rows],
    )


def _section(section: str, what: str, pair, prompts, o: Options) -> list[Row]:
    if section == "greedy":
        return device_checks.greedy_rows(pair, prompts, o.max_new_tokens)
    if section == "tree":
        return device_checks.tree_rows(pair, prompts, o.max_new_tokens)
    if section == "sampling":
        return device_checks.sampling_rows(pair, prompts[0], o.samples, o.decodes)
    if section == "hf":
        return device_checks.hf_rows(pair, prompts, 2 * o.max_new_tokens, o.repeats)
    if section == "notebooks":
        return [_notebook_row(next(p for p in notebook_paths("all") if p.name == what), o.preset)]
    return grader_rows(o.preset)


def _notebook_row(path: Path, preset: str) -> Row:
    done = run_notebook(path, preset)
    failed = [f"{cell}: {line}" for cell, ok, line in done.checks if not ok]
    detail = done.error or "; ".join(failed) or f"{len(done.checks)} check cells passed"
    if not done.checks and not done.error:
        detail = "no check cell ran"
    return Row(
        "notebooks",
        path.name,
        PASS if done.passed else FAIL,
        detail,
        round(done.seconds, 1),
        values=dict(checks=len(done.checks), failed=len(failed)),
    )


def grader_rows(preset: str) -> list[Row]:
    """The grader on the reference solution at ``preset``: every item must get full marks (the bonus too
    on a GPU preset, where PA3's absolute bars apply; on a CPU it is not measured)."""
    from specdec_helpers.assignment.grading.grader import grade, load_config
    from specdec_helpers.assignment.grading.speed import measure
    from specdec_helpers.assignment.grading.submission import reference_sources

    reference = reference_sources()
    config = load_config(preset=preset)
    start = time.perf_counter()
    report = grade(reference, config, reference_sources=reference, measure_fn=measure, seed=0)
    seconds = round(time.perf_counter() - start, 1)
    rows = []
    for r in report.results:
        if r.test_id.startswith("perf.") or r.status != "passed":
            status = PASS if r.status == "passed" else SKIP if r.status == "skipped" else FAIL
            rows.append(
                Row(
                    "grader",
                    r.name,
                    status,
                    (r.feedback or r.status)[:300],
                    values=dict(score=r.score, max_score=r.max_score),
                )
            )
    detail = report.measurement.get("detail", {})
    rows.insert(
        0,
        Row(
            "grader",
            f"reference solution at {preset}",
            PASS if report.score >= report.max_score else FAIL,
            f"{report.score:g}/{report.max_score:g} points; speedup {report.measurement.get('speedup', 0):.2f}x "
            f"({detail.get('baseline', '?')} baseline), acceptance {report.measurement.get('acceptance', 0):.2f}",
            seconds,
            values=dict(
                score=report.score,
                max_score=report.max_score,
                speedup=report.measurement.get("speedup"),
                acceptance=report.measurement.get("acceptance"),
                thresholds=config["thresholds"],
            ),
        ),
    )
    return rows


def write_json(result: dict, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1, default=str) + "\n")
    return path
