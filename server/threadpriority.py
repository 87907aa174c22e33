"""Running a background thread at a lower CPU priority than the request handlers.

On a host with few cores, background work that needs a core for seconds (the
scratchpad's embedding of flushed records: a MiniLM forward pass of 128 tokens
per record) queues the handlers behind it. Linux keeps a nice value per thread,
and threads a thread starts inherit it (torch's OpenMP workers, started by the
thread that first runs a parallel op), so raising the nice value of the thread
that does the work lets the kernel run the handlers first and gives the work
the cores they leave idle. The Python-level parts of that work still take the
interpreter lock, but only between native calls, which is where a handler
waiting for it gets its turn.

Only Linux has per-thread nice values; elsewhere ``setpriority`` with a thread
id would name a process, so this does nothing there. Lowering a value back is
privileged, so it is raised once, at the start of the thread's loop.
"""

from __future__ import annotations

import logging
import os
import sys
import threading

log = logging.getLogger(__name__)

#: The largest nice value (lowest priority) Linux has.
MAX_NICE = 19


def lower_this_thread(increment: int, what: str) -> int | None:
    """Raise the calling thread's nice value by ``increment`` (capped at 19).
    Returns the new value, or None when nothing changed (``increment`` 0, not
    Linux, or refused: logged, the thread goes on at its old priority)."""
    if increment <= 0 or sys.platform != "linux":
        return None
    tid = threading.get_native_id()
    try:
        target = min(MAX_NICE, os.getpriority(os.PRIO_PROCESS, tid) + increment)
        os.setpriority(os.PRIO_PROCESS, tid, target)
    except OSError as exc:
        log.warning("%s keeps its CPU priority: raising its nice value failed: %s", what, exc)
        return None
    log.debug("%s runs at nice %d", what, target)
    return target
