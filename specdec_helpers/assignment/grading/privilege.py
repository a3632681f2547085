"""Who runs student code, with which rights: one `Jail` per student, used for every process that runs
their code (the graded cells' child, the notebooks' kernels under nbval).

Layers, chosen once per process (``$SPECDEC_SANDBOX``: ``auto`` (default), ``user``, ``bwrap``, ``none``):

- **user** (the grader runs as root: Gradescope, CI): the student's processes run as an unprivileged
  user of their own (``specdec-student``, then ``specdec-student1``, ... one per student graded at the
  same time, claimed with a lock; created with ``useradd --system`` when missing), under resource
  limits (`Limits`), with a private scratch folder as HOME, TMPDIR and working directory. They cannot
  signal the grader or the reference solution (other users), nor write the kit, the results or
  anything root owns. When the student is done, every process of that user is killed (a ``kill(-1)``
  run as that user: ``setsid`` cannot escape it) and its files in /tmp, /var/tmp, /dev/shm removed.
- **bwrap** (bubblewrap installed and usable): a mount namespace showing only the system, Python's
  environment, `view` (the kit's student-facing modules, read-only) and the scratch folder, and a pid
  namespace: the student's processes see and signal only each other and die with the sandbox.
  Combined with **user** when both work (bwrap sets up the mounts as root, then ``setpriv`` becomes
  the student user with no capabilities); alone when the grader is not root.
- **none**: student code runs with the grader's rights; `warn` says so once.

The reference solution is the instructor's code: `Jail(trusted=True)` runs it as the grader, which (as root) is
another user than the student's. Only the grader writes results.json, after `Jail.close`.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from specdec_helpers.assignment.grading import kernel_launcher, packages
from specdec_helpers.assignment.grading.isolation import (
    bwrap_args,
    package_dirs,
    readable_by,
    secrets,
    view,
)
from specdec_helpers.assignment.grading.jail_policy import PASS_ENV, Limits, layers
from specdec_helpers.assignment.grading.jail_policy import describe  # noqa: F401 - for callers: privilege.describe()
from specdec_helpers.assignment.grading.student_users import (
    claim_user,
    namespace_members,
    processes_of,
    remove_files_of,
    signal_user,
)
from specdec_helpers.assignment.grading.student_users import USER  # noqa: F401 - for callers: privilege.USER

SWITCH_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP")  # what setpriv needs in bwrap to become the student
_current: contextvars.ContextVar = contextvars.ContextVar("specdec_jail", default=None)
_warned: list = []


# --------------------------------------------------------------------------- without a sandbox


def warn(stream=None) -> None:
    """Say once, plainly, that student code runs with the grader's rights."""
    if not _warned:
        _warned.append(True)
        print(
            "⚠️  student code runs with YOUR rights here (not root, no usable bubblewrap): it can read and "
            "change what you can. Install bubblewrap (apt-get install bubblewrap) or grade as root (Gradescope, "
            "a container) for a sandbox.",
            file=stream or sys.stderr,
            flush=True,
        )


# --------------------------------------------------------------------------- the jail


