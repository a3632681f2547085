"""Write the student kit: ``python -m specdec_helpers release --out DIR``.

Instructor sources use nbgrader's markers, in Python files and in notebook cells alike:

- ``### BEGIN SOLUTION`` ... ``### END SOLUTION``: replaced by ``# YOUR CODE HERE`` and
  ``raise NotImplementedError()`` at the same indentation (markdown cells: ``YOUR ANSWER HERE``);
- ``### BEGIN HIDDEN TESTS`` ... ``### END HIDDEN TESTS``: removed;
- in Python files, ``### BEGIN INSTRUCTOR ONLY`` ... ``### STUDENT EDITION`` ... ``### END INSTRUCTOR ONLY``:
  the kit's own implementation of a graded part (the instructor edition runs the first half); the
  student edition gets the second half, written as comments (``# `` removed on release), usually a
  ``raise`` that names the notebook where the student writes that part.

Whole modules go the same way (``editions.SWAPS``): ``core/reference_*.py``, the kit's own implementations that
the decode loops call, ship as their student editions (``assignment/student/edition_*.py``, which do not ship
under their own names). ``core/`` holds no marker.

Notebook outputs and execution counts are cleared, and every notebook's Colab badge and install line
point at the student repository (``repo_url``: the one students open and install from). The kit gets
its own README (``templates/STUDENT_README.md``), not the instructor's. Instructor-only files (this
tool, the autograder, the mistake catalog, the notebook builder, the kit's own tests) are left out.
Afterwards the kit is scanned; if a marker, an instructor-only file or a line of a solution survived,
the release fails loudly and the folder is deleted, so a leaky kit cannot be shipped by accident.
"""

from __future__ import annotations

import ast
import copy
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import jinja2
import nbformat

from specdec_helpers.assignment.authoring.notebook_sync import fix_notebook
from specdec_helpers.assignment.grading.editions import (  # noqa: F401 - the markers' rules, shared with the grader
    CODE_STUB,
    LINE_BEGIN,
    LINE_ELSE,
    LINE_END,
    STUDENT_LINE,
    TEXT_STUB,
    SWAPS,
    ReleaseError,
    edition_source,
    strip,
)
from specdec_helpers.present.notebook_help import REPO_BRANCH, colab_url, github_path, pip_install_spec

ROOT = Path(__file__).resolve().parents[3]
TEMPLATES = Path(__file__).resolve().parent / "templates"
#: What the kit contains (paths relative to the repository root); its README is written from a template.
INCLUDE = ["pyproject.toml", "requirements.txt", "conftest.py", "specdec_helpers", "notebooks", "report"]
#: Never shipped: solutions, the mistake catalog, the instructor's tools and templates.
INSTRUCTOR_ONLY = [
    "specdec_helpers/assignment/authoring",
    # grading a class and flagging copies: the instructor's (and the thresholds stay private)
    "specdec_helpers/assignment/grading/classroom.py",
    "specdec_helpers/assignment/grading/contain.py",
    "specdec_helpers/assignment/grading/grade_worker.py",
    "specdec_helpers/cli/worker.py",
    "specdec_helpers/assignment/grading/similarity.py",
    "specdec_helpers/assignment/grading/templates",
    "tests",
    "report/build",
]
SKIP_PARTS = {"__pycache__", ".ipynb_checkpoints", ".pytest_cache"}
#: Files the kit gets in a student version (a template here) instead of the instructor's text.
STUDENT_TEMPLATES = {"notebooks/README.md": "NOTEBOOKS_README.md"}

REGION = re.compile(
    r"^(?P<indent>[ \t]*)### BEGIN (?P<kind>SOLUTION|HIDDEN TESTS|INSTRUCTOR ONLY)[ \t]*\n(?P<body>.*?)"
    r"(?:^[ \t]*### STUDENT EDITION[ \t]*\n.*?)?^[ \t]*### END (?P=kind)[ \t]*(?:\n|\Z)",
    re.S | re.M,
)
MARKER = re.compile(r"^[ \t]*### (?:(?:BEGIN|END) (?:SOLUTION|HIDDEN TESTS|INSTRUCTOR ONLY)|STUDENT EDITION)\b", re.M)


def is_solution_cell(cell) -> bool:
    """nbgrader's answer cells: ``metadata.nbgrader.solution`` is true."""
    return bool(cell.get("metadata", {}).get("nbgrader", {}).get("solution"))


def regions(source: str) -> list[str]:
    return [m["body"] for m in REGION.finditer(source)]


def whole_solutions(path: Path) -> list[str]:
    """A notebook's answer cells without markers: all of their text is solution."""
    if path.suffix != ".ipynb":
        return []
    cells = nbformat.read(str(path), as_version=4).cells
    return [c.source for c in cells if is_solution_cell(c) and not MARKER.search(c.source)]


