"""Shared fixtures; the tiny model factories live in tiny_models.py.

The README runs the suite on three pytest-xdist workers (``-n 3 --dist loadfile``: a file's tests stay on
one worker, so module fixtures are built once and a notebook's cells run in order). Each worker grades
with student users of its own, so a test that checks "no student process is left" sees only its own.
The files that take minutes go first (`LONGEST_FIRST`), so that the workers finish together."""

import os

_WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # gw0, gw1, ...; unset with -n 0
if _WORKER:  # before anything imports the grading modules, which read it once
    os.environ["SPECDEC_STUDENT_USER"] = f"specdec-{_WORKER}-student"

import pytest  # noqa: E402
import sandbox_required  # noqa: E402
from longest_first import LONGEST_FIRST  # noqa: E402
from tiny_models import FAMILIES  # noqa: E402


@pytest.fixture(params=FAMILIES)
def family(request):
    return request.param


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file keeps its own order


def pytest_runtest_setup(item):
    marker = item.get_closest_marker("sandbox")  # root (and bubblewrap): skip, or fail with SPECDEC_REQUIRE_SANDBOX=1
    if marker is not None:
        sandbox_required.require(**marker.kwargs)
