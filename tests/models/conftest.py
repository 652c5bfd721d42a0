"""Model tests run on one thread: tiny tensors gain nothing from threads on a shared machine."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def single_thread(one_thread) -> None:
    """Every test here under the shared `one_thread` fixture (tests/conftest.py)."""
