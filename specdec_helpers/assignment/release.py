"""Write the student kit: ``python -m specdec_helpers release --out DIR``.

Instructor sources use nbgrader's markers, in Python files and in notebook cells alike:

- ``### BEGIN SOLUTION`` ... ``### END SOLUTION``: replaced by ``# YOUR CODE HERE`` and
  ``raise NotImplementedError()`` at the same indentation (markdown cells: ``YOUR ANSWER HERE``);
- ``### BEGIN HIDDEN TESTS`` ... ``### END HIDDEN TESTS``: removed.

Notebook outputs and execution counts are cleared. Instructor-only files (this tool, the mistake
catalog, the notebook builder with its solutions, the test suite of the kit itself) are left out.
Afterwards the kit is scanned; if a marker, an instructor-only file or a line of a solution survived,
the release fails loudly and the folder is deleted, so a leaky kit cannot be shipped by accident.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: What the kit contains (paths relative to the repository root).
INCLUDE = ["README.md", "pyproject.toml", "requirements.txt", "conftest.py", "specdec_helpers", "notebooks", "report"]
#: Never shipped: solutions, the mistake catalog, the release tool itself.
INSTRUCTOR_ONLY = ["specdec_helpers/assignment/release.py", "specdec_helpers/assignment/mutations.py",
                   "notebooks/_build.py", "tests", "report/build"]
SKIP_PARTS = {"__pycache__", ".ipynb_checkpoints", ".pytest_cache"}

REGION = re.compile(
    r"^(?P<indent>[ \t]*)### BEGIN (?P<kind>SOLUTION|HIDDEN TESTS)[ \t]*\n(?P<body>.*?)^[ \t]*### END (?P=kind)[ \t]*(?:\n|\Z)",
    re.S | re.M,
)
MARKER = re.compile(r"^[ \t]*### (?:BEGIN|END) (?:SOLUTION|HIDDEN TESTS)\b", re.M)


class ReleaseError(Exception):
    """The kit would leak solutions or hidden tests, or a marker is malformed."""


def strip(source: str, markdown: bool = False, where: str = "") -> str:
    """``source`` with solutions stubbed out and hidden tests removed."""
    def replace(m: re.Match) -> str:
        if m["kind"] == "HIDDEN TESTS":
            return ""
        if markdown:
            return f"{m['indent']}YOUR ANSWER HERE\n"
        return f"{m['indent']}# YOUR CODE HERE\n{m['indent']}raise NotImplementedError()\n"

    out = REGION.sub(replace, source)
    left = MARKER.search(out)
    if left:
        line = out[: left.start()].count("\n") + 1
        raise ReleaseError(f"{where}: unmatched marker {left.group().strip()!r} (line {line} after stripping)")
    return out


def regions(source: str) -> list[str]:
    return [m["body"] for m in REGION.finditer(source)]


def strip_notebook(nb, where: str = ""):
    """A stripped copy of an nbformat notebook: markers handled per cell, outputs cleared."""
    import copy

    nb = copy.deepcopy(nb)
    for i, cell in enumerate(nb.cells):
        cell.source = strip(cell.source, markdown=cell.cell_type == "markdown", where=f"{where} cell {i}")
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        cell.metadata.pop("execution", None)
    return nb


def _files(root: Path):
    for name in INCLUDE:
        path = root / name
        paths = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else []
        for p in paths:
            rel = p.relative_to(root).as_posix()
            if SKIP_PARTS & set(p.parts) or any(rel == x or rel.startswith(x + "/") for x in INSTRUCTOR_ONLY):
                continue
            yield p, rel


def _text(path: Path) -> str | None:
    """What a reader sees: a notebook's cell sources joined; a text file's text; None for binaries."""
    if path.suffix == ".ipynb":
        import nbformat

        return "\n".join(cell.source for cell in nbformat.read(str(path), as_version=4).cells)
    try:
        return path.read_text()
    except (UnicodeDecodeError, OSError):
        return None


def release(out, root=ROOT) -> list[str]:
    """Write the kit to ``out`` and verify it; returns the relative paths written."""
    import nbformat

    root, out = Path(root), Path(out)
    written, secrets = [], {}
    for path, rel in _files(root):
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".ipynb":
            nbformat.write(strip_notebook(nbformat.read(str(path), as_version=4), rel), str(target))
        elif path.suffix == ".py":
            target.write_text(strip(path.read_text(), where=rel))
        else:
            shutil.copy2(path, target)
        if path.suffix in (".py", ".ipynb"):
            source = _text(path)
            secrets[rel] = (regions(source), REGION.sub("", source))
        written.append(rel)
    verify(out, secrets)
    return written


def _distinctive(body: str, visible: str) -> list[str]:
    """Lines of a hidden region long enough to be telling and not also in the file's visible text."""
    lines = [line.strip() for line in body.splitlines()]
    return [line for line in lines if len(line) >= 16 and not line.startswith("#") and line not in visible]


def verify(out: Path, secrets: dict[str, tuple[list[str], str]]) -> None:
    """Fail loudly if a marker, an instructor-only file, or a solution/hidden-test line is in the kit.

    ``secrets``: per released file, the bodies of its regions and the source's text outside them.
    """
    problems = []
    for rel in INSTRUCTOR_ONLY:
        if (out / rel).exists():
            problems.append(f"instructor-only {rel} is in the kit")
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        rel = path.relative_to(out).as_posix()
        text = _text(path)
        if text is None:
            continue  # binary data
        if MARKER.search(text):
            problems.append(f"{rel}: a solution/hidden-test marker survived")
        bodies, visible = secrets.get(rel, ([], ""))
        for body in bodies:
            leaked = [line for line in _distinctive(body, visible) if line in text]
            if leaked:
                problems.append(f"{rel}: solution/hidden-test text leaked: {leaked[0]!r}")
    if problems:
        raise ReleaseError("\n".join(problems))
