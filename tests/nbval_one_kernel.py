"""A pytest plugin (``-p tests.nbval_one_kernel``) for tests/test_notebooks_fp16.py's child: nbval's notebooks run
one after another in one kernel instead of one kernel each, which pays the kernel's start and its imports of torch,
transformers and the kit (about 5 CPU s) once. Where nbval stops a notebook's kernel, the user namespace is emptied
instead (``%reset -f``: a cell that needs a name its own notebook did not define still fails with a NameError);
modules stay imported, with what state they keep. A kernel that died or was stopped is replaced by a fresh one.
nbval's reading and comparing of each cell is its own, unchanged.
"""

from __future__ import annotations

import nbval.plugin
from nbval.kernel import RunningKernel

from tests.one_kernel import EMPTY

_shared: dict = {}


class SharedKernel:
    """nbval's `RunningKernel`, kept for the next notebook: ``stop`` empties the namespace."""

    def __init__(self, kernel: RunningKernel, cwd):
        self.kernel, self.cwd = kernel, cwd

    def __getattr__(self, name):
        return getattr(self.kernel, name)

    def stop(self):
        if not self.kernel.is_alive():
            return
        msg_id = self.kernel.execute_cell_input(EMPTY, allow_stdin=False)
        try:
            while True:  # nbval's await_reply drops the reply's status: a reset that raised would go unseen
                reply = self.kernel.get_message(stream="shell", timeout=120)
                if reply["parent_header"].get("msg_id") == msg_id:
                    break
            self.kernel.await_idle(msg_id, timeout=120)
            emptied = reply["content"]["status"] == "ok"
        except Exception:  # noqa: BLE001 - a kernel that cannot reset is not reused
            emptied = False
        if not emptied:  # the next notebook gets a fresh kernel
            self.kernel.stop()


def _running_kernel(kernel_name, cwd=None, startup_timeout=60):
    kept = _shared.get(kernel_name)
    if kept is None or kept.cwd != cwd or not kept.kernel.is_alive():
        kept = _shared[kernel_name] = SharedKernel(RunningKernel(kernel_name, cwd, startup_timeout), cwd)
    return kept


nbval.plugin.RunningKernel = _running_kernel


def pytest_unconfigure(config):
    for kept in _shared.values():
        if kept.kernel.is_alive():
            kept.kernel.stop()
    _shared.clear()
