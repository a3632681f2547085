"""The graded cells of the notebooks: found by their nbgrader ``grade_id``, read and loaded.

One extraction used by the notebooks (a later notebook loads the student's earlier parts from its
sibling notebooks), by ``check``, ``handin`` and the grader alike. A graded cell is a code cell
whose nbgrader metadata has ``"solution": true``; its ``grade_id`` names the part (`decoder.PARTS`).
"""

from __future__ import annotations

import ast
import linecache
import re
import sys
from pathlib import Path

from specdec_helpers.assignment.parts.decoder import FUNCTIONS, NOTEBOOK_OF, PARTS, STANDINS, build_decoder

#: The one import a graded cell may take from the kit: cache bookkeeping is plumbing, not the exercise.
ALLOWED_KIT_IMPORTS = ("specdec_helpers.core.cache",)
#: Where Colab's File > Save a copy in Drive puts notebooks, once the student has mounted Drive.
COLAB_DRIVE_NOTEBOOKS = Path("/content/drive/MyDrive/Colab Notebooks")
_STUB = re.compile(r"^\s*raise NotImplementedError\(\)\s*$", re.M)


def nbgrader(cell) -> dict:
    return (cell.get("metadata") or {}).get("nbgrader") or {}


def graded_cells(nb) -> dict[str, str]:
    """``{grade_id: source}`` of a notebook's graded (solution) code cells."""
    return {
        nbgrader(c)["grade_id"]: c["source"]
        for c in nb["cells"]
        if c["cell_type"] == "code" and nbgrader(c).get("solution") and nbgrader(c).get("grade_id")
    }


def read_notebook(path):
    import nbformat

    return nbformat.read(str(path), as_version=4)


def notebook_files(paths) -> list[Path]:
    """The notebooks among ``paths`` (files, or folders searched recursively), without Jupyter's
    checkpoints and the ``__MACOSX/._*.ipynb`` resource forks a zip made on a Mac carries."""
    files = []
    for path in map(Path, paths):
        files += sorted(path.rglob("*.ipynb")) if path.is_dir() else [path]
    return [f for f in files if not {".ipynb_checkpoints", "__MACOSX"} & set(f.parts) and not f.name.startswith("._")]


def graded_cell_copies(files, skip_unreadable: bool = False) -> dict[str, list[tuple[str, Path]]]:
    """``{part: [(cell source, notebook), ...]}``, in file order: every notebook among ``files`` that holds a
    part of `decoder.PARTS`, found by grade_id whatever the notebook is called ("Copy of 03_...": Colab's
    name for a saved copy)."""
    copies: dict[str, list[tuple[str, Path]]] = {}
    for file in files:
        try:
            nb = read_notebook(file)
        except Exception:  # not a notebook (a half-uploaded file): nothing to find in it
            if skip_unreadable:
                continue
            raise
        for grade_id, source in graded_cells(nb).items():
            if grade_id in PARTS:
                copies.setdefault(grade_id, []).append((source, Path(file)))
    return copies


def chosen_copy(copies: list[tuple[str, Path]]) -> tuple[str, Path]:
    """Of several copies of one part, the one graded: the last finished one, else the last."""
    return next((c for c in reversed(copies) if not is_stub(c[0])), copies[-1])


def graded_cells_in(files, skip_unreadable: bool = False) -> dict[str, tuple[str, Path]]:
    """``{part: (cell source, notebook)}``: the copy `chosen_copy` takes of each part in ``files``."""
    return {part: chosen_copy(c) for part, c in graded_cell_copies(files, skip_unreadable).items()}


def graded_sources(paths) -> dict[str, str]:
    """``{part: cell source}`` for the graded parts found in the notebooks ``paths`` (files or folders);
    see `graded_cells_in` for which cell wins."""
    return {part: source for part, (source, _) in graded_cells_in(notebook_files(paths)).items()}


def is_stub(source: str) -> bool:
    """The released stub (``raise NotImplementedError()`` on a line of its own) is still there."""
    return bool(_STUB.search(source))


