"""A client on the daemon's host reads a cold blob straight from its payload
file (a short-circuit read the daemon offers for the "file" path), checking
every block; a damaged file is never served (the daemon's own read reports
DATA_LOSS), a file that is not the one the daemon named is not read, and a
daemon with ``blobs.local_file_reads`` off serves by shared memory instead."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.blobs.helpers import MiB, pattern
from tiermem.client import Client
from tiermem.client.errors import TiermemClientError
from tiermem.server.app import Daemon


def test_cold_blobs_are_read_from_the_payload_file_byte_exact(
    client: Client, tmp_path: Path
) -> None:
    blobs = {f"cold-{i}.bin": pattern(21 * MiB + 77, seed=80 + i) for i in range(4)}
    for key, data in blobs.items():  # one blob per read: reads make a blob hot (DRAM)
        client.blobs.put(key, data)
    data = blobs["cold-0.bin"]
    assert client.blobs.get("cold-0.bin") == data  # into memory (through scratch units)
    data = blobs["cold-1.bin"]
    buf = bytearray(len(data))
    n, info = client.blobs.get_into("cold-1.bin", buf)  # in place, into the caller's buffer
    assert n == len(data) and buf == data and info.sha256 == hashlib.sha256(data).digest()
    dest = tmp_path / "back.bin"
    client.blobs.get("cold-2.bin", dest, verify="sha256")  # a path, the whole hash checked
    assert dest.read_bytes() == blobs["cold-2.bin"]
    part = client.blobs.get("cold-3.bin", offset=3 * MiB + 5, length=9 * MiB)  # a range
    assert part == blobs["cold-3.bin"][3 * MiB + 5 : 12 * MiB + 5]
    stats = client.path_stats()
    assert stats["shm"]["gets"] == 0
    assert stats["file"] == {
        "puts": 0, "gets": 4, "put_bytes": 0, "get_bytes": 3 * len(data) + 9 * MiB,
    }  # fmt: skip


def damage(path: Path, at: int) -> None:
    with path.open("r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0x01]))


def test_a_damaged_payload_file_is_data_loss_never_served(daemon: Daemon, client: Client) -> None:
    data = pattern(12 * MiB, seed=81)
    info = client.blobs.put("damaged.bin", data)
    payload = daemon.blobs.payload_path(info.sha256)
    assert payload is not None
    damage(payload, 7 * MiB + 3)
    buf = bytearray(len(data))
    with pytest.raises(TiermemClientError) as err:
        client.blobs.get_into("damaged.bin", buf)
    assert err.value.code == "DATA_LOSS" and "damaged" in err.value.message
    assert client.path_stats()["file"]["gets"] == 0
    client.blobs.put("repair.bin", data)  # the same bytes again repair the content
    assert client.blobs.get("damaged.bin") == data
    other = pattern(12 * MiB, seed=84)
    client.blobs.put("other.bin", other)
    assert client.blobs.get("other.bin") == other
    assert client.path_stats()["file"]["gets"] >= 1  # file reads stay on for the client


def test_a_file_other_than_the_one_named_is_not_read(daemon: Daemon, client: Client) -> None:
    data = pattern(10 * MiB, seed=82)
    info = client.blobs.put("moved.bin", data)
    payload = daemon.blobs.payload_path(info.sha256)
    assert payload is not None
    real_stat: Callable[..., os.stat_result] = os.stat

    def stat_of_another_file(path: object, *args: object, **kwargs: object) -> os.stat_result:
        st = real_stat(path, *args, **kwargs)  # type: ignore[arg-type]
        if str(path) != str(payload):
            return st
        fields = list(st)
        fields[1] += 1  # another inode: as if the file were replaced after the daemon looked
        return os.stat_result(fields)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("tiermem.server.services.blobs.os.stat", stat_of_another_file)
        assert client.blobs.get("moved.bin") == data
    stats = client.path_stats()
    assert stats["file"]["gets"] == 0 and stats["shm"]["gets"] == 1
    fresh = pattern(10 * MiB, seed=85)  # (moved.bin is hot by now: read from DRAM)
    client.blobs.put("fresh.bin", fresh)
    assert client.blobs.get("fresh.bin") == fresh
    assert client.path_stats()["file"]["gets"] == 1  # a mismatch does not turn file reads off


def test_a_daemon_can_turn_file_reads_off(make_daemon: Callable[..., Daemon]) -> None:
    daemon = make_daemon("nofile", blobs={"local_file_reads": False})
    data = pattern(9 * MiB, seed=83)
    with Client(daemon.address) as c:
        c.blobs.put("x.bin", data)
        assert c.blobs.get("x.bin") == data
        stats = c.path_stats()
        assert stats["file"]["gets"] == 0 and stats["shm"]["gets"] == 1
