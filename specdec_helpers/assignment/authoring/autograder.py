"""A Gradescope autograder: ``python -m specdec_helpers autograder --out DIR [--config points.toml]``.

Writes ``DIR/`` and ``DIR.zip`` (upload the zip as the assignment's autograder)::

    setup.sh          builds the image once: a venv with the instructor's package versions
    run_autograder    per submission: python -m specdec_helpers grade /autograder/submission
                      --config points.toml --results /autograder/results/results.json
    requirements.txt  the kit's requirements; constraints.txt pins the versions installed here
    points.toml       the grading config (--config, else the defaults of points.example.toml)
    kit/              the instructor's kit, solutions and hidden tests included: grading runs the
                      same code as ``grade`` does here

``run_autograder`` reads ``$AUTOGRADER_ROOT`` (default ``/autograder``), so a test can run it in a
temporary folder laid out like Gradescope's (``source/``, ``submission/``, ``results/``).
"""

from __future__ import annotations

import shutil
import zipfile
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

from specdec_helpers.assignment.authoring.release import ROOT, SKIP_PARTS, TEMPLATES, is_kit

#: The kit as the grader needs it (paths relative to the repository root): code, hidden tests, notebooks.
KIT = ["pyproject.toml", "requirements.txt", "conftest.py", "specdec_helpers", "notebooks"]
EXAMPLE_CONFIG = TEMPLATES / "points.example.toml"
PACKAGED_TOY = Path("specdec_helpers") / "data" / "toy"


def check_out(out: Path, root: Path) -> None:
    out, root = out.resolve(), root.resolve()
    if not is_kit(root):
        raise ValueError(f"--root {root} is not the course kit (no specdec_helpers/ and notebooks/ in it)")
    if out == root or out in root.parents or any(out == root / p or (root / p) in out.parents for p in KIT):
        raise ValueError(f"--out {out} would overwrite the kit at {root}; choose a folder outside it (or under build/)")
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; name a folder")
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"--out {out} is not empty; remove it or choose another folder")


def constraints(requirements: Path) -> str:
    """``name==version`` for each requirement installed here (torch without its +cpu/+cuXX tag)."""
    lines = []
    for line in requirements.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        name = Requirement(line).name
        try:
            version = metadata.version(name).split("+", 1)[0]
        except metadata.PackageNotFoundError:
            continue
        lines.append(f"{name}=={version}")
    return "\n".join(lines) + "\n"


def _copy_tree(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(*SKIP_PARTS, "*.pyc"))


def bundle(out, root=ROOT, config=None) -> list[str]:
    """Write the autograder folder ``out`` and ``out.zip``; returns the folder's files (relative)."""
    out, root = Path(out), Path(root)
    check_out(out, root)
    config = Path(config) if config else EXAMPLE_CONFIG
    if not config.is_file():
        raise ValueError(f"--config {config} does not exist")
    if not (root / PACKAGED_TOY / "toy.json").is_file():
        raise ValueError(
            f"the toy pair the grader runs on is missing from {root / PACKAGED_TOY}; "
            "restore it (git checkout specdec_helpers/data/toy) or rebuild it: specdec train-toy"
        )
    out.mkdir(parents=True, exist_ok=True)
    for name in ("setup.sh", "run_autograder"):
        shutil.copy2(TEMPLATES / name, out / name)
    shutil.copy2(root / "requirements.txt", out / "requirements.txt")
    (out / "constraints.txt").write_text(constraints(root / "requirements.txt"))
    shutil.copy2(config, out / "points.toml")
    (out / "kit").mkdir()
    for name in KIT:
        src = root / name
        if src.is_dir():
            _copy_tree(src, out / "kit" / name)
        elif src.is_file():
            shutil.copy2(src, out / "kit" / name)
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    with zipfile.ZipFile(out.with_name(out.name + ".zip"), "w", zipfile.ZIP_DEFLATED) as archive:
        for rel in files:
            info = zipfile.ZipInfo.from_file(out / rel, rel)  # keeps the executable bits of the scripts
            archive.writestr(info, (out / rel).read_bytes(), zipfile.ZIP_DEFLATED)
    return files
