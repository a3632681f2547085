"""The grader's side of `child`: start a child on some graded cells, send it requests with a
deadline, pause it (SIGSTOP) while another child or the grader itself is timed, and turn its death into a message.

One protocol (`Runner`) for the ways student code is answered: `Child` (a process in the student's
`privilege.Jail`: another user and/or a bubblewrap sandbox) for grading, `InProcess` for trusted code.
Nothing the child sends is executed or unpickled here: answers are JSON, decoded into tensors, lists
and numbers only.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from typing import Protocol

from specdec_helpers.assignment.grading import privilege
from specdec_helpers.assignment.grading.child import error_answer
from specdec_helpers.assignment.testing.wire import StudentError, decode
from specdec_helpers.assignment.grading.packages import PackagesDiffer
from specdec_helpers.core.timing import child_threads


class ChildFailed(Exception):
    """The child exited, crashed or ran out of time; the message says which, for the student."""


class Delegated(Exception):
    """A graded part called the kit's own implementation of itself."""


class Runner(Protocol):
    """What the suites need from whatever runs the student's code."""

    ready: dict  # per part: "ok", "not implemented" or "error: ..." (loading the graded cells)

    def request(self, op: str, timeout: float = 60, **kwargs): ...

    def alive(self) -> bool: ...

    def cpu_seconds(self) -> float: ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def close(self) -> None: ...


