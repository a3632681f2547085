"""The mechanics under `privilege`: the student's read-only view of the kit, bubblewrap's arguments,
resource limits (the student users and their processes are `student_users`')."""

from __future__ import annotations

import ast
import functools
import glob
import importlib.util
import os
import re
import shutil
import site
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

from specdec_helpers.assignment.grading.student_users import (  # noqa: F401 - the tests reach them as isolation.X
    USER,
    _lock_folder,
    _student_user,
    ensure_user,
    processes_of,
)

PACKAGE = Path(__file__).resolve().parents[2]  # specdec_helpers/
ROOT = PACKAGE.parent
#: Never in the student's view: the instructor's tools; nor grading/ (the grader) and testing/ (the hidden tests)
#: but for `needs`.
HIDDEN_PARTS = ("assignment/authoring",)
GUARDED = ("grading", "testing")
#: Where the student's processes start: the graded cells' child; the notebooks' kernels, which may import any
#: library module (the package, core/, models/, measure/, present/, assignment/student/) but no command (cli/).
ROOTS = {"child": ("specdec_helpers.assignment.grading.child",), "kernel": ("library",)}


_bwrap_ok: dict = {}


def bwrap_works() -> bool:
    """bubblewrap is installed and can make its namespaces here (Docker's default seccomp profile, as on
    Gradescope, forbids that); as root, ``setpriv`` is needed too."""
    key = os.geteuid()
    if key not in _bwrap_ok:
        ok = False
        if shutil.which("bwrap") and (key != 0 or shutil.which("setpriv")):
            try:
                ok = (
                    subprocess.run(
                        [
                            "bwrap",
                            "--unshare-all",
                            "--die-with-parent",
                            "--ro-bind",
                            "/",
                            "/",
                            "--proc",
                            "/proc",
                            "--dev",
                            "/dev",
                            "true",
                        ],
                        capture_output=True,
                        timeout=30,
                        cwd="/",
                    ).returncode
                    == 0
                )
            except (OSError, subprocess.SubprocessError):
                ok = False
        _bwrap_ok[key] = ok
    return _bwrap_ok[key]


# --------------------------------------------------------------------------- the student's view of the kit

_views: dict = {}


def _module_file(name: str, package: Path = PACKAGE) -> Path | None:
    rel = Path(*name.split(".")[1:])
    for candidate in (package / rel / "__init__.py", package / rel.with_suffix(".py")) if rel.parts else ():
        if candidate.is_file():
            return candidate
    return package / "__init__.py" if not rel.parts else None


