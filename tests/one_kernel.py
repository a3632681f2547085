"""Several notebooks run one after another in one kernel, each read back on its own. A plain module, not
conftest.py (see tiny_models.py).

A kernel pays about 5 CPU s to start and import torch, transformers and the kit before its first cell; run in one
kernel, the notebooks pay that once. Before each notebook a cell of the harness empties the user namespace
(``%reset -f``: every name a notebook defined or imported is gone, so a cell that needs a name its own notebook did
not define still fails with a NameError) and moves to the notebook's folder (where `nb.your_decoder` finds the
earlier notebooks). What a fresh kernel has and this does not: modules stay imported, with whatever state they keep
(torch's thread count and random state, the kit's caches). Errors are allowed, so every notebook runs to its end
and one notebook's failure leaves the others to be read.
"""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

#: Empties the user namespace and holds that it is empty (every name left is IPython's own or starts with "_").
EMPTY = (
    "%reset -f\nassert not [n for n in get_ipython().user_ns if n[0] != '_' and n not in get_ipython().user_ns_hidden]"
)
#: `EMPTY`, then the notebook's folder.
RESET = EMPTY + "\nimport os as _os\n_os.chdir({folder!r})\ndel _os"


def run_in_one_kernel(parts: list[tuple[str, object, Path]], env: dict, timeout: float = 600) -> dict[str, list]:
    """Run each ``(label, notebook, folder)`` of ``parts`` in order in one fresh kernel with ``env`` added to this
    process's environment; returns each label's executed code cells (their ``id``s the notebook's own)."""
    from nbclient import NotebookClient

    cells = []
    for label, nb, folder in parts:
        cells.append(new_code_cell(RESET.format(folder=str(folder)), metadata={"part": None}))
        for cell in nb.cells:
            if cell.cell_type == "code":
                copy = new_code_cell(cell.source, metadata={**cell.metadata, "part": label, "cell": cell.id})
                cells.append(copy)
    for i, cell in enumerate(cells):
        cell.id = f"k{i:04d}"
    run = new_notebook(cells=cells, metadata=parts[0][1].metadata)
    client = NotebookClient(
        run,
        timeout=timeout,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": str(parts[0][2])}},
    )
    client.execute(env={**os.environ, **env})
    harness = [c for c in run.cells if c.metadata["part"] is None]
    for cell in harness:  # the harness's own cells must run clean, or every part after it is suspect
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        assert cell.get("execution_count") is not None and not errors, (cell.source, errors)
    out: dict[str, list] = {label: [] for label, _, _ in parts}
    for cell in run.cells:
        if cell.metadata["part"] is not None:
            cell.id = cell.metadata["cell"]
            out[cell.metadata["part"]].append(cell)
    return out


def read(path: Path):
    return nbformat.read(str(path), as_version=4)
