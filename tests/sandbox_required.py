"""Tests of the sandbox need root (the user layer) and often bubblewrap. Where either is missing they skip,
except with ``SPECDEC_REQUIRE_SANDBOX=1`` (CI, set in .ci/run): then they fail, so a CI machine that lost
root or bubblewrap cannot turn the sandbox tests into silent skips.

Mark a test ``@pytest.mark.sandbox`` (root) or ``@pytest.mark.sandbox(bwrap=True)`` (root and a usable
bubblewrap); tests/conftest.py applies `require` before it runs. A fixture can call `require` itself."""

from __future__ import annotations

import os

import pytest

REQUIRED = os.environ.get("SPECDEC_REQUIRE_SANDBOX", "") not in ("", "0")


def missing(bwrap: bool = False) -> str:
    """What this machine lacks for such a test ('' when nothing)."""
    if os.geteuid() != 0:
        return "the sandbox's user layer needs the tests to run as root (Gradescope and CI do)"
    if bwrap:
        from specdec_helpers.assignment.grading import isolation

        if not isolation.bwrap_works():
            return "bubblewrap is not installed or cannot make namespaces here (apt-get install -y bubblewrap)"
    return ""


def require(bwrap: bool = False) -> None:
    """Skip the test (or fail it, with SPECDEC_REQUIRE_SANDBOX=1) when the sandbox it needs cannot run here."""
    why = missing(bwrap)
    if why and REQUIRED:
        pytest.fail(f"SPECDEC_REQUIRE_SANDBOX is set but {why}")
    if why:
        pytest.skip(why)
