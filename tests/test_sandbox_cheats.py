"""END TO END (slow): a cheating student graded by the Gradescope bundle's run_autograder, as root, in a
temporary root laid out like Gradescope's (world-traversable, as /autograder is).

The student's graded cell tries every cheat that earned points when student code ran as the grader's
user: write results.json and kill the grader, leave a process that rewrites results.json after the
grader ends, patch the grader's files and the kit, read the reference notebooks and the hidden tests,
stop the grader and the reference (SIGSTOP), write outside its scratch folder. The cell then raises with
what each attempt did, so results.json shows the cheat ran; its notebook also runs under nbval (the
same code in a kernel). A control run with the sandbox off shows the same cheats do win there.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest

from specdec_helpers.assignment.authoring import autograder
from specdec_helpers.assignment.grading import privilege

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]  # Gradescope runs the autograder as root; so must this test
ROOT = Path(__file__).resolve().parent.parent

CHEAT = r"""
import glob, json, os, signal, subprocess, sys, time
loader = getattr(__builtins__, "__dict__", __builtins__)["__im" + "port__"]("im" + "portlib")  # hidden from the static delegation check: this test is about the sandbox
RESULTS, KIT = {results!r}, {kit!r}
FORGED = json.dumps({{"score": 100, "output": "CHEATED"}})
done = []

def attempt(name, fn):
    try:
        fn()
        done.append(name + "=ok")
    except BaseException as error:
        done.append(name + "=" + type(error).__name__)

