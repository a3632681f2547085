"""Notebook set-up on Colab: an install that upgrades nothing it need not, and a clear word when the
runtime must restart (an upgraded package that was already imported stays old until then)."""

import re
import sys
from importlib import metadata
from types import SimpleNamespace

import pytest

from specdec_helpers.present import notebook_help


def test_a_package_replaced_under_the_kernel_asks_for_a_restart(monkeypatch, capsys):
    installed = metadata.version("ipywidgets")
    monkeypatch.setitem(sys.modules, "ipywidgets", SimpleNamespace(__version__="7.7.0"))  # what was imported
    assert notebook_help.stale_modules() == [f"ipywidgets 7.7.0 is loaded, {installed} installed"]
    notebook_help.setup()
    out = capsys.readouterr().out
    assert "Restart needed" in out and "dependency conflicts" in out  # Colab's pip prints them in red


def test_no_restart_when_nothing_changed(capsys):
    import ipywidgets  # noqa: F401  (the real one: loaded == installed)

    assert notebook_help.stale_modules() == []
    assert "Restart" not in (notebook_help.setup(), capsys.readouterr().out)[1]


@pytest.mark.slow
def test_unfinished_work_reads_as_one_line_not_a_traceback():
    """After nb.setup(), a failed check shows its message, and a cell calling an exercise that still
    raises the stub's NotImplementedError says which; other errors keep their full traceback."""
    import nbclient
    from nbformat.v4 import new_code_cell, new_notebook

    sources = [
        "from specdec_helpers.present import notebook_help as nb\ninfo = nb.setup()",
        "def count(model):\n    # YOUR CODE HERE\n    raise NotImplementedError()",
        "nb.check(lambda: count(1) == 1, 'counted', 'sum p.numel()')",
        "print(count(1) / 1e6)",
        "from specdec_helpers.assignment.student.check import CheckFailed\nraise CheckFailed('Not yet: see the checks above')",
        "def kit():\n    raise NotImplementedError('only full-attention caches')\nkit()",
        "1 / 0",
        "print(cache_bytes(cache))",
    ]
    nb = new_notebook(cells=[new_code_cell(s) for s in sources])
    nbclient.NotebookClient(nb, timeout=120, allow_errors=True).execute()
    errors = [next((o for o in c.outputs if o.output_type == "error"), None) for c in nb.cells]
    shown = [re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(e.traceback)) if e else "" for e in errors]  # no colours
    assert errors[0] is None and errors[1] is None
    assert (
        shown[2].startswith("Not done yet: the exercise above still raises NotImplementedError")
        and "\n" not in shown[2]
    )
    assert errors[2].ename == "CheckFailed"  # still an error: Run all stops here, nbval and handin see it
    assert "count()" in shown[3] and "NotImplementedError" in shown[3] and "File " not in shown[3], shown[3]
    assert errors[3].ename == "NotImplementedError"
    assert shown[4] == "Not yet: see the checks above"
    assert "only full-attention caches" in shown[5] and "kit()" in shown[5]  # the kit's own: full traceback
    assert "ZeroDivisionError" in shown[6] and "1 / 0" in shown[6]
    assert "name 'cache_bytes' is not defined" in shown[7] and shown[7].rstrip().endswith(
        "Runtime > Run before, then this cell again."
    )  # out of order, or after a restart
