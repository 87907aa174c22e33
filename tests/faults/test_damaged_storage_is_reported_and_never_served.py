"""Fault fixtures: damaged or missing storage under a daemon.

In every case the daemon starts, reports what is damaged (the
``tiermem_damaged_objects`` metric, an error log line, ``tiermem fsck``), serves
everything else byte-exact, and answers DATA_LOSS, never damaged bytes."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from tests.conftest import daemon_config
from tests.faults.flips import damaged_gauge, flip
from tests.helpers import DaemonProcess
from tiermem.cli.main import main as cli
from tiermem.client import ChecksumError, Client, Kind, NotFoundError, Profile, Tier
from tiermem.server.app import Daemon
from tiermem.server.model import Kind as ServerKind
from tiermem.server.model import ObjectKey
from tiermem.server.services.integrity import check_offline

SSD = Profile(preferred_tier=Tier.SSD)
MiB = 1 << 20


def location(daemon: Daemon, key: str) -> tuple[int, int, int]:
    entry = daemon.store.catalog.find(ObjectKey("default", ServerKind.BLOB, key).encode())
    assert entry is not None
    return entry.seg, entry.seg_off, entry.size


def segment_path(daemon: Daemon, seg: int) -> Path:
    return Path(daemon.config.data_dir) / "segments" / f"seg-{seg:010d}.dat"


@pytest.fixture
def stored(make_daemon: Callable[..., Daemon]) -> Iterator[tuple[Daemon, dict[str, bytes]]]:
    """A stopped daemon's data: 12 segment values over 3 segments, 20 inline ones."""
    daemon = make_daemon(tiers={"ssd": {"segment_bytes": 2 * MiB}})
    values = {f"seg-{i}": os.urandom(500_000) for i in range(12)}
    values |= {f"inline-{i}": os.urandom(3000) for i in range(20)}
    with Client(daemon.address) as c:
        for key, data in values.items():
            c.put(Kind.BLOB, key, data, profile=SSD)
    yield daemon, values


def restart(make_daemon: Callable[..., Daemon], daemon: Daemon) -> Daemon:
    daemon.stop()
    return make_daemon(
        name=Path(daemon.config.data_dir).name, tiers={"ssd": {"segment_bytes": 2 * MiB}}
    )


def expect_served(client: Client, values: dict[str, bytes], damaged: set[str]) -> None:
    for key, data in values.items():
        if key in damaged:
            with pytest.raises(ChecksumError):
                client.get(Kind.BLOB, key)
        else:
            assert client.get(Kind.BLOB, key) == data, key


