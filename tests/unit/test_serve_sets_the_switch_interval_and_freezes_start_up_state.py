"""``tiermem serve`` sets the interpreter's thread switch interval from
``server.switch_interval_s`` and, with ``server.gc_freeze``, freezes what is
alive once start-up is done (process-wide settings, so the CLI applies them,
not ``Daemon``)."""

from __future__ import annotations

import gc
import sys

from tiermem.server.config import ServerConfig
from tiermem.server.runtime import configure_interpreter, settle_heap


def test_switch_interval_comes_from_the_config() -> None:
    saved = sys.getswitchinterval()
    try:
        configure_interpreter(ServerConfig(switch_interval_s=0.002))
        assert abs(sys.getswitchinterval() - 0.002) < 1e-9
    finally:
        sys.setswitchinterval(saved)


def test_start_up_state_is_frozen_only_when_asked() -> None:
    frozen = gc.get_freeze_count()
    try:
        settle_heap(ServerConfig(gc_freeze=False))
        assert gc.get_freeze_count() == frozen
        settle_heap(ServerConfig(gc_freeze=True))
        assert gc.get_freeze_count() > frozen
    finally:
        gc.unfreeze()
