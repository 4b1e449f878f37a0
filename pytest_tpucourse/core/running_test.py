"""Which test is running now, as pytest itself says (PYTEST_CURRENT_TEST)."""

from __future__ import annotations

import os


def current_test() -> str | None:
    """The node id of the test running now, or None outside a test."""
    running = os.environ.get("PYTEST_CURRENT_TEST")
    return running.rsplit(" (", 1)[0] if running else None
