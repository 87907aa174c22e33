"""The crash workload's services beyond plain objects: scratchpad appends, KV
blocks, vector upserts and blobs, each through the real client, each with its
own part of the test's record and its own check after a restart.

Every model belongs to one worker (one client thread), so each has at most one
call in flight: what that call would write is ``pending`` until it returns, and
acknowledged once it has. What each check accepts follows docs/reliability.md:

* **Scratch** (``ScratchModel``): LOGGED and SYNC records survive ``kill -9``;
  BUFFERED ones may be lost, but only the newest: the lost ones of a session
  are a suffix of its acknowledged BUFFERED records, each acknowledged within
  ``agent.scratch.buffered_window_ms`` of the kill (plus a slack for a loaded
  machine); one read back after a restart (recovery flushed it) is never lost
  later. Every record read back is byte-exact, keeps its id, and comes in
  append order; none is invented or doubled.
* **KV blocks** (``KvModel``): CACHE blocks come back intact or missing, DURABLE
  ones (a profile may ask) intact; ``lookup_prefix`` counts exactly the leading
  blocks ``get_blocks`` finds, and the object listing agrees.
* **Vectors** (``VectorModel``): an acknowledged upsert or delete is durable:
  every id reads back with its acknowledged vector and payload (or the one in
  flight), a deleted id never comes back, ``count`` agrees.
* **Blobs** (``BlobModel``): durable once ``put`` returns: present and
  byte-exact; the listing agrees; each content's reference count equals the
  blobs naming it (copies share one content).
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import re
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from tests.crash.expected import DELETE, LOST, NO_VERSION, KeyState, Version, digest
from tiermem import kv_keys
from tiermem.client import (
    AlreadyExistsError,
    Client,
    Durability,
    Kind,
    KvBlock,
    KvScope,
    NotFoundError,
    Payload,
    Profile,
    RecordDurability,
    RecordKind,
    Tier,
    TiermemClientError,
)
from tiermem.client.scratch import NewRecord

KiB, MiB = 1 << 10, 1 << 20

#: Namespace of the KV blocks, vector collections and blobs (the object keys of
#: the plain-object part stay alone in "default", whose listing it checks).
NS = "crash-x"

#: ``agent.scratch.buffered_window_ms`` of the crash config, and how much later
#: than that window a lost BUFFERED record may have been acknowledged: a loaded
#: 2-core runner delays the log thread.
BUFFERED_WINDOW_MS = 100
BUFFERED_SLACK_S = 2.0


def _err(exc: TiermemClientError) -> str:
    return f"{exc.code}: {exc.message[:200]}"


# -- scratch ---------------------------------------------------------------------------------


@dataclass
class _Rec:
    seq: int
    digest: bytes
    durability: RecordDurability
    kind: RecordKind
    id: int = 0
    acked_at: float = 0.0  # monotonic
    #: Read back after a restart: recovery has flushed it to RocksDB, so even a
    #: BUFFERED record may not be lost any more.
    survived: bool = False


_KINDS = [RecordKind.OBSERVATION, RecordKind.THOUGHT, RecordKind.TOOL_CALL, RecordKind.DECISION]
_HEADER = re.compile(rb"^w(\d+) s(\d+) d(\d)\|")


@dataclass
class ScratchModel:
    """One session's records, appended by one worker."""

    worker: int
    session: str = ""
    opened: bool = False
    next_seq: int = 0
    acked: dict[int, _Rec] = field(default_factory=dict)  # seq -> record
    pending: list[_Rec] = field(default_factory=list)
    #: The oldest (in seconds before the kill) BUFFERED record a restart lost.
    buffered_lost_max_age_s: float = 0.0

    def __post_init__(self) -> None:
        self.session = self.session or f"crash-w{self.worker}"

    def setup(self, c: Client) -> list[str]:
        try:
            c.sessions.describe(self.session)
            return []
        except NotFoundError:
            lost = (
                [f"scratch {self.session}: acknowledged session open lost"] if self.opened else []
            )
        with contextlib.suppress(AlreadyExistsError):
            c.sessions.open(id=self.session, label="crash")
        self.opened = True
        return lost

    def append(self, c: Client, rng: random.Random, durability: RecordDurability) -> int:
        recs, msgs = [], []
        for _ in range(rng.randint(1, 4)):
            seq = self.next_seq
            self.next_seq += 1
            kind = rng.choice(_KINDS)
            payload = b"w%d s%d d%d|" % (self.worker, seq, durability) + rng.randbytes(
                rng.randint(16, 600)
            )
            recs.append(_Rec(seq, digest(payload), durability, kind))
            msgs.append(NewRecord(kind, payload, durability=durability))
        self.pending = recs
        ids = c.scratch.append_many(self.session, msgs)
        now = time.monotonic()
        for rec, rid in zip(recs, ids, strict=True):
            rec.id, rec.acked_at = rid, now
            self.acked[rec.seq] = rec
        self.pending = []
        return 1

    def check_serving(self, c: Client, rng: random.Random) -> list[str]:
        """The newest acknowledged records (any durability) read back exactly."""
        recent = sorted(self.acked.values(), key=lambda r: r.id)[-40:]
        if not recent:
            return []
        got = c.scratch.replay(self.session, after_id=recent[0].id - 1)
        by_id = {r.id: r for r in got}
        out = []
        for rec in recent:
            r = by_id.get(rec.id)
            if r is None:
                out.append(f"scratch {self.session} #{rec.id}: acknowledged record missing")
            elif digest(r.payload) != rec.digest or r.kind != rec.kind:
                out.append(f"scratch {self.session} #{rec.id}: bytes that {NO_VERSION}")
        return out

    def clear_pending(self) -> None:
        self.pending = []

    def verify(self, c: Client, killed_at: float) -> list[str]:
        """Read the whole session back; adopt what is there."""
        where = f"scratch {self.session}"
        try:
            records = c.scratch.replay(self.session)
        except TiermemClientError as exc:
            return [f"{where}: replay: {_err(exc)}"]
        out: list[str] = []
        pending = {r.seq: r for r in self.pending}
        seen: dict[int, _Rec] = {}
        last_id = 0
        for r in records:
            m = _HEADER.match(r.payload)
            if r.id <= last_id:
                out.append(f"{where}: record #{r.id} out of append order (after #{last_id})")
            last_id = max(last_id, r.id)
            if m is None or int(m.group(1)) != self.worker:
                out.append(f"{where} #{r.id}: a record never appended ({r.payload[:24]!r})")
                continue
            seq = int(m.group(2))
            want = self.acked.get(seq) or pending.get(seq)
            if want is None:
                out.append(f"{where} #{r.id}: seq {seq} was never appended")
                continue
            if seq in seen:
                out.append(f"{where} #{r.id}: seq {seq} read back twice")
                continue
            if digest(r.payload) != want.digest or r.kind != want.kind:
                out.append(f"{where} #{r.id}: {len(r.payload)} bytes that {NO_VERSION}")
                continue
            if seq in self.acked and r.id != want.id:
                out.append(f"{where}: seq {seq} acknowledged as #{want.id}, read back as #{r.id}")
            seen[seq] = want
            if want.id == 0:
                want.id = r.id
        lost_buffered: list[_Rec] = []
        for seq, rec in self.acked.items():
            if seq in seen:
                continue
            if rec.durability == RecordDurability.BUFFERED and not rec.survived:
                lost_buffered.append(rec)
            else:
                name = RecordDurability(rec.durability).name
                name += " (recovered before)" if rec.survived else ""
                out.append(f"{where} #{rec.id}: acknowledged {name} record lost")
        if lost_buffered:
            first_lost = min(r.id for r in lost_buffered)
            later = [
                r.id for s, r in seen.items()
                if s in self.acked and r.durability == RecordDurability.BUFFERED
                and not r.survived and r.id > first_lost
            ]  # fmt: skip
            if later:
                out.append(
                    f"{where}: BUFFERED #{first_lost} lost but later BUFFERED records kept "
                    f"({later[:5]}): not a suffix"
                )
            age = killed_at - min(r.acked_at for r in lost_buffered)
            self.buffered_lost_max_age_s = max(self.buffered_lost_max_age_s, age)
            if age > BUFFERED_WINDOW_MS / 1000 + BUFFERED_SLACK_S:
                out.append(
                    f"{where}: BUFFERED record #{first_lost} lost though acknowledged "
                    f"{age:.2f} s before the kill (window {BUFFERED_WINDOW_MS} ms)"
                )
        for rec in seen.values():
            rec.survived = True
        self.acked = dict(sorted(seen.items()))
        self.pending = []
        return out


