"""The student kit's ``python -m specdec_helpers check`` passes a correct hand-in wherever students run it:
as root with bubblewrap (a container with it installed), as root without it (Colab), and as a normal user.

As root with bubblewrap it once exited 2 with "No module named 'specdec_helpers.assignment.authoring'": the
sandbox's view of the kit imported the release tool, which the student kit leaves out. The kit is released
once into a folder other users can read, with the instructor's answers filled in (tests/test_course.py).
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from specdec_helpers.assignment.authoring import release
from specdec_helpers.assignment.grading import isolation

URL = "https://github.com/example-course/specdec-students"
pytestmark = pytest.mark.slow  # a release, then the visible tests in sandboxed children (about a minute a mode)


@pytest.fixture(scope="module")
def kit():
    from test_course import fill

    folder = Path(tempfile.mkdtemp(prefix="specdec-check-kit-"))  # pytest's own tmp folders are private to root
    try:
        release.release(folder / "students", release.ROOT, URL)
        assert fill(folder / "students", release.ROOT) > 0
        for path in [folder, *folder.rglob("*")]:
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        yield folder / "students"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def public_python(folder: Path) -> str:
    """A Python every user can run: this one where its folders are open to all, else the system's Python of
    the same version with this one's packages on its path (a venv under a private home, e.g. /root/.pyenv)."""
    nobody = (65534, 65534)
    if isolation.readable_by(Path(sys.executable).resolve(), *nobody):
        return sys.executable
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    system = shutil.which(version, path="/usr/local/bin:/usr/bin:/bin")
    if not system or not isolation.readable_by(Path(system).resolve(), *nobody):
        pytest.fail(f"no {version} that other users can run: the user layer cannot run student code here")
    venv = folder / "venv"
    subprocess.run([system, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next(venv.glob("lib/python*/site-packages"))
    (site / "kit_packages.pth").write_text("\n".join(p for p in sys.path if p.endswith("site-packages")) + "\n")
    for path in [venv, *venv.rglob("*")]:
        if not path.is_symlink():
            os.chmod(path, 0o755 if path.is_dir() or os.access(path, os.X_OK) else 0o644)
    return str(venv / "bin" / "python")


def check(kit: Path, python: str, user=None, **env) -> subprocess.CompletedProcess:
    home = Path(tempfile.mkdtemp(prefix="specdec-check-home-"))
    os.chmod(home, 0o755)  # the kit's views go in TMPDIR: the student's user must reach them
    if user is not None:
        os.chown(home, user.pw_uid, user.pw_gid)
    environ = {k: v for k, v in os.environ.items() if k not in ("SPECDEC_SANDBOX", "SPECDEC_CACHE_DIR", "PYTHONPATH")}
    environ |= {"PYTHONPATH": str(kit), "HOME": str(home), "TMPDIR": str(home), "OMP_NUM_THREADS": "1", **env}
    switch = dict(user=user.pw_uid, group=user.pw_gid, extra_groups=[]) if user is not None else {}
    try:
        return subprocess.run(
            [python, "-m", "specdec_helpers", "check"],
            cwd=kit,
            env=environ,
            capture_output=True,
            text=True,
            timeout=900,
            **switch,
        )
    finally:
        shutil.rmtree(home, ignore_errors=True)


def passed(done: subprocess.CompletedProcess) -> None:
    text = done.stdout + done.stderr
    assert done.returncode == 0, text[-3000:]
    assert "All visible checks pass" in done.stdout and "authoring" not in text, text[-3000:]
    assert done.stdout.count("✅") >= 4 and "❌" not in done.stdout, done.stdout[-3000:]


@pytest.mark.sandbox(bwrap=True)
def test_check_as_root_with_bubblewrap(kit):
    passed(check(kit, sys.executable, SPECDEC_SANDBOX="auto"))


@pytest.mark.sandbox
def test_check_as_root_without_bubblewrap(kit):
    """Colab: root, no usable bubblewrap; the student's children run as an unprivileged user."""
    passed(check(kit, public_python(kit.parent), SPECDEC_SANDBOX="user"))


@pytest.mark.sandbox  # root, to become a normal user
def test_check_as_a_normal_user(kit):
    user = isolation.ensure_user(f"{isolation.USER}-own"[:30])
    done = check(kit, public_python(kit.parent), user=user)
    passed(done)


def test_the_student_kit_imports_no_instructor_module_anywhere(kit):
    """No import statement of the released package names a module the kit leaves out (authoring/, the class
    grading, the mistake catalog): no path of the student edition, lazy ones included, can need it. (The kit
    fixture's package is the release's: `fill` writes only its notebooks.)"""
    out = kit
    left_out = [
        p.removesuffix(".py").replace("/", ".") for p in release.INSTRUCTOR_ONLY if p.startswith("specdec_helpers")
    ]
    found = []
    for path in (out / "specdec_helpers").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            found += [
                f"{path.relative_to(out)}:{node.lineno} {n}"
                for n in names
                if any(n == m or n.startswith(m + ".") for m in left_out)
            ]
    allowed = ("specdec_helpers/cli/",)  # the commands' guarded imports: "an instructor command" in the kit
    assert [f for f in found if not f.startswith(allowed)] == [], found
