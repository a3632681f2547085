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

The reference solution is the instructor's code: `TRUSTED` runs it as the grader, which (as root) is
another user than the student's. Only the grader writes results.json, after `Jail.close`.
"""
from __future__ import annotations

import contextlib
import contextvars
import fcntl
import json
import os
import pwd
import resource
import shutil
import signal
import site
import stat
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2]  # specdec_helpers/
ROOT = PACKAGE.parent
#: Never in the student's view: the instructor's tools; nor grading/ (hidden tests, the grader) but for CHILD_NEEDS.
HIDDEN_PARTS = ("assignment/authoring",)
#: ... except what the child and the student's notebooks import from grading/.
CHILD_NEEDS = ("__init__.py", "child.py", "world.py", "sandbox.py", "privilege.py")
#: ... and what the notebooks' check cells import (the visible tests: hidden ones are stripped, as in `release`).
KERNEL_NEEDS = CHILD_NEEDS + ("grader.py", "suite.py", "suite_decode.py", "speed.py")
USER = "specdec-student"
MAX_SLOTS = 64
SWITCH_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP")  # what setpriv needs in bwrap to become the student
PASS_ENV = ("SPECDEC_PRESET", "SPECDEC_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "LANG", "LC_ALL",
            "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM", "CUDA_VISIBLE_DEVICES")
_current: contextvars.ContextVar = contextvars.ContextVar("specdec_jail", default=None)
_warned: list = []


@dataclass(frozen=True)
class Limits:
    """Per-process limits on a student's code (``processes`` counts all of the student user's)."""

    processes: int = 256  # RLIMIT_NPROC (threads count too)
    memory: int | None = None  # RLIMIT_AS in bytes; None: half the machine's memory, unlimited when CUDA is used
    cpu_seconds: int = 3600  # RLIMIT_CPU: a process left spinning dies even if the grader never comes back
    file_bytes: int = 1 << 30  # RLIMIT_FSIZE

    def resolved(self) -> dict:
        memory = self.memory
        if memory is None and not _cuda():  # CUDA reserves far more address space than memory: no limit there
            memory = max(4 << 30, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2)
        return {"NPROC": self.processes, "AS": memory, "CPU": self.cpu_seconds, "FSIZE": self.file_bytes}


def _cuda() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_available())


def apply_limits(limits: dict) -> None:
    for name, value in limits.items():
        if value is not None:
            resource.setrlimit(getattr(resource, "RLIMIT_" + name), (value, value))


# --------------------------------------------------------------------------- which layers


def layers() -> tuple[bool, bool]:
    """``(user, bwrap)``: which layers this process uses (see the module's doc)."""
    choice = os.environ.get("SPECDEC_SANDBOX", "auto")
    if choice not in ("auto", "user", "bwrap", "none"):
        raise ValueError(f"SPECDEC_SANDBOX must be auto, user, bwrap or none, got {choice!r}")
    root = os.geteuid() == 0
    if choice == "none":
        return False, False
    if choice == "user" and not root:
        raise ValueError("SPECDEC_SANDBOX=user needs the grader to run as root")
    if root:
        ensure_user(USER)
    if choice == "bwrap" and not bwrap_works():
        raise ValueError("SPECDEC_SANDBOX=bwrap, but bubblewrap is not installed or cannot make namespaces here")
    return root, choice != "user" and bwrap_works()


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


def warn(stream=None) -> None:
    """Say once, plainly, that student code runs with the grader's rights."""
    if not _warned:
        _warned.append(True)
        print("⚠️  student code runs with YOUR rights here (not root, no usable bubblewrap): it can read and "
              "change what you can. Install bubblewrap (apt-get install bubblewrap) or grade as root (Gradescope, "
              "a container) for a sandbox.", file=stream or sys.stderr, flush=True)


def describe() -> str:
    user, bwrap = layers()
    parts = (["as an unprivileged user"] if user else []) + (["in a bubblewrap sandbox"] if bwrap else [])
    return "student code runs " + (" and ".join(parts) if parts else "with the grader's rights")


# --------------------------------------------------------------------------- the student's view of the kit

_views: dict = {}


def view(kind: str = "child") -> Path:
    """A read-only copy of the kit's package without the instructor's parts: what the student's processes
    import (``child``: the graded cells' child, grading/ only `CHILD_NEEDS`; ``kernel``: the notebooks'
    kernels, grading/ only `KERNEL_NEEDS` with the hidden tests stripped). Made once per grading process."""
    if kind in _views and _views[kind].is_dir():
        return _views[kind]
    needs = CHILD_NEEDS if kind == "child" else KERNEL_NEEDS
    folder = Path(tempfile.mkdtemp(prefix=f"specdec-{kind}-view-"))

    def ignore(directory, names):
        rel = Path(directory).relative_to(PACKAGE).as_posix()
        skip = {n for n in names if n in ("__pycache__", ".ipynb_checkpoints") or n.endswith(".pyc")}
        for name in names:
            path = f"{rel}/{name}".removeprefix("./")
            if path in HIDDEN_PARTS:
                skip.add(name)
            if rel == "assignment/grading" and name not in needs:
                skip.add(name)
        return skip

    shutil.copytree(PACKAGE, folder / "specdec_helpers", ignore=ignore)
    if kind != "child":
        from specdec_helpers.assignment.authoring.release import strip

        for path in (folder / "specdec_helpers" / "assignment" / "grading").glob("*.py"):
            path.write_text(strip(path.read_text(), where=path.name))
    for path in [folder, *folder.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    _views[kind] = folder
    import atexit

    atexit.register(shutil.rmtree, folder, True)
    return folder


def secrets() -> list[Path]:
    """What student code must not read: the kit (its package, notebooks with the solutions, tests)."""
    found = [PACKAGE, ROOT / "notebooks", ROOT / "tests"]
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


def _python_roots() -> list[Path]:
    roots = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    roots |= {Path(p).resolve() for p in site.getsitepackages() if Path(p).is_dir()}
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
    roots = _python_roots()
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
    base = Path("/run") if os.access("/run", os.W_OK) else Path(tempfile.gettempdir())
    folder = base / "specdec-sandbox"
    try:
        st = os.lstat(folder)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o077:
            shutil.rmtree(folder) if stat.S_ISDIR(st.st_mode) else folder.unlink()
            raise FileNotFoundError
    except FileNotFoundError:
        folder.mkdir(mode=0o700, exist_ok=True)
    return folder


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
        self.lock, self.user = (claim_user() if self.user_layer else (None, None))
        self.processes: list[subprocess.Popen] = []
        self.scratch = Path(tempfile.mkdtemp(prefix="specdec-scratch-"))
        if self.user:
            os.chown(self.scratch, self.user.pw_uid, self.user.pw_gid)
            self.kill()  # a previous grading's leftovers of this user
            if not self.bwrap_layer:
                python = Path(sys.executable).resolve()
                if not readable_by(python, self.user.pw_uid, self.user.pw_gid):
                    raise RuntimeError(f"the user {self.user.pw_name} that runs student code cannot run {python} "
                                       "(a folder on its path is private): use a Python all users can run, or install "
                                       "bubblewrap")
            self.problems = [str(p) for p in secrets() if not self.bwrap_layer and
                             readable_by(p, self.user.pw_uid, self.user.pw_gid)]
            if self.problems:
                print(f"⚠️  student code (user {self.user.pw_name}) can read {', '.join(self.problems)}: make them "
                      "unreadable to other users (chmod -R o-rwx) or install bubblewrap", file=sys.stderr, flush=True)

    # -- starting
    def env(self, extra: dict | None = None, kind: str = "child") -> dict:
        base = {k: os.environ[k] for k in PASS_ENV if k in os.environ}
        if not self.trusted and (self.user_layer or self.bwrap_layer):
            base |= {"PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin", "HOME": str(self.scratch),
                     "TMPDIR": str(self.scratch), "PYTHONPATH": str(view(kind)), "PYTHONDONTWRITEBYTECODE": "1",
                     "MPLCONFIGDIR": str(self.scratch / ".matplotlib"), "USER": self.name, "LOGNAME": self.name}
            if os.environ.get("SPECDEC_CACHE_DIR"):
                base["SPECDEC_CACHE_DIR"] = os.environ["SPECDEC_CACHE_DIR"]
        else:
            base = {**os.environ}
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
            wrapped = ["setpriv", f"--reuid={self.user.pw_uid}", f"--regid={self.user.pw_gid}", "--clear-groups",
                       "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--",
                       "env", "-C", str(self.scratch), *wrapped]
        if self.bwrap_layer:
            switch = ([a for cap in SWITCH_CAPS for a in ("--cap-add", cap)] if self.user else
                      ["--chdir", str(self.scratch)])
            wrapped = bwrap_args(self.scratch, kind == "kernel", kind) + switch + ["--"] + wrapped
        limits = {k: v for k, v in self.limits.items() if v is not None and (k != "NPROC" or self.user_layer)}
        if shutil.which("prlimit"):
            return ["prlimit", *[f"--{k.lower()}={v}" for k, v in limits.items()], "--", *wrapped]
        return [sys.executable, "-m", __name__, "limits", json.dumps(limits), *wrapped]

    def popen(self, argv: list[str], env: dict | None = None, **kwargs) -> subprocess.Popen:
        if self.user and not self.bwrap_layer:
            kwargs.update(user=self.user.pw_uid, group=self.user.pw_gid, extra_groups=[])
        process = subprocess.Popen(self.argv(argv), env=self.env(env), cwd=self.scratch, start_new_session=True, **kwargs)
        self.processes.append(process)
        return process

    def kernel_spec(self, folder: Path, env: dict | None = None) -> str:
        """Write a Jupyter kernelspec under ``folder`` (put it on ``JUPYTER_PATH``) whose kernels run in this
        jail; returns its name (nbval's ``--nbval-kernel-name``)."""
        name = "specdec-student"
        spec = folder / "kernels" / name
        spec.mkdir(parents=True, exist_ok=True)
        plan = {"argv": self.argv([sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"], "kernel"),
                "env": self.env(env, "kernel"), "scratch": str(self.scratch),
                "user": [self.user.pw_uid, self.user.pw_gid] if self.user else None,
                "switch": bool(self.user and not self.bwrap_layer)}
        (folder / "plan.json").write_text(json.dumps(plan))
        os.chmod(folder / "plan.json", 0o600)
        (spec / "kernel.json").write_text(json.dumps({
            "argv": [sys.executable, "-m", __name__, "kernel", str(folder / "plan.json"), "{connection_file}"],
            "display_name": "student (sandboxed)", "language": "python"}))
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
                for pid in _namespace_members(process.pid) if self.bwrap_layer else [process.pid]:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, sig) if self.bwrap_layer else os.killpg(pid, sig)

    def kill(self) -> None:
        """Kill every process of this student (its user's, or its sandboxes' namespaces, or process groups)."""
        for process in self.processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
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
        shutil.rmtree(self.scratch, ignore_errors=True)
        if self.user:
            _remove_files_of(self.user.pw_uid)
            os.close(self.lock)
            self.lock, self.user = None, None


def _namespace_members(pid: int) -> list[int]:
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


def _remove_files_of(uid: int) -> None:
    for shared in ("/tmp", "/var/tmp", "/dev/shm"):
        with contextlib.suppress(OSError), os.scandir(shared) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    if entry.stat(follow_symlinks=False).st_uid == uid:
                        shutil.rmtree(entry.path) if entry.is_dir(follow_symlinks=False) else os.unlink(entry.path)


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


# --------------------------------------------------------------------------- helpers run as programs


def _kernel(plan_path: str, connection_file: str) -> None:
    """A kernel's launcher (run by Jupyter as the grader): hand the connection file to the student, then
    become the student and start the kernel in the jail."""
    plan = json.loads(Path(plan_path).read_text())
    scratch = Path(plan["scratch"])
    mine = scratch / "kernel-connection.json"
    shutil.copyfile(connection_file, mine)
    if plan["user"]:
        os.chown(mine, *plan["user"])
    if plan["switch"]:
        uid, gid = plan["user"]
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    os.chdir(scratch)
    argv = [str(mine) if a == "{connection_file}" else a for a in plan["argv"]]
    with contextlib.suppress(OSError):
        os.setsid()
    os.execvpe(argv[0], argv, plan["env"])


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[0] == "kernel":
        _kernel(argv[1], argv[2])
    elif argv[0] == "limits":
        apply_limits(json.loads(argv[1]))
        os.execvp(argv[2], argv[2:])
    else:
        raise SystemExit(f"usage: python -m {__name__} kernel PLAN CONNECTION_FILE | limits JSON COMMAND...")


if __name__ == "__main__":
    main()
