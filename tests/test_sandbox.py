"""Student code without the grader's rights (`grading.privilege`): each layer that can run here, tried
with shell commands a student could run (fast), and the graded cells' child in its jail.

As root the student's processes run as an unprivileged user (``user``), inside bubblewrap too where it
can make namespaces (``user+bwrap``); CI and Gradescope run as root.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sandbox_required

from specdec_helpers.assignment.grading import isolation, kernel_launcher, privilege
from specdec_helpers.assignment.grading.sandbox import Child

ROOT = Path(__file__).resolve().parent.parent
root_only = pytest.mark.sandbox  # the user layer needs the grader to run as root (else skip; CI: fail)


def modes() -> list:
    bwrap = pytest.mark.sandbox(bwrap=True)
    # the user layer alone (where bubblewrap cannot make namespaces) in the slow tier; user+bwrap, what root
    # gets where namespaces work (CI, Gradescope), in the fast one
    return [
        pytest.param("user", marks=[root_only, pytest.mark.slow]),
        pytest.param("auto", id="user+bwrap", marks=[bwrap]),
    ]


@pytest.fixture
def jail(request, monkeypatch):
    monkeypatch.setenv("SPECDEC_SANDBOX", request.param)
    made = privilege.Jail(privilege.Limits(processes=40))
    yield made
    made.close()


def run(jail, script: str, timeout: float = 60, **env) -> str:
    process = jail.popen(
        ["/bin/sh", "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    out, _ = process.communicate(timeout=timeout)
    return out


def outcomes(text: str) -> dict:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and " " not in line.split("=")[0])


def private_secret(tmp_path_factory) -> Path:
    """A file only root can read, in a folder anyone can reach (the Gradescope layout after setup.sh)."""
    folder = Path(os.environ.get("TMPDIR", "/tmp")) / f"specdec-test-secret-{os.getpid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    (folder / "solution.py").write_text("answer = 42\n")
    return folder


@pytest.mark.parametrize("jail", modes(), indirect=True)
def test_the_student_user_has_no_rights_on_the_grader(jail, tmp_path_factory):
    secret = private_secret(tmp_path_factory)
    reference = privilege.Jail(trusted=True)
    sleeper = reference.popen(["sleep", "60"])
    try:
        text = run(
            jail,
            f"""
            echo uid=$(id -u)
            cat {secret}/solution.py >/dev/null 2>&1 && echo read_secret=ok || echo read_secret=denied
            touch {secret}/new 2>/dev/null && echo write_secret=ok || echo write_secret=denied
            touch /usr/lib/specdec-x 2>/dev/null && echo write_system=ok || echo write_system=denied
            touch {ROOT}/specdec-x 2>/dev/null && echo write_kit=ok || echo write_kit=denied
            kill -0 {os.getpid()} 2>/dev/null && echo signal_grader=ok || echo signal_grader=denied
            kill -STOP {sleeper.pid} 2>/dev/null && echo stop_reference=ok || echo stop_reference=denied
            echo x > "$HOME/mine" && echo write_scratch=ok || echo write_scratch=denied
            echo cwd=$(pwd)
            mv "$HOME" "$HOME-moved" 2>/dev/null && echo rename_scratch=ok || echo rename_scratch=denied
        """,
        )
        got = outcomes(text)
        assert int(got["uid"]) == jail.user.pw_uid != 0, text
        assert got["cwd"] == str(jail.scratch) and got["write_scratch"] == "ok", text
        assert {k: v for k, v in got.items() if k not in ("uid", "cwd", "write_scratch")} == {
            name: "denied"
            for name in (
                "read_secret",
                "write_secret",
                "write_system",
                "write_kit",
                "signal_grader",
                "stop_reference",
                "rename_scratch",
            )
        }, text
        state = Path(f"/proc/{sleeper.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        assert state != "T"  # the reference was not stopped
        assert not (ROOT / "specdec-x").exists()
    finally:
        reference.close()
        (secret / "solution.py").unlink()
        secret.rmdir()


@pytest.mark.parametrize("jail", modes(), indirect=True)
def test_the_kit_and_its_solutions_are_out_of_sight(jail):
    """With bubblewrap the kit is not even there; with the user alone, the grader says what the user can read."""
    text = run(jail, f"cat {ROOT}/notebooks/01_model_init.ipynb >/dev/null 2>&1 && echo read=ok || echo read=denied")
    if jail.bwrap_layer:
        assert outcomes(text)["read"] == "denied" and jail.problems == []
    else:  # this checkout is world-readable: said plainly (Gradescope's run_autograder locks source/)
        assert outcomes(text)["read"] == "ok" and str(ROOT / "notebooks") in jail.problems


@pytest.mark.parametrize("jail", modes(), indirect=True)
def test_processes_left_behind_are_killed_setsid_or_not(jail):
    quiet = ">/dev/null 2>&1"
    main = jail.popen(
        [
            "/bin/sh",
            "-c",
            f"setsid sleep 313 {quiet} & (sleep 314 {quiet} &) ; nohup sleep 315 {quiet} & exec sleep 316",
        ]
    )
    uid = jail.user.pw_uid
    deadline = time.monotonic() + 30
    while len(isolation.processes_of(uid)) < 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(isolation.processes_of(uid)) >= 4
    jail.close()
    assert main.poll() is not None
    assert isolation.processes_of(uid) == []


@pytest.mark.parametrize("jail", modes(), indirect=True)
def test_pause_stops_every_process_of_the_student(jail):
    process = jail.popen(
        [
            "/bin/sh",
            "-c",
            'setsid sh -c "while :; do echo x >> \\"$HOME/n\\"; sleep 0.02; done" &'
            ' while :; do echo y >> "$HOME/m"; sleep 0.02; done',
        ]
    )
    counter = [jail.scratch / "n", jail.scratch / "m"]
    deadline = time.monotonic() + 30
    while not all(c.exists() for c in counter) and time.monotonic() < deadline:
        time.sleep(0.1)
    jail.pause()
    time.sleep(0.3)  # a write under way when the signal came lands now
    sizes = [c.stat().st_size for c in counter]
    time.sleep(0.7)
    assert [c.stat().st_size for c in counter] == sizes

    def stats():
        found = {}
        for pid in isolation.processes_of(jail.user.pw_uid):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            found[pid] = (fields[0], int(fields[1]))  # state, parent
        return found

    def running():
        """Processes not stopped. A shell that vforked stays in D (waiting in kernel_clone) while its child,
        stopped before it could exec, holds the shared memory: that parent cannot run either, so it counts as
        stopped when one of its children is."""
        found = stats()
        stopped_parents = {parent for state, parent in found.values() if state == "T"}
        return {
            pid: state
            for pid, (state, _) in found.items()
            if state != "T" and not (state == "D" and pid in stopped_parents)
        }

    # A process caught in uninterruptible sleep (D: in the middle of a write, on a loaded machine) stops as
    # soon as that returns: wait for it, a few seconds at most. Nothing else but stopped may be seen.
    deadline = time.monotonic() + 5
    while running() and set(running().values()) <= {"D"} and time.monotonic() < deadline:
        time.sleep(0.05)
    assert running() == {}
    jail.resume()
    deadline = time.monotonic() + 30
    while not all(c.stat().st_size > s for c, s in zip(counter, sizes)) and time.monotonic() < deadline:
        time.sleep(0.1)  # both writers run again (the loop used to stop when the first one did)
    assert all(c.stat().st_size > s for c, s in zip(counter, sizes))
    process.kill()


@pytest.mark.parametrize("jail", modes(), indirect=True)
def test_a_fork_bomb_is_bounded_and_ends_with_the_student(jail):
    process = jail.popen(
        ["/bin/bash", "-c", "while :; do sleep 100 & done"],  # bash retries a failed fork
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    uid = jail.user.pw_uid
    counts, deadline = [], time.monotonic() + 60  # a loaded machine forks slowly: wait for the bomb to grow
    while time.monotonic() < deadline and sum(c > 30 for c in counts) < 20:
        counts.append(len(isolation.processes_of(uid)))  # then watch it at its peak for a while
        time.sleep(0.1)
    assert 30 < max(counts) <= 40, counts  # Limits(processes=40): the user never holds more, however it fares
    jail.close()
    assert isolation.processes_of(uid) == [] and process.poll() is not None


@root_only
def test_students_graded_at_once_get_users_of_their_own(monkeypatch):
    monkeypatch.setenv("SPECDEC_SANDBOX", "user")
    first, second = privilege.Jail(), privilege.Jail()
    try:
        assert first.user.pw_uid != second.user.pw_uid
        assert {first.user.pw_name, second.user.pw_name} <= {u.pw_name for u in pwd.getpwall()}
        sleeper = second.popen(["sleep", "60"])
        first.close()  # the first student's end leaves the second's processes alone
        assert sleeper.poll() is None
    finally:
        first.close()
        second.close()


def test_without_a_sandbox_it_says_so_once(monkeypatch, capsys):
    monkeypatch.setenv("SPECDEC_SANDBOX", "none")
    monkeypatch.setattr(privilege, "_warned", [])
    for _ in range(2):
        privilege.Jail().close()
    err = capsys.readouterr().err
    assert err.count("student code runs with YOUR rights") == 1
    assert "with the grader's rights" in privilege.describe()


def test_bad_choice_is_named(monkeypatch):
    monkeypatch.setenv("SPECDEC_SANDBOX", "docker")
    with pytest.raises(ValueError, match="SPECDEC_SANDBOX must be auto, user, bwrap or none"):
        privilege.layers()


def test_the_students_view_holds_no_hidden_test_and_no_instructor_tool():
    child, kernel = isolation.view("child"), isolation.view("kernel")

    def grading(view):  # what the view holds of grading/ and testing/
        return {
            p.relative_to(view / "specdec_helpers/assignment").as_posix()
            for sub in isolation.GUARDED
            for p in (view / "specdec_helpers/assignment" / sub).glob("*.py")
        }

    assert (
        grading(child)
        == set(isolation.needs("child"))
        >= {"grading/child.py", "testing/world.py", "grading/packages.py", "testing/wire.py"}
    )
    assert (
        grading(kernel)
        == set(isolation.needs("kernel"))
        >= {"grading/grader.py", "testing/suite.py", "testing/cases.py", "testing/replay.py", "testing/devices.py"}
    )
    hidden = {
        "grading/classroom.py",
        "grading/similarity.py",
        "grading/grade_worker.py",
        "grading/contain.py",
        "grading/submission.py",
    }
    assert not hidden & (grading(child) | grading(kernel))
    assert not any((folder / "specdec_helpers/assignment/authoring").exists() for folder in (child, kernel))
    for folder in (child, kernel):
        assert not (folder / "specdec_helpers/assignment/authoring").exists()
        assert all(oct(p.stat().st_mode)[-3:] in ("755", "644") for p in folder.rglob("*"))
    suite = (kernel / "specdec_helpers/assignment/testing/suite.py").read_text()
    original = (ROOT / "specdec_helpers/assignment/testing/suite.py").read_text()
    assert "BEGIN HIDDEN TESTS" in original and "BEGIN HIDDEN TESTS" not in suite


@pytest.mark.parametrize(
    "kind, module",
    [
        # the child's requests import these lazily (op_cache_length, op_pair): its view holds only what it imports
        (
            "child",
            "specdec_helpers.assignment.grading.child, specdec_helpers.core.cache, "
            "specdec_helpers.models.preset_models",
        ),
        ("kernel", "specdec_helpers.assignment.student.notebook"),
    ],
)
def test_the_students_view_imports_what_its_processes_run(kind, module, tmp_path):
    """A kernel's view without a module the notebooks' set-up cell imports fails every check line as root
    ("NameError: name 'nb' is not defined"): what each view must import, imported from that view alone."""
    folder = isolation.view(kind)
    code = f"import {module}, specdec_helpers; print(specdec_helpers.__file__)"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(folder)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().startswith(str(folder)), done.stdout


def test_the_students_view_is_the_student_edition():
    """No kit implementation of a graded part is importable from student code, so inspect.getsource + exec
    or a module global cannot reach it: the view holds the student edition of every module."""
    from specdec_helpers.assignment.grading.editions import SWAPS

    answer = "matches = (choices[:k] == draft_tokens.to(choices.device)).int()"
    assert answer in (ROOT / "specdec_helpers/core/reference_parts.py").read_text()  # the instructor's kit has it
    for kind in ("child", "kernel"):
        folder = isolation.view(kind) / "specdec_helpers"
        assert not [p for p in folder.rglob("*.py") if answer in p.read_text()]
        for instructor, student in SWAPS.items():  # each swapped module is its student edition, once; the child
            if kind == "kernel":  # imports neither, so its view holds neither (`isolation.least_code`)
                assert (folder / instructor).read_text() == (ROOT / "specdec_helpers" / student).read_text()
            else:
                assert not (folder / instructor).exists()
            assert not (folder / student).exists()
        assert not [
            p for p in folder.rglob("*.py") if re.search(r"^\s*### BEGIN INSTRUCTOR ONLY\s*$", p.read_text(), re.M)
        ]
        decoder = (folder / "assignment/parts/decoder.py").read_text()
        assert "missing_part(name) for name in FUNCTIONS" in decoder and "standin_verify_tokens_cached" not in decoder


def test_a_views_bytecode_is_the_kits_and_only_for_the_modules_it_holds_unchanged(monkeypatch):
    """`isolation.reuse_bytecode`: a view holds compiled modules (a student's process cannot write them there, and
    compiled what it imported again at every start), each for a source byte for byte the kit's; none for a module the
    view rewrites (the swapped and stripped modules, the child's ``__init__``), whose kit bytecode is the instructor's.
    Fresh views: a process running as root (the other tests here) may compile the view's own sources into them."""
    monkeypatch.setattr(isolation, "_views", {})
    for kind in ("child", "kernel"):
        folder = isolation.view(kind) / "specdec_helpers"

        def kits(path: Path, folder=folder) -> bytes:
            return (ROOT / "specdec_helpers" / path.relative_to(folder)).read_bytes()

        compiled = list(folder.rglob("__pycache__/*.pyc"))
        assert len(compiled) > 10, (kind, compiled)
        for pyc in compiled:
            source = pyc.parent.parent / (pyc.name.split(".")[0] + ".py")
            assert source.read_bytes() == kits(source), pyc
        rewritten = [p for p in folder.rglob("*.py") if p.read_bytes() != kits(p)]
        assert rewritten and not [p for p in rewritten if Path(importlib.util.cache_from_source(str(p))).exists()]


def test_bytecode_is_reused_for_the_same_bytes_only_even_where_size_and_time_agree(tmp_path, monkeypatch):
    """The case the check of a source's size and time alone would let through: the view's file has the kit file's
    size and time but other bytes (a swapped module written in the same second, as long as the kit's). No bytecode."""
    import py_compile

    kit, view = tmp_path / "kit", tmp_path / "view"
    for folder in (kit, view):
        folder.mkdir()
    (kit / "same.py").write_text("ANSWER = 1\n")
    (kit / "swapped.py").write_text("ANSWER = 1\n")
    for name in ("same.py", "swapped.py"):
        py_compile.compile(str(kit / name), invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
        shutil.copy2(kit / name, view / name)
    (view / "swapped.py").write_text("ANSWER = 0\n")  # the student edition: as long as the kit's
    stat = (kit / "swapped.py").stat()
    os.utime(view / "swapped.py", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    monkeypatch.setattr(isolation, "PACKAGE", kit)
    isolation.reuse_bytecode(view)
    assert sorted(p.name.split(".")[0] for p in (view / "__pycache__").iterdir()) == ["same"]


def test_readable_by_follows_every_folder_on_the_path(tmp_path):
    folder = tmp_path / "kit"
    folder.mkdir()
    (folder / "f").write_text("x")
    os.chmod(tmp_path, 0o755)
    os.chmod(folder, 0o755)
    os.chmod(folder / "f", 0o644)
    nobody = 65534
    open_path = all(isolation.readable_by(p, nobody, nobody) for p in tmp_path.parents)
    assert isolation.readable_by(folder / "f", nobody, nobody) == open_path
    os.chmod(folder, 0o700)
    assert not isolation.readable_by(folder / "f", nobody, nobody)


@root_only
@pytest.mark.slow
def test_the_graded_cells_child_runs_as_the_student(monkeypatch):
    """The real child (torch, the kit's view): the student's user, its scratch folder, no kit in sight."""
    monkeypatch.setenv("SPECDEC_SANDBOX", "auto")
    source = (
        "import os\n"
        "SEEN = (os.getuid(), os.getcwd(), os.path.exists(%r))\n"
        "raise RuntimeError('seen %%s %%s %%s' %% SEEN)\n"
    ) % str(ROOT / "notebooks")
    with privilege.student() as jail:
        child = Child({"init": source})
        try:
            message = child.ready["init"]
        finally:
            child.close()
        uid, cwd, kit = message.split("seen ", 1)[1].split()[:3]
        assert int(uid) == jail.user.pw_uid and cwd == str(jail.scratch)
        assert kit == ("False" if jail.bwrap_layer else "True")


def sleeping(tag: str) -> list[int]:
    """Processes whose command line holds ``tag`` (seen from here, outside any sandbox)."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if tag in Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


@pytest.fixture
def instructor_bwrap(monkeypatch):
    """bubblewrap alone, as when an instructor grades as a normal user (simulated as root: the grader believes
    it is not root, so bwrap makes its own user namespace and no student user is involved)."""
    sandbox_required.require(bwrap=True)
    monkeypatch.setenv("SPECDEC_SANDBOX", "bwrap")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    made = privilege.Jail()
    assert made.bwrap_layer and not made.user_layer and made.user is None
    yield made
    made.close()


def test_bwrap_alone_shows_no_kit_no_grader_and_only_its_scratch(instructor_bwrap):
    jail = instructor_bwrap
    text = run(
        jail,
        f"""
        cat {ROOT}/notebooks/01_model_init.ipynb >/dev/null 2>&1 && echo read_kit=ok || echo read_kit=denied
        echo home="$(ls -A {Path.home()} 2>/dev/null | tr '\\n' ,)"
        touch /usr/lib/specdec-x 2>/dev/null && echo write_system=ok || echo write_system=denied
        kill -0 {os.getpid()} 2>/dev/null && echo signal_grader=ok || echo signal_grader=denied
        echo x > "$HOME/mine" && echo write_scratch=ok || echo write_scratch=denied
        echo processes=$(ls /proc | grep -c '^[0-9]')
    """,
    )
    got = outcomes(text)
    assert got.pop("write_scratch") == "ok" and int(got.pop("processes")) < 10, text
    home = Path.home().resolve()  # only the way to Python's own files, when they live there (pyenv)
    allowed = {r.relative_to(home).parts[0] for r in isolation.python_roots() if home in r.parents}
    assert set(filter(None, got.pop("home").split(","))) <= allowed, text
    assert set(got.values()) == {"denied"}, text


def test_bwrap_alone_pauses_and_kills_the_whole_namespace(instructor_bwrap):
    jail = instructor_bwrap
    tag = f"sleep 31{os.getpid() % 10}.{os.getpid()}"
    main = jail.popen(
        ["/bin/sh", "-c", f'setsid sh -c "while :; do echo x >> $HOME/n; {tag}; sleep 0.02; done" & {tag}0']
    )
    deadline = time.monotonic() + 30
    while not (jail.scratch / "n").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    jail.pause()
    time.sleep(0.3)
    size = (jail.scratch / "n").stat().st_size
    time.sleep(0.7)
    assert (jail.scratch / "n").stat().st_size == size
    jail.resume()
    jail.close()
    assert main.poll() is not None and sleeping(tag) == []


def test_the_student_user_name_comes_from_the_environment_and_is_checked(monkeypatch):
    monkeypatch.setenv("SPECDEC_STUDENT_USER", "specdec-gw7-student")
    assert isolation._student_user() == "specdec-gw7-student"
    monkeypatch.delenv("SPECDEC_STUDENT_USER")
    assert isolation._student_user() == "specdec-student"
    for bad in ("Root", "a b", "x" * 31, "-dash", ""):
        monkeypatch.setenv("SPECDEC_STUDENT_USER", bad)
        with pytest.raises(ValueError, match="SPECDEC_STUDENT_USER=.*unset it"):
            isolation._student_user()


def test_the_limits_launcher_imports_nothing_from_the_scratch_it_runs_in(tmp_path):
    """Where ``prlimit`` is missing, the grader applies the limits itself, in the student's scratch folder
    (`kernel_launcher.limits_command`): modules a student left there are never imported (``python -m`` put the
    folder first on the path, so a planted ``json.py`` ran as the grader), and the limits hold."""
    planted = "open('PLANTED', 'w').write('ran')\n"
    for name in ("json.py", "resource.py", "kernel_launcher.py"):
        (tmp_path / name).write_text(planted)
    (tmp_path / "specdec_helpers").mkdir()
    (tmp_path / "specdec_helpers" / "__init__.py").write_text(planted)
    show = "import resource; print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])"
    command = kernel_launcher.limits_command({"NOFILE": 77}, [sys.executable, "-I", "-c", show])
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.split() == ["77"], done.stderr[-2000:]
    assert not (tmp_path / "PLANTED").exists()


def test_the_kernel_launcher_never_follows_a_link_the_student_left_in_the_scratch(tmp_path):
    """The scratch folder is the student's and outlives a notebook: a link named like the kernel's connection file
    must not make the launcher (run as the grader) overwrite the link's target or hand it to the student."""
    victim = tmp_path / "graders_file"
    victim.write_text("the grader's\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "kernel-connection.json").symlink_to(victim)  # what the student's code could do
    connection = tmp_path / "connection.json"
    connection.write_text('{"key": "abc"}')
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "scratch": str(scratch),
                "user": [os.getuid(), os.getgid()],
                "switch": False,
                "argv": ["/bin/true"],
                "env": {},
            }
        )
    )
    done = subprocess.run(  # as Jupyter runs it: the kernelspec's command (`Jail.kernel_spec`)
        kernel_launcher.command(plan, str(connection)), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert victim.read_text() == "the grader's\n"
    mine = scratch / "kernel-connection.json"
    assert not mine.is_symlink() and mine.read_text() == '{"key": "abc"}'


def test_concurrent_gradings_share_one_lock_folder_whatever_their_tmpdir(monkeypatch, tmp_path):
    """A class's forked gradings each have a TMPDIR of their own; their claims on student users must still meet."""
    real_access = os.access
    monkeypatch.setattr(
        isolation.os, "access", lambda path, mode: False if str(path) == "/run" else real_access(path, mode)
    )
    monkeypatch.setattr(isolation.tempfile, "tempdir", str(tmp_path))
    assert isolation._lock_folder() == Path("/tmp/specdec-sandbox")
    # a link left in its place (anyone may write /tmp) is removed, not followed
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    shutil.rmtree("/tmp/specdec-sandbox")
    Path("/tmp/specdec-sandbox").symlink_to(elsewhere)
    folder = isolation._lock_folder()
    assert not folder.is_symlink() and folder.is_dir() and elsewhere.is_dir()
