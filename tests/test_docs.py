"""Docs that stay true: every path, module, command and `sd.`/`nb.` name the READMEs promise exists.

A README sentence that names a path is a promise; this test keeps it. It reads the instructor README,
notebooks/README.md and the student README template, and fails on the first name that does not exist,
quoting the document it came from.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

import specdec_helpers as sd
from specdec_helpers.cli import COMMANDS
from specdec_helpers.assignment.student import notebook as nb  # what the notebooks import as nb

ROOT = Path(__file__).resolve().parent.parent
DOCS = [
    ROOT / "README.md",
    ROOT / "notebooks" / "README.md",
    ROOT / "report" / "README.md",
    ROOT / "specdec_helpers" / "assignment" / "authoring" / "templates" / "STUDENT_README.md",
]

CODE = re.compile(r"`([^`\n]+)`")
PATH = re.compile(r"^[\w.\-]+(?:/[\w.\-*]*)+$|^[\w\-]+\.(?:py|md|ipynb|toml|txt|sh|json|cfg)$")
COMMAND = re.compile(r"python -m specdec_helpers ([a-z][a-z\-]*)")
MODULE = re.compile(r"^specdec_helpers(?:\.\w+)+$")
API = re.compile(r"^(sd|nb)\.(\w+)")
#: a Markdown link or image to a file of the repository: [text](path) or ![text](path)
LINK = re.compile(r"\]\(([^)\s#]+)\)")
#: `module.name` with a short module name (`bench.measure_forward_cost`): the module is found by file name.
SHORT = re.compile(r"^([a-z_]+)\.([A-Za-z_]\w*)$")
STEMS = {p.stem: p for p in (ROOT / "specdec_helpers").rglob("*.py") if p.stem != "__init__"}
#: Paths that are written by commands, not shipped (the docs say so where they name them).
GENERATED = (
    "report/build",
    "build/",
    "handin.zip",
    "DIR",
    "ROOT/",
    "../students",
    "/content",
    "/autograder",
    "report/figures",
    "report/tables",
    ".ci-cache",
    "benchmarks/results",
    "__MACOSX",
    # written by the instructor or by a command: results, configs, the autograder bundle's files
    "results.json",
    "perf.json",
    "points.toml",
    "release.toml",
    "setup.sh",
    "constraints.txt",
    # what `grade` writes for a class, and the folders the README's examples name
    "submissions",
    "grades/",
    "similarity.json",
    "similarity.html",
    "gradebook.csv",
    "histogram.png",
    "grade.log",
)


def _spans(doc: Path):
    text = doc.read_text()
    return [m.group(1).strip() for m in CODE.finditer(text)], text


def _resolve(name: str, doc: Path) -> bool:
    """A path is found from the repository root, beside the document, or inside the package."""
    name = name.rstrip("/").split(":")[0]
    for base in (ROOT, doc.parent, ROOT / "specdec_helpers", ROOT / "notebooks"):
        if "*" in name:
            if list(base.glob(name)):
                return True
        elif (base / name).exists():
            return True
    return False


def _paths(doc: Path) -> list[str]:
    spans, text = _spans(doc)
    out = [link for link in LINK.findall(text) if not link.startswith(("http", "mailto:", "{{"))]
    for span in spans:
        for word in span.split():
            word = word.strip("(),;")
            if (
                PATH.match(word)
                and not word.startswith(("http", "git+", "-"))
                and "<" not in word
                and not any(word.startswith(g) or g in word for g in GENERATED)
                and "ORG/" not in word
            ):
                out.append(word)
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name if p.parent.name != "notebooks" else "notebooks/README.md")
def test_every_named_path_exists(doc):
    missing = [p for p in _paths(doc) if not _resolve(p, doc)]
    assert not missing, f"{doc.relative_to(ROOT)} names paths that do not exist: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name if p.parent.name != "notebooks" else "notebooks/README.md")
def test_every_named_command_exists(doc):
    commands = set(COMMAND.findall(doc.read_text()))
    unknown = sorted(commands - set(COMMANDS))
    assert not unknown, f"{doc.relative_to(ROOT)} names commands that do not exist: {unknown}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name if p.parent.name != "notebooks" else "notebooks/README.md")
def test_every_named_module_and_api_exists(doc):
    spans, _ = _spans(doc)
    problems = []
    for span in spans:
        if "{{" in span:  # a Jinja2 placeholder in a template, not a name
            continue
        for word in re.findall(r"[\w.]+", span):
            if MODULE.match(word):
                try:
                    importlib.import_module(word)
                except ImportError:
                    head, _, attr = word.rpartition(".")
                    try:
                        if not hasattr(importlib.import_module(head), attr):
                            problems.append(word)
                    except ImportError:
                        problems.append(word)
            short = SHORT.match(word)
            if (
                short
                and short[1] in STEMS
                and short[2]
                not in ("py", "md", "zip", "json", "toml", "ipynb", "txt", "html", "csv", "png", "log", "pdf", "sh")
            ):
                module = ".".join(STEMS[short[1]].relative_to(ROOT).with_suffix("").parts)
                if not hasattr(importlib.import_module(module), short[2]):
                    problems.append(word)
            m = API.match(word)
            if m and not hasattr({"sd": sd, "nb": nb}[m[1]], m[2]):
                problems.append(word)
    assert not problems, f"{doc.relative_to(ROOT)} names modules or API that do not exist: {sorted(set(problems))}"


def test_the_checker_catches_a_missing_path(tmp_path):
    """The path test can fail: a README naming a file that is not there is caught."""
    doc = tmp_path / "README.md"
    doc.write_text("See `specdec_helpers/core/not_a_module.py` and `notebooks/README.md`.\n")
    assert [p for p in _paths(doc) if not _resolve(p, doc)] == ["specdec_helpers/core/not_a_module.py"]
    doc.write_text("![the explorer](docs/no_such_picture.png) and [a page](https://example.org/x.png)\n")
    assert [p for p in _paths(doc) if not _resolve(p, doc)] == ["docs/no_such_picture.png"]