def processes():
    for folder in glob.glob("/proc/[0-9]*"):
        try:
            command = open(folder + "/cmdline", "rb").read().replace(b"\0", b" ").decode()
            parent = int(open(folder + "/stat").read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if int(folder[6:]) != os.getpid():
            yield int(folder[6:]), parent, command

def graders():  # this grading's grader only (other graders may share the machine)
    return [pid for pid, _, command in processes() if RESULTS in command and " grade " in command]

def references():  # the children the grader runs as itself
    return [pid for pid, parent, command in processes() if parent in graders() and "grading.child" in command]

def signal_all(find, sig):
    targets = find()
    if not targets:
        raise LookupError("none visible")
    hit = 0
    for pid in targets:
        try:
            os.kill(pid, sig)
            hit += 1
        except OSError:
            pass
    if not hit:
        raise PermissionError(f"{{len(targets)}} visible, none signalled")

def write(path, text, mode="w"):
    with open(path, mode) as file:
        file.write(text)

attempt("write_results", lambda: write(RESULTS, FORGED))
attempt("read_reference", lambda: open(glob.glob(KIT + "/notebooks/*.ipynb")[0] if os.path.isdir(KIT + "/notebooks")
                                       else KIT + "/notebooks/01_model_init.ipynb").read())
attempt("read_hidden_tests", lambda: open(KIT + "/specdec_helpers/assignment/testing/suite.py").read())
attempt("import_hidden_tests", lambda: loader.import_module("specdec_helpers.assignment.testing.suite"))
attempt("patch_grader", lambda: write(KIT + "/specdec_helpers/assignment/grading/grader.py", "\n# patched\n", "a"))
attempt("patch_installed_kit", lambda: write(loader.import_module("specdec_helpers").__file__, "\n# patched\n", "a"))
attempt("write_outside_scratch", lambda: write("/tmp/specdec-cheat-marker", "x"))
attempt("stop_reference", lambda: signal_all(references, signal.SIGSTOP))
attempt("grader_memory", lambda: open(f"/proc/{{graders()[0]}}/mem", "wb"))
daemon = ("import json, time\n"
          "for _ in range(60):\n"
          "    try: open(%r, 'w').write(%r)\n"
          "    except OSError: pass\n"
          "    time.sleep(0.5)\n") % (RESULTS, FORGED)
subprocess.Popen([sys.executable, "-c", daemon], start_new_session=True,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
attempt("kill_grader", lambda: signal_all(graders, signal.SIGKILL))
time.sleep(1)
raise RuntimeError("CHEAT-RAN " + " ".join(done))
"""


def cheating_notebook(results: Path, kit: Path) -> str:
    nb = nbformat.read(str(ROOT / "notebooks" / "01_model_init.ipynb"), as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "init")
    cell.source = CHEAT.format(results=str(results), kit=str(kit)) + (
        "\nclass Unused:\n    def initialize_target_model(self, path):\n        return None\n"
    )
    return nbformat.writes(nb)


def tree_hash(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(folder)).encode() + path.read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("cheat-bundle") / "autograder"
    autograder.bundle(out, ROOT)
    return out


def gradescope_root(bundle: Path) -> Path:
    """Like /autograder: world-traversable, so only the run_autograder and grader rights protect it."""
    root = Path(tempfile.mkdtemp(prefix="specdec-gs-"))
    os.chmod(root, 0o755)
    shutil.copytree(bundle, root / "source")
    (root / "results").mkdir()
    (root / "submission" / "notebooks").mkdir(parents=True)
    (root / "submission" / "notebooks" / "01_model_init.ipynb").write_text(
        cheating_notebook(root / "results" / "results.json", root / "source" / "kit")
    )
    for path in [root, *root.rglob("*")]:  # as the zip unpacks with a 022 umask: everything readable
        os.chmod(path, 0o755 if path.is_dir() or os.access(path, os.X_OK) else 0o644)
    return root


def run_autograder(root: Path, **env) -> subprocess.CompletedProcess:
    environ = {**os.environ, "AUTOGRADER_ROOT": str(root), "PYTHON": sys.executable, **env}
    environ.pop("SPECDEC_CACHE_DIR", None)
    return subprocess.run(
        [str(root / "source" / "run_autograder")], env=environ, capture_output=True, text=True, timeout=900
    )


def student_processes() -> list[int]:
    import pwd

    uids = [u.pw_uid for u in pwd.getpwall() if u.pw_name.startswith(privilege.USER)]
    return [pid for uid in uids for pid in privilege.processes_of(uid)]


def attempts(data: dict, kernel: bool = False) -> dict:
    """What the cheat reported: in the graded cells' child (the first test line whose feedback carries it), or in the
    notebook's kernel (nbval's line for the notebook's other cells, where the cheat's cell raised)."""
    text = next(
        t["output"] for t in data["tests"] if "CHEAT-RAN" in t["output"] and t["name"].startswith("checks") == kernel
    )
    words = text.split("CHEAT-RAN", 1)[1].split()
    return dict(word.split("=", 1) for word in words if "=" in word)


def test_every_cheat_earns_nothing_and_results_json_is_the_graders(bundle):
    Path("/tmp/specdec-cheat-marker").unlink(missing_ok=True)
    root = gradescope_root(bundle)
    kit_before = tree_hash(root / "source" / "kit")
    try:
        done = run_autograder(root)
        assert done.returncode == 0, done.stderr[-3000:]
        results = root / "results" / "results.json"
        first = results.read_text()
        time.sleep(3)  # a process left behind would rewrite it now
        assert results.read_text() == first
        data = json.loads(first)
        assert "CHEATED" not in first and "autograder failed" not in data["output"], data["output"]
        assert data["score"] == 0 and data["max_score"] > 0 and data["tests"], data["output"]
        tried = attempts(data)
        assert set(tried) >= {
            "write_results",
            "read_reference",
            "read_hidden_tests",
            "import_hidden_tests",
            "patch_grader",
            "patch_installed_kit",
            "write_outside_scratch",
            "stop_reference",
            "grader_memory",
            "kill_grader",
        }, tried
        assert not [name for name, outcome in tried.items() if outcome == "ok"], tried
        # the kernel's view holds the visible tests (its testing/suite.py has the hidden ones stripped): nothing else
        in_kernel = attempts(data, kernel=True)
        assert set(in_kernel) >= set(tried) - {"kill_grader"}, in_kernel  # each attempt reported (the last may be cut)
        assert {name for name, outcome in in_kernel.items() if outcome == "ok"} <= {"import_hidden_tests"}, in_kernel
        assert any("01_model_init.ipynb: init_check" in t["name"] for t in data["tests"])  # nbval ran it too
        assert tree_hash(root / "source" / "kit") == kit_before
        assert not Path("/tmp/specdec-cheat-marker").exists()
        assert student_processes() == []
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_control_without_the_sandbox_the_cheats_win(bundle):
    """The same student with ``SPECDEC_SANDBOX=none`` (today's rights): the forged results.json stands."""
    root = gradescope_root(bundle)
    try:
        # its own TMPDIR: the grader the cheat kills leaves its jail and world folders there, not in /tmp
        (root / "tmp").mkdir()
        done = run_autograder(
            root, SPECDEC_SANDBOX="none", SPECDEC_GRADE_ARGS="--no-nbval --no-perf", TMPDIR=str(root / "tmp")
        )
        assert done.returncode == 0, done.stderr[-3000:]
        time.sleep(2)
        for _ in range(50):  # the daemon truncates, then writes, every 0.5 s: an empty read is mid-write
            text = (root / "results" / "results.json").read_text()
            if text:
                break
            time.sleep(0.1)
        assert json.loads(text) == {"score": 100, "output": "CHEATED"}
    finally:
        for pid in privilege.processes_of(0):  # the cheat's daemon (root here): ours to end
            try:
                if str(root) in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                    os.kill(pid, 9)
            except OSError:
                pass
        shutil.rmtree(root, ignore_errors=True)
        Path("/tmp/specdec-cheat-marker").unlink(missing_ok=True)
