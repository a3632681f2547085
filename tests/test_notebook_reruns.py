"""Notebooks that survive a student's habits (issue 44): every code cell run twice in a row ("each"), and the
whole notebook run twice in one kernel ("whole"), on the reference; every cell still runs and every check cell
still passes. nbval runs each cell once, so it never sees a cell whose rerun breaks a later check (04's rollback
cell once fed its draft into the cache a rerun had already grown, and the check then rejected a correct
``cache_lengths``). How a run is built and a check cell is read: tests/notebook_reruns.py.

CI runs notebook 04 in both modes, and the control (this file: 80 CPU s, 3.3 min wall at load 6-8). All eight
in both modes took 500 s of wall on the shared 2-core machine (2026-11-27, load 1-6; each + whole, s: 01 13 + 17,
02 20 + 14, 03 10 + 19, 04 44 + 35, 05 30 + 24, 06 18 + 25, 07 58 + 59, 08 48 + 65), too long for CI for one
property. 04 is in CI: its practice check reads what an earlier cell measured, and its graded check is the
costliest cell (16-30 s a run). ``SPECDEC_RERUN_ALL=1`` runs all eight:
``SPECDEC_RERUN_ALL=1 python -m pytest -q -p no:cacheprovider tests/test_notebook_reruns.py``.

The control: a copy of 04 up to its ``cache_lengths`` check, with the rollback cell as it was before the fix
(rerun-unsafe under "each": it prints another number and the check rejects a correct answer) and a cell that appends to a file a check then counts (rerun-unsafe under both
modes); the test must name exactly those cells.
"""

from __future__ import annotations

import os

import nbformat
import pytest
from notebook_reruns import MODES, NOTEBOOKS, read, run_rerun

pytestmark = pytest.mark.slow  # a kernel with the toy pair, every cell run twice or more

ALL = sorted(p.name for p in NOTEBOOKS.glob("0[1-8]_*.ipynb"))
IN_CI = ["04_kv_cached_verification.ipynb"]
CHOSEN = ALL if os.environ.get("SPECDEC_RERUN_ALL") == "1" else IN_CI


def test_the_notebooks_are_there():
    assert len(ALL) == 8 and set(IN_CI) <= set(ALL), ALL


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", CHOSEN)
def test_every_cell_and_check_survives_a_rerun(name, mode):
    problems, _ = run_rerun(read(name), mode)
    assert not problems, f"{name}, {mode}:\n" + "\n".join(problems)


#: 04's rollback cell before the fix: it feeds the draft into section 1's cache, which its own first run grew.
UNSAFE_ROLLBACK = """# NBVAL_CHECK_OUTPUT
start = prompt_ids.shape[1]
drafter.update(0)   # a new text
draft_tokens = drafter.propose(prompt_ids, K).tokens
_, accepted = decoder.verify_tokens_vectorized(prompt_ids, draft_tokens.view(1, -1))
pair.target(input_ids=draft_tokens.view(1, -1), cache=cache, use_cache=True)
after_pass = nb.cache_length(cache)
print(f"after feeding the draft: {after_pass} cached positions")
nb.crop_cache(cache, start + accepted)
after_rollback = nb.cache_length(cache)"""
#: A results log a student appends to, outside the kernel: a rerun from the top does not reset it.
APPEND = """log = os.path.join(os.environ["SPECDEC_EXPORT_DIR"], "rounds.csv")
with open(log, "a") as f:
    f.write(f"{after_pass},{after_rollback}\\n")"""
COUNT = """with open(log) as f:
    rows = f.read().splitlines()
nb.check(len(rows) == 1, "one round, one row.", f"the log holds {len(rows)} rows for one round.")"""


def control_notebook():
    nb = read("04_kv_cached_verification.ipynb")
    rollback = next(i for i, c in enumerate(nb.cells) if "nb.crop_cache(cache, start + accepted)" in c.source)
    check = next(i for i, c in enumerate(nb.cells) if "cache_lengths(start," in c.source and "nb.check(" in c.source)
    nb.cells = nb.cells[: check + 1]
    nb.cells[rollback].source = UNSAFE_ROLLBACK
    nb.cells += [nbformat.v4.new_code_cell(APPEND), nbformat.v4.new_code_cell(COUNT)]
    return nb, rollback, check, len(nb.cells) - 1


@pytest.mark.parametrize("mode", MODES)
def test_the_control_is_rejected(mode):
    nb, rollback, check, count = control_notebook()
    problems, _ = run_rerun(nb, mode)
    failed = sorted({line.split(" (")[0] for line in problems})
    if mode == "each":  # the second rollback grows the cache by the draft again (its print shows K more positions), and
        # the check rejects the correct answer
        assert failed == sorted([f"cell {rollback}", f"cell {check}", f"cell {count}"]), problems
    else:  # from the top, section 1 builds a new cache; only the log outlives the first pass
        assert problems and all(line.startswith(f"cell {count} (pass 2, check)") for line in problems), problems
