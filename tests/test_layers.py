"""The package's layers: imports flow one way (core <- models <- measure <- present <- assignment <- cli),
and no module imports itself back through others (no import circles, not even inside functions)."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "specdec_helpers"
LAYERS = ["core", "models", "measure", "present", "assignment", "cli"]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(path: Path, known: set[str]) -> set[str]:
    """Every package module `path` imports, at the top or inside a function."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and target != "specdec_helpers":
                found.add(target)
    return found


def layer_of(name: str) -> int | None:
    parts = name.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def holds_code(path: Path) -> bool:
    """More than a docstring, imports and ``__all__``: an ``__init__`` that runs or defines something."""
    body = ast.parse(path.read_text()).body
    return any(
        not (
            isinstance(node, (ast.Import, ast.ImportFrom))
            or isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            or isinstance(node, ast.Assign)
            and [getattr(t, "id", "") for t in node.targets] == ["__all__"]
        )
        for node in body
    )


def graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports. An edge into a package's ``__init__`` that only gathers its
    submodules is reached through them, so it does not count; one into an ``__init__`` that holds code does
    (``cli/__init__.py``: importing it from the library is an upward import)."""
    mods = modules()
    return {
        name: {t for t in imports_of(path, set(mods)) if mods[t].name != "__init__.py" or holds_code(mods[t])}
        for name, path in mods.items()
    }


def test_every_module_sits_in_a_layer():
    loose = [n for n in modules() if layer_of(n) is None and n not in ("specdec_helpers", "specdec_helpers.__main__")]
    assert not loose, f"modules outside the layers {LAYERS}: {loose}"


def test_imports_flow_one_way():
    upward = [
        f"{name} imports {target}"
        for name, targets in graph().items()
        for target in targets
        if layer_of(name) is not None and layer_of(target) is not None and layer_of(target) > layer_of(name)
    ]
    assert not upward, "upward imports between layers:\n" + "\n".join(sorted(upward))


#: Inside `assignment/`, by lifecycle, imports flow one way too: what a graded part is (read from cells, assembled
#: into the decoder) <- the tests, as data <- grading (the machinery that runs them) <- the student's tools
#: (check, hand-in, notebook helpers) <- authoring.
ASSIGNMENT = ["parts", "testing", "grading", "student", "authoring"]


def test_assignment_subpackages_flow_one_way():
    def sub(name):
        parts = name.split(".")
        return ASSIGNMENT.index(parts[2]) if len(parts) > 3 and parts[1] == "assignment" else None

    subs = {name.split(".")[2] for name in modules() if name.startswith("specdec_helpers.assignment.")}
    assert subs <= set(ASSIGNMENT), f"assignment/ subpackages outside the order {ASSIGNMENT}: {subs - set(ASSIGNMENT)}"
    upward = [
        f"{name} imports {target}"
        for name, targets in graph().items()
        for target in targets
        if sub(name) is not None and sub(target) is not None and sub(target) > sub(name)
    ]
    assert not upward, f"upward imports inside assignment/ ({' <- '.join(ASSIGNMENT)}):\n" + "\n".join(sorted(upward))


def test_no_import_circles():
    edges = graph()
    cycles = []

    def visit(node, stack, on_stack, done):
        on_stack.add(node)
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt in on_stack:
                cycles.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in done:
                visit(nxt, stack, on_stack, done)
        stack.pop()
        on_stack.discard(node)
        done.add(node)

    done: set[str] = set()
    for node in sorted(edges):
        if node not in done:
            visit(node, [], set(), done)
    assert not cycles, "import circles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_checks_see_a_circle(tmp_path, monkeypatch):
    """The circle finder is not vacuous: two modules importing each other are reported."""
    fake = tmp_path / "specdec_helpers" / "core"
    fake.mkdir(parents=True)
    (fake.parent / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("")
    (fake / "a.py").write_text("from specdec_helpers.core import b\n")
    (fake / "b.py").write_text("def f():\n    from .a import x\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", fake.parent)
    with pytest.raises(AssertionError, match="core.a -> specdec_helpers.core.b"):
        test_no_import_circles()


def test_the_checks_see_an_upward_import_inside_assignment(tmp_path, monkeypatch):
    fake = tmp_path / "specdec_helpers" / "assignment"
    for sub in ("parts", "student"):
        (fake / sub).mkdir(parents=True)
        (fake / sub / "__init__.py").write_text("")
    for init in (fake.parent / "__init__.py", fake / "__init__.py"):
        init.write_text("")
    (fake / "parts" / "cells.py").write_text("def f():\n    from specdec_helpers.assignment.student import check\n")
    (fake / "student" / "check.py").write_text("")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", fake.parent)
    with pytest.raises(AssertionError, match="assignment.parts.cells imports specdec_helpers.assignment.student.check"):
        test_assignment_subpackages_flow_one_way()


def test_each_module_name_is_used_once():
    """A name says which module it is (grep, tracebacks, a reader's memory): ``rounds.py`` twice was two jobs."""
    seen: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name not in ("__init__.py", "__main__.py"):
            seen.setdefault(path.name, []).append(module_name(path))
    twice = {name: where for name, where in seen.items() if len(where) > 1}
    assert not twice, f"module names used more than once: {twice}"


MAX_LINES = 400  # a module a newcomer reads in one sitting (issue #28)


def test_no_module_exceeds_the_line_limit():
    sizes = {name: len(path.read_text().splitlines()) for name, path in modules().items()}
    big = sorted((s, n) for n, s in sizes.items() if s > MAX_LINES)
    assert not big, f"modules over {MAX_LINES} lines; split each along a seam (one job a module): " + ", ".join(
        f"{n} ({s} lines)" for s, n in reversed(big)
    )


def test_the_readme_states_the_line_limit_this_test_keeps():
    readme = (PACKAGE.parent / "README.md").read_text()
    assert f"a module of more than {MAX_LINES} lines" in readme, "README.md's layers paragraph names another limit"


#: What speed is made of: the backend choice and the forwards it chooses between (`core/backends.py`).
BACKENDS = {
    "specdec_helpers.core.backends",
    "specdec_helpers.core.graphs",
    "specdec_helpers.core.lean",
    "specdec_helpers.core.compiled",
    "specdec_helpers.core.cpu_kernels",
    "specdec_helpers.core.capture_rehearsal",
}


def edition_modules() -> dict[str, Path]:
    """The graded parts' modules in both editions: the kit's (``core/reference_*.py``) and the students'."""
    from specdec_helpers.assignment.grading.editions import SWAPS

    paths = [PACKAGE / path for pair in SWAPS.items() for path in pair]
    return {module_name(path): path for path in paths}


def test_edition_modules_import_nothing_of_the_backends():
    """An edition holds what students write (the graded parts, the greedy baseline, the checks that let greedy
    decoding run): which forward runs, over which cache, is `backends`' choice, the same in both editions."""
    names = set(modules())
    found = {name: sorted(imports_of(path, names) & BACKENDS) for name, path in edition_modules().items()}
    assert len(found) == 4 and not any(found.values()), found
    assert BACKENDS <= names  # the list names real modules (a rename would empty the check)


def test_the_edition_check_sees_a_backend_import(tmp_path, monkeypatch):
    module = tmp_path / "specdec_helpers" / "core" / "reference_loop.py"
    module.parent.mkdir(parents=True)
    module.write_text("def f():\n    from specdec_helpers.core.graphs import static_forward\n")
    known = set(modules())
    monkeypatch.setattr(__import__(__name__), "PACKAGE", module.parents[1])
    assert imports_of(module, known) & BACKENDS == {"specdec_helpers.core.graphs"}
