"""nbgrader compatibility: its ``generate_assignment`` (``enforce_metadata`` on, as by default) accepts
notebooks that follow the kit's contract and writes the same student cells as ``release``."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from course_notebooks import instructor_kit
from specdec_helpers.assignment.authoring import release

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def has_nbgrader_metadata(path: Path) -> bool:
    return any("nbgrader" in c.metadata for c in nbformat.read(str(path), as_version=4).cells)


@pytest.mark.slow
def test_generate_assignment_matches_release(tmp_path):
    source = tmp_path / "course" / "source" / "ps1"
    source.mkdir(parents=True)
    kit = instructor_kit(tmp_path / "kit")
    paths = sorted(kit.glob("notebooks/*.ipynb"))
    # The course's own notebooks join as soon as they carry nbgrader metadata.
    paths += [p for p in sorted(NOTEBOOKS.glob("[0-9]*.ipynb")) if has_nbgrader_metadata(p)]
    for path in paths:
        shutil.copy(path, source / path.name)
    # An answer cell without markers: both stub it as a whole.
    nb = nbformat.read(str(paths[0]), as_version=4)
    nb.cells[2].source = "def multiply(a, b):\n    return a * b"
    nbformat.write(nb, str(tmp_path / "03_whole.ipynb"))
    paths.append(tmp_path / "03_whole.ipynb")
    shutil.copy(paths[-1], source / paths[-1].name)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "nbgrader",
            "generate_assignment",
            "ps1",
            "--no-db",
            "--force",
            f"--CourseDirectory.root={tmp_path / 'course'}",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path / "course",
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for path in paths:
        ours = release.strip_notebook(nbformat.read(str(path), as_version=4), path.name)
        theirs = nbformat.read(str(tmp_path / "course" / "release" / "ps1" / path.name), as_version=4)
        assert [c.source for c in theirs.cells] == [c.source for c in ours.cells], path.name
        assert [c.cell_type for c in theirs.cells] == [c.cell_type for c in ours.cells]
        assert all(not c.get("outputs") for c in theirs.cells if c.cell_type == "code")
    assert "return a * b" not in (tmp_path / "course/release/ps1/03_whole.ipynb").read_text()
