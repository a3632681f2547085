"""Two environment checks a Colab student met: the restart warning and the Python version (issue 26)."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from importlib import metadata
from pathlib import Path

import pytest

from specdec_helpers.present import notebook_help as notebook

SETUP_SH = Path(notebook.__file__).parents[1] / "assignment" / "authoring" / "templates" / "setup.sh"


@pytest.mark.parametrize(
    "loaded, installed, stale",
    [
        ("2.13.0+cu130", "2.13.0", False),  # Colab's CUDA torch: a local label, the same install
        ("2.13.0", "2.13.0+cpu", False),
        ("2.13.0+cu130", "2.13.0+cu130", False),
        ("4.57.1", "5.24.0", True),  # the set-up cell upgraded transformers under a running kernel
        ("2.12.0+cu126", "2.13.0", True),
        ("weird-build", "weird-build", False),  # not PEP 440: compared as text
    ],
)
def test_stale_modules_ignores_local_labels(monkeypatch, loaded, installed, stale):
    monkeypatch.setattr(notebook, "WATCHED", ("fakepkg",))
    monkeypatch.setitem(sys.modules, "fakepkg", types.SimpleNamespace(__version__=loaded))
    monkeypatch.setattr(metadata, "version", lambda name: installed)
    assert notebook.stale_modules() == ([f"fakepkg {loaded} is loaded, {installed} installed"] if stale else [])


def _fake_bin(folder: Path, name: str, script: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + script + "\n")
    path.chmod(0o755)


def test_pyproject_states_python_311():
    text = (Path(notebook.__file__).parents[2] / "pyproject.toml").read_text()
    assert 'requires-python = ">=3.11"' in text


def test_setup_sh_refuses_an_old_python_first(tmp_path):
    """An image with Python 3.10 and no python3.11 to install stops at once with a message saying what to do,
    before anything is installed (here python3 claims to be too old, apt-get fails)."""
    _fake_bin(tmp_path, "python3", 'case "$*" in *version_info*) exit 1;; esac; echo "python3 ran: $*" >&2; exit 0')
    _fake_bin(tmp_path, "apt-get", "exit 100")
    env = {**os.environ, "PATH": f"{tmp_path}:/usr/bin:/bin"}
    done = subprocess.run(["bash", str(SETUP_SH)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert "older than 3.11" in done.stderr and "Ubuntu 24.04" in done.stderr
    assert "python3 ran" not in done.stderr and "/autograder" not in done.stderr.split("older than")[0]


def test_setup_sh_goes_on_with_a_new_python(tmp_path):
    """With Python >= 3.11 the check passes silently and the script goes on (to `cd /autograder/source`)."""
    _fake_bin(tmp_path, "python3", "exit 0")
    env = {**os.environ, "PATH": f"{tmp_path}:/usr/bin:/bin"}
    done = subprocess.run(["bash", str(SETUP_SH)], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert "older than 3.11" not in done.stderr
    assert "cd /autograder/source" in done.stderr  # set -x traces it: the check let the script go on
