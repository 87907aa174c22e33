"""The client's side of the shared-memory path: the daemon's DRAM arena mapped
into this process, kept open for the client's lifetime.

The mapping is only used after checking it is the very file the daemon named
(device, inode and size), so a same-named file in another mount namespace is
never mistaken for it. It is mapped with ``MAP_POPULATE`` so copies into and
out of it do not pay a page fault per 4 KiB on first touch.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from typing import Any

import numpy as np

from tiermem.v1 import dataplane_pb2


class ArenaMismatch(Exception):
    """The file at the arena path is not the daemon's arena (or cannot be opened)."""


class Arena:
    def __init__(self, info: dataplane_pb2.ArenaInfo, populate: bool = True) -> None:
        self.arena_id = info.arena_id
        self.path = info.path
        self.size_bytes = int(info.size_bytes)
        try:
            fd = os.open(info.path, os.O_RDWR)
        except OSError as exc:
            raise ArenaMismatch(f"cannot open the arena {info.path}: {exc}") from None
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino, st.st_size) != (info.device, info.inode, info.size_bytes):
                raise ArenaMismatch(
                    f"{info.path} is not the daemon's arena (device/inode/size differ): "
                    "another mount namespace or a stale file"
                )
            flags = mmap.MAP_SHARED | (mmap.MAP_POPULATE if populate else 0)
            self._mmap = mmap.mmap(fd, self.size_bytes, flags=flags)
        finally:
            os.close(fd)
        self.array: np.ndarray[Any, np.dtype[np.uint8]] = np.frombuffer(self._mmap, dtype=np.uint8)

    def region(self, offset: int, length: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
        """The arena bytes ``[offset, offset + length)`` (a view, no copy)."""
        if offset < 0 or length < 0 or offset + length > self.size_bytes:
            raise ArenaMismatch(
                f"region [{offset}, {offset + length}) lies outside the arena of "
                f"{self.size_bytes} bytes"
            )
        return self.array[offset : offset + length]

    def close(self) -> None:
        self.array = np.empty(0, dtype=np.uint8)
        # A caller may still hold a view: the mapping then goes when it is dropped.
        with contextlib.suppress(BufferError):
            self._mmap.close()