def test_flipped_byte_in_a_segment_value(
    stored: tuple[Daemon, dict[str, bytes]], make_daemon: Callable[..., Daemon],
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    daemon, values = stored
    seg, off, size = location(daemon, "seg-4")
    data_dir = Path(daemon.config.data_dir)
    daemon.stop()
    flip(segment_path(daemon, seg), off + size // 2)
    report = check_offline(data_dir)
    assert [d.key for d in report.damaged] == ["default/BLOB/seg-4"]
    assert cli(["fsck", "--data-dir", str(data_dir), "--quick"]) == 0  # lengths are fine
    assert cli(["fsck", "--data-dir", str(data_dir)]) == 1

    again = restart(make_daemon, daemon)
    with Client(again.address) as c:
        caplog.set_level(logging.ERROR)
        expect_served(c, values, {"seg-4"})
        assert damaged_gauge(again) == 1
        assert "data damaged, not served" in caplog.text and "seg-4" in caplog.text
        # Compaction never copies the damaged value on as if it were good.
        again.mover.compact_segment(seg)
        expect_served(c, values, {"seg-4"})
        # Overwriting the damaged object clears the damage.
        c.put(Kind.BLOB, "seg-4", b"fresh")
        assert c.get(Kind.BLOB, "seg-4") == b"fresh"
        assert damaged_gauge(again) == 0


def test_online_fsck_finds_damage_before_any_read(
    stored: tuple[Daemon, dict[str, bytes]], make_daemon: Callable[..., Daemon]
) -> None:
    daemon, values = stored
    seg, off, _size = location(daemon, "seg-7")
    daemon.stop()
    flip(segment_path(daemon, seg), off + 10)
    again = restart(make_daemon, daemon)
    assert damaged_gauge(again) == 0  # a flipped byte is only found by reading it
    with Client(again.address) as c:
        result = c.integrity.check()
        assert result.objects_checked == len(values)
        assert [(d.kind, d.key, d.where) for d in result.damaged] == [
            (Kind.BLOB, "seg-7", "segment")
        ]
        assert damaged_gauge(again) == 1
        expect_served(c, values, {"seg-7"})
        assert c.integrity.check(metadata_only=True).damaged_total == 0
    out = subprocess.run(
        [sys.executable, "-m", "tiermem.cli.main", "fsck", "--addr", again.address, "--json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode == 1, out.stderr
    assert json.loads(out.stdout)["damaged"][0]["key"] == "default/BLOB/seg-7"


def test_truncated_segment_file(
    stored: tuple[Daemon, dict[str, bytes]], make_daemon: Callable[..., Daemon]
) -> None:
    daemon, values = stored
    seg, off, _size = location(daemon, "seg-5")
    in_segment = {k for k in values if k.startswith("seg-") and location(daemon, k)[0] == seg}
    after = {k for k in in_segment if location(daemon, k)[1] >= off}
    daemon.stop()
    os.truncate(segment_path(daemon, seg), off + 1000)
    again = restart(make_daemon, daemon)
    assert again.recovery is not None and again.recovery.truncated_segment == len(after)
    assert damaged_gauge(again) == len(after)  # known at start, before any read
    with Client(again.address) as c:
        expect_served(c, values, after)
        assert {d.key for d in c.integrity.check(metadata_only=True).damaged} == after


def test_missing_segment_file(
    stored: tuple[Daemon, dict[str, bytes]], make_daemon: Callable[..., Daemon]
) -> None:
    daemon, values = stored
    seg, _off, _size = location(daemon, "seg-0")
    gone = {k for k in values if k.startswith("seg-") and location(daemon, k)[0] == seg}
    daemon.stop()
    segment_path(daemon, seg).unlink()
    again = restart(make_daemon, daemon)
    assert again.recovery is not None and again.recovery.missing_segment == len(gone)
    assert damaged_gauge(again) == len(gone)
    with Client(again.address) as c:
        expect_served(c, values, gone)
        for key in gone:  # damaged objects can be deleted, which clears the report
            assert c.delete(Kind.BLOB, key)
        assert damaged_gauge(again) == 0
        assert c.integrity.check().clean


def test_flipped_byte_in_an_inline_value_in_rocksdb(
    stored: tuple[Daemon, dict[str, bytes]], make_daemon: Callable[..., Daemon]
) -> None:
    daemon, values = stored
    data_dir = Path(daemon.config.data_dir)
    daemon.stop()  # a clean stop writes the memtables to SST files
    needle = values["inline-3"][:64]
    hits = [
        (p, p.read_bytes().find(needle))
        for p in (data_dir / "catalog").glob("*.sst")
        if needle in p.read_bytes()
    ]
    assert len(hits) == 1, hits
    flip(hits[0][0], hits[0][1] + 100)
    again = restart(make_daemon, daemon)
    with Client(again.address) as c:
        bad = set()
        for key, data in values.items():
            try:
                assert c.get(Kind.BLOB, key) == data, key
            except ChecksumError as exc:
                assert "damaged" in str(exc)
                bad.add(key)
        # RocksDB's block checksum fails for the whole block holding the value.
        assert "inline-3" in bad and all(k.startswith("inline-") for k in bad)
        assert damaged_gauge(again) == len(bad)
        assert {d.key for d in c.integrity.check().damaged} == bad


def test_damaged_catalog_records_lose_only_their_range(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon()
    values = {f"rec-{i:04d}": os.urandom(200) for i in range(600)}
    with Client(daemon.address) as c:
        for key, data in values.items():
            c.put(Kind.SCRATCH, key, data)
    data_dir = Path(daemon.config.data_dir)
    daemon.stop()
    # A clean stop flushes each column family to its own SST; the largest one
    # without value bytes holds the records. Damage a data block in its middle.
    ssts = list((data_dir / "catalog").glob("*.sst"))
    records = max(
        (p for p in ssts if values["rec-0300"][:32] not in p.read_bytes()),
        key=lambda p: p.stat().st_size,
    )
    flip(records, records.stat().st_size // 3)
    report = check_offline(data_dir)
    assert report.damaged and report.damaged[0].where == "catalog"
    again = make_daemon(name="d")
    assert again.recovery is not None and again.recovery.catalog_gaps
    with Client(again.address) as c:
        found = 0
        for key_name, data in values.items():
            try:
                assert c.get(Kind.SCRATCH, key_name) == data
                found += 1
            except NotFoundError:
                pass
        assert len(values) - 100 < found < len(values)  # one block's records are lost
        c.put(Kind.SCRATCH, "after", b"the daemon still takes writes")
        assert c.get(Kind.SCRATCH, "after") == b"the daemon still takes writes"


def test_torn_wal_tail_after_kill_9(tmp_path: Path) -> None:
    proc = DaemonProcess(tmp_path / "data")
    acknowledged: dict[str, bytes] = {}
    try:
        with Client(proc.start()) as c:
            for i in range(60):
                data = os.urandom(300 if i % 3 else 200_000)
                c.put(Kind.BLOB, f"w{i}", data)
                acknowledged[f"w{i}"] = data
        proc.kill9()
        wal = max((tmp_path / "data" / "catalog").glob("*.log"), key=lambda p: p.stat().st_size)
        os.truncate(wal, wal.stat().st_size - 700)  # tear the last record(s)
        with Client(proc.start()) as c:
            lost = 0
            for key, data in acknowledged.items():
                try:
                    assert c.get(Kind.BLOB, key) == data  # whole, or
                except NotFoundError:
                    lost += 1  # gone with its torn record: never corrupt
            assert lost <= 3
            c.put(Kind.BLOB, "after", b"ok")
            assert c.integrity.check().clean
    finally:
        proc.stop()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 24 MiB tmpfs (root only); skipped where mounting is not permitted."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mount)],
        capture_output=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_full_disk_refuses_writes_and_keeps_serving(small_disk: Path) -> None:
    # The SSD budget is larger than the disk: the disk fills first.
    config = daemon_config(
        small_disk / "data",
        tiers={"ssd": {"capacity_bytes": "1GiB", "segment_bytes": 4 * MiB}},
    )
    # Space an operator can free later: opening RocksDB replays its WAL into a
    # new file, so a restart needs some room.
    ballast = small_disk / "ballast"
    ballast.write_bytes(b"\0" * (2 * MiB))
    acknowledged: dict[str, bytes] = {}
    with (
        Daemon(config, registry=CollectorRegistry()) as daemon,
        Client(daemon.address, retries=0) as c,
    ):
        refusal = None
        for i in range(40):
            data = os.urandom(MiB)
            try:
                c.put(Kind.BLOB, f"f{i}", data, profile=SSD)
                acknowledged[f"f{i}"] = data
            except Exception as exc:
                refusal = exc
                break
        assert refusal is not None, "the disk never filled"
        assert getattr(refusal, "code", "") == "RESOURCE_EXHAUSTED", refusal
        assert "No space left" in str(refusal) or "full" in str(refusal)
        assert len(acknowledged) >= 10
        for key, data in acknowledged.items():
            assert c.get(Kind.BLOB, key) == data
        assert sorted(o.key for o in c.list()) == sorted(acknowledged)
    ballast.unlink()
    with Daemon(config, registry=CollectorRegistry()) as again, Client(again.address) as c:
        for key, data in acknowledged.items():
            assert c.get(Kind.BLOB, key) == data
        assert c.integrity.check().clean


def test_compaction_finds_entries_after_a_hole_left_by_a_crash(
    make_daemon: Callable[..., Daemon],
) -> None:
    """Found by the crash-kill benchmark: two appends share the active segment,
    the later one commits, the process dies before the earlier one wrote its
    header. The walk must find the committed entry behind the hole, and
    compaction must never delete a segment that records still name."""
    daemon = make_daemon(tiers={"ssd": {"segment_bytes": 2 * MiB}})
    hole, live = os.urandom(900_000), os.urandom(100_000)
    with Client(daemon.address) as c:
        c.put(Kind.BLOB, "torn", hole, profile=SSD)
        c.put(Kind.BLOB, "behind", live, profile=SSD)
    seg, off, _ = location(daemon, "torn")
    assert location(daemon, "behind")[0] == seg
    key = ObjectKey("default", ServerKind.BLOB, "torn").encode()
    daemon.stop()
    with open(segment_path(daemon, seg), "r+b") as f:  # the header was never written
        f.seek(off - len(key) - 24)
        f.write(b"\0" * (24 + len(key)))
    again = restart(make_daemon, daemon)
    with Client(again.address) as c:
        c.delete(Kind.BLOB, "torn")
        assert again.mover.compact_segment(seg)
        assert not segment_path(again, seg).exists()
        assert c.get(Kind.BLOB, "behind") == live
        assert c.integrity.check().clean
