"""Small instructor kits for the course-tooling tests: notebooks that follow the grading contract.

Answer cells: nbgrader ``solution`` metadata, the solution between ``### BEGIN/END SOLUTION``.
Check cells: locked, ``grade_id`` ``<id>_check``, hidden tests between ``### BEGIN/END HIDDEN TESTS``.
The badge and set-up cells are locked, as the real notebooks' are.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from specdec_helpers.assignment.authoring import release
from specdec_helpers.present import notebook_help as nbh

#: Lines that must never reach a student (each appears only inside a solution or hidden-test region).
SECRETS = [
    "return a * b + 0  # secret-product",
    "assert multiply(7, 6) == 42  # hidden-secret",
    "Because the-secret-written-answer.",
]
REPORT = (
    "# Report\n\n<!-- replace every TODO paragraph -->\n\n## 1. Method\n\nTODO: how your decoder works.\n\n"
    "## 2. Results\n\nTODO: which k is best.\n"
)


def meta(grade_id, *, solution=False, grade=False, locked=False, points=None) -> dict:
    data = {
        "grade": grade,
        "grade_id": grade_id,
        "locked": locked,
        "schema_version": 3,
        "solution": solution,
        "task": False,
    }
    if grade:
        data["points"] = points or 1
    return {"nbgrader": data}


def setup_source(repo_url: str = nbh.REPO_URL) -> str:
    return (
        "import os, subprocess, sys\ntry:\n    import specdec_helpers\nexcept ImportError:\n"
        '    if "google.colab" in sys.modules:\n'
        f'        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "{nbh.pip_install_spec(repo_url)}"], check=True)\n'
        "from specdec_helpers.present import notebook_help as nb\ninfo = nb.setup()"
    )


def contract_notebook(name: str, stem: str, repo_url: str = nbh.REPO_URL):
    """Badge, set-up, one code answer + its check (with a hidden test), one written answer."""
    return new_notebook(
        cells=[
            new_markdown_cell(
                f"# {name[:2]} · {stem.title()}\n\n{nbh.colab_badge(name, repo_url)}\n\n**What you will learn**",
                metadata=meta(f"{stem}_intro", locked=True),
            ),
            new_code_cell(setup_source(repo_url), metadata=meta(f"{stem}_setup", locked=True)),
            new_code_cell(
                f'def {stem}(a, b):\n    """Multiply."""\n    ### BEGIN SOLUTION\n    return a * b + 0  # secret-product\n'
                "    ### END SOLUTION",
                metadata=meta(stem, solution=True),
            ),
            new_code_cell(
                f"assert {stem}(2, 3) == 6\n### BEGIN HIDDEN TESTS\nassert multiply(7, 6) == 42  # hidden-secret\n"
                "### END HIDDEN TESTS",
                metadata=meta(f"{stem}_check", grade=True, locked=True, points=2),
            ),
            new_markdown_cell(
                "Why does it work?\n\n### BEGIN SOLUTION\nBecause the-secret-written-answer.\n### END SOLUTION",
                metadata=meta(f"{stem}_why", solution=True, grade=True, points=1),
            ),
        ]
    )


def instructor_kit(root: Path, repo_url: str = nbh.REPO_URL) -> Path:
    """A minimal instructor repository: package, two contract notebooks, report template."""
    (root / "specdec_helpers").mkdir(parents=True)
    (root / "specdec_helpers" / "__init__.py").write_text("")
    (root / "notebooks").mkdir()
    for name, stem in (("01_multiply.ipynb", "multiply"), ("02_times.ipynb", "times")):
        nbformat.write(contract_notebook(name, stem, repo_url), str(root / "notebooks" / name))
    (root / "report").mkdir()
    (root / "report" / "REPORT_TEMPLATE.md").write_text(REPORT)
    (root / "report" / "README.md").write_text("# report/\n")
    (root / "README.md").write_text("# Instructor kit: solutions live in notebooks/\n")
    (root / "pyproject.toml").write_text("[project]\nname = 'kit'\n")
    return root


def ran(cell, *outputs, count: int = 1):
    """``cell`` as if executed: an execution count and outputs (default: none)."""
    cell.execution_count = count
    cell.outputs = list(outputs)
    return cell


def error_output(ename="CheckFailed", evalue="❌ Not yet: the product is wrong"):
    return new_output("error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


def stream(text="✅ Correct\n"):
    return new_output("stream", name="stdout", text=text)


def solution_lines(root) -> set[str]:
    """Every telling line inside a solution or hidden-test region of the instructor's shipped sources
    (and of answer cells without markers) that does not also appear outside those regions."""
    hidden, visible = set(), set()
    for path, _rel in release._files(root):
        if path.suffix not in (".py", ".ipynb"):
            continue
        source = release._text(path)
        for body in release.regions(source) + release.whole_solutions(path):
            hidden |= {line.strip() for line in body.splitlines()}
        visible |= {line.strip() for line in release.REGION.sub("", source).splitlines()}
    return {line for line in hidden - visible if len(line) >= 8 and not re.fullmatch(r"[#\s\w]*", line)}