# -- KV blocks -------------------------------------------------------------------------------

CHAINS, CHAIN_LEN = 3, 8


@dataclass
class KvModel:
    """Chains of KV blocks under one scope, written by one worker."""

    worker: int
    blocks: dict[int, KeyState] = field(default_factory=dict)  # chunk hash -> state

    def __post_init__(self) -> None:
        self.scope = KvScope(model=f"crash-w{self.worker}", dtype="uint8", namespace=NS)
        self.prefix = kv_keys.key_prefix(self.scope.model, 1, 0, "uint8", "")
        for c in range(CHAINS):
            for h in self.chain(c):
                self.blocks[h] = KeyState("kv")

    def chain(self, c: int) -> list[int]:
        return [(self.worker + 1) << 32 | (c + 1) << 8 | p for p in range(CHAIN_LEN)]

    def key(self, h: int) -> str:
        return self.prefix + f"{h:016x}"

    def put(self, c: Client, rng: random.Random, large_started: threading.Event) -> int:
        chain = self.chain(rng.randrange(CHAINS))
        start = rng.choice([0, 0, rng.randrange(CHAIN_LEN)])
        hashes = chain[start : start + rng.randint(1, 4)]
        durability, tier = rng.choice(
            [(Durability.CACHE, None)] * 4
            + [(Durability.CACHE, Tier.SSD), (Durability.DURABLE, None)]
        )
        blocks, versions = [], []
        for h in hashes:
            # both sides of the data plane's 64 KiB threshold: streamed and fast path
            n = rng.randint(*rng.choice([(1 * KiB, 60 * KiB), (64 * KiB, 400 * KiB)]))
            data = rng.randbytes(n)
            blocks.append(KvBlock(h, data, dtype="uint8", shape=(n,)))
            versions.append(Version(digest(data), n, durability == Durability.DURABLE))
        for h, v in zip(hashes, versions, strict=True):
            self.blocks[h].pending = v
        c.kv.put_blocks(
            self.scope, blocks, profile=Profile(durability=durability, preferred_tier=tier)
        )
        for h, v in zip(hashes, versions, strict=True):
            self.blocks[h].acked, self.blocks[h].pending = v, None
        return 1

    def clear_pending(self) -> None:
        for state in self.blocks.values():
            state.pending = None

    def _check_chain(self, c: Client, chain: list[int], adopt: bool) -> list[str]:
        where = f"kv {self.scope.model}"
        hit = c.kv.lookup_prefix(self.scope, chain)
        got = c.kv.get_blocks(self.scope, chain)
        out: list[str] = []
        leading = 0
        for block in got:
            if not block.found:
                break
            leading += 1
        if hit.stored_chunks != leading:
            out.append(
                f"{where}: lookup_prefix counts {hit.stored_chunks} leading blocks, "
                f"get_blocks finds {leading}"
            )
        for h, block in zip(chain, got, strict=True):
            state = self.blocks[h]
            digests, absent_ok = state.acceptable()
            if not adopt:  # while serving: no call in flight for this worker's blocks
                absent_ok = state.acked is None or not state.acked.durable
            if not block.found:
                if not absent_ok:
                    out.append(f"{where} {h:x}: {LOST}")
                if adopt:
                    state.adopt(None)
                continue
            got_digest = digest(block.data)
            if got_digest not in digests:
                out.append(f"{where} {h:x}: {block.size_bytes} bytes that {NO_VERSION}")
                continue
            if adopt:
                state.adopt(got_digest, block.size_bytes)
        return out

    def check_serving(self, c: Client, rng: random.Random) -> list[str]:
        return self._check_chain(c, self.chain(rng.randrange(CHAINS)), adopt=False)

    def verify(self, c: Client) -> list[str]:
        out: list[str] = []
        try:
            for ch in range(CHAINS):
                out += self._check_chain(c, self.chain(ch), adopt=True)
            listed = {o.key for o in c.list(namespace=NS, kind=Kind.KV_BLOCK, prefix=self.prefix)}
        except TiermemClientError as exc:
            return [*out, f"kv {self.scope.model}: {_err(exc)}"]
        present = {self.key(h) for h, s in self.blocks.items() if s.acked is not None}
        if listed != present:
            diff = sorted(listed ^ present)[:5]
            out.append(f"kv {self.scope.model}: list disagrees with get: {diff}")
        return out


