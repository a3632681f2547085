"""Every course notebook under nbval in fp16 on the CPU (issue 33): a check cell whose text depends on the dtype
(04 once printed "x 4 bytes" on a CPU in fp32 and "x 2 bytes" on a GPU in fp16) or a check that holds only in
fp32 fails here, on a machine without a GPU.

``SPECDEC_DTYPE=fp16`` makes `load_pair` (and so every notebook's pair) load the toy models in half precision; all
eight run in one pytest child under nbval, one after another in one kernel, with that variable set (in fp32 they run
in tests/test_course.py). All eight, no subset: in fp16 on the shared 2-core machine they took 10-28 s each, 135 s
one after another (benchmarks/RESULTS.md). A notebook that cannot run (no nbval, no kernel, a cell that fails or is
skipped) fails the test: nothing here skips.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("0[1-8]_*.ipynb"))

pytestmark = pytest.mark.slow  # loads the toy pair; runs notebooks in a child pytest


def test_all_eight_notebooks_are_here():
    assert [p.name[:2] for p in NOTEBOOKS] == ["01", "02", "03", "04", "05", "06", "07", "08"]


def test_load_pair_honours_specdec_dtype(monkeypatch):
    from specdec_helpers.models.pairs import load_pair

    monkeypatch.setenv("SPECDEC_DTYPE", "fp16")
    pair = load_pair("toy", progress=False)
    assert pair.dtype == torch.float16 and next(pair.target.parameters()).dtype == torch.float16
    assert load_pair("toy", dtype=torch.float32, progress=False).dtype == torch.float32  # an explicit dtype wins
    monkeypatch.setenv("SPECDEC_DTYPE", "float8")
    with pytest.raises(ValueError, match="SPECDEC_DTYPE='float8'.*fp32, fp16, bf16"):
        load_pair("toy", progress=False)


def code_cells(path: Path) -> int:
    return sum(cell["cell_type"] == "code" for cell in json.loads(path.read_text())["cells"])


def test_every_notebook_passes_nbval_in_fp16_on_the_cpu(tmp_path):
    # One pytest child and one kernel for all eight (tests/nbval_one_kernel.py: a namespace emptied between), with
    # none of this run's xdist or option variables (a -m "not slow" there would deselect every notebook cell).
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTEST_", "SPECDEC_DTYPE"))}
    env.update(SPECDEC_DTYPE="fp16", SPECDEC_PRESET="toy", SPECDEC_QUICK="1", SPECDEC_THREADS="1")
    junit = tmp_path / "fp16.xml"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "tests.nbval_one_kernel",
            f"--junitxml={junit}",
        ]
        + list(map(str, NOTEBOOKS)),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    tail = (result.stdout + result.stderr)[-6000:]
    assert result.returncode == 0, f"a notebook under nbval in fp16 failed:\n{tail}"
    # every code cell of every notebook ran and passed: none skipped, deselected or missing
    cases = ElementTree.parse(junit).getroot().iter("testcase")
    ran: dict[str, int] = {}
    for case in cases:
        assert not list(case), f"{case.get('classname')} {case.get('name')}: not a plain pass"  # skipped/failure
        notebook = case.get("classname", "").removeprefix("notebooks.").removesuffix(".ipynb")  # nbval's item names
        ran[notebook] = ran.get(notebook, 0) + 1
    assert ran == {path.stem: code_cells(path) for path in NOTEBOOKS}, ran
