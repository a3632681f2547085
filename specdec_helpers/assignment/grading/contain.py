"""Run a command so that nothing it starts outlives it: ``python contain.py SECONDS -- COMMAND ...``
(run as a script, not with ``-m``: importing the package would import torch, seconds per student).

One student's grading runs under this wrapper when a class is graded (`classroom`). The wrapper makes
itself a child subreaper (Linux ``prctl``), so every process the grading starts stays its descendant:
the student's child, and whatever that child spawns, even in a new session, double-forked or
daemonized. When the command ends, or after SECONDS, every descendant is stopped (SIGSTOP, so a fork
storm cannot outrun the sweep) and then killed, until none is left. Exit status: the command's, or
124 when it ran out of time (as coreutils ``timeout``). Elsewhere than Linux the wrapper still kills
the descendants it can see, but an orphan reparented to init escapes it.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

import psutil

PR_SET_CHILD_SUBREAPER = 36
TIMED_OUT = 124


def become_subreaper() -> bool:
    """Orphaned descendants are reparented to this process instead of init (Linux 3.4+)."""
    if not sys.platform.startswith("linux"):
        return False
    return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def kill_descendants(rounds: int = 50) -> int:
    """Stop, then kill every descendant of this process, sweeping until none is left; returns how many."""
    killed = 0
    for _ in range(rounds):
        procs = psutil.Process().children(recursive=True)
        if not procs:
            break
        for action in ("suspend", "kill"):
            for proc in procs:
                try:
                    getattr(proc, action)()
                except psutil.Error:
                    pass
        killed += len(procs)
        psutil.wait_procs(procs, timeout=2)
        _reap()
    return killed


def _reap() -> None:
    """Collect the exit status of every dead child (orphans adopted as a subreaper become zombies)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def run(command: list[str], seconds: float) -> int:
    become_subreaper()
    # SIGTERM / SIGINT (the class run stopped by the instructor): still sweep before exiting.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _interrupt)
    process = subprocess.Popen(command)
    try:
        status = process.wait(timeout=seconds)
        status = 128 - status if status < 0 else status  # killed by a signal: 128 + its number, as shells say
    except subprocess.TimeoutExpired:
        print(f"contain: still running after {seconds:g} s: stopped, the points are lost", file=sys.stderr, flush=True)
        status = TIMED_OUT
    except KeyboardInterrupt:
        status = 130
    finally:
        left = kill_descendants()
        if left:
            print(f"contain: killed {left} process(es) left behind", file=sys.stderr, flush=True)
    return status


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python contain.py SECONDS -- COMMAND ...", file=sys.stderr)
        return 2
    return run(argv[2:], float(argv[0]))


if __name__ == "__main__":
    sys.exit(main())
