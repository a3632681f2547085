"""A class's grading worker: `classroom` starts one per job slot, as ``python -m specdec_helpers.cli.worker``
(the command line's entry point: grading a student is running ``grade``, a command, and this library module
imports no command).

A grading process spent ~12 s of CPU importing torch, transformers and the grader before it graded anything
(about half of one student's CPU on the 2-core machine); a class paid that once per student. A worker imports
them once, then grades one student at a time, each in a process forked from it, the imports done. It is what
`contain` is for one command: a child subreaper, so whatever a student's grading starts stays its descendant,
and after each student (done, crashed or out of time) every descendant is stopped and killed before the next.
The worker itself never runs a model, so torch's thread pools do not exist yet when it forks (as torch's
own DataLoader workers fork after ``import torch``).

Protocol, one line each way per student: ``{"argv": [grade's arguments], "log": PATH, "timeout": SECONDS}`` in;
``{"status": N}`` out: grade's exit status, `contain.TIMED_OUT` (124) when out of time, 128 + the signal's
number when a signal killed it. Everything the grading prints goes to PATH.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import traceback
from typing import Callable

from specdec_helpers.assignment.grading import contain


def preload() -> None:
    """What every grading imports: the grader and the toy pair's model family (the caller brings the command)."""
    import transformers.models.gpt_neox.modeling_gpt_neox  # noqa: F401

    from specdec_helpers.assignment.grading import grader  # noqa: F401


def _graded_here(run: Callable[[list[str]], int], argv: list[str], log: str) -> None:
    """In the forked process (the worker's process group: killing that group ends both): output to ``log``,
    then ``grade`` as on the command line."""
    code = 1
    try:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, signal.SIG_DFL)
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        code = run(argv)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except BaseException:  # noqa: BLE001 - whatever happens, this process ends here, with the reason in the log
        traceback.print_exc()
    finally:
        from specdec_helpers.assignment.grading import isolation

        isolation.remove_views()  # os._exit skips the atexit that would
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def grade(run: Callable[[list[str]], int], argv: list[str], log: str, timeout: float) -> int:
    """Grade one student in a forked process within ``timeout`` seconds; then sweep what it left and delete
    its temporary folder (the kit views and scratch it made there: a grading killed at its time limit never
    reaches its own clean-up)."""
    sys.stdout.flush()
    sys.stderr.flush()
    folder = tempfile.mkdtemp(prefix="specdec-grading-")
    os.chmod(folder, 0o711)  # the student user passes through to its view and scratch, and lists nothing
    pid = os.fork()
    if pid == 0:
        tempfile.tempdir = folder
        os.environ["TMPDIR"] = folder
        _graded_here(run, argv, log)
    try:
        return contain.supervise(pid, timeout, say=lambda line: _note(log, line))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _note(log: str, line: str) -> None:
    with open(log, "a") as file:
        print(line, file=file)


def main(run: Callable[[list[str]], int]) -> int:
    """Serve jobs from stdin until it ends; ``run(argv)`` grades one student (``grade``'s arguments)."""
    contain.become_subreaper()
    contain.on_stop_sweep()
    try:
        preload()
        for line in sys.stdin:
            job = json.loads(line)
            status = grade(run, list(job["argv"]), str(job["log"]), float(job["timeout"]))
            print(json.dumps({"status": status}), flush=True)
    except KeyboardInterrupt:  # stopped at any point, even between a fork and its supervision
        return 130
    finally:
        contain.kill_descendants()
    return 0
