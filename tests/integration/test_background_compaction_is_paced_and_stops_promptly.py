"""Background compaction keeps to tiers.ssd.compaction_rate_bytes_per_s, gives
way when the SSD tier needs its space, and a stopping daemon does not wait for
a paced pass; what a stopped pass left half done loses nothing."""

import os
import threading
import time

import pytest

from tests.polling import poll_until
from tiermem.client import Client, Kind, Profile, Tier
from tiermem.server.app import Daemon
from tiermem.server.services.pacer import BytePacer

MiB = 1 << 20
COLD = Profile(preferred_tier=Tier.SSD)


def sample(daemon: Daemon, name: str) -> float:
    value = daemon.metrics.registry.get_sample_value(name)
    return 0.0 if value is None else value


def fill_and_thin(daemon: Daemon) -> dict[str, bytes]:
    """30 values of 700 kB on SSD (4 MiB segments), three of four deleted: leaves
    several sealed segments under the live ratio. Returns the survivors."""
    values = {f"b{i}": os.urandom(700_000) for i in range(30)}
    with Client(daemon.address) as client:
        for key, data in values.items():
            client.put(Kind.BLOB, key, data, profile=COLD)
        for i in range(30):
            if i % 4 != 0:
                client.delete(Kind.BLOB, f"b{i}")
                del values[f"b{i}"]
    return values


def assert_all_present(daemon: Daemon, values: dict[str, bytes]) -> None:
    with Client(daemon.address) as client:
        for key, data in values.items():
            assert client.get(Kind.BLOB, key) == data, key


def test_a_paced_pass_waits_bytes_over_rate_and_moves_every_live_value(make_daemon) -> None:  # type: ignore[no-untyped-def]
    daemon: Daemon = make_daemon(
        tiers={"ssd": {"segment_bytes": 4 * MiB}}, background={"compaction_interval_s": 3600}
    )
    values = fill_and_thin(daemon)
    waits: list[float] = []
    rate = 8 * MiB
    # a clock that only the waits move: the copying itself takes no time on it
    pacer = BytePacer(
        rate, stop=threading.Event(), clock=lambda: sum(waits), sleep=waits.append, burst_s=0.0
    )
    assert daemon.mover.compact(pacer=pacer) >= 3
    moved = sample(daemon, "tiermem_segment_compacted_bytes_total")
    assert moved > 0
    assert sum(waits) == pytest.approx(moved / rate, rel=0.01)
    assert_all_present(daemon, values)


def test_pacing_gives_way_when_the_ssd_tier_needs_its_space(make_daemon) -> None:  # type: ignore[no-untyped-def]
    # one kilobyte a second would take hours; above the (tiny) threshold it is lifted
    daemon: Daemon = make_daemon(
        tiers={
            "ssd": {
                "segment_bytes": 4 * MiB,
                "compaction_rate_bytes_per_s": 1024,
                "compaction_unpaced_above": 1e-6,
            }
        },
        background={"compaction_interval_s": 0.2},
    )
    values = fill_and_thin(daemon)
    assert poll_until(lambda: sample(daemon, "tiermem_segment_compactions_total") >= 3, 30)
    assert sample(daemon, "tiermem_segment_compaction_paced_seconds_total") == 0
    assert_all_present(daemon, values)


def test_a_stop_ends_a_paced_pass_and_the_half_compacted_segment_loses_nothing(
    make_daemon,  # type: ignore[no-untyped-def]
) -> None:
    daemon: Daemon = make_daemon(
        tiers={"ssd": {"segment_bytes": 4 * MiB, "compaction_rate_bytes_per_s": 1024}},
        background={"compaction_interval_s": 0.2},
    )
    values = fill_and_thin(daemon)
    # the pass has copied its first value and waits ~11 minutes before the next
    assert poll_until(
        lambda: sample(daemon, "tiermem_segment_compaction_paced_seconds_total") > 60, 30
    )
    assert sample(daemon, "tiermem_segment_compactions_total") == 0
    started = time.monotonic()
    daemon.stop(grace_s=0)
    assert time.monotonic() - started < 20  # not the paced pass's minutes

    again: Daemon = make_daemon(
        tiers={"ssd": {"segment_bytes": 4 * MiB}}, background={"compaction_interval_s": 3600}
    )
    assert_all_present(again, values)
    again.maintain()  # unpaced: finishes what the stopped pass began
    assert sample(again, "tiermem_segment_compactions_total") >= 3
    assert_all_present(again, values)