# -- vectors ---------------------------------------------------------------------------------

DIM, IDS = 8, 40


@dataclass
class VectorModel:
    """One collection (FLAT, L2) whose ids 0..IDS-1 one worker upserts and deletes."""

    worker: int
    created: bool = False
    ids: dict[int, KeyState] = field(default_factory=dict)
    vectors: dict[bytes, np.ndarray] = field(default_factory=dict)  # digest -> vector

    def __post_init__(self) -> None:
        self.name = f"crash-w{self.worker}"
        self.ids = {i: KeyState("vector") for i in range(IDS)}

    def setup(self, c: Client) -> list[str]:
        lost = []
        if self.created:
            try:
                c.vectors.describe(self.name, namespace=NS)
                return []
            except NotFoundError:
                lost = [f"vectors {self.name}: acknowledged collection create lost"]
        c.vectors.create(self.name, DIM, index="FLAT", namespace=NS, if_absent=True)
        self.created = True
        return lost

    def upsert(self, c: Client, rng: random.Random) -> int:
        ids = rng.sample(range(IDS), rng.randint(1, 6))
        vecs = np.asarray([[rng.random() for _ in range(DIM)] for _ in ids], dtype="<f4")
        versions = [Version(digest(v.tobytes()), DIM * 4, True) for v in vecs]
        for i, v, ver in zip(ids, vecs, versions, strict=True):
            self.vectors[ver.digest] = v
            self.ids[i].pending = ver
        payloads = [Payload({"d": ver.digest.hex(), "w": self.worker}) for ver in versions]
        c.vectors.upsert(self.name, ids, vecs, payloads, namespace=NS)
        for i, ver in zip(ids, versions, strict=True):
            self.ids[i].acked, self.ids[i].pending = ver, None
        return 1

    def delete(self, c: Client, rng: random.Random) -> int:
        ids = rng.sample(range(IDS), rng.randint(1, 3))
        for i in ids:
            self.ids[i].pending = DELETE
        c.vectors.delete(self.name, ids, namespace=NS)
        for i in ids:
            self.ids[i].acked, self.ids[i].pending = None, None
        return 1

    def clear_pending(self) -> None:
        for state in self.ids.values():
            state.pending = None

    def _check(self, c: Client, adopt: bool) -> list[str]:
        where = f"vectors {self.name}"
        out: list[str] = []
        count = c.vectors.count(self.name, namespace=NS)
        every = c.vectors.search(
            self.name, np.zeros(DIM, "<f4"), 2 * IDS, include_payloads=True, namespace=NS
        )
        assert every.payloads is not None
        found: dict[int, bytes] = {}
        for vid, payload in zip(every.ids[0], every.payloads[0], strict=True):
            if vid < 0:
                continue
            if vid not in self.ids or payload is None or vid in found:
                out.append(f"{where}: id {vid} ({payload}) was never upserted, or came twice")
                continue
            found[int(vid)] = bytes.fromhex(str(payload.fields.get("d", "")))
        if count != len(every.ids[0][every.ids[0] >= 0]):
            out.append(f"{where}: count {count}, a search of everything finds {len(found)}")
        for vid, state in self.ids.items():
            digests, absent_ok = state.acceptable()
            if not adopt:
                absent_ok = state.acked is None
            if vid not in found:
                if not absent_ok:
                    out.append(f"{where} id {vid}: {LOST}")
                if adopt:
                    state.adopt(None)
            elif found[vid] not in digests:
                out.append(f"{where} id {vid}: stored payload and vector {NO_VERSION}")
                del found[vid]
        # each vector found: its stored vector is the one its payload names
        if found:
            ids = list(found)
            queries = np.stack([self.vectors[found[i]] for i in ids])
            near = c.vectors.search(self.name, queries, 1, namespace=NS)
            for row, vid in enumerate(ids):
                if near.ids[row][0] != vid or near.distances[row][0] > 1e-4:
                    out.append(
                        f"{where} id {vid}: stored vector and payload {NO_VERSION} (the "
                        f"payload's vector is nearest to {near.ids[row][0]} at "
                        f"{near.distances[row][0]:.3g})"
                    )
                elif adopt:
                    self.ids[vid].adopt(found[vid], DIM * 4)
        if adopt:
            live = {s.acked.digest for s in self.ids.values() if s.acked is not None}
            self.vectors = {d: v for d, v in self.vectors.items() if d in live}
        return out

    def check_serving(self, c: Client, rng: random.Random) -> list[str]:
        return self._check(c, adopt=False)

    def verify(self, c: Client) -> list[str]:
        try:
            return self._check(c, adopt=True)
        except TiermemClientError as exc:
            return [f"vectors {self.name}: {_err(exc)}"]


