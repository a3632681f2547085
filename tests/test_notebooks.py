"""Static checks of the course notebooks (fast; running them is nbval's job:
``pytest --nbval-lax --nbval-current-env notebooks/``, settings in notebooks/conftest.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest

from specdec_helpers.present import notebook_help as nbh

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
NAMES = [
    "01_model_init.ipynb",
    "02_draft_generation.ipynb",
    "03_vectorized_verification.ipynb",
    "04_kv_cached_verification.ipynb",
    "05_benchmarking.ipynb",
    "06_speculative_sampling.ipynb",
    "07_tree_speculation.ipynb",
    "08_serving_batches_and_trees.ipynb",
]


def read(name):
    return nbformat.read(NOTEBOOKS / name, as_version=4)


@pytest.mark.parametrize("name", NAMES)
def test_conventions(name):
    nb = read(name)
    nbformat.validate(nb)
    first = nb.cells[0]
    assert first.cell_type == "markdown" and first.source.startswith("# ")
    assert nbh.colab_badge(name) in first.source and "What you will learn" in first.source
    code = [c for c in nb.cells if c.cell_type == "code"]
    setup = code[0].source
    assert "google.colab" in setup and nbh.pip_install_spec() in setup and "nb.setup()" in setup
    params = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1 and 'PRESET = os.environ.get("SPECDEC_PRESET", "auto")' in params[0].source
    for cell in code:
        if (
            "load_pair(PRESET)" in cell.source
            or "perf_counter" in cell.source
            or "timed(" in cell.source
            or "token_explorer(" in cell.source
        ):
            assert cell.source.startswith("# NBVAL_IGNORE_OUTPUT"), cell.source[:80]


@pytest.mark.parametrize("name", NAMES)
def test_every_exercise_is_followed_by_a_check(name):
    cells = read(name).cells
    exercises = [i for i, c in enumerate(cells) if "### BEGIN SOLUTION" in c.source]
    assert exercises, "each notebook has exercises"
    for i in exercises:
        following = cells[i + 1]
        assert following.cell_type == "code" and (
            "nb.check(" in following.source or "check_part(" in following.source
        ), cells[i].source[:80]
        assert following.metadata["nbgrader"]["locked"], cells[i].source[:80]


@pytest.mark.parametrize("name", NAMES)
def test_saved_without_errors(name):
    for cell in read(name).cells:
        for output in cell.get("outputs", []):
            assert output.get("output_type") != "error", f"{name}: saved error output in {cell.get('id')}"
            assert "Traceback" not in json.dumps(output.get("text", "")), f"{name}: saved traceback"


def test_student_copies_have_no_solutions():
    from specdec_helpers.assignment.authoring.release import strip_notebook

    for name in NAMES:
        nb = strip_notebook(read(name))
        text = "\n".join(c.source for c in nb.cells)
        assert "BEGIN SOLUTION" not in text and "raise NotImplementedError()" in text
        for cell in nb.cells:
            if cell.cell_type == "code":
                compile(re.sub(r"^\s*[%!].*$", "", cell.source, flags=re.M), name, "exec")  # still valid Python
