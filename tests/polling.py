"""Waiting for a condition a background thread brings about, without timing
assertions: poll until it holds or a generous deadline passes."""

from __future__ import annotations

import time
from collections.abc import Callable


def poll_until(check: Callable[[], bool], timeout_s: float, every_s: float = 0.02) -> bool:
    """True as soon as ``check()`` holds; False if it still does not after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(every_s)
    return check()
