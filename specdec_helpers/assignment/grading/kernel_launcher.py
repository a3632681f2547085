"""A notebook kernel's launcher for the student's jail (`privilege.Jail.kernel_spec`): run by Jupyter as the
grader, it hands the connection file to the student, becomes the student and starts the kernel in the jail. Also
the resource limits' launcher where ``prlimit`` is missing (`limits_command`).

Jupyter runs it once per notebook that nbval runs, by its path and with ``python -I`` (`command`), so that it
imports the standard library only: run as ``python -m`` it imported the kit's package first, whose ``__init__``
brings torch and transformers along (about 2 CPU s a notebook, 16 for the eight of one hand-in)."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path


def command(plan_path, connection_file: str = "{connection_file}") -> list[str]:
    """The launcher's command line (a kernelspec's ``argv``): this file run alone, nothing but the standard library
    on its path (``-I``: no ``PYTHON*`` variables, no user site, not this file's folder)."""
    return [sys.executable, "-I", str(Path(__file__).resolve()), str(plan_path), connection_file]


def limits_command(limits: dict, argv: list[str]) -> list[str]:
    """``argv`` run under the resource ``limits`` (``{"NOFILE": 64, ...}``), where ``prlimit`` is missing. It runs as
    the grader in the student's scratch folder, so it imports nothing from there: the standard library only (``-I``)."""
    return [sys.executable, "-I", str(Path(__file__).resolve()), "limits", json.dumps(limits), *argv]


def launch(plan_path: str, connection_file: str) -> None:
    """Hand the connection file to the student, become the student, and exec the kernel the plan names."""
    plan = json.loads(Path(plan_path).read_text())
    scratch = Path(plan["scratch"])
    mine = scratch / "kernel-connection.json"
    # The scratch folder is the student's, kept between notebooks: what is at that name may be their link to a
    # file of the grader's, which copying and chown would follow (overwrite it, give it to the student). Never
    # follow it: remove whatever is there and create the file anew; a link made in between fails the open.
    with contextlib.suppress(FileNotFoundError):
        os.unlink(mine)
    fd = os.open(mine, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as out:
        if plan["user"]:
            os.fchown(fd, *plan["user"])
        out.write(Path(connection_file).read_bytes())
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


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[1] == "limits":
        import resource

        for name, value in json.loads(sys.argv[2]).items():
            resource.setrlimit(getattr(resource, "RLIMIT_" + name), (value, value))
        os.execvp(sys.argv[3], sys.argv[3:])
    if len(sys.argv) != 3:
        raise SystemExit(f"usage: python -I {sys.argv[0]} PLAN CONNECTION_FILE | limits JSON COMMAND...")
    launch(sys.argv[1], sys.argv[2])
