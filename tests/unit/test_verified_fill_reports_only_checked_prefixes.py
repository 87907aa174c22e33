"""``VerifiedReader.fill`` reads a range with several threads and reports the
verified prefix of the buffer in order, however the reads finish; a damaged
unit is never reported and stops the fill with Corrupted; and once the fill
has ended (done, failed or closed) no read thread writes into the buffer.
A staged shared-memory extent is freed only after both its lease and its
filling have ended."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import xxhash

from tiermem.server.blobs.blocks import U64, aligned_range
from tiermem.server.blobs.reader import VerifiedReader
from tiermem.server.dataplane.shm import StagedExtent
from tiermem.server.errors import Corrupted

BLOCK = 4096
UNIT = 2 * BLOCK
SIZE = 10 * UNIT + 1000  # 11 units, the last one short


def content() -> bytes:
    return np.random.default_rng(7).integers(0, 256, SIZE, dtype=np.uint8).tobytes()


def sums_of(data: bytes) -> bytes:
    return b"".join(
        U64.pack(xxhash.xxh3_64_intdigest(data[i : i + BLOCK])) for i in range(0, len(data), BLOCK)
    )


class SlowPayload:
    """Serves ``data``; the first units are slowest (reads finish out of order);
    ``damage`` flips a byte there; records every read and whether one ran
    after ``closed_at`` was set."""

    parallel_reads = True

    def __init__(self, data: bytes, damage: int = -1) -> None:
        self.data = bytearray(data)
        if damage >= 0:
            self.data[damage] ^= 0x01
        self.reads: list[int] = []
        self.active = 0
        self.lock = threading.Lock()

    def readinto(self, offset: int, buffer: memoryview) -> None:
        with self.lock:
            self.active += 1
        try:
            time.sleep(max(0.0, 0.02 - offset / SIZE * 0.02))
            buffer[:] = self.data[offset : offset + len(buffer)]
            with self.lock:
                self.reads.append(offset)
        finally:
            with self.lock:
                self.active -= 1

    def close(self) -> None:
        return None


def reader(payload: SlowPayload, data: bytes, damaged: list[int]) -> VerifiedReader:
    rng = aligned_range(0, SIZE, SIZE, BLOCK)
    return VerifiedReader(payload, rng, BLOCK, sums_of(data), UNIT, "blob t/x", damaged.append, 4)


def read_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "tiermem-blob-read"]


def test_the_verified_prefix_grows_in_order_to_the_whole_range() -> None:
    data = content()
    payload, damaged = SlowPayload(data), []
    buffer = memoryview(bytearray(SIZE))
    reported = list(reader(payload, data, damaged).fill(buffer))
    assert reported == [min(u + UNIT, SIZE) for u in range(0, SIZE, UNIT)]
    assert bytes(buffer) == data and not damaged
    assert sorted(payload.reads) == list(range(0, SIZE, UNIT))
    assert not read_threads()


def test_a_damaged_unit_is_never_reported_and_stops_the_fill() -> None:
    data = content()
    bad = 6 * UNIT + 100  # in unit 6, block 12
    payload, damaged = SlowPayload(data, damage=bad), []
    buffer = memoryview(bytearray(SIZE))
    reported: list[int] = []
    with pytest.raises(Corrupted) as err:
        for verified in reader(payload, data, damaged).fill(buffer):
            reported.append(verified)
    assert "block 12" in err.value.message and "not served" in err.value.message
    assert damaged == [12]
    assert all(verified <= 6 * UNIT for verified in reported)
    good = reported[-1] if reported else 0
    assert bytes(buffer[:good]) == data[:good]
    assert payload.active == 0 and not read_threads()  # nothing writes into the buffer now


def test_closing_the_fill_early_stops_the_reads() -> None:
    data = content()
    payload, damaged = SlowPayload(data), []
    fill = reader(payload, data, damaged).fill(memoryview(bytearray(SIZE)))
    assert next(fill) == UNIT
    fill.close()
    assert payload.active == 0 and not read_threads()
    assert len(payload.reads) < SIZE // UNIT + 1  # the rest were never read


def test_a_staged_extent_is_freed_after_both_its_lease_and_its_filling_end() -> None:
    freed: list[int] = []
    extent = StagedExtent(memoryview(bytearray(8)), lambda: freed.append(1))
    assert extent.begin()
    extent.lease_ended()  # the client let go (or the TTL ran out) while it is written
    assert not freed
    extent.done()
    assert freed == [1]

    early: list[int] = []
    extent = StagedExtent(memoryview(bytearray(8)), lambda: early.append(1))
    extent.lease_ended()
    assert early == [1]
    assert not extent.begin()  # never written once it may be reused
    extent.done()
    assert early == [1]
