"""The SSD tier's usage (``SegmentStore.used_bytes``) is read by every put's
admission while other threads create and retire segments. It used to sum over
the segment dict with a generator, which lets other threads run between items:
a segment created meanwhile raised "dictionary changed size during iteration"
and the put was answered INTERNAL (seen in the soak)."""

import os
import threading
from pathlib import Path

from tiermem.server.tiers.segments import SegmentStore


def test_a_segment_created_while_usage_is_summed_does_not_break_the_sum(tmp_path: Path) -> None:
    store = SegmentStore(tmp_path / "segments", segment_bytes=16 * 1024)
    store.append(b"first", memoryview(os.urandom(12 * 1024)), 1, sync=False)
    rolled = threading.Event()

    def roll() -> None:  # another thread's put that needs a new segment
        store.append(b"second", memoryview(os.urandom(12 * 1024)), 2, sync=False)
        rolled.set()

    class Probe:
        """A segment whose size, when read, lets another thread roll a new
        segment (waiting briefly for it, as a thread switch would)."""

        @property
        def size(self) -> int:
            threading.Thread(target=roll).start()
            rolled.wait(0.5)  # the summing thread must keep others out meanwhile
            return 0

    store._segments[10**9] = Probe()  # type: ignore[assignment]
    try:
        used = store.used_bytes
    finally:
        assert rolled.wait(10), "the other thread's append never finished"
        del store._segments[10**9]
    assert used >= 12 * 1024
    assert store.used_bytes > used  # the new segment counts once the sum is done
    store.close()