class Child:
    """One child process running ``sources`` (``{part: cell source}``) in ``jail``: the student's by
    default (`privilege.current`, else a jail of its own, closed with the child); ``trusted=True`` for
    the reference solution, which runs as the grader (another user than the student's)."""

    def __init__(
        self,
        sources: dict,
        ready_timeout: float = 120,
        env: dict | None = None,
        jail: privilege.Jail | None = None,
        trusted: bool = False,
    ):
        self.log_file = tempfile.TemporaryFile()
        read_end, write_end = os.pipe()
        self.own_jail = None
        if jail is None:
            jail = privilege.current() if not trusted else None
            if jail is None:
                jail = self.own_jail = privilege.Jail(trusted=trusted)
        self.jail = jail
        try:
            self.process = jail.popen(
                [sys.executable, "-m", "specdec_helpers.assignment.grading.child", str(write_end)],
                env=env,
                stdin=subprocess.PIPE,
                stdout=self.log_file,
                stderr=self.log_file,
                pass_fds=(write_end,),
                text=True,
            )
        except BaseException:
            os.close(read_end)
            self._release()
            raise
        finally:
            os.close(write_end)
        self.answers = os.fdopen(read_end, "r")
        self.buffer = ""
        self.ready = None
        try:  # the cells go over the pipe, never through a file another user could read
            self.process.stdin.write(json.dumps(sources) + "\n")
            self.process.stdin.flush()
        except OSError:
            pass  # the child died at once: _receive says so
        try:
            first = self._receive(ready_timeout, "loading your notebook's graded cells")
        except BaseException:  # no caller gets a child to close: free its jail (user, lock, folder) here
            self.close()
            raise
        if "packages" in first:  # the grader's own setup is wrong, not the student's code: stop grading
            self.close()
            raise PackagesDiffer(first["packages"])
        self.ready = first.get("ready", {})

    # -- process control
    def alive(self) -> bool:
        return self.process.poll() is None

    def pause(self) -> None:
        """Stop the child and every process of its jail (so nothing of theirs runs while another is timed)."""
        if self.alive():
            self.jail.pause() if self.jail.user_layer or self.jail.bwrap_layer else os.killpg(
                self.process.pid, signal.SIGSTOP
            )

    def resume(self) -> None:
        if self.alive():
            self.jail.resume() if self.jail.user_layer or self.jail.bwrap_layer else os.killpg(
                self.process.pid, signal.SIGCONT
            )

    def kill(self) -> None:
        """Kill the child and everything it started (in a student's jail: every process of the student)."""
        if self.alive():
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait()
        if not self.jail.trusted:
            self.jail.kill()

    def cpu_seconds(self) -> float:
        """CPU time the child and every process it started have used, as the kernel accounts it: read from
        outside, so student code can add to it but never take from it (its own counters it can patch)."""
        import psutil

        total = 0.0
        try:
            root = psutil.Process(self.process.pid)
            processes = [root] + root.children(recursive=True)
        except psutil.Error:
            return total
        for process in processes:
            try:
                t = process.cpu_times()
            except psutil.Error:
                continue
            total += t.user + t.system + t.children_user + t.children_system
        return total

    def output_tail(self, chars: int = 600) -> str:
        self.log_file.seek(0)
        return self.log_file.read().decode(errors="replace")[-chars:].strip()

    # -- messages
    def _receive(self, timeout: float, what: str) -> dict:
        deadline = time.monotonic() + timeout
        while "\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise ChildFailed(f"did not finish within {timeout:g} s while {what} (an endless loop?)")
            ready, _, _ = select.select([self.answers], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(self.answers.fileno(), 1 << 20).decode(errors="replace")
                if not chunk:
                    self.process.wait()
                    tail = self.output_tail()
                    raise ChildFailed(
                        f"your code ended the process (exit status {self.process.returncode}) while "
                        f"{what}" + (f"; its last output: {tail}" if tail else "")
                    )
                self.buffer += chunk
            elif not self.alive():
                raise ChildFailed(f"your code ended the process (exit status {self.process.returncode}) while {what}")
        line, self.buffer = self.buffer.split("\n", 1)
        return json.loads(line)

    def request(self, op: str, timeout: float = 60, **kwargs):
        """Send one request; returns the decoded answer or raises StudentError / ChildFailed / Delegated."""
        if not self.alive():
            raise ChildFailed("the process running your code is gone (an earlier test ended it)")
        self.process.stdin.write(json.dumps({"op": op, **kwargs}) + "\n")
        self.process.stdin.flush()
        answer = self._receive(timeout, f"running {kwargs.get('method', op)}")
        if answer.get("delegated"):
            raise Delegated(
                f"your code called the kit's own implementation ({answer['delegated'][0]}): a graded "
                "part must be your own code"
            )
        if "error" in answer:
            e = answer["error"]
            raise StudentError(e["type"], e["message"], e.get("where", ""))
        return decode(answer["ok"])

    def close(self) -> None:
        self.kill()
        self.answers.close()
        self._release()

    def _release(self) -> None:
        self.log_file.close()
        if self.own_jail is not None:
            self.own_jail.close()


class InProcess:
    """The same requests answered in this process: for a student's own notebook kernel and tests of
    the grader itself, where the code is trusted. Not for grading (`Child` is)."""

    def __init__(self, functions: dict):
        from specdec_helpers.assignment.grading.child import Server
        from specdec_helpers.assignment.parts.decoder import STANDINS

        self.server = Server(functions, dict(STANDINS))
        self.ready = {}

    def alive(self) -> bool:
        return True

    def cpu_seconds(self) -> float:
        return time.process_time()

    def pause(self) -> None:  # this process: the grader's own timing runs in it
        pass

    def resume(self) -> None:
        pass

    def request(self, op: str, timeout: float = 60, **kwargs):
        # the child's torch threads (`$SPECDEC_THREADS`, default 1), not this kernel's: the checks of cost hold this
        # process's CPU time against the grader's own at that count, and a Colab kernel's two threads spin
        # 1.6-1.9 times the CPU of one (a correct decoder then failed "one target pass")
        try:  # the same JSON round trip as the child's answers
            with child_threads():
                answer = getattr(self.server, "op_" + op)(**decode(kwargs))
            return decode(json.loads(json.dumps(answer)))
        except Exception as error:  # reported like the child does
            e = error_answer(error)
            raise StudentError(e["type"], e["message"], e["where"]) from error

    def close(self) -> None:
        pass
