"""The package's cache folder (converted SmolLM2, trained drafts): atomic writes, a sha256 manifest checked on
load, permissions that follow the umask, a build lock for concurrent first uses, leftovers of killed runs removed."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from filelock import FileLock


def cache_root() -> Path:
    """Folder for everything this package caches: ``$SPECDEC_CACHE_DIR``, else the user cache."""
    env = os.environ.get("SPECDEC_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "specdec_helpers"


MANIFEST = "manifest.json"  # sha256 of every file in a cache folder, written last: marks it whole


LEFTOVER_HOURS = 6  # a hidden temp folder this old (or whose writer died) is a killed run's leftover


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(folder: Path) -> None:
    """Record the sha256 of every file under ``folder`` in ``folder/manifest.json``."""
    files = sorted(p for p in Path(folder).rglob("*") if p.is_file() and p.name != MANIFEST)
    sums = {p.relative_to(folder).as_posix(): _sha256(p) for p in files}
    (Path(folder) / MANIFEST).write_text(json.dumps(sums, indent=1, sort_keys=True) + "\n")


def folder_problem(folder: Path) -> str | None:
    """None when ``folder`` holds every file its manifest lists, unchanged; else what is wrong,
    naming the file (missing, truncated or altered), so a broken cache is rebuilt or reported."""
    folder = Path(folder)
    if not folder.is_dir():
        return f"{folder} does not exist"
    try:
        sums = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return f"{folder / MANIFEST} is missing or unreadable (an unfinished or older cache folder)"
    for rel, digest in sums.items():
        path = folder / rel
        if not path.is_file():
            return f"{path} is missing"
        if _sha256(path) != digest:
            return f"{path} is damaged (truncated or altered: its sha256 differs from {MANIFEST})"
    return None


def open_permissions(folder: Path) -> None:
    """Give files the permissions the umask allows (mkdtemp makes 0700 folders and some writers
    0600 files): a cache shared by a course must be readable by everyone the umask lets in."""
    mask = os.umask(0)
    os.umask(mask)
    for path in [folder, *folder.rglob("*")]:
        os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~mask)


def _remove_leftovers(folder: Path) -> None:
    """Delete hidden temp folders of ``folder`` left by killed runs: the writer's pid (in the name)
    is gone from this machine, or the folder is older than LEFTOVER_HOURS."""
    for tmp in folder.parent.glob(f".{folder.name}-*"):
        pid = tmp.name[len(folder.name) + 2 :].partition("-")[0]
        try:
            alive = pid.isdigit() and (os.kill(int(pid), 0) is None)
        except PermissionError:
            alive = True
        except OSError:
            alive = False
        stale = time.time() - tmp.stat().st_mtime > LEFTOVER_HOURS * 3600
        if tmp.is_dir() and (not alive or stale):
            shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def build_lock(folder: Path):
    """Hold ``folder``'s lock (a ``.lock`` file beside it), so concurrent first uses build it once:
    the others wait, then find it whole."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder.parent / f".{folder.name}.lock")):
        yield


@contextlib.contextmanager
def atomic_folder(folder: Path, is_complete=None):
    """Write a cache folder atomically: yields a fresh folder beside ``folder`` to fill, then writes
    its manifest, opens its permissions to the umask and moves it into place, so readers see no
    folder or a whole one. ``is_complete(folder)`` (default: its manifest checks out) says whether
    a folder already there is whole: another process finishing first is fine, a broken one goes.
    Leftover temp folders of killed runs are removed first."""
    is_complete = is_complete or (lambda f: folder_problem(f) is None)
    folder.parent.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(folder)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-{os.getpid()}-", dir=folder.parent))
    try:
        yield tmp
        write_manifest(tmp)
        open_permissions(tmp)
        if folder.exists() and not is_complete(folder):
            shutil.rmtree(folder)
        try:
            os.replace(tmp, folder)
        except OSError:
            if not is_complete(folder):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # no-op after the move; else lost a race


def cached_folder(folder: Path, build, progress: bool = True) -> Path:
    """``folder`` if its manifest checks out; else (re)built by ``build(tmp)`` under its lock."""
    folder = Path(folder)
    if folder_problem(folder) is None:
        return folder
    with build_lock(folder):
        problem = folder_problem(folder)
        if problem is None:  # another process built it while we waited
            return folder
        if folder.exists():
            if progress:
                print(f"{problem}: rebuilding {folder}", file=sys.stderr, flush=True)
            shutil.rmtree(folder)
        with atomic_folder(folder) as tmp:
            build(tmp)
    return folder
