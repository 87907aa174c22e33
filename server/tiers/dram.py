"""DRAM tier: a shared-memory arena for large values plus a map for small ones.

The arena is one file in ``/dev/shm`` mapped shared, so clients on the same host
can map it and read or write objects in place (the shared-memory data plane).
It is pre-faulted with ``MAP_POPULATE`` at start so first writes do not pay page
faults (first touch of fresh pages runs at ~1 GB/s here, against ~8 GB/s warm).
Values below ``arena_min_bytes`` are kept as ``bytearray`` in a dict: sharing
them buys nothing and they would fragment the arena. Both count against the same
byte budget.

Location encoding: ``>= 0`` is an arena offset; ``< 0`` is ``-handle`` of the small map.

Where an arena value starts (``VALUE_SKEW``): extents are cut on 64-byte
granules and every value starts ``VALUE_SKEW`` (16) bytes into its extent. The
kernel's copy into a receiving process's buffer runs at half speed or less on
this machine's CPUs when the destination lies 1-31 bytes after the source
modulo 4096 (the CPU mistakes the copy's stores for the loads that follow them:
"4K aliasing"; glibc's memcpy steers around it, the kernel's copy does not).
With ``dataplane.bulk.sendfile`` on, a bulk get sends a value by sendfile(2)
straight from the arena file, so the source is the value's place in the arena
and the destination is the client's buffer: numpy arrays and bytearrays of
more than 128 KiB start 16 bytes past a page (glibc's chunk header),
page-aligned values put them 16 bytes after their source, and a 32 MiB get into
one took 31 ms against 12 ms into a page-aligned buffer. Starting values 16
bytes past a 64-byte boundary keeps the distance a multiple of 64 for such
buffers and 48 bytes (mod 64) for page- and 64-byte-aligned ones, all fast.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import secrets
import threading
from pathlib import Path

import numpy as np

from tiermem.server.errors import InvariantViolation
from tiermem.server.model import Tier
from tiermem.server.tiers.base import Reservation
from tiermem.server.tiers.extents import ExtentAllocator

SHM_DIR = Path("/dev/shm")
#: extents of the arena are cut on this many bytes
GRANULE = 64
#: every arena value starts this many bytes into its extent (see the module doc)
VALUE_SKEW = 16
ARENA_PREFIX = "tiermem-arena-"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_arenas(shm_dir: Path = SHM_DIR) -> list[Path]:
    """Delete arena files left by daemons that died without closing them."""
    removed = []
    for path in shm_dir.glob(ARENA_PREFIX + "*"):
        try:
            pid = int(path.name[len(ARENA_PREFIX) :].split("-")[0])
        except ValueError:
            continue
        if not _pid_alive(pid):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


class DramEngine:
    tier = Tier.DRAM

    def __init__(
        self,
        capacity_bytes: int,
        arena_min_bytes: int = 16 * 1024,
        prefault: bool = True,
        shm_dir: Path = SHM_DIR,
    ) -> None:
        self.capacity_bytes = capacity_bytes
        self.arena_min_bytes = arena_min_bytes
        self._lock = threading.Lock()
        self._alloc = ExtentAllocator(capacity_bytes, granule=GRANULE)
        self._small: dict[int, bytearray] = {}
        self._small_bytes = 0
        self._next_handle = 1
        shm_dir = shm_dir if shm_dir.is_dir() else Path("/tmp")
        remove_stale_arenas(shm_dir)
        self.arena_path = shm_dir / f"{ARENA_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        size = max(self._alloc.capacity_bytes, mmap.PAGESIZE)
        fd = os.open(self.arena_path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, size)
            flags = mmap.MAP_SHARED | (mmap.MAP_POPULATE if prefault else 0)
            self._mmap = mmap.mmap(fd, size, flags=flags)
        except BaseException:
            os.close(fd)
            raise
        #: the arena file, open for as long as the engine: with
        #: ``dataplane.bulk.sendfile`` on, bulk gets send large values from it
        #: with sendfile(2) (``file_span``)
        self.file_fd = fd
        self._arena = np.frombuffer(self._mmap, dtype=np.uint8)
        self._base = int(self._arena.ctypes.data)
        self._view = memoryview(self._mmap)

    @property
    def device(self) -> str:
        return f"shm:{self.arena_path}"

    @property
    def used_bytes(self) -> int:
        return self._alloc.allocated_bytes + self._small_bytes

    def cost_of(self, size: int) -> int:
        """Bytes of budget a value of ``size`` bytes takes (arena rounding included)."""
        return size if size < self.arena_min_bytes else self._alloc.rounded(size + VALUE_SKEW)

    def reserve(self, size: int) -> Reservation | None:
        with self._lock:
            if self.used_bytes + self.cost_of(size) > self.capacity_bytes:
                return None
            if size < self.arena_min_bytes:
                self._small_bytes += size
                handle = self._next_handle
                self._next_handle += 1
                return Reservation(self.tier, -handle, size, memoryview(bytearray(size)))
            extent = self._alloc.allocate(size + VALUE_SKEW)
            if extent is None:
                return None
        location = extent + VALUE_SKEW
        return Reservation(self.tier, location, size, self._view[location : location + size])

    def trim_front(self, reservation: Reservation, nbytes: int) -> Reservation:
        """The reservation without its first ``nbytes`` (a multiple of
        ``GRANULE``), which go back to the arena: a remote value landed whole
        (head and payload in one transfer) keeps only its payload. Only the
        returned reservation may be committed or aborted afterwards."""
        if reservation.location < 0 or nbytes % GRANULE or not 0 < nbytes < reservation.size:
            raise InvariantViolation(f"cannot trim {nbytes} bytes off reservation {reservation}")
        with self._lock:
            self._alloc.trim_front(reservation.location - VALUE_SKEW, nbytes)
        return Reservation(
            self.tier,
            reservation.location + nbytes,
            reservation.size - nbytes,
            reservation.buffer[nbytes:],
            reservation.recheck,
        )

    def commit(self, reservation: Reservation) -> int:
        if reservation.location < 0:
            buf = reservation.buffer.obj
            if not isinstance(buf, bytearray):
                raise InvariantViolation("small reservation lost its buffer")
            with self._lock:
                self._small[-reservation.location] = buf
        return reservation.location

    def abort(self, reservation: Reservation) -> None:
        with self._lock:
            if reservation.location < 0:
                self._small_bytes -= reservation.size
            else:
                self._alloc.free(reservation.location - VALUE_SKEW)

    def read(self, location: int, size: int) -> memoryview:
        if location < 0:
            return memoryview(self._small[-location]).toreadonly()
        return self._view[location : location + size].toreadonly()

    def file_span(self, view: memoryview) -> int | None:
        """Where ``view``'s bytes lie in the arena file (``file_fd``): their
        offset, or None when the view is not a slice of the arena (a small
        value's own buffer, a copy)."""
        if not view.c_contiguous:
            return None
        offset = int(np.frombuffer(view, dtype=np.uint8).ctypes.data) - self._base
        if offset < 0 or offset + view.nbytes > len(self._arena):
            return None
        return offset

    def write_view(self, location: int, size: int) -> memoryview:
        """Writable view of an arena extent (shared-memory writers)."""
        if location < 0:
            raise InvariantViolation("small values have no shared view")
        return self._view[location : location + size]

    def free(self, location: int, size: int) -> None:
        with self._lock:
            if location < 0:
                if self._small.pop(-location, None) is None:
                    raise InvariantViolation(f"free of unknown small value {location}")
                self._small_bytes -= size
            else:
                self._alloc.free(location - VALUE_SKEW)

    def close(self) -> None:
        self._small.clear()
        self._arena = np.empty(0, dtype=np.uint8)
        with contextlib.suppress(OSError):
            os.close(self.file_fd)
        try:
            self._view.release()
            self._mmap.close()
        except BufferError:
            # A view is still exported (e.g. a reader mid-copy at shutdown): the
            # mapping goes away with the process; the file is unlinked regardless.
            pass
        self.arena_path.unlink(missing_ok=True)
