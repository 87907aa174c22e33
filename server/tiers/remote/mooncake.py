"""Mooncake Store backend (``mooncake.store.MooncakeDistributedStore``).

The daemon is a Mooncake client: it talks to ``mooncake_master`` for metadata
and moves bytes with the transfer engine (TCP here, RDMA where configured) to
and from the segments storage nodes contribute (``mooncake_client``, or this
daemon itself with ``global_segment_bytes`` > 0).

Calls used and why:

* ``upsert_batch`` — insert or replace (a plain ``put`` of an existing name
  keeps the old value); one call per batch;
* ``batch_get_buffer`` — each value lands in the client's transfer buffer and
  comes back as a handle with the buffer protocol: no copy into Python bytes.
  It answers ``None`` both for a missing name and for a failed read, so those
  names are asked again with ``batch_is_exist``, which tells absent (0) from an
  error (negative) and fails at once when the master is down;
* ``batch_get_replica_desc`` + a get session (``batch_get_session_start``,
  ``batch_get_into_multi_buffer_ranges``, ``batch_get_session_end``; where the
  client lacks them, ``batch_get_into_multi_buffers``) — a read that lands
  payloads where the caller wants them (``get_many_into``): the descriptors
  give each value's length (one call to the master), and a value with a head
  of fixed size (``codec``) is read whole, in one transfer, into a buffer the
  caller gives (an arena extent with room for the head before the payload:
  no copy on the way). One slice per value: the TCP transport moves each
  slice as a transfer of its own (two slices, head and payload apart, took
  12 ms for 16 values of 1 MiB against 9.4 ms for one). TCP transfers need no
  registration of those buffers; RDMA would need the arena registered
  (``register_buffer``);
* ``batch_remove(force=True)`` — a get takes a 10 s lease and a plain remove
  of a leased object fails.

Behaviour to design around (see ``/work/shared/PEERS.md``): at its high
watermark the store evicts silently (later reads find nothing: a miss, not an
error); while the master is down every call blocks ~4 s inside the client (the
engine's deadline returns control earlier; those calls release the GIL).
``setup`` does not release the GIL while it retries an unreachable master, so
the backend checks with a plain TCP connect first that the master and the
metadata server answer.
"""

from __future__ import annotations

import os
import socket
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from tiermem.server.config import MooncakeConfig
from tiermem.server.tiers.remote.base import LANDED, Landed, Lander, RemoteBackend, RemoteError

#: Mooncake error codes (mooncake-store/include/types.h).
OBJECT_NOT_FOUND = -704
NO_AVAILABLE_HANDLE = -200  # no segment has room: the store refuses the value


#: How long the pre-connect check waits for each service (seconds).
CONNECT_CHECK_S = 0.5


