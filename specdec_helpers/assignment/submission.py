"""Find and import a student's ``SpeculativeDecoder``: from the exercise module, a notebook, a folder
or a hand-in zip.

Notebooks are not executed. Their code cells are reduced to definitions (imports, functions,
classes, constant assignments) and imported as a module: that is what grading needs, it takes no
time, needs no hub access and cannot be derailed by a cell that loads Pythia-1.4b or runs a
benchmark. (Executing with nbclient would run all of that, on the grader's CPU, offline.)
"""
from __future__ import annotations

import ast
import hashlib
import importlib.util
import sys
import tempfile
import zipfile
from pathlib import Path

CLASS_NAME = "SpeculativeDecoder"
MODULE_CANDIDATES = ("specdec_helpers/assignment/exercises.py", "exercises.py")


class SubmissionError(Exception):
    """The submission cannot be loaded; the message says what was looked for."""


def import_file(path: Path):
    """Import ``path`` as a submodule of `specdec_helpers`, so its relative imports (``from .cache import
    ...``) resolve against the installed kit; a unique name keeps submissions apart."""
    path = Path(path).resolve()
    digest = hashlib.sha1(str(path).encode() + path.read_bytes()).hexdigest()[:10]
    name = f"specdec_helpers._submission_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception:
        del sys.modules[name]
        raise
    return module


def _keep(node: ast.stmt) -> bool:
    """Definitions only: no model loading, benchmarks or prints run at import."""
    if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return True
    if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
        return not any(isinstance(n, (ast.Call, ast.Await, ast.Yield)) for n in ast.walk(node.value))
    return False


def notebook_source(path: Path) -> str:
    """The definitions from a notebook's code cells, in order, as one module's source."""
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    parts = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        # IPython magics and shell escapes are not Python.
        lines = [line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!"))]
        source = "\n".join(lines)
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        kept = [ast.get_source_segment(source, node, padded=True) for node in tree.body if _keep(node)]
        # Decorators are not part of a node's segment: re-attach them.
        for node, text in zip([n for n in tree.body if _keep(n)], kept):
            decorators = getattr(node, "decorator_list", [])
            prefix = "".join("@" + ast.get_source_segment(source, d) + "\n" for d in decorators)
            parts.append(prefix + text)
    return "\n\n".join(parts) + "\n"


def import_notebook(path: Path):
    source = notebook_source(path)
    folder = Path(tempfile.mkdtemp(prefix="specdec-nb-"))
    module_path = folder / (Path(path).stem.replace("-", "_").replace(".", "_") + ".py")
    module_path.write_text(source)
    return import_file(module_path)


def _defines_class(path: Path) -> bool:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return False
    return f"class {CLASS_NAME}" in text


def find_in_folder(folder: Path) -> Path:
    """The exercise module if present, else the first notebook (by name) that defines the class."""
    for candidate in MODULE_CANDIDATES:
        if (folder / candidate).is_file():
            return folder / candidate
    hits = sorted(p for p in folder.rglob("*.py") if _defines_class(p) and ".ipynb_checkpoints" not in p.parts)
    hits += sorted(p for p in folder.rglob("*.ipynb") if _defines_class(p) and ".ipynb_checkpoints" not in p.parts)
    if not hits:
        raise SubmissionError(f"no {CLASS_NAME} found in {folder}: looked for {', '.join(MODULE_CANDIDATES)} and for "
                              f"'class {CLASS_NAME}' in its .py and .ipynb files")
    return hits[0]


def load(path) -> tuple[type, Path]:
    """``(SpeculativeDecoder class, the file it came from)`` for a .py, .ipynb, folder or .zip."""
    path = Path(path)
    if not path.exists():
        raise SubmissionError(f"{path} does not exist")
    if path.suffix == ".zip":
        folder = Path(tempfile.mkdtemp(prefix="specdec-handin-"))
        with zipfile.ZipFile(path) as archive:
            archive.extractall(folder)
        path = folder
    if path.is_dir():
        path = find_in_folder(path)
    try:
        module = import_notebook(path) if path.suffix == ".ipynb" else import_file(path)
    except Exception as error:
        raise SubmissionError(f"importing {path.name} failed: {type(error).__name__}: {error}") from error
    cls = getattr(module, CLASS_NAME, None)
    if not isinstance(cls, type):
        raise SubmissionError(f"{path.name} defines no class {CLASS_NAME}")
    return cls, path
