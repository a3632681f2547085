"""The mechanics under `privilege`: student users and their slots, signalling all of a user's processes,
the student's read-only view of the kit, bubblewrap's arguments, resource limits."""
from __future__ import annotations

import ast
import contextlib
import fcntl
import functools
import glob
import importlib.util
import os
import pwd
import re
import resource
import shutil
import site
import stat
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2]  # specdec_helpers/
ROOT = PACKAGE.parent
#: Never in the student's view: the instructor's tools; nor grading/ (the grader) and testing/ (the hidden tests)
#: but for `needs`.
HIDDEN_PARTS = ("assignment/authoring",)
GUARDED = ("grading", "testing")
#: Where the student's processes start: the graded cells' child; the notebooks' kernels, which may import any
#: library module (the package, core/, models/, measure/, present/, assignment/student/) but no command (cli/).
ROOTS = {"child": ("specdec_helpers.assignment.grading.child",), "kernel": ("library",)}


def _student_user() -> str:
    """The student users' name (then ``name1``, ``name2``, ...): ``$SPECDEC_STUDENT_USER``, so that two graders
    on one machine that each check "no process of my students is left" (the test suite's parallel workers) use
    users of their own."""
    name = os.environ.get("SPECDEC_STUDENT_USER", "specdec-student")
    if not re.fullmatch(r"[a-z_][a-z0-9_-]{0,29}", name):
        raise ValueError(f"SPECDEC_STUDENT_USER={name!r} is not a user name useradd accepts: lowercase letters, "
                         "digits, '-' and '_', 30 characters at most, starting with a letter; unset it for "
                         "'specdec-student'")
    return name


USER = _student_user()
MAX_SLOTS = 64


def apply_limits(limits: dict) -> None:
    for name, value in limits.items():
        if value is not None:
            resource.setrlimit(getattr(resource, "RLIMIT_" + name), (value, value))


_bwrap_ok: dict = {}


def bwrap_works() -> bool:
    """bubblewrap is installed and can make its namespaces here (Docker's default seccomp profile, as on
    Gradescope, forbids that); as root, ``setpriv`` is needed too."""
    key = os.geteuid()
    if key not in _bwrap_ok:
        ok = False
        if shutil.which("bwrap") and (key != 0 or shutil.which("setpriv")):
            try:
                ok = subprocess.run(["bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/",
                                     "--proc", "/proc", "--dev", "/dev", "true"], capture_output=True,
                                    timeout=30, cwd="/").returncode == 0
            except (OSError, subprocess.SubprocessError):
                ok = False
        _bwrap_ok[key] = ok
    return _bwrap_ok[key]


# --------------------------------------------------------------------------- the student's view of the kit

_views: dict = {}


def _module_file(name: str) -> Path | None:
    rel = Path(*name.split(".")[1:])
    for candidate in (PACKAGE / rel / "__init__.py", PACKAGE / rel.with_suffix(".py")) if rel.parts else ():
        if candidate.is_file():
            return candidate
    return PACKAGE / "__init__.py" if not rel.parts else None


def _imports(path: Path) -> set[str]:
    """Every kit module ``path`` names in an import statement, at any depth (lazy imports included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name.split(".")[0] == "specdec_helpers"}


@functools.lru_cache(maxsize=None)
def needs(kind: str) -> tuple[str, ...]:
    """The files of grading/ and testing/ that the student's processes of ``kind`` import (`ROOTS`, then every kit module
    they import, read from the sources): the only ones in their view. Derived, so a new module cannot be
    forgotten (a kernel without one fails every notebook's set-up cell)."""
    roots = list(ROOTS[kind])
    if "library" in roots:
        roots.remove("library")
        for path in PACKAGE.rglob("*.py"):
            name = ".".join(("specdec_helpers", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__")
            if not name.startswith((*(f"specdec_helpers.assignment.{sub}" for sub in GUARDED),
                                    "specdec_helpers.assignment.authoring", "specdec_helpers.cli",
                                    "specdec_helpers.__main__")):
                roots.append(name)
    seen, todo = {}, roots
    while todo:
        name = todo.pop()
        path = None if name in seen or ".assignment.authoring" in name else _module_file(name)
        if path is None:
            continue
        seen[name] = path
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))] + sorted(_imports(path))
    return tuple(sorted({p.relative_to(PACKAGE / "assignment").as_posix() for p in seen.values()
                         if p.parent.name in GUARDED and p.parent.parent == PACKAGE / "assignment"}))


