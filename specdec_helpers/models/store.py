"""The package's cache folder (trained toy pair, converted SmolLM2, trained drafts) and atomic writes into it."""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path


def cache_root() -> Path:
    """Folder for everything this package caches: ``$SPECDEC_CACHE_DIR``, else the user cache."""
    env = os.environ.get("SPECDEC_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "specdec_helpers"


@contextlib.contextmanager
def atomic_folder(folder: Path, is_complete):
    """Write a cache folder atomically: yields a fresh folder beside ``folder`` to fill, then moves
    it into place, so readers see no folder or a whole one. ``is_complete(folder)`` says whether a
    folder already there is whole: another process finishing first is fine, a partial leftover goes."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        yield tmp
        if folder.exists() and not is_complete(folder):
            shutil.rmtree(folder)
        try:
            os.replace(tmp, folder)
        except OSError:
            if not is_complete(folder):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # no-op after the move; else lost a race
