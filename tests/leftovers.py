"""A grading's own TMPDIR, and what it left there: a grading must clean up after itself, killed or not.

    with leftovers() as (tmpdir, left):
        run the grading with TMPDIR=tmpdir
    assert left == []

A plain module, not conftest.py (see tiny_models.py)."""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def leftovers():
    """``(folder, left)``: a fresh folder traversable by the student users (as /tmp is); on leaving the block,
    ``left`` holds the names still in it, and the folder is removed."""
    folder = Path(tempfile.mkdtemp(prefix="specdec-test-tmp-"))
    os.chmod(folder, 0o711)
    left: list[str] = []
    try:
        yield folder, left
        left[:] = sorted(p.name for p in folder.iterdir())
    finally:
        shutil.rmtree(folder, ignore_errors=True)
