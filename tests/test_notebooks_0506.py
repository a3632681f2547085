"""Notebooks 05 and 06 (issue 28): the kit only through sd./nb., every exercise labelled practice (neither
has a graded part), and 05 measures the student's own decoder, never the kit's greedy loop."""

import re
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
ALLOWED = {
    "import specdec_helpers",
    "import specdec_helpers as sd",
    "from specdec_helpers.assignment.student import notebook as nb",
}


@pytest.mark.parametrize("name", ["05_benchmarking", "06_speculative_sampling"])
def test_imports_through_sd_and_nb_and_every_exercise_is_labelled(name):
    nb = nbformat.read(str(NOTEBOOKS / f"{name}.ipynb"), as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            assert "**Exercise" not in cell.source, f"{name} {cell.id}: say 'Practice exercise' or 'Graded exercise'"
            continue
        imports = {
            line.strip() for line in cell.source.splitlines() if re.match(r"\s*(from|import) specdec_helpers", line)
        }
        assert imports <= ALLOWED, f"{name} {cell.id}: {sorted(imports - ALLOWED)}"
        if cell.metadata.get("nbgrader", {}).get("solution"):
            assert cell.source.startswith("# Practice exercise"), f"{name} {cell.id}: the cell says it is practice"
        # Greedy speculative decoding is the student's (the student kit refuses it): never the kit's at T = 0.
        assert not re.search(r"temperature=0(\.0)?\b", cell.source), f"{name} {cell.id} decodes greedily with the kit"
    text = " ".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "Practice exercise 1" in text and "no graded part" in text


def test_05_benchmarks_the_students_decoder():
    nb = nbformat.read(str(NOTEBOOKS / "05_benchmarking.ipynb"), as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert 'decoder = nb.your_decoder("05", pair)' in code
    for call in ("bm.benchmark(pair, decoder", "bm.sweep(pair, decoder", "decoder=decoder", "decoder.benchmark("):
        assert call in code, call
    assert "speculative_decode(" not in code and "load_pair(PRESET)" in code
