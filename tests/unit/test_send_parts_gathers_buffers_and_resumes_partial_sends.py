"""``send_parts`` writes a header and many values back to back in as few
``sendmsg`` calls as the kernel allows, and resumes exactly where a partial
send stopped (mid-buffer, or after a batch of SENDMSG_MAX_PARTS buffers)."""

from __future__ import annotations

import numpy as np

from tests.unit.peer import received_while
from tiermem.dataplane_wire import SENDMSG_MAX_PARTS, send_parts


class Trickle:
    """A channel whose every ``sendmsg`` takes at most ``step`` bytes."""

    def __init__(self, step: int) -> None:
        self.step = step
        self.out = bytearray()
        self.calls = 0
        self.most_parts = 0

    def sendmsg(self, parts: list[memoryview]) -> int:
        self.calls += 1
        self.most_parts = max(self.most_parts, len(parts))
        left = self.step
        for part in parts:
            take = bytes(part[:left])
            self.out += take
            left -= len(take)
            if not left:
                break
        return self.step - left


class SendallOnly:
    def __init__(self) -> None:
        self.out = bytearray()

    def sendall(self, data: memoryview) -> None:
        self.out += bytes(data)


def parts_of(sizes: list[int], seed: int = 0) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in sizes]


def test_partial_sends_resume_mid_buffer_in_order() -> None:
    parts = parts_of([5, 0, 1000, 3, 77, 0, 4096])
    for step in (1, 7, 999, 1 << 20):
        channel = Trickle(step)
        send_parts(channel, parts)
        assert bytes(channel.out) == b"".join(parts)
    idle = Trickle(1 << 20)
    send_parts(idle, [b"", memoryview(b"")])
    assert idle.calls == 0  # nothing to send: no system call


def test_many_buffers_go_in_batches_the_kernel_accepts() -> None:
    parts = parts_of([3] * (SENDMSG_MAX_PARTS * 2 + 5), seed=1)
    channel = Trickle(1 << 30)
    send_parts(channel, parts)
    assert bytes(channel.out) == b"".join(parts)
    assert channel.most_parts == SENDMSG_MAX_PARTS
    assert channel.calls == 3


def test_typed_views_are_sent_as_their_bytes_and_channels_without_sendmsg_work() -> None:
    floats = np.arange(1000, dtype=np.float16)
    parts: list[bytes | memoryview] = [b"head", memoryview(floats), memoryview(b"")]
    plain = SendallOnly()
    send_parts(plain, parts)
    gathered = Trickle(333)
    send_parts(gathered, parts)
    assert bytes(plain.out) == bytes(gathered.out) == b"head" + floats.tobytes()


def test_a_real_socket_receives_a_large_gathered_send_exactly() -> None:
    parts = parts_of([9, 3 << 20, 1, 5 << 20], seed=2)
    # timeout mode: the kernel may take part of a sendmsg
    got = received_while(lambda conn: send_parts(conn, parts), sum(map(len, parts)))
    assert got == b"".join(parts)
