"""Check and fix what every course notebook shares: its "Open in Colab" badge, its set-up cell, and
saved outputs only where nbval compares them.

Each notebook opens with a markdown cell holding a Colab badge, and its first code cell is the
set-up cell (works on Colab and locally: ``pip install git+URL@BRANCH`` on Colab, then
``nb.setup()``). Both name the repository, so they must all point at the same one: the repository
students open and install from. Only the badge link and the install line are checked and rewritten;
the rest of each cell is the author's, edited in Jupyter like any other cell.

Saved outputs: the tests run the notebooks with ``--nbval-lax``, which compares only the cells marked
``# NBVAL_CHECK_OUTPUT``. Any other saved output is compared with nothing and goes stale with the next change
(and weighs the repository down: plots are base64 images), so the course notebooks keep none; `fix` clears them.

``release`` calls `fix_notebook` to point a student release at its own repository; a test runs
`check` over ``notebooks/``.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

from specdec_helpers.present.notebook_help import REPO_BRANCH, REPO_URL, colab_url, pip_install_spec

BADGE_LINK = re.compile(r"https://colab\.research\.google\.com/github/[^)\s\"']+")
INSTALL_SPEC = re.compile(r"git\+https?://[^\s\"']+")
COMPARED = "NBVAL_CHECK_OUTPUT"  # the cells `pytest --nbval-lax` compares with their saved outputs


def uncompared_outputs(nb) -> list:
    """Code cells with saved outputs that nbval never compares (not marked ``# NBVAL_CHECK_OUTPUT``)."""
    return [
        cell for cell in nb.cells if cell.cell_type == "code" and cell.get("outputs") and COMPARED not in cell.source
    ]


def setup_cell(nb):
    """The set-up cell: the first code cell (None if there is no code cell)."""
    return next((cell for cell in nb.cells if cell.cell_type == "code"), None)


def problems_in(nb, name: str, repo_url: str = REPO_URL, branch: str = REPO_BRANCH) -> list[str]:
    """What is wrong with one notebook's badge and set-up cell, one line each (empty: all fine)."""
    problems = []
    badge, spec = colab_url(name, repo_url, branch), pip_install_spec(repo_url, branch)
    first = nb.cells[0] if nb.cells else None
    links = BADGE_LINK.findall(first.source) if first is not None and first.cell_type == "markdown" else []
    if not links:
        problems.append(f"{name}: no 'Open in Colab' badge in the first (markdown) cell")
    problems += [f"{name}: the Colab badge opens {link}, expected {badge}" for link in links if link != badge]
    setup = setup_cell(nb)
    if setup is None:
        return problems + [f"{name}: no set-up cell (no code cell at all)"]
    specs = INSTALL_SPEC.findall(setup.source)
    if not specs:
        problems.append(f"{name}: the set-up cell (first code cell) has no Colab install line 'pip install {spec}'")
    problems += [f"{name}: the set-up cell installs {s}, expected {spec}" for s in specs if s != spec]
    for needed, why in (("google.colab", "tell Colab from a local run"), ("nb.setup()", "call nb.setup()")):
        if needed not in setup.source:
            problems.append(f"{name}: the set-up cell does not {why} ({needed!r} missing)")
    stale = uncompared_outputs(nb)
    if stale:
        problems.append(
            f"{name}: {len(stale)} cell(s) keep saved outputs that nbval never compares (first: "
            f"{stale[0].get('id', '?')}); clear them with notebook_sync.fix (or mark the cell "
            f"'# {COMPARED}' if nbval should compare it)"
        )
    return problems


def fix_notebook(nb, name: str, repo_url: str = REPO_URL, branch: str = REPO_BRANCH) -> bool:
    """Point ``nb``'s badge and install line at ``repo_url`` and clear the outputs nbval never compares, in
    place; returns whether anything changed."""
    badge, spec = colab_url(name, repo_url, branch), pip_install_spec(repo_url, branch)
    changed = False
    if nb.cells and nb.cells[0].cell_type == "markdown":
        new = BADGE_LINK.sub(badge, nb.cells[0].source)
        changed |= new != nb.cells[0].source
        nb.cells[0].source = new
    setup = setup_cell(nb)
    if setup is not None:
        new = INSTALL_SPEC.sub(spec, setup.source)
        changed |= new != setup.source
        setup.source = new
    for cell in uncompared_outputs(nb):
        cell.outputs, cell.execution_count, changed = [], None, True
    return changed


def _notebooks(paths) -> list[Path]:
    found = []
    for path in map(Path, [paths] if isinstance(paths, (str, Path)) else paths):
        found += sorted(path.glob("[0-9]*.ipynb")) if path.is_dir() else [path]
    return found


def check(paths, repo_url: str = REPO_URL, branch: str = REPO_BRANCH) -> list[str]:
    """Problems over notebooks (files, or folders whose numbered notebooks are checked)."""
    return [
        p
        for path in _notebooks(paths)
        for p in problems_in(nbformat.read(str(path), as_version=4), path.name, repo_url, branch)
    ]


def fix(paths, repo_url: str = REPO_URL, branch: str = REPO_BRANCH) -> list[Path]:
    """Rewrite badges and install lines to point at ``repo_url`` and clear uncompared outputs; returns the
    files changed."""
    changed = []
    for path in _notebooks(paths):
        nb = nbformat.read(str(path), as_version=4)
        if fix_notebook(nb, path.name, repo_url, branch):
            nbformat.write(nb, str(path))
            changed.append(path)
    return changed
