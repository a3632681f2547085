"""Run a course notebook the way students do (issue 44), in one kernel, and read every run of every cell. A plain
module, not conftest.py (see tiny_models.py).

`PASSES`: passes 1 and 2, every code cell twice in a row; pass 3, the whole notebook again from the top; pass 4,
its student edition (stubs in place of the answers), as a student who ran a correct answer and then a wrong one.
The run is built as a notebook: the code cells in that order (markdown dropped), each copy tagged
``rerun = [original index, pass]``. nbclient runs it in a fresh kernel with errors allowed, so every cell's every
run can be read afterwards. One kernel for all four passes: the toy pair loads and the graded checks warm up once.

A check cell is a code cell that calls ``nb.check(``, ``nb.checks(`` or ``check_part(`` (the verdicts of
`present.notebook_help.check` and `assignment.student.check.check_part`). A rejected check raises
``CheckFailed`` (an error output, its message starting with ❌) and `check_part` prints a ❌ line before it
raises; so a check run passed when it printed a ✅ line, no ❌ line and no error. Any other cell passed when it
raised no error. On the reference, a cell nbval compares (``# NBVAL_CHECK_OUTPUT``) must also print what it
printed on pass 1.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_notebook
from one_kernel import EMPTY

from specdec_helpers.present.headless import output_text

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
CHECK_CALL = re.compile(r"\bnb\.(check|checks|check_part)\(|^\s*check_part\(", re.M)
COMPARED = "NBVAL_CHECK_OUTPUT"  # the cells nbval compares with their saved outputs (--nbval-lax)
STUB = "raise NotImplementedError()"
EACH, WHOLE, STUDENT = (1, 2), (3,), (4,)  # the passes: each cell twice in a row, from the top again, stubs
PASSES = (*EACH, *WHOLE, *STUDENT)


def is_check_cell(cell) -> bool:
    return cell.cell_type == "code" and bool(CHECK_CALL.search(cell.source))


def student_edition(nb):
    from specdec_helpers.assignment.authoring.release import strip_notebook

    return strip_notebook(nb)


def rerun_notebook(nb):
    """``nb``'s code cells in the order of `PASSES`, each copy tagged ``rerun = [original index, pass]``."""
    code = [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code"]
    stubbed = student_edition(nb).cells
    order = [(i, nb.cells[i], p) for i in code for p in EACH]
    order += [(i, nb.cells[i], p) for p in WHOLE for i in code]
    order += [(i, stubbed[i], p) for p in STUDENT for i in code]
    cells = []
    for i, cell, p in order:
        copy = new_code_cell(cell.source, metadata={**cell.metadata, "rerun": [i, p]})
        copy.id = f"c{i:03d}p{p}"
        cells.append(copy)
    return new_notebook(cells=cells, metadata=nb.metadata)


def problems(executed) -> list[str]:
    """Every cell run that failed: ``"cell 10 (pass 2, check): CheckFailed: ❌ Not yet: ..."``, and on the
    reference every cell nbval compares that printed otherwise than on pass 1."""
    found, first = [], {}
    for cell in executed.cells:
        index, run = cell.metadata["rerun"]
        outputs = cell.get("outputs", [])
        text = output_text(outputs)
        errored = any(o.get("output_type") == "error" for o in outputs)
        check = is_check_cell(cell)
        if cell.get("execution_count") is None:
            found.append(f"cell {index} (pass {run}): did not run")
        elif errored or (check and ("✅" not in text or "❌" in text)):
            lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
            at = next((j for j in reversed(range(len(lines))) if "❌" in lines[j] or "Error" in lines[j]), -1)
            said = " / ".join(lines[at : at + 2] if at >= 0 else lines[-1:])  # a rejection and what it says
            found.append(f"cell {index} (pass {run}{', check' if check else ''}): {said[:300] or 'no verdict'}")
        elif COMPARED in cell.source and run not in STUDENT:
            first.setdefault(index, text)
            if first[index] != text:
                found.append(f"cell {index} (pass {run}): prints {text.strip()[:300]!r}, pass 1 {first[index][:300]!r}")
    return found


def failed(found: list[str], passes) -> list[int]:
    """The cells with a problem in one of ``passes``."""
    runs = [re.match(r"cell (\d+) \(pass (\d+)", line).groups() for line in found]
    return sorted({int(cell) for cell, run in runs if int(run) in passes})


def stub_checks(nb) -> list[int]:
    """The check cells of ``nb`` right after a cell its student edition stubs (``raise NotImplementedError()``):
    in the student edition each must reject."""
    cells = student_edition(nb).cells
    code = [i for i, cell in enumerate(cells) if cell.cell_type == "code"]
    return [i for before, i in zip(code, code[1:]) if is_check_cell(cells[i]) and STUB in cells[before].source]


def accepted_stubs(nb, found: list[str]) -> list[int]:
    """The `stub_checks` of ``nb`` that did not reject on the student pass (``found``: the run's `problems`)."""
    rejected = failed(found, STUDENT)
    return [i for i in stub_checks(nb) if i not in rejected]


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


#: Before each notebook after the first: an emptied namespace, held empty (`one_kernel.EMPTY`, as the other shared
#: kernels reset), and an export folder of its own.
NEXT = EMPTY + "\nimport os as _os\n_os.environ['SPECDEC_EXPORT_DIR'] = {export!r}\ndel _os"


def run_reruns(nbs: list, timeout: float = 900) -> tuple[list[list[str]], float]:
    """Run each of ``nbs``' `PASSES` in one fresh kernel in notebooks/ (where the notebooks find each other), one
    notebook after another: the toy pair's imports are paid once. Before each notebook after the first the user
    namespace is emptied (``%reset -f``: a cell that needs a name its own notebook did not define still fails) and
    the exports go to a new folder (a log the notebook before wrote is not there); modules stay imported. Returns each
    notebook's `problems` and the seconds the kernel took."""
    import nbclient

    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="specdec-rerun-export-") as export:
        cells = []
        for part, nb in enumerate(nbs):
            if part:
                folder = os.path.join(export, str(part))
                os.mkdir(folder)
                cells.append(new_code_cell(NEXT.format(export=folder), metadata={"part": part}))
            for cell in rerun_notebook(nb).cells:
                cell.metadata["part"] = part
                cell.id = f"{cell.id}n{part}"
                cells.append(cell)
        rerun = new_notebook(cells=cells, metadata=nbs[0].metadata)
        client = nbclient.NotebookClient(
            rerun,
            timeout=timeout,
            kernel_name="python3",
            allow_errors=True,
            resources={"metadata": {"path": str(NOTEBOOKS)}},
        )
        client.execute(env=kernel_env(export))
    seconds = time.perf_counter() - start
    found = []
    for part in range(len(nbs)):
        mine = [c for c in rerun.cells if c.metadata["part"] == part]
        ok = all(
            c.get("execution_count") is not None and not c.get("outputs") for c in mine if "rerun" not in c.metadata
        )
        assert ok, f"the harness's cell before notebook {part} failed: {mine[0].get('outputs')}"
        found.append(problems(new_notebook(cells=[c for c in mine if "rerun" in c.metadata])))
    return found, seconds


def read(name: str):
    return nbformat.read(str(NOTEBOOKS / name), as_version=4)
