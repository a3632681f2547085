"""Settings for `pytest --nbval-lax --nbval-current-env notebooks/` (the notebook kernels inherit them).

- SPECDEC_PRESET=toy: the offline pair, no network (unless the caller chose another preset).
- SPECDEC_EXPORT_DIR: notebook 05 exports to a temporary folder, so a test run leaves no files.
- SPECDEC_QUICK=1: notebooks with long measurements (05, 06) shrink them in their parameters cell
  (fewer k values, prompts, repeats, draws), so each runs top to bottom in under 3 minutes on CPU toy.
- SPECDEC_THREADS=1: the toy models are tiny; on a shared 2-core machine one thread per kernel is
  faster and far steadier than two threads competing with other jobs.
- PYTHONPATH: the kernels import the package from this checkout even if it is not pip-installed.
- Every notebook cell is marked ``slow`` (the notebooks load the toy pair and run for minutes), so
  ``pytest -m "not slow"`` skips them.
"""

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

os.environ.setdefault("SPECDEC_PRESET", "toy")
os.environ.setdefault("SPECDEC_THREADS", "1")
os.environ.setdefault("SPECDEC_QUICK", "1")
if "SPECDEC_EXPORT_DIR" not in os.environ:
    os.environ["SPECDEC_EXPORT_DIR"] = tempfile.mkdtemp(prefix="specdec-nbval-export-")
    atexit.register(shutil.rmtree, os.environ["SPECDEC_EXPORT_DIR"], True)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

collect_ignore: list = []


def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)