def view(kind: str = "child") -> Path:
    """A read-only copy of the kit's package without the instructor's parts: what the student's processes
    import (``child``: the graded cells' child; ``kernel``: the notebooks' kernels, with the hidden tests
    stripped); of grading/ only what they import (`needs`). Made once per grading process."""
    if kind in _views and _views[kind].is_dir():
        return _views[kind]
    wanted = needs(kind)
    folder = Path(tempfile.mkdtemp(prefix=f"specdec-{kind}-view-"))

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

    shutil.copytree(PACKAGE, folder / "specdec_helpers", ignore=ignore)
    from specdec_helpers.assignment.grading.editions import strip, swap_modules  # (shipped: the kit's check makes views)

    if kind != "child":
        for guarded in GUARDED:
            for path in (folder / "specdec_helpers" / "assignment" / guarded).glob("*.py"):
                path.write_text(strip(path.read_text(), where=path.name))
    # The student edition of every module: the kit's own implementations of the graded parts (whole modules,
    # `editions.SWAPS`, and INSTRUCTOR ONLY regions) are not in the student's view, so no name, module global or
    # inspect.getsource + exec reaches them from a graded cell; the stand-ins become placeholders that name the part.
    swap_modules(folder / "specdec_helpers")
    for path in (folder / "specdec_helpers").rglob("*.py"):
        source = path.read_text()
        if "### BEGIN INSTRUCTOR ONLY" in source:
            path.write_text(strip(source, where=path.name))
    for path in [folder, *folder.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    _views[kind] = folder
    import atexit

    atexit.register(shutil.rmtree, folder, True)
    return folder


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
    args = ["bwrap", "--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent",
            "--new-session", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--tmpfs", "/var/tmp"]
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


# --------------------------------------------------------------------------- users


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def ensure_user(name: str = USER) -> pwd.struct_passwd:
    """The unprivileged user ``name``, created (``useradd --system``, no home, no login) when missing."""
    if not _user_exists(name):
        nologin = shutil.which("nologin") or "/usr/sbin/nologin"
        done = subprocess.run(["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
                               "--shell", nologin, name], capture_output=True, text=True)
        if done.returncode != 0 and not _user_exists(name):
            raise RuntimeError(f"could not create the user {name} that runs student code: {done.stderr.strip()}")
    user = pwd.getpwnam(name)
    if user.pw_uid == 0 or user.pw_gid == 0 or user.pw_uid == os.getuid():
        raise RuntimeError(f"user {name} has uid {user.pw_uid} / gid {user.pw_gid}: student code needs a user of its own")
    if set(os.getgrouplist(name, user.pw_gid)) != {user.pw_gid}:
        raise RuntimeError(f"user {name} belongs to other groups ({os.getgrouplist(name, user.pw_gid)}); remove them")
    return user


def _lock_folder() -> Path:
    # one folder for every grading on the machine (not $TMPDIR: a class's gradings each have their own), so that
    # concurrent gradings see each other's claims
    base = Path("/run") if os.access("/run", os.W_OK) else Path("/tmp")
    folder = base / "specdec-sandbox"
    for _ in range(3):  # checked after it is made too: in /tmp a student could put a link there in between
        try:
            st = os.lstat(folder)
        except FileNotFoundError:
            with contextlib.suppress(FileExistsError):
                folder.mkdir(mode=0o700)
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077:
            return folder
        shutil.rmtree(folder) if stat.S_ISDIR(st.st_mode) else folder.unlink()
    raise RuntimeError(f"{folder} is not a private folder of this user's and keeps coming back; remove whatever "
                       "makes it, or make /run writable")


def claim_user() -> tuple[int, pwd.struct_passwd]:
    """``(lock fd, user)``: the first student user no other grading holds (a lock held until `Jail.close`)."""
    folder = _lock_folder()
    for n in range(MAX_SLOTS):
        name = USER if n == 0 else f"{USER}{n}"
        fd = os.open(folder / f"{name}.lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return fd, ensure_user(name)
    raise RuntimeError(f"all {MAX_SLOTS} student users are busy")


def signal_user(uid: int, gid: int, sig: int) -> None:
    """Send ``sig`` to every process of user ``uid``, atomically: ``kill(-1)`` from a fork that became that
    user (it reaches exactly that user's processes; no binary the user must be able to run)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the fork only makes system calls, then exits
        pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            os.kill(-1, sig)
        except BaseException:  # noqa: BLE001 - nothing to kill, or anything: exit either way
            pass
        os._exit(0)
    os.waitpid(pid, 0)


def processes_of(uid: int) -> list[int]:
    """Live (not zombie) processes of user ``uid``."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                status = Path(entry.path, "status").read_text()
            except OSError:
                continue
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            if int(fields.get("Uid", "-1").split()[0]) == uid and not fields.get("State", "").strip().startswith("Z"):
                found.append(int(entry.name))
    return found


def namespace_members(pid: int) -> list[int]:
    """The processes in the pid namespace of ``pid``'s sandboxed child (bwrap runs it as the namespace's init)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        namespace = os.readlink(f"/proc/{children[0]}/ns/pid") if children else None
    except OSError:
        return [pid]
    members = [pid]
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and namespace:
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{entry.name}/ns/pid") == namespace:
                    members.append(int(entry.name))
    return members


def remove_files_of(uid: int) -> None:
    for shared in ("/tmp", "/var/tmp", "/dev/shm"):
        with contextlib.suppress(OSError), os.scandir(shared) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    if entry.stat(follow_symlinks=False).st_uid == uid:
                        shutil.rmtree(entry.path) if entry.is_dir(follow_symlinks=False) else os.unlink(entry.path)