# -- blobs -----------------------------------------------------------------------------------

BLOBS = 8
#: Blobs the test keeps the bytes of (to upload copies: one content, more references).
KEEP_BYTES = 1 * MiB


@dataclass
class BlobModel:
    """Blobs w<worker>-b0..7, put, copied and deleted by one worker."""

    worker: int
    keys: dict[str, KeyState] = field(default_factory=dict)
    contents: dict[bytes, bytes] = field(default_factory=dict)  # digest -> bytes (small ones)

    def __post_init__(self) -> None:
        self.keys = {f"w{self.worker}-b{j}": KeyState("blob") for j in range(BLOBS)}

    def _put(self, c: Client, key: str, data: bytes, *, known: bool = False) -> None:
        version = Version(digest(data), len(data), True)
        state = self.keys[key]
        state.pending = version
        c.blobs.put(
            key, data, namespace=NS, media_type="application/octet-stream",
            skip_text_embedding=True, retries=0,
            sha256=hashlib.sha256(data).digest() if known else None,
        )  # fmt: skip
        state.acked, state.pending = version, None
        if len(data) <= KEEP_BYTES:
            self.contents[version.digest] = data

    def put(
        self, c: Client, rng: random.Random, size: tuple[int, int], large_started: threading.Event
    ) -> int:
        key = rng.choice(list(self.keys))
        n = rng.randint(*size)
        if n >= MiB:
            large_started.set()
        self._put(c, key, rng.randbytes(n))
        return 1

    def copy(self, c: Client, rng: random.Random) -> int:
        """Put another blob's bytes (naming their SHA-256 half the time): one
        content, one reference more."""
        have = [s.acked.digest for s in self.keys.values() if s.acked is not None]
        have = [d for d in have if d in self.contents]
        if not have:
            return 0
        data = self.contents[rng.choice(have)]
        self._put(c, rng.choice(list(self.keys)), data, known=rng.random() < 0.5)
        return 1

    def delete(self, c: Client, rng: random.Random) -> int:
        key = rng.choice(list(self.keys))
        state = self.keys[key]
        state.pending = DELETE
        c.blobs.delete(key, namespace=NS)
        state.acked, state.pending = None, None
        return 1

    def clear_pending(self) -> None:
        for state in self.keys.values():
            state.pending = None

    def _check_key(self, c: Client, key: str, adopt: bool) -> list[str]:
        state = self.keys[key]
        digests, absent_ok = state.acceptable()
        if not adopt:
            absent_ok = state.acked is None
        try:
            data = c.blobs.read(key, namespace=NS)
        except NotFoundError:
            if adopt:
                state.adopt(None)
            return [] if absent_ok else [f"blob {key}: {LOST}"]
        except TiermemClientError as exc:
            if not adopt:
                raise  # while serving: the worker's loop tells a kill from a failure
            return [f"blob {key}: {_err(exc)}"]
        got = digest(data)
        if got not in digests:
            return [f"blob {key}: {len(data)} bytes that {NO_VERSION}"]
        if adopt:
            state.adopt(got, len(data))
        return []

    def check_serving(self, c: Client, rng: random.Random) -> list[str]:
        return self._check_key(c, rng.choice(list(self.keys)), adopt=False)

    def verify(self, c: Client) -> list[str]:
        out: list[str] = []
        for key in self.keys:
            out += self._check_key(c, key, adopt=True)
        live = {s.acked.digest for s in self.keys.values() if s.acked is not None}
        self.contents = {d: b for d, b in self.contents.items() if d in live}
        return out


def verify_blob_listing(c: Client, models: list[BlobModel]) -> list[str]:
    """The listing names exactly the blobs found, and each content's reference
    count is the number of blobs naming it."""
    try:
        listed = list(c.blobs.list(namespace=NS))
    except TiermemClientError as exc:
        return [f"blobs: list: {_err(exc)}"]
    present = {k for m in models for k, s in m.keys.items() if s.acked is not None}
    out = []
    keys = {b.key for b in listed}
    if keys != present:
        out.append(f"blobs: list disagrees with get: {sorted(keys ^ present)[:10]}")
    refs: dict[bytes, int] = {}
    for b in listed:
        refs[b.sha256] = refs.get(b.sha256, 0) + 1
    for b in listed:
        if b.content_refs != refs[b.sha256]:
            out.append(
                f"blob {b.key}: its content counts {b.content_refs} references, "
                f"{refs[b.sha256]} blobs name it"
            )
    return out