def strip_notebook(nb, where: str = ""):
    """A stripped copy of an nbformat notebook: markers handled per cell, outputs cleared. An answer
    cell (nbgrader ``solution``) without markers becomes the stub as a whole, as in nbgrader."""
    nb = copy.deepcopy(nb)
    for i, cell in enumerate(nb.cells):
        markdown = cell.cell_type == "markdown"
        if is_solution_cell(cell) and not any(LINE_BEGIN.match(line) for line in cell.source.split("\n")):
            cell.source = "\n".join(TEXT_STUB if markdown else CODE_STUB)
        cell.source = strip(cell.source, markdown=markdown, where=f"{where} cell {i}")
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
        return "\n".join(cell.source for cell in nbformat.read(str(path), as_version=4).cells)
    try:
        return path.read_text()
    except (UnicodeDecodeError, OSError):
        return None


def _normal(url: str) -> str:
    """A repository URL reduced to ``host/owner/name`` (https or ssh, with or without .git)."""
    url = url.strip().lower().removesuffix("/").removesuffix(".git")
    url = re.sub(r"^(git\+)?(https?|ssh|git)://", "", url)
    url = re.sub(r"^[^@/]+@", "", url)  # user@ of ssh URLs
    return url.replace(":", "/", 1) if "/" not in url.split(":", 1)[0] and ":" in url else url