#: What reads a function's insides or a caller's frame: the way around the grader's guard on the kit's functions.
INTROSPECTION = (
    "__closure__",
    "cell_contents",
    "__globals__",
    "__wrapped__",
    "__code__",
    "f_globals",
    "f_locals",
    "f_back",
    "gi_frame",
    "tb_frame",
)


def kit_references(source: str) -> list[str]:
    """What a graded cell takes from the kit beyond cache bookkeeping (a part that delegates to the
    kit's own implementation earns nothing): imports of other kit modules, and dynamic imports."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found = []
    # the modules that reach any other module, under whatever name the cell binds them to (import sys as s)
    loaders = {"sys", "importlib", "decoder"} | {
        alias.asname
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.asname and alias.name.split(".")[0] in ("sys", "importlib", "builtins")
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("sys", "importlib", "builtins"):
            found += [
                f"from {node.module} import {a.name}"
                for a in node.names
                if a.name in ("modules", "import_module", "__import__", "*", "reload", "util", "machinery")
            ]
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if module.startswith("specdec_helpers") and module not in ALLOWED_KIT_IMPORTS:
                found.append(f"from {module} import ...")
            if module == "specdec_helpers":
                found.append("from specdec_helpers import ...")
        elif isinstance(node, ast.Import):
            found += [
                f"import {a.name}"
                for a in node.names
                if a.name.startswith("specdec_helpers") and a.name not in ALLOWED_KIT_IMPORTS
            ]
        elif isinstance(node, ast.Name) and node.id in ("__import__", "STANDINS", "exec", "eval", "compile"):
            found.append(node.id)
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in ("modules", "import_module", "STANDINS")
            and isinstance(node.value, ast.Name)
            and node.value.id in loaders
        ):
            found.append(f"{node.value.id}.{node.attr}")
        elif (
            isinstance(node, ast.Attribute)
            and node.attr == "modules"
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "sys"
        ):  # torch.sys.modules and its kind
            found.append("sys.modules")
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in INTROSPECTION
            or isinstance(node, ast.Constant)
            and node.value in INTROSPECTION
        ):  # getattr(f, "__closure__") too
            found.append(node.attr if isinstance(node, ast.Attribute) else node.value)
    return found + _package_reaches(tree)


def _package_reaches(tree: ast.AST) -> list[str]:
    """``import specdec_helpers.core.cache`` binds the name ``specdec_helpers``: the whole package is then an
    attribute away (``specdec_helpers.core.verify``). Every use of that name other than a path into the
    allowed modules is a reach into the kit."""
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Name) and node.id == "specdec_helpers"):
            continue
        path, top = [node.id], node
        while isinstance(parents.get(top), ast.Attribute):
            top = parents[top]
            path.append(top.attr)
        dotted = ".".join(path)
        if not any(dotted.startswith(allowed + ".") for allowed in ALLOWED_KIT_IMPORTS):
            found.append(dotted)
    return found


def compile_graded(text: str, where: str = "<graded cell>"):
    """``text`` compiled under the name ``where``, its lines kept in `linecache`: tracebacks and the grader's
    line-level feedback (`devices`) can then show the graded cell's own lines."""
    linecache.cache[where] = (len(text), None, text.splitlines(True), where)
    return compile(text, where, "exec")


def exec_cell(source: str, where: str = "<graded cell>") -> dict:
    """Run a graded cell's source in a fresh namespace and return the graded functions it defines.
    IPython magics and shell escapes are dropped."""
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    namespace: dict = {"__name__": "__graded__"}
    exec(compile_graded("\n".join(lines) + "\n", where), namespace)
    return {name: namespace[name] for name in FUNCTIONS if callable(namespace.get(name))}


def load_functions(sources: dict[str, str]) -> dict:
    """The graded functions defined by ``{part: source}``, stubs left out (`decoder.STANDINS` fills in)."""
    functions = {}
    for part, source in sources.items():
        if is_stub(source):
            continue
        defined = exec_cell(source, f"<graded cell {part}>")
        functions.update({name: fn for name, fn in defined.items() if name in PARTS[part]})
    return functions


