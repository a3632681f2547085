"""The student users that run student code: one per student graded at the same time (``specdec-student``,
then ``specdec-student1``, ... claimed with a lock), created when missing; and all of one user's processes
and files, found, signalled and removed (`privilege.Jail` kills and cleans up through these)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import re
import shutil
import stat
import subprocess
import warnings
from pathlib import Path


def _student_user() -> str:
    """The student users' name (then ``name1``, ``name2``, ...): ``$SPECDEC_STUDENT_USER``, so that two graders
    on one machine that each check "no process of my students is left" (the test suite's parallel workers) use
    users of their own."""
    name = os.environ.get("SPECDEC_STUDENT_USER", "specdec-student")
    if not re.fullmatch(r"[a-z_][a-z0-9_-]{0,29}", name):
        raise ValueError(
            f"SPECDEC_STUDENT_USER={name!r} is not a user name useradd accepts: lowercase letters, "
            "digits, '-' and '_', 30 characters at most, starting with a letter; unset it for "
            "'specdec-student'"
        )
    return name


USER = _student_user()
MAX_SLOTS = 64


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
        done = subprocess.run(
            [
                "useradd",
                "--system",
                "--user-group",
                "--no-create-home",
                "--home-dir",
                "/nonexistent",
                "--shell",
                nologin,
                name,
            ],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0 and not _user_exists(name):
            raise RuntimeError(f"could not create the user {name} that runs student code: {done.stderr.strip()}")
    user = pwd.getpwnam(name)
    if user.pw_uid == 0 or user.pw_gid == 0 or user.pw_uid == os.getuid():
        raise RuntimeError(
            f"user {name} has uid {user.pw_uid} / gid {user.pw_gid}: student code needs a user of its own"
        )
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
    raise RuntimeError(
        f"{folder} is not a private folder of this user's and keeps coming back; remove whatever "
        "makes it, or make /run writable"
    )


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