class Jail:
    """How one student's code runs: `popen` starts a process, `pause`/`resume`/`kill` act on all of the
    student's processes, `close` kills them, removes their files and frees the user."""

    def __init__(self, limits: Limits | None = None, trusted: bool = False):
        self.trusted = trusted
        self.user_layer, self.bwrap_layer = (False, False) if trusted else layers()
        if not trusted and not (self.user_layer or self.bwrap_layer):
            warn()
        self.limits = (limits or Limits()).resolved()
        self.lock, self.user = claim_user() if self.user_layer else (None, None)
        self.processes: list[subprocess.Popen] = []
        # the scratch folder inside a folder of the grader's (0711): the student owns the scratch but cannot rename
        # it or put a link in its place (what they put inside it is theirs: the grader never follows it there)
        self.folder = Path(tempfile.mkdtemp(prefix="specdec-jail-"))
        os.chmod(self.folder, 0o711)
        self.scratch = self.folder / "scratch"
        self.scratch.mkdir(mode=0o700)
        self.problems: list[str] = []  # kit paths the student's user could read (user layer without bwrap)
        if self.user:
            os.chown(self.scratch, self.user.pw_uid, self.user.pw_gid)
            self.kill()  # a previous grading's leftovers of this user
            self.problems = [
                str(p) for p in secrets() if not self.bwrap_layer and readable_by(p, self.user.pw_uid, self.user.pw_gid)
            ]
            if self.problems:
                print(
                    f"⚠️  student code (user {self.user.pw_name}) can read {', '.join(self.problems)}: make them "
                    "unreadable to other users (chmod -R o-rwx) or install bubblewrap",
                    file=sys.stderr,
                    flush=True,
                )

    # -- starting
    def env(self, extra: dict | None = None, kind: str = "child") -> dict:
        base = {k: os.environ[k] for k in PASS_ENV if k in os.environ}
        kit = None  # where the child finds the kit: the grader's own, or (sandboxed) the student's view of it
        if not self.trusted and (self.user_layer or self.bwrap_layer):
            base |= {
                "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
                "HOME": str(self.scratch),
                "TMPDIR": str(self.scratch),
                "PYTHONDONTWRITEBYTECODE": "1",
                "PYTHONPATH": os.pathsep.join(map(str, [view(kind), *package_dirs()])),
                "MPLCONFIGDIR": str(self.scratch / ".matplotlib"),
                "USER": self.name,
                "LOGNAME": self.name,
            }
            if os.environ.get("SPECDEC_CACHE_DIR"):
                base["SPECDEC_CACHE_DIR"] = os.environ["SPECDEC_CACHE_DIR"]
            kit = str(view(kind) / "specdec_helpers")
        else:
            # no sandbox (or the reference): its temporary files still go where close() removes them
            base = {**os.environ, "TMPDIR": str(self.scratch)}
        base[packages.ENV] = packages.expected(kit)  # the child checks it imports what the grader does
        return {**base, **(extra or {})}

    @property
    def name(self) -> str:
        return self.user.pw_name if self.user else pwd.getpwuid(os.getuid()).pw_name

    def argv(self, argv: list[str], kind: str = "child") -> list[str]:
        """``argv`` wrapped in this jail's limits and sandbox (the user switch is `popen`'s)."""
        if self.trusted:
            return list(argv)
        wrapped = list(argv)
        if self.bwrap_layer and self.user:  # bwrap mounts as root, then the student user, no capabilities
            wrapped = [
                "setpriv",
                f"--reuid={self.user.pw_uid}",
                f"--regid={self.user.pw_gid}",
                "--clear-groups",
                "--inh-caps=-all",
                "--bounding-set=-all",
                "--no-new-privs",
                "--",
                "env",
                "-C",
                str(self.scratch),
                *wrapped,
            ]
        if self.bwrap_layer:
            switch = (
                [a for cap in SWITCH_CAPS for a in ("--cap-add", cap)] if self.user else ["--chdir", str(self.scratch)]
            )
            wrapped = bwrap_args(self.scratch, kind == "kernel", kind) + switch + ["--"] + wrapped
        limits = {k: v for k, v in self.limits.items() if v is not None and (k != "NPROC" or self.user_layer)}
        if shutil.which("prlimit"):
            return ["prlimit", *[f"--{k.lower()}={v}" for k, v in limits.items()], "--", *wrapped]
        return kernel_launcher.limits_command(limits, wrapped)  # by path, the standard library only

    def runnable(self, program: str) -> None:
        """Raise if the student's user cannot reach ``program`` (without bwrap, a private folder on its path
        such as /root stops it)."""
        if self.user and not self.bwrap_layer:
            path = Path(shutil.which(program) or program).resolve()
            if not readable_by(path, self.user.pw_uid, self.user.pw_gid):
                raise RuntimeError(
                    f"the user {self.user.pw_name} that runs student code cannot run {path} (a folder "
                    "on its path is private): use a Python all users can run, or install bubblewrap"
                )
            hidden = [str(p) for p in package_dirs() if not readable_by(p, self.user.pw_uid, self.user.pw_gid)]
            if hidden:
                raise RuntimeError(
                    f"the user {self.user.pw_name} that runs student code cannot read the grader's "
                    f"packages in {', '.join(hidden)} (a folder on the way is private): install them "
                    "where all users can read them, or install bubblewrap"
                )

    def popen(self, argv: list[str], env: dict | None = None, **kwargs) -> subprocess.Popen:
        self.runnable(argv[0])
        if self.user and not self.bwrap_layer:
            kwargs.update(user=self.user.pw_uid, group=self.user.pw_gid, extra_groups=[])
        process = subprocess.Popen(
            self.argv(argv), env=self.env(env), cwd=self.scratch, start_new_session=True, **kwargs
        )
        self.processes.append(process)
        return process

    def kernel_spec(self, folder: Path, env: dict | None = None) -> str:
        """Write a Jupyter kernelspec under ``folder`` (put it on ``JUPYTER_PATH``) whose kernels run in this
        jail; returns its name (nbval's ``--nbval-kernel-name``)."""
        name = "specdec-student"
        self.runnable(sys.executable)
        spec = folder / "kernels" / name
        spec.mkdir(parents=True, exist_ok=True)
        plan = {
            "argv": self.argv([sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"], "kernel"),
            "env": self.env(env, "kernel"),
            "scratch": str(self.scratch),
            "user": [self.user.pw_uid, self.user.pw_gid] if self.user else None,
            "switch": bool(self.user and not self.bwrap_layer),
        }
        (folder / "plan.json").write_text(json.dumps(plan))
        os.chmod(folder / "plan.json", 0o600)
        (spec / "kernel.json").write_text(
            json.dumps(
                {
                    "argv": kernel_launcher.command(folder / "plan.json"),  # the standard library only
                    "display_name": "student (sandboxed)",
                    "language": "python",
                }
            )
        )
        return name

    # -- control
    def pause(self) -> None:
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def _signal(self, sig) -> None:
        if self.user:
            signal_user(self.user.pw_uid, self.user.pw_gid, sig)
            return
        for process in self.processes:
            if process.poll() is None:
                for pid in namespace_members(process.pid) if self.bwrap_layer else [process.pid]:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, sig) if self.bwrap_layer else os.killpg(pid, sig)

    def kill(self) -> None:
        """Kill every process of this student (its user's, or its sandboxes' namespaces, or process groups)."""
        members = [
            pid
            for process in self.processes
            if process.poll() is None and self.bwrap_layer and not self.user
            for pid in namespace_members(process.pid)
        ]
        for process in self.processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
        for _ in range(200):  # the namespace dies with its init, not at once: kill its members and wait
            members = [pid for pid in members if _alive(pid)]
            for pid in members:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            if not members:
                break
            time.sleep(0.05)
        if self.user:
            for _ in range(50):
                signal_user(self.user.pw_uid, self.user.pw_gid, signal.SIGCONT)  # a stopped process dies too
                signal_user(self.user.pw_uid, self.user.pw_gid, signal.SIGKILL)
                if not processes_of(self.user.pw_uid):
                    break
                time.sleep(0.05)
        for process in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
        self.processes = [p for p in self.processes if p.poll() is None]

    def close(self) -> None:
        """Kill the student's processes, remove their files, free the user: after this, results.json."""
        self.kill()
        shutil.rmtree(self.folder, ignore_errors=True)
        if self.user:
            remove_files_of(self.user.pw_uid)
            os.close(self.lock)
            self.lock, self.user = None, None


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@contextlib.contextmanager
def student(limits: Limits | None = None):
    """The jail of the student being graded in this context: every child and kernel started inside uses
    it, and it is closed (all the student's processes killed) on the way out."""
    jail = Jail(limits)
    token = _current.set(jail)
    try:
        yield jail
    finally:
        _current.reset(token)
        jail.close()


def current() -> Jail | None:
    return _current.get()
