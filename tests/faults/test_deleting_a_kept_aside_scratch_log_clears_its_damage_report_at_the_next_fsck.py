"""A scratchpad log file kept aside by recovery (a damaged frame) is damage
until an operator deletes it: its entry in the damage register (and so
``tiermem_damaged_objects``) must stay while the file is there, whatever
happens to the sessions whose records it holds (the log is shared by every
session, and the kept file is what the entry names), and must go once the file
is deleted and a whole-daemon online ``fsck`` looks again.

Before, the register kept the entry until the daemon restarted: after the
file was deleted, online ``fsck`` answered clean while the gauge still counted
one damaged object (an alert on it kept firing)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.faults.scratch_log import RESTART_CONFIG, crash_with_three_logged_appends
from tiermem.client import Client
from tiermem.server.app import Daemon

GAUGE = "tiermem_damaged_objects"


def test_deleting_a_kept_aside_scratch_log_clears_its_damage_report_at_the_next_fsck(
    tmp_path: Path, make_daemon: Callable[..., Daemon]
) -> None:
    crashed = crash_with_three_logged_appends(tmp_path / "d")
    middle = crashed.frames[1]
    data = bytearray(crashed.path.read_bytes())
    data[middle.offset + 8 + middle.length // 2] ^= 0x5A  # a byte of its batch
    crashed.path.write_bytes(data)

    daemon = make_daemon("d", **RESTART_CONFIG)
    kept = crashed.path.with_name(crashed.path.name + ".damaged")
    name = f"<scratch log {kept.name}>"

    def damaged() -> float:
        return daemon.metrics.registry.get_sample_value(GAUGE) or 0.0

    with Client(daemon.address) as c:
        assert damaged() == 1
        # the damaged data is still there: closing the session it held records
        # of changes nothing, and every check lists it again
        c.sessions.close(crashed.session)
        for _ in range(2):
            assert [(d.key, d.where) for d in c.integrity.check().damaged] == [
                (name, "scratch_log")
            ]
            assert damaged() == 1
        assert [d.key for d in daemon.integrity.known_damage()] == [name]

        kept.unlink()  # inspected: the operator deletes it
        assert c.integrity.check().damaged == []
        assert damaged() == 0
        assert daemon.integrity.known_damage() == []