def _imports(path: Path) -> set[str]:
    """Every kit module ``path`` names in an import statement, at any depth (lazy imports included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name.split(".")[0] == "specdec_helpers"}


def imported(roots, package: Path = PACKAGE) -> dict[str, Path]:
    """Module name -> file of every kit module that ``roots`` import (with their packages), at any depth, lazy
    imports included, read from the sources in ``package``: all a process started at ``roots`` can import."""
    seen, todo = {}, list(roots)
    while todo:
        name = todo.pop()
        path = None if name in seen or ".assignment.authoring" in name else _module_file(name, package)
        if path is None:
            continue
        seen[name] = path
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))] + sorted(_imports(path))
    return seen


@functools.lru_cache(maxsize=None)
def needs(kind: str) -> tuple[str, ...]:
    """The files of grading/ and testing/ that the student's processes of ``kind`` import (`ROOTS`, then every kit module
    they import, read from the sources): the only ones in their view. Derived, so a new module cannot be
    forgotten (a kernel without one fails every notebook's set-up cell)."""
    roots = list(ROOTS[kind])
    if "library" in roots:
        roots.remove("library")
        for path in PACKAGE.rglob("*.py"):
            name = ".".join(("specdec_helpers", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(
                ".__init__"
            )
            if not name.startswith(
                (
                    *(f"specdec_helpers.assignment.{sub}" for sub in GUARDED),
                    "specdec_helpers.assignment.authoring",
                    "specdec_helpers.cli",
                    "specdec_helpers.__main__",
                )
            ):
                roots.append(name)
    return tuple(
        sorted(
            {
                p.relative_to(PACKAGE / "assignment").as_posix()
                for p in imported(roots).values()
                if p.parent.name in GUARDED and p.parent.parent == PACKAGE / "assignment"
            }
        )
    )


#: The only ``core`` modules the graded child imports (`least_code` derives the view; tests/test_child_view.py fails
#: when it grows), and why each is safe to keep: none decodes, drafts, verifies or samples.
CHILD_CORE = {
    "cache": "the one kit import a graded cell may take (`cells.ALLOWED_KIT_IMPORTS`): cache bookkeeping (new, "
    "length, crop), which notebooks 02-04 hand students as plumbing",
    "cpu_kernels": "the oneDNN Linear layers of the test worlds' and the timed pair's models (`world.as_timed`, "
    "`preset_models`): they run inside a model's forward, the same for every decoder",
    "timing": "the clock of `DecoderBase.benchmark` (PA3's benchmark): reads time, decodes nothing",
}
#: What the graded child's view keeps besides its modules: the shipped toy pair the test worlds are built from
#: (weights and tokenizer, no code) and its notice.
CHILD_DATA = ("data/toy", "data/NOTICE")


def least_code(package: Path) -> None:
    """Leave in the graded child's view (``package``, the student edition) only the modules the child imports
    (`imported` from `ROOTS`, read from that edition) and `CHILD_DATA`. The package's ``__init__`` there names
    the version only: the kit's own re-exports every decode loop, drafter and sampler, and a module that is absent
    cannot stand in for a graded step, however it is reached (a closure, ``gc``, ``sys.modules``, a file path)."""
    init = package / "__init__.py"
    version = re.search(r'^__version__ = "[^"]*"$', init.read_text(), re.M)
    init.write_text(
        f'"""The kit, as the graded child sees it: only the modules it imports (`isolation`)."""\n\n{version[0]}\n'
    )
    keep = set(imported(ROOTS["child"], package).values())
    for path in sorted(package.rglob("*"), reverse=True):  # files before their folders
        rel = path.relative_to(package).as_posix()
        if any(rel == d or rel.startswith(d + "/") or d.startswith(rel + "/") for d in CHILD_DATA):
            continue
        if path.is_dir():
            if not any(path.iterdir()):
                path.rmdir()
        elif path not in keep:
            path.unlink()


def view(kind: str = "child") -> Path:
    """A read-only copy of the kit's package without the instructor's parts: what the student's processes
    import (``child``: the graded cells' child, only the modules it imports, `least_code`; ``kernel``: the
    notebooks' kernels, with the hidden tests stripped); of grading/ only what they import (`needs`). Made once
    per grading process."""
    if kind in _views and _views[kind].is_dir():
        return _views[kind]
    folder = Path(tempfile.mkdtemp(prefix=f"specdec-{kind}-view-"))
    edition(folder / "specdec_helpers", kind)
    if kind == "child":
        least_code(folder / "specdec_helpers")
    reuse_bytecode(folder / "specdec_helpers")
    for path in [folder, *folder.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    _views[kind] = folder
    import atexit

    atexit.register(shutil.rmtree, folder, True)
    return folder


def reuse_bytecode(package: Path) -> None:
    """Copy the kit's compiled modules into a view (``package``) for the files it holds as they are: a student's
    process cannot write them there, and compiled every module it imported again at each start. Only for a source
    byte for byte the kit's, so no bytecode of a module the view rewrites (stripped, swapped) or leaves out gets in;
    and only bytecode that Python checks against its source (a timestamp, not an unchecked hash) and that matches it."""
    for path in package.rglob("*.py"):
        original = PACKAGE / path.relative_to(package)
        compiled = Path(importlib.util.cache_from_source(str(original)))
        if not compiled.is_file() or not original.is_file() or original.read_bytes() != path.read_bytes():
            continue
        data, source = compiled.read_bytes(), path.stat()
        fresh = int.from_bytes(data[4:8], "little") == 0 and (
            int.from_bytes(data[8:12], "little") == int(source.st_mtime) & 0xFFFFFFFF
            and int.from_bytes(data[12:16], "little") == source.st_size & 0xFFFFFFFF
        )
        if data[:4] == importlib.util.MAGIC_NUMBER and fresh:  # beside its source, whatever PYTHONPYCACHEPREFIX says
            (path.parent / "__pycache__").mkdir(exist_ok=True)
            (path.parent / "__pycache__" / compiled.name).write_bytes(data)


def edition(package: Path, kind: str) -> None:
    """The student edition of the kit's package, written to ``package``: no instructor tool, of grading/ and
    testing/ only what ``kind``'s processes import (`needs`)."""
    wanted = needs(kind)

    def ignore(directory, names):
        rel = Path(directory).relative_to(PACKAGE).as_posix()
        skip = {n for n in names if n in ("__pycache__", ".ipynb_checkpoints") or n.endswith(".pyc")}
        for name in names:
            path = f"{rel}/{name}".removeprefix("./")
            if path in HIDDEN_PARTS:
                skip.add(name)
            if rel.removeprefix("assignment/") in GUARDED and f"{rel}/{name}".removeprefix("assignment/") not in wanted:
                skip.add(name)
        return skip

    shutil.copytree(PACKAGE, package, ignore=ignore)
    from specdec_helpers.assignment.grading.editions import (
        strip,
        swap_modules,
    )  # (shipped: the kit's check makes views)

    if kind != "child":
        for guarded in GUARDED:
            for path in (package / "assignment" / guarded).glob("*.py"):
                text = path.read_text()
                stripped = strip(text, where=path.name)
                if stripped != text:  # a module left as it is keeps its bytecode (`reuse_bytecode`)
                    path.write_text(stripped)
    # The student edition of every module: the kit's own implementations of the graded parts (whole modules,
    # `editions.SWAPS`, and INSTRUCTOR ONLY regions) are not in the student's view, so no name, module global or
    # inspect.getsource + exec reaches them from a graded cell; the stand-ins become placeholders that name the part.
    swap_modules(package)
    for path in package.rglob("*.py"):
        source = path.read_text()
        if "### BEGIN INSTRUCTOR ONLY" in source:
            path.write_text(strip(source, where=path.name))


def remove_views() -> None:
    """Delete this process's views now (they go at exit otherwise; a forked grading ends with ``os._exit``)."""
    while _views:
        shutil.rmtree(_views.popitem()[1], ignore_errors=True)


def secrets() -> list[Path]:
    """What student code must not read: the instructor's kit (its package, notebooks with the solutions,
    tests). The student kit (no ``assignment/authoring``: `release` leaves it out) holds no answers, so a
    student checking their own work has nothing to hide from it."""
    found = [PACKAGE, ROOT / "notebooks", ROOT / "tests"] if (PACKAGE / "assignment" / "authoring").is_dir() else []
    autograder = os.environ.get("AUTOGRADER_ROOT")
    if autograder:
        found += [Path(autograder) / "source", Path(autograder) / "submission", Path(autograder) / "results"]
    return [p for p in found if p.exists()]


def readable_by(path: Path, uid: int, gid: int) -> bool:
    """Whether user ``uid`` (group ``gid``, no other groups) can reach and read ``path`` (mode bits only)."""

    def may(st, bit_user, bit_group, bit_other):
        if st.st_uid == uid:
            return bool(st.st_mode & bit_user)
        if st.st_gid == gid:
            return bool(st.st_mode & bit_group)
        return bool(st.st_mode & bit_other)

    path = Path(path).resolve()
    for parent in reversed(path.parents):
        if not may(os.stat(parent), stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH):
            return False
    return may(os.stat(path), stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH)


# --------------------------------------------------------------------------- bubblewrap


def package_dirs() -> list[Path]:
    """The folders the grader imports torch and transformers from (its site-packages, or a user site, a
    PYTHONPATH entry, a .pth's folder): shown to the student's processes and put on their path after the kit's
    view, so that they import the grader's own packages (`packages` checks it)."""
    found = set()
    for name in ("torch", "transformers"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            folder = Path(spec.origin).resolve().parents[1]
            if folder != ROOT:  # the kit's own checkout: its view stands in for it
                found.add(folder)
    return sorted(found)


def python_roots() -> list[Path]:
    roots = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    roots |= {Path(p).resolve() for p in site.getsitepackages() if Path(p).is_dir()} | set(package_dirs())
    cache = os.environ.get("SPECDEC_CACHE_DIR")
    if cache and Path(cache).is_dir():
        roots.add(Path(cache).resolve())
    return sorted(r for r in roots if not any(r != o and o in r.parents for o in roots))


def bwrap_args(scratch: Path, share_net: bool = False, kind: str = "child") -> list[str]:
    args = [
        "bwrap",
        "--unshare-ipc",
        "--unshare-pid",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        "--tmpfs",
        "/var/tmp",
    ]
    args += ([] if os.geteuid() == 0 else ["--unshare-user"]) + ([] if share_net else ["--unshare-net"])
    for system in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"):
        args += ["--ro-bind-try", system, system]
    for gpu in sorted(glob.glob("/dev/nvidia*")):  # --dev makes a /dev without them: CUDA would see no GPU
        args += ["--dev-bind", gpu, gpu]
    roots = python_roots()
    folder = view(kind)
    made = set()
    for target in [*roots, folder, scratch]:  # bwrap (as root) would make their parents private (0700)
        for parent in reversed(Path(target).parents):
            if str(parent) not in made and str(parent) not in ("/", "/tmp", "/usr", "/etc"):
                made.add(str(parent))
                args += ["--perms", "0755", "--dir", str(parent)]
    for root in roots:
        args += ["--ro-bind", str(root), str(root)]
    for secret in secrets():  # e.g. the kit installed into site-packages: hidden under an empty folder
        secret = secret.resolve()
        if any(secret == r or r in secret.parents for r in roots):
            args += ["--tmpfs", str(secret)]
    return args + ["--ro-bind", str(folder), str(folder), "--bind", str(scratch), str(scratch)]