def _reachable(address: str, what: str) -> None:
    """Raise RemoteError unless something accepts TCP connections at HOST:PORT."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), CONNECT_CHECK_S):
            return
    except (OSError, ValueError) as exc:
        raise RemoteError(f"Mooncake {what} at {address} is unreachable: {exc}") from exc


def _address(buf: memoryview) -> int:
    """Where a writable buffer's first byte is in this process's memory."""
    return int(np.frombuffer(buf, dtype=np.uint8).ctypes.data)


class MooncakeBackend(RemoteBackend):
    name = "mooncake"
    # After a store restart the client was seen to keep sending transfers to
    # the old storage node's transport port (the new node listens on another).
    reconnect_after_trip = True

    def __init__(self, config: MooncakeConfig) -> None:
        # The transfer engine reads this when it starts; without it, it advertises
        # the host's external address.
        os.environ.setdefault("MC_TCP_BIND_ADDRESS", config.local_hostname)
        from mooncake.store import MooncakeDistributedStore

        self._config = config
        # ``setup`` holds the GIL while it retries a master that does not answer
        # (~90 s: the whole daemon would stall), so check both services first.
        _reachable(config.master, "master")
        _reachable(urlsplit(config.metadata_server).netloc, "metadata server")
        self._store: Any = MooncakeDistributedStore()
        rc = self._store.setup(
            config.local_hostname,
            config.metadata_server,
            int(config.global_segment_bytes),
            int(config.local_buffer_bytes),
            config.protocol,
            config.rdma_devices,
            config.master,
        )
        if rc != 0:
            raise RemoteError(f"Mooncake client setup against {self.address} returned {rc}")
        #: get sessions (``_transfer_into``): 0.3.13.post1 has them, older releases may not
        self.ranged_reads = hasattr(self._store, "batch_get_into_multi_buffer_ranges")
        #: reads between their session's start and end, per name
        self._readers: Counter[str] = Counter()
        self._readers_lock = threading.Lock()

    @property
    def address(self) -> str:
        return self._config.master

    def put_many(self, names: Sequence[str], values: Sequence[bytes]) -> list[bool]:
        rc = self._store.upsert_batch(list(names), list(values))
        if rc == NO_AVAILABLE_HANDLE:
            return [False] * len(names)
        if rc != 0:
            raise RemoteError(f"Mooncake upsert_batch of {len(names)} values returned {rc}")
        return [True] * len(names)

    def get_many(self, names: Sequence[str]) -> list[tuple[memoryview, object] | None]:
        handles = self._store.batch_get_buffer(list(names))
        out: list[tuple[memoryview, object] | None] = [
            None if h is None else (memoryview(h).cast("B"), h) for h in handles
        ]
        unknown = [i for i, h in enumerate(handles) if h is None]
        if unknown:
            codes = self._store.batch_is_exist([names[i] for i in unknown])
            for i, code in zip(unknown, codes, strict=True):
                if code < 0:
                    raise RemoteError(f"Mooncake read of {names[i]!r} failed ({code})")
                if code == 1:  # there, yet not read: the transfer failed
                    raise RemoteError(f"Mooncake could not read {names[i]!r}")
        return out

    def get_many_into(
        self, names: Sequence[str], lander: Lander
    ) -> list[tuple[memoryview, object] | Landed | None]:
        """``get_many``, each value with a head of fixed size landing whole in
        the buffer ``lander`` gives for it (one transfer into one slice); the
        others, and values gone or resized since their length was asked,
        through ``get_many``. A get session reads as many bytes as it is asked
        for, so a value that grew meanwhile lands cut short: its head then
        announces another length, ``head_read`` says False (as ``decode_head``
        does for such a head), and the value is read again whole."""
        out: list[tuple[memoryview, object] | Landed | None] = [None] * len(names)
        lengths = self._lengths(names)
        placed: list[tuple[int, int, int, memoryview]] = []  # index, length, head, whole
        for i, length in enumerate(lengths):
            spot = lander.target_whole(i, length) if length > 0 else None
            if spot is not None:
                placed.append((i, length, spot[0], spot[1]))
        codes = (
            self._transfer_into(
                [names[i] for i, *_ in placed],
                [_address(whole) for *_, whole in placed],
                [length for _i, length, _h, _w in placed],
            )
            if placed
            else []
        )
        answered: set[int] = set()
        for (i, length, head, whole), code in zip(placed, codes, strict=True):
            # Asked again: gone or shrunk meanwhile, or a failed transfer (code !=
            # length); grown meanwhile (read cut short), another layout or a
            # damaged head (head_read False)
            if code == length and lander.head_read(i, whole[:head], length):
                answered.add(i)
                out[i] = LANDED
        ask = [i for i in range(len(names)) if i not in answered]
        if ask:
            for i, got in zip(ask, self.get_many([names[i] for i in ask]), strict=True):
                out[i] = got
        return out

    def _transfer_into(
        self, names: list[str], addresses: list[int], lengths: list[int]
    ) -> list[int]:
        """Each value whole into one buffer: per name, the bytes read (the
        length asked for) or a negative Mooncake code.

        A get session where the client has one (``batch_get_session_start``:
        the master's replica query and lease, then ``..._multi_buffer_ranges``
        reading from the replicas it cached): 16 values of 1 MiB took 9.7 ms
        here against 14.4 ms by ``batch_get_into_multi_buffers``, which asks
        the master in the same way. A name the session could not start for
        (gone meanwhile, no complete memory replica) or whose lease ran out
        during the transfer answers a negative code, as the other call does.
        The client keeps one session per name, shared by the process's
        threads, so a read ends only the sessions of names that no other read
        of this backend has started and not yet ended (``_readers``). Were
        another user of the client to end one meanwhile, the read of that
        name would answer a negative code (and be read the ordinary way)."""
        if not self.ranged_reads:
            return list(
                self._store.batch_get_into_multi_buffers(
                    names, [[a] for a in addresses], [[n] for n in lengths]
                )
            )
        with self._readers_lock:
            self._readers.update(names)
        try:
            started = self._store.batch_get_session_start(names)
            got = self._store.batch_get_into_multi_buffer_ranges(
                names, [[a] for a in addresses], [[n] for n in lengths], [[0]] * len(names)
            )
        finally:
            # held while ending: a read counted after this end starts its own session
            with self._readers_lock:
                self._readers.subtract(names)
                done = [n for n in set(names) if self._readers[n] <= 0]
                for n in done:
                    del self._readers[n]
                if done:
                    self._store.batch_get_session_end(done)
        if len(started) != len(names) or len(got) != len(names):
            raise RemoteError(f"Mooncake get session of {len(names)} values answered nothing")
        return [code if code < 0 else read for code, read in zip(started, got, strict=True)]

    def _lengths(self, names: Sequence[str]) -> list[int]:
        """Each value's length from its replica descriptors (0: not known, e.g.
        not in the store or not in memory)."""
        found = self._store.batch_get_replica_desc(list(names))
        out = []
        for name in names:
            length = 0
            for replica in found.get(name) or ():
                if replica.is_memory_replica():
                    length = int(replica.get_memory_descriptor().buffer_descriptor.size)
                    break
            out.append(length)
        return out

    def exists_many(self, names: Sequence[str]) -> list[bool]:
        codes = self._store.batch_is_exist(list(names))
        if any(c < 0 for c in codes):
            raise RemoteError(f"Mooncake batch_is_exist returned {sorted(set(codes))}")
        return [c == 1 for c in codes]

    def delete_many(self, names: Sequence[str]) -> None:
        codes = self._store.batch_remove(list(names), True)
        bad = [c for c in codes if c not in (0, OBJECT_NOT_FOUND)]
        if bad:
            raise RemoteError(f"Mooncake batch_remove returned {sorted(set(bad))}")

    def ping(self) -> None:
        code = self._store.batch_is_exist(["tiermem/ping"])[0]
        if code < 0:
            raise RemoteError(f"Mooncake master at {self.address} is unreachable ({code})")

    def release(self, owner: object) -> None:
        del owner  # the handle frees its transfer-buffer space when collected

    def close(self) -> None:
        self._store.close()
