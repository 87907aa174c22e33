"""The whole-reply send deadline of the bulk channel (``SendDeadline``) costs a
reply that leaves in one ``sendmsg`` no clock read, later sends one each, and
cuts a reply whose sends keep moving past ``max(io_timeout_s, bytes / rate)``."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from tiermem.dataplane_wire import send_parts
from tiermem.server.dataplane.transfers import SendDeadline


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now


class _Trickle:
    """A channel whose every sendmsg takes ``per_send`` bytes and ``step_s`` seconds."""

    def __init__(self, clock: _Clock, per_send: int, step_s: float) -> None:
        self.clock = clock
        self.per_send = per_send
        self.step_s = step_s
        self.sent = 0
        self.calls = 0

    def sendmsg(self, parts: Sequence[memoryview]) -> int:
        self.calls += 1
        self.clock.now += self.step_s
        n = min(self.per_send, sum(p.nbytes for p in parts))
        self.sent += n
        return n


def test_a_reply_sent_in_one_send_reads_no_clock() -> None:
    clock = _Clock()
    channel = _Trickle(clock, per_send=1 << 30, step_s=0.001)
    send_parts(channel, [b"head", b"x" * 100_000], SendDeadline(100_004, 30.0, 1 << 20, clock))
    assert (channel.calls, clock.reads) == (1, 0)


def test_later_sends_read_the_clock_once_each() -> None:
    clock = _Clock()
    channel = _Trickle(clock, per_send=1000, step_s=0.001)
    send_parts(channel, [b"x" * 10_000], SendDeadline(10_000, 30.0, 1 << 20, clock))
    assert channel.calls == 10
    assert clock.reads == 9  # none before the first send


def test_a_reply_read_too_slowly_is_cut_at_its_deadline() -> None:
    clock = _Clock()
    # 1 MiB at a 64 KiB/s minimum: 16 s; the trickle moves 1 KiB per second
    channel = _Trickle(clock, per_send=1024, step_s=1.0)
    deadline = SendDeadline(1 << 20, 2.0, 64 << 10, clock)
    with pytest.raises(TimeoutError, match="too slowly"):
        send_parts(channel, [b"x" * (1 << 20)], deadline)
    # the clock started at the second send (after 1 s), the cut came at the
    # first check past 16 s after that
    assert channel.calls == 18
    assert channel.sent < 1 << 20


def test_a_small_reply_gets_at_least_the_io_timeout() -> None:
    clock = _Clock()
    channel = _Trickle(clock, per_send=10, step_s=1.0)
    with pytest.raises(TimeoutError):
        send_parts(channel, [b"x" * 1000], SendDeadline(1000, 5.0, 1 << 20, clock))
    assert channel.calls == 7  # 1 + 5 s from the second send, checked before the 7th
