"""Nothing a student's grading starts outlives it: what a class's grading worker (`grade_worker`) does around
each student it forks.

The worker makes itself a child subreaper (Linux ``prctl``), so every process a grading starts stays its
descendant: the student's child, and whatever that child spawns, even in a new session, double-forked or
daemonized. When the grading ends, or after its time limit, every descendant is stopped (SIGSTOP, so a
fork storm cannot outrun the sweep) and then killed, until none is left. Status: the grading's, or 124
when it ran out of time (as coreutils ``timeout``). Elsewhere than Linux the sweep still kills the
descendants it can see, but an orphan reparented to init escapes it.
"""

from __future__ import annotations

import ctypes
import os
import signal
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


def on_stop_sweep() -> None:
    """SIGTERM / SIGINT (the class run stopped by the instructor) raise KeyboardInterrupt, so the sweep in
    `supervise` (or the caller's own) still runs before the process exits."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _interrupt)


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def supervise(pid: int, seconds: float, say=_say) -> int:
    """Wait at most ``seconds`` for child ``pid``, then stop and kill every descendant (``say`` tells what was
    stopped). Its exit status, 128 + the signal's number when a signal killed it (as shells say), or
    `TIMED_OUT`. Called by a subreaper (`become_subreaper`), the sweep reaches whatever the child left."""
    try:
        code = psutil.Process(pid).wait(timeout=seconds)
        return 128 - code if code < 0 else code
    except psutil.TimeoutExpired:
        say(f"contain: still running after {seconds:g} s: stopped, the points are lost")
        return TIMED_OUT
    finally:
        left = kill_descendants()
        if left:
            say(f"contain: killed {left} process(es) left behind")