def instructor_urls(root: Path) -> list[str]:
    """The instructor repository's own remotes (``git remote -v``); empty when it is no git checkout."""
    try:
        out = subprocess.run(["git", "-C", str(root), "remote", "-v"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return []
    return sorted({line.split()[1] for line in out.stdout.splitlines() if len(line.split()) >= 2})


def is_kit(root: Path) -> bool:
    return (root / "specdec_helpers").is_dir() and (root / "notebooks").is_dir()


def check_paths(out, root=ROOT) -> None:
    """Refuse an ``out`` that would overwrite the instructor's repository, or a ``root`` that is no kit."""
    out, root = Path(out).resolve(), Path(root).resolve()
    if not is_kit(root):
        raise ValueError(
            f"--root {root} is not the course kit (no specdec_helpers/ and notebooks/ in it); "
            "pass the instructor repository's top folder"
        )
    if out == root or root in out.parents:
        raise ValueError(
            f"--out {out} is inside the instructor repository {root}: the release would overwrite or "
            "ship the instructor's files; write it outside, e.g. a clone of the student repository"
        )
    if out in root.parents:
        raise ValueError(f"--out {out} contains the instructor repository {root}; choose a folder outside it")
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; name a folder (empty, absent, or a clone of the student repository)")


def check_repo_url(repo_url: str, root=ROOT, instructor_url: str | None = None) -> None:
    """Refuse a missing, non-GitHub or instructor repository URL: Colab installs the kit from it."""
    if not repo_url:
        raise ValueError(
            "release needs --repo-url: the student repository (https://github.com/OWNER/NAME) that the "
            "notebooks' Colab badges open and their set-up cells install from"
        )
    github_path(repo_url)  # ValueError for a URL that is not a GitHub repository
    own = [u for u in instructor_urls(Path(root)) + [instructor_url or ""] if u]
    for url in own:
        if _normal(url) == _normal(repo_url):
            raise ValueError(
                f"--repo-url {repo_url} is the instructor's own repository ({url}): Colab would install "
                "the solutions from it; give the student repository's URL"
            )


def student_readme(notebooks: list[tuple[str, str]], repo_url: str, branch: str = REPO_BRANCH) -> str:
    """The student repository's README from ``templates/STUDENT_README.md``; ``notebooks``: (file, title)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES), keep_trailing_newline=True, undefined=jinja2.StrictUndefined
    )
    items = [dict(file=name, title=title, colab=colab_url(name, repo_url, branch)) for name, title in notebooks]
    return env.get_template("STUDENT_README.md").render(
        repo_url=repo_url.rstrip("/").removesuffix(".git"),
        github=github_path(repo_url),
        branch=branch,
        install=pip_install_spec(repo_url, branch),
        notebooks=items,
    )


def _title(nb, name: str) -> str:
    first = nb.cells[0].source if nb.cells and nb.cells[0].cell_type == "markdown" else ""
    heading = next((line for line in first.splitlines() if line.startswith("# ")), "")
    return heading[2:].strip() or name


def release(
    out, root=ROOT, repo_url: str | None = None, branch: str = REPO_BRANCH, instructor_url: str | None = None
) -> list[str]:
    """Write the kit to ``out`` (empty or absent) and verify it; returns the relative paths written.

    ``repo_url``: the student repository; badges and install lines point there. Raises ValueError for a
    bad ``out``/``root``/``repo_url`` (nothing written), ReleaseError if the kit would leak.
    """
    check_paths(out, root)
    check_repo_url(repo_url, root, instructor_url)
    root, out = Path(root), Path(out)
    written, secrets, notebooks = [], {}, []
    for path, rel in _files(root):
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if rel in STUDENT_TEMPLATES:  # the student's own text in place of the instructor's
            target.write_text((TEMPLATES / STUDENT_TEMPLATES[rel]).read_text())
        elif path.suffix == ".ipynb":
            nb = strip_notebook(nbformat.read(str(path), as_version=4), rel)
            fix_notebook(nb, path.name, repo_url, branch)
            nbformat.write(nb, str(target))
            if rel.startswith("notebooks/") and rel.count("/") == 1 and path.name[0].isdigit():
                notebooks.append((path.name, _title(nb, path.name)))
        elif path.suffix == ".py":
            inside = rel.startswith("specdec_helpers/")
            shipped = edition_source(root / "specdec_helpers", rel.removeprefix("specdec_helpers/")) if inside else path
            if shipped is None:
                continue  # a student module: it ships in its instructor module's place
            target.write_text(strip(shipped.read_text(), where=rel))
        else:
            shutil.copy2(path, target)
        if path.suffix in (".py", ".ipynb"):
            source = _text(path)
            swapped = rel.removeprefix("specdec_helpers/") in SWAPS and inside  # all of it is the instructor's
            secrets[rel] = (
                [source] if swapped else regions(source) + whole_solutions(path),
                target.read_text() if swapped else REGION.sub("", source),
            )
        written.append(rel)
    (out / "README.md").write_text(student_readme(sorted(notebooks), repo_url, branch))
    written.append("README.md")
    verify(out, secrets)
    return written


def _distinctive(body: str, visible: str) -> list[str]:
    """Lines of a hidden region long enough to be telling and not also in the file's visible text."""
    lines = [line.strip() for line in body.splitlines()]
    return [line for line in lines if len(line) >= 16 and not line.startswith("#") and line not in visible]


def _shifted_rows(node: ast.Subscript) -> bool:
    """Does this subscript pick the rows that judge a draft, off by one: ``logits[..., -(k + 1):]`` (the last k + 1
    positions) or ``logits[start - 1 : start + k]``?"""
    if "logit" not in ast.unparse(node.value).lower():
        return False
    parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    for part in parts:
        if not isinstance(part, ast.Slice) or part.lower is None:
            continue
        low, high = part.lower, part.upper
        plus_one = lambda e: (
            isinstance(e, ast.BinOp)
            and isinstance(e.op, ast.Add)
            and isinstance(e.right, ast.Constant)
            and e.right.value == 1
        )
        if isinstance(low, ast.UnaryOp) and isinstance(low.op, ast.USub) and plus_one(low.operand) and high is None:
            return True
        if (
            isinstance(low, ast.BinOp)
            and isinstance(low.op, ast.Sub)
            and isinstance(low.right, ast.Constant)
            and low.right.value == 1
            and isinstance(high, ast.BinOp)
            and isinstance(high.op, ast.Add)
        ):
            return True
    return False


def scoring_passes(source: str, where: str = "") -> list[str]:
    """Where ``source`` (Python) implements the off-by-one scoring pass of notebook 03 (the target's logits cut to
    the k + 1 rows that judge a draft), whatever the function is called: ``where:line: code`` per place."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    return [
        f"{where}:{node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Subscript) and _shifted_rows(node)
    ]


def verify(out: Path, secrets: dict[str, tuple[list[str], str]]) -> None:
    """Fail loudly if a marker, an instructor-only file, a solution/hidden-test line or a scoring pass (`scoring_passes`:
    the heart of notebook 03, under any name) is in the kit.

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
        if path.suffix == ".py":
            problems += [f"a scoring pass is in the kit: {place}" for place in scoring_passes(text, rel)]
    if problems:
        raise ReleaseError("\n".join(problems))


SETTINGS = ("out", "root", "repo_url", "branch", "instructor_url")


def load_settings(path) -> dict:
    """Release settings from a TOML file (keys at the top or in a ``[release]`` table)."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"--config {path}: {error}") from None
    data = data.get("release", data)
    unknown = set(data) - set(SETTINGS)
    if unknown:
        raise ValueError(f"--config {path}: unknown keys {sorted(unknown)}; known: {', '.join(SETTINGS)}")
    return data


def clear(out: Path) -> None:
    """Empty ``out`` but keep its ``.git``: releasing into a clone of the student repository keeps the clone."""
    for child in Path(out).iterdir():
        if child.name != ".git":
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()


def publish(
    out=None,
    root=ROOT,
    repo_url: str | None = None,
    branch: str = REPO_BRANCH,
    instructor_url: str | None = None,
    force: bool = False,
) -> list[str]:
    """`release` after every check, into an empty folder or (``force``) a replaced one whose ``.git``
    stays; if the kit would leak, the folder is emptied again and ReleaseError raised."""
    if not out:
        raise ValueError("release needs --out (or out in --config): the folder for the student repository")
    out = Path(out)
    check_paths(out, root)
    check_repo_url(repo_url, root, instructor_url)
    if out.exists() and any(p.name != ".git" for p in out.iterdir()):
        if not force:
            raise ValueError(f"{out} is not empty; use --force to replace its files (a .git folder is kept)")
        clear(out)
    try:
        return release(out, root, repo_url, branch, instructor_url)
    except ReleaseError:
        clear(out) if (out / ".git").exists() else shutil.rmtree(out, ignore_errors=True)
        raise
