"""Run a course notebook the way students do (issue 44): every code cell twice in a row, or the whole notebook
twice in one kernel, and read every run of every cell. A plain module, not conftest.py (see tiny_models.py).

The rerun is built as a notebook: its code cells in the order a student would run them (markdown dropped), each
copy tagged with the original cell's index and its pass. nbclient then runs it in one fresh kernel with errors
allowed, so every cell's every run can be read afterwards.

A check cell is a code cell that calls ``nb.check(``, ``nb.checks(`` or ``check_part(`` (the verdicts of
`present.notebook_help.check` and `assignment.student.check.check_part`). A rejected check raises
``CheckFailed`` (an error output, its message starting with ❌) and `check_part` prints a ❌ line before it
raises; so a check run passed when it printed a ✅ line, no ❌ line and no error. Any other cell passed when it
raised no error. A cell nbval compares must print on its second run what it printed on its first.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from pathlib import Path

import nbformat
from nbformat.v4 import new_notebook

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
CHECK_CALL = re.compile(r"\bnb\.(check|checks|check_part)\(|^\s*check_part\(", re.M)
COMPARED = "NBVAL_CHECK_OUTPUT"  # the cells nbval compares with their saved outputs (--nbval-lax)
MODES = ("each", "whole")  # each code cell twice in a row; the whole notebook twice in one kernel


def is_check_cell(cell) -> bool:
    return cell.cell_type == "code" and bool(CHECK_CALL.search(cell.source))


def rerun_notebook(nb, mode: str):
    """``nb``'s code cells in ``mode``'s order, each copy tagged ``rerun = [original index, pass]``."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    code = [(i, cell) for i, cell in enumerate(nb.cells) if cell.cell_type == "code"]
    if mode == "each":
        order = [(i, cell, p) for i, cell in code for p in (1, 2)]
    else:
        order = [(i, cell, p) for p in (1, 2) for i, cell in code]
    cells = []
    for i, cell, p in order:
        copy = nbformat.v4.new_code_cell(cell.source, metadata={**cell.metadata, "rerun": [i, p]})
        copy.id = f"c{i:03d}p{p}"
        cells.append(copy)
    return new_notebook(cells=cells, metadata=nb.metadata)


def _text(outputs) -> str:
    parts = []
    for out in outputs:
        if out.get("output_type") == "stream":
            parts.append(out.get("text", ""))
        elif out.get("output_type") == "error":
            parts.append(f"{out.get('ename')}: {out.get('evalue')}")
    return "".join(parts)


def problems(executed) -> list[str]:
    """Every cell run that failed: ``"cell 10 (pass 2, check): CheckFailed: ❌ Not yet: ..."``. A cell nbval
    compares (``# NBVAL_CHECK_OUTPUT``) that ran cleanly twice must also print the same text on its second run."""
    found, first = [], {}
    for cell in executed.cells:
        index, run = cell.metadata["rerun"]
        outputs = cell.get("outputs", [])
        text = _text(outputs)
        errored = any(o.get("output_type") == "error" for o in outputs)
        check = is_check_cell(cell)
        if cell.get("execution_count") is None:
            found.append(f"cell {index} (pass {run}): did not run")
        elif errored or (check and ("✅" not in text or "❌" in text)):
            lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
            said = next((ln for ln in reversed(lines) if "❌" in ln or "Error" in ln), lines[-1] if lines else "")
            found.append(f"cell {index} (pass {run}{', check' if check else ''}): {said[:300] or 'no verdict'}")
        elif COMPARED in cell.source:
            if run == 1:
                first[index] = text
            elif index in first and first[index] != text:
                found.append(
                    f"cell {index} (pass 2): prints {text.strip()[:300]!r}, pass 1 {first[index].strip()[:300]!r}"
                )
    return found


def kernel_env(export_dir: str) -> dict:
    """The settings of notebooks/conftest.py (toy pair, quick measurements, one thread, exports to a temporary
    folder, this checkout importable), for the kernel only."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    env.update(
        SPECDEC_PRESET=os.environ.get("SPECDEC_PRESET", "toy"),
        SPECDEC_THREADS=os.environ.get("SPECDEC_THREADS", "1"),
        SPECDEC_QUICK=os.environ.get("SPECDEC_QUICK", "1"),
        SPECDEC_EXPORT_DIR=export_dir,
        TOKENIZERS_PARALLELISM="false",
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    )
    return env


def run_rerun(nb, mode: str, timeout: float = 900) -> tuple[list[str], float]:
    """Run ``nb`` in ``mode`` in a fresh kernel in notebooks/ (where the notebooks find each other); returns its
    failed cell runs (`problems`) and the seconds it took."""
    import nbclient

    rerun = rerun_notebook(nb, mode)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="specdec-rerun-export-") as export:
        client = nbclient.NotebookClient(
            rerun,
            timeout=timeout,
            kernel_name="python3",
            allow_errors=True,
            resources={"metadata": {"path": str(NOTEBOOKS)}},
        )
        client.execute(env=kernel_env(export))
    return problems(rerun), time.perf_counter() - start


def read(name: str):
    return nbformat.read(str(NOTEBOOKS / name), as_version=4)
