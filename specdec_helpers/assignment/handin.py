"""Bundle your work for submission: ``python -m specdec_helpers handin [--out handin.zip]``.

Packs the notebooks (your graded cells live there) and ``report/`` into one zip (upload it to
Gradescope). It also runs the visible checks on the notebooks' graded cells and puts their verdict
in the zip as ``CHECK.txt``; unfinished parts do not block a hand-in, missing notebooks do. On
Colab, download your notebooks (File > Download .ipynb) and zip them: the grader takes that too.
"""
from __future__ import annotations

import io
import zipfile
from pathlib import Path

from specdec_helpers.assignment.check import run_check

#: (what, glob pattern relative to the kit root); each needs at least one match.
REQUIRED = [("the notebooks", "notebooks/*.ipynb")]
PACKED = ["notebooks/*.ipynb", "report/**/*"]
SKIP_PARTS = {"__pycache__", ".ipynb_checkpoints"}
MAX_FILE_MB = 20


def missing(root: Path) -> list[str]:
    """Descriptions of the required files that are not there."""
    return [f"{what}: {pattern}" for what, pattern in REQUIRED if not any(p.is_file() for p in root.glob(pattern))]


def files(root: Path) -> list[Path]:
    found = {p for pattern in PACKED for p in root.glob(pattern) if p.is_file() and not SKIP_PARTS & set(p.parts)}
    return sorted(p for p in found if p.stat().st_size <= MAX_FILE_MB * 1e6)


def handin(root=".", out="handin.zip", run_checks: bool = True) -> Path:
    """Write the zip; raises FileNotFoundError listing what is missing."""
    root = Path(root).resolve()
    absent = missing(root)
    if absent:
        raise FileNotFoundError("cannot hand in yet, missing:\n  - " + "\n  - ".join(absent)
                                + f"\n(looked in {root}; run this from the kit's top folder or pass --root)")
    out = Path(out).resolve()
    report = ""
    if run_checks:
        buffer = io.StringIO()
        failing = run_check(root / "notebooks", file=buffer)
        report = buffer.getvalue()
        print(f"visible checks: {'all pass' if not failing else f'{failing} part(s) not passing yet'}")
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in files(root):
            if path != out:
                archive.write(path, path.relative_to(root).as_posix())
        if report:
            archive.writestr("CHECK.txt", report)
    return out