def earlier_parts(notebook: str, folder=".", verbose: bool = True) -> dict:
    """For notebook ``notebook`` (e.g. ``"04"``): the student's own functions of the parts taught in
    earlier notebooks, read from the notebooks in ``folder`` (any name: Colab saves "Copy of 02_...",
    browsers download "02_... (1).ipynb"; the newest finished one wins) and, on Colab, in a mounted
    Drive's "Colab Notebooks" (where Save a copy in Drive puts them), when they are there and finished.
    Prints which parts are yours and which are missing (the instructor edition: the kit's stand-ins), and how
    to use yours."""
    folder = Path(folder)
    wanted = [part for part, nb in NOTEBOOK_OF.items() if nb < notebook]
    colab = "google.colab" in sys.modules  # `notebook_help.in_colab`, not imported: the graded child needs no present/
    folders = [folder] + ([COLAB_DRIVE_NOTEBOOKS] if colab and COLAB_DRIVE_NOTEBOOKS.is_dir() else [])
    files = sorted(notebook_files([p for f in folders for p in f.glob("*.ipynb")]), key=lambda f: f.stat().st_mtime)
    found = {part: hit for part, hit in graded_cells_in(files, skip_unreadable=True).items() if part in wanted}
    functions, lines = {}, []
    for part in wanted:
        source, file = found.get(part, (None, None))
        try:
            mine = load_functions({part: source}) if source is not None else {}
        except Exception as error:  # noqa: BLE001 - the student's cell does not run: say so, use the kit's
            mine, why = {}, f"your cell in {file.name} fails ({type(error).__name__}: {error})"
        else:
            why = (
                "no notebook next to this one has it"
                if source is None
                else f"your cell in {file.name} is not finished"
                if not mine
                else ""
            )
        functions.update(mine)
        lines.append(
            f"  {part:7s} ({NOTEBOOK_OF[part]}): " + (f"yours ({file.name})" if mine else f"{_fallback(part)} ({why})")
        )
    if verbose and wanted:
        print("Parts from earlier notebooks:\n" + "\n".join(lines))
        if any(part not in found for part in wanted):
            print(
                f"To use yours, put your notebooks {NOTEBOOK_OF[wanted[0]]}-{NOTEBOOK_OF[wanted[-1]]} in "
                f"{folder.resolve()} and run this cell again. On Colab: File > Download > Download .ipynb in "
                "each notebook's tab, then upload it with the Files pane (the folder icon on the left); or, if "
                "you saved them with File > Save a copy in Drive, mount Drive there (Mount Drive button)."
            )
    return functions


def assemble(notebook: str, folder=".", verbose: bool = True, **functions) -> type:
    """``SpeculativeDecoder`` for a notebook: its own ``functions``, the earlier parts from
    `earlier_parts`, and `decoder.STANDINS` for the rest (in the student edition: placeholders that raise
    `decoder.PartMissing`, naming the notebook to finish)."""
    earlier = earlier_parts(notebook, folder, verbose)
    unfinished = [name for name, fn in functions.items() if _is_stub_function(fn)]
    if unfinished and verbose:
        print(
            f"Not finished yet ({', '.join(unfinished)}): "
            + ("calling them says so." if _student_edition() else "the kit's stand-ins used instead.")
        )
    mine = {name: fn for name, fn in functions.items() if name not in unfinished}
    return build_decoder(**{**earlier, **mine})


def _student_edition() -> bool:
    """The released kit: its `STANDINS` are placeholders that name the notebook to finish, not answers."""
    return any(getattr(fn, "missing_part", False) for fn in STANDINS.values())


def _fallback(part: str) -> str:
    return f"MISSING: finish notebook {NOTEBOOK_OF[part]} first" if _student_edition() else "the kit's stand-in"


def _is_stub_function(fn) -> bool:
    import inspect

    try:
        return is_stub(inspect.getsource(fn))
    except (OSError, TypeError):
        return False
