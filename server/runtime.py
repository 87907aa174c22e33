"""Process-wide interpreter settings of a serving daemon (``tiermem serve``).

They act on the whole Python process, so the CLI applies them, not ``Daemon``
(tests and embedders run several daemons, or a daemon beside other code, in
one process): ``configure_interpreter`` before the daemon starts,
``settle_heap`` once it serves.
"""

from __future__ import annotations

import gc
import sys

from tiermem.server.config import ServerConfig


def configure_interpreter(server: ServerConfig) -> None:
    """Set the thread switch interval (``server.switch_interval_s``)."""
    sys.setswitchinterval(server.switch_interval_s)


def settle_heap(server: ServerConfig) -> None:
    """With ``server.gc_freeze``: collect once, then freeze what is alive (start-up
    state lives as long as the daemon; full collections need not scan it)."""
    if server.gc_freeze:
        gc.collect()
        gc.freeze()
