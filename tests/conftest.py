"""Shared fixtures; the tiny model factories live in tiny_models.py.

The README runs the suite on two pytest-xdist workers (``-n 2 --dist loadfile``: a file's tests stay on
one worker, so module fixtures are built once and a notebook's cells run in order). Each worker grades
with student users of its own, so a test that checks "no student process is left" sees only its own."""
import os

_WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # gw0, gw1, ...; unset with -n 0
if _WORKER:  # before anything imports the grading modules, which read it once
    os.environ["SPECDEC_STUDENT_USER"] = f"specdec-{_WORKER}-student"

import pytest  # noqa: E402
from tiny_models import FAMILIES  # noqa: E402


@pytest.fixture(params=FAMILIES)
def family(request):
    return request.param
