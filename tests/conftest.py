"""Shared fixtures; the tiny model factories live in tiny_models.py."""
import pytest
from tiny_models import FAMILIES


@pytest.fixture(params=FAMILIES)
def family(request):
    return request.param
