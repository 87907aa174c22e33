"""A session's close does not wait for a write-back flush to embed its batch
(with MiniLM a forward pass of hundreds of ms, and seconds for the model's
first load: the soak saw closes of 0.5-16 s). The close used to take the
flush lock, held through the embedding. Now it waits only for a commit, and
the flush in progress leaves the closed session's records out of its commit:
they are neither stored nor indexed, while the other sessions' records of the
same batch are; if that commit fails, only the open sessions' records go back
to the buffer. The embedder is held at a gate so the close lands mid-flush."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from tests.agent.failing_commit import CommitFailsOnceWhenArmed, InjectedFailure
from tiermem.client import Client, NewRecord, RecordKind
from tiermem.server.app import Daemon
from tiermem.server.embedding.base import Embedder, Vectors
from tiermem.server.scratch.service import CF


class _GatedEmbedder:
    """The daemon's embedder, held at ``gate`` once ``entered`` is set."""

    def __init__(self, real: Embedder) -> None:
        self.real = real
        self.name, self.dim = real.name, real.dim
        self.entered, self.gate = threading.Event(), threading.Event()

    def embed(self, texts: Sequence[str]) -> Vectors:
        self.entered.set()
        assert self.gate.wait(30), "the test never opened the gate"
        return self.real.embed(texts)


def _stored_ids(daemon: Daemon, session: str) -> list[int]:
    from tiermem.server.scratch.records import decode_batch

    ids: list[int] = []
    for tag in (b"b", b"k"):
        for _key, value in daemon.scratch.rocks.scan(CF, tag + session.encode() + b"\x00"):
            ids.extend(int(m.id) for m in decode_batch(value, "in the test"))
    return ids


def _two_sessions(
    daemon: Daemon, client: Client, records: int
) -> tuple[_GatedEmbedder, str, str, list[int], list[int]]:
    """The daemon's embedder gated; sessions "closing" and "staying" with
    ``records`` buffered records each: (gated, closing, staying, their ids)."""
    gated = _GatedEmbedder(daemon.scratch.embedder)
    daemon.scratch.embedder = gated  # type: ignore[assignment]
    ids = []
    for label in ("closing", "staying"):
        session = client.sessions.open(label=label).id
        new = [NewRecord(RecordKind.THOUGHT, f"{label} {i}") for i in range(records)]
        ids.append((session, client.scratch.append_many(session, new)))
    (closing, gone), (staying, kept) = ids
    return gated, closing, staying, gone, kept


def test_a_close_mid_flush_returns_at_once_and_its_records_are_left_out(
    adaemon: Daemon, aclient: Client
) -> None:
    scratch = adaemon.scratch
    gated, closing, staying, gone, kept = _two_sessions(adaemon, aclient, 3)
    flusher = threading.Thread(target=scratch.flush, args=("timer",))
    flusher.start()
    try:
        assert gated.entered.wait(10), "the flush never reached the embedder"
        closed = threading.Event()

        def close() -> None:
            with Client(adaemon.address, timeout_s=30) as other:
                other.sessions.close(closing)
            closed.set()

        closer = threading.Thread(target=close)
        closer.start()
        # the embedder is still held: the close must not need it
        assert closed.wait(10), "the close waited for the flush's embedding"
    finally:
        gated.gate.set()
        flusher.join(30)
    closer.join(10)
    assert not flusher.is_alive()
    assert _stored_ids(adaemon, closing) == []
    assert sorted(_stored_ids(adaemon, staying)) == sorted(kept)
    index = scratch.index
    indexed = {int(h.id) for h in index.search(gated.real.embed(["closing 1"])[0], 100)}
    assert not indexed & set(gone)
    assert set(kept) <= indexed
    assert [r.id for r in aclient.scratch.replay(staying)] == kept
    stats = aclient.scratch.stats()
    assert stats.stored_records == len(kept)
    assert stats.buffered_records == 0
    assert [s.id for s in aclient.sessions.list()] == [staying]


def test_a_flush_that_fails_after_a_close_puts_back_only_the_open_sessions_records(
    adaemon: Daemon, aclient: Client
) -> None:
    scratch = adaemon.scratch
    gated, closing, staying, _gone, kept = _two_sessions(adaemon, aclient, 1)
    failing = CommitFailsOnceWhenArmed(scratch.rocks, "injected: the flush's commit failed")
    scratch.rocks = failing  # type: ignore[assignment]
    raised: list[BaseException] = []

    def flush() -> None:
        try:
            scratch.flush("timer")
        except InjectedFailure as exc:
            raised.append(exc)

    flusher = threading.Thread(target=flush)
    flusher.start()
    try:
        assert gated.entered.wait(10), "the flush never reached the embedder"
        aclient.sessions.close(closing)  # returns while the embedder is held
        failing.armed = True  # the flush's commit, the next one, fails
    finally:
        gated.gate.set()
        flusher.join(30)
    assert len(raised) == 1
    stats = aclient.scratch.stats()
    assert (stats.buffered_records, stats.stored_records) == (1, 0)
    assert [r.id for r in aclient.scratch.replay(staying)] == kept
    scratch.flush("timer")
    assert _stored_ids(adaemon, closing) == []
    assert _stored_ids(adaemon, staying) == kept
    assert aclient.scratch.stats().buffered_records == 0
