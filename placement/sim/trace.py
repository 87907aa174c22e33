"""Workload traces: objects of the four kinds and the timed operations on them.

A trace is policy-independent: it says which object is written, read, deleted
or announced (prefetch) when. The generator models the data profiles of
DESIGN.md §1:

* **KV blocks** — one-shot requests whose prompts share a prefix drawn from a
  Zipf popularity over ``kv_prefixes`` prefixes (reuse) and append blocks
  nobody reads again; multi-turn sessions that reread their own history after
  an exponential think time (a scheduler announces a share of the resumptions
  with a prefetch ``kv_prefetch_lead_s`` ahead); optionally an inference spike
  that multiplies request and session arrivals for a while. CACHE, hint HOT,
  except where the client knows better (``kv_client_hints``, below).
* **vector shards** — collections loaded at the start, queried at
  ``vec_query_rate_per_s`` with a Zipf popularity whose ranking is reshuffled
  every ``vec_phase_s`` (query bursts move between collections). DURABLE, WARM.
* **blobs** — a long tail of large objects (log-normal sizes) read rarely with
  Zipf popularity, plus new uploads of which some are read soon after. DURABLE,
  COLD.
* **scratch** — agents that append small records at a steady rate and replay
  their whole log in bursts; a share of the agents delete their log at the end.
  DURABLE, WARM.

Operations: PUT (write or overwrite), GET, DELETE, PREFETCH (``arg`` = the
deadline, s). Times are seconds from the trace start.

**Client hints of one-shot chunks** (``kv_client_hints``, a modelling choice
that applies to every policy alike): the operations of a one-shot request (no
session) carry its request id (``Trace.req``). A KV client knows, when it
stores a request's new chunks, whether its prefix lookup found any chunk of the
prompt (LookupPrefix) and whether the request belongs to a multi-turn session;
it marks the chunks a one-shot request stores *after a prefix hit* COLD: they
are the request's own tail, unlikely to be reused. With no hit at all it cannot
tell the shared part of the prompt from the unique tail and sets no hint, and
session chunks are never marked (later turns reread them). The hint is decided
during replay from what the client saw (``Engine.put_hint``): if a prefix
block was dropped, the request recomputes and stores it after the hit point, so
it is marked COLD too, exactly as a real client would mark it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from tiermem.placement.model import BLOB, COLD, HOT, KV_BLOCK, SCRATCH, VECTOR, WARM

PUT, GET, DELETE, PREFETCH = 1, 2, 3, 4
MiB = 1 << 20
KiB = 1 << 10


@dataclass(frozen=True, slots=True)
class MixParams:
    """Every knob of one workload mix (recorded with results)."""

    name: str
    duration_s: float = 600.0
    seed: int = 7
    # KV blocks
    kv_block_bytes: int = 4 * MiB
    kv_request_rate_per_s: float = 8.0
    kv_prefixes: int = 400
    kv_zipf: float = 1.1
    kv_prefix_blocks: tuple[int, int] = (2, 8)
    kv_suffix_blocks: tuple[int, int] = (1, 2)
    kv_session_rate_per_s: float = 0.5
    kv_turns: tuple[int, int] = (2, 8)
    kv_think_s: float = 20.0
    kv_turn_blocks: tuple[int, int] = (1, 3)
    kv_prefetch_fraction: float = 0.5
    kv_prefetch_lead_s: float = 2.0
    kv_session_delete_fraction: float = 0.5
    kv_client_hints: bool = True
    """The KV client marks the chunks a one-shot request stores after a prefix
    hit COLD (see the module doc); False: every KV block is put HOT."""
    spike: tuple[float, float, float] | None = None
    """(start s, end s, arrival multiplier) of an inference spike."""
    # vectors
    vec_shards: int = 48
    vec_shard_median_bytes: int = 32 * MiB
    vec_shard_sigma: float = 0.5
    vec_query_rate_per_s: float = 80.0
    vec_zipf: float = 1.0
    vec_phase_s: float = 60.0
    # blobs
    blob_count: int = 1500
    blob_median_bytes: int = 8 * MiB
    blob_sigma: float = 1.2
    blob_max_bytes: int = 512 * MiB
    blob_read_rate_per_s: float = 3.0
    blob_zipf: float = 0.8
    blob_upload_rate_per_s: float = 0.5
    blob_upload_reread_fraction: float = 0.3
    # scratch
    scratch_agent_rate_per_s: float = 0.2
    scratch_agent_life_s: float = 120.0
    scratch_append_rate_per_s: float = 2.0
    scratch_record_median_bytes: int = 2 * KiB
    scratch_replay_interval_s: float = 30.0
    scratch_delete_fraction: float = 0.5

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(slots=True)
class Trace:
    """Objects (one entry per object id) and operations sorted by time."""

    params: MixParams
    size: npt.NDArray[np.int64]
    kind: npt.NDArray[np.uint8]
    hint: npt.NDArray[np.uint8]
    durable: npt.NDArray[np.bool_]
    session: npt.NDArray[np.int32]
    t: npt.NDArray[np.float64]
    op: npt.NDArray[np.uint8]
    obj: npt.NDArray[np.int32]
    arg: npt.NDArray[np.float64]
    summary: dict[str, Any] = field(default_factory=dict)
    req: npt.NDArray[np.int32] | None = None
    """Per operation: the one-shot request it belongs to (0 = none)."""
    req_hinting: npt.NDArray[np.bool_] | None = None
    """Per request id: its client marks chunks stored after a prefix hit COLD."""

    @property
    def objects(self) -> int:
        return len(self.size)

    def __len__(self) -> int:
        return len(self.t)


class _Builder:
    def __init__(self) -> None:
        self.size: list[int] = []
        self.kind: list[int] = []
        self.hint: list[int] = []
        self.durable: list[bool] = []
        self.session: list[int] = []
        self.ev: list[tuple[float, int, int, float, int]] = []
        self.requests = 0

    def new(self, size: int, kind: int, hint: int, durable: bool, session: int = 0) -> int:
        self.size.append(max(1, int(size)))
        self.kind.append(kind)
        self.hint.append(hint)
        self.durable.append(durable)
        self.session.append(session)
        return len(self.size) - 1

    def add(self, t: float, op: int, obj: int, arg: float = 0.0, req: int = 0) -> None:
        self.ev.append((t, op, obj, arg, req))

    def request(self) -> int:
        self.requests += 1
        return self.requests


def _zipf_weights(n: int, s: float) -> npt.NDArray[np.float64]:
    w = 1.0 / np.arange(1, n + 1) ** s
    return np.asarray(w / w.sum(), dtype=np.float64)


def _arrivals(rng: np.random.Generator, rate: float, p: MixParams) -> npt.NDArray[np.float64]:
    """Poisson arrival times over the trace, with the spike's multiplier applied."""
    if rate <= 0:
        return np.empty(0)
    times = np.cumsum(rng.exponential(1.0 / rate, int(rate * p.duration_s * 1.3) + 16))
    times = times[times < p.duration_s]
    if p.spike is not None:
        start, end, mult = p.spike
        extra = np.cumsum(
            rng.exponential(
                1.0 / (rate * (mult - 1)), int(rate * (mult - 1) * (end - start) * 1.3) + 16
            )
        )
        extra = start + extra[extra < end - start]
        times = np.sort(np.concatenate([times, extra]))
    return times


def generate(p: MixParams) -> Trace:
    rng = np.random.default_rng(p.seed)
    b = _Builder()
    _kv(rng, p, b)
    _vectors(rng, p, b)
    _blobs(rng, p, b)
    _scratch(rng, p, b)
    ev = sorted(b.ev, key=lambda e: e[0])
    trace = Trace(
        params=p,
        size=np.asarray(b.size, dtype=np.int64),
        kind=np.asarray(b.kind, dtype=np.uint8),
        hint=np.asarray(b.hint, dtype=np.uint8),
        durable=np.asarray(b.durable, dtype=bool),
        session=np.asarray(b.session, dtype=np.int32),
        t=np.asarray([e[0] for e in ev], dtype=np.float64),
        op=np.asarray([e[1] for e in ev], dtype=np.uint8),
        obj=np.asarray([e[2] for e in ev], dtype=np.int32),
        arg=np.asarray([e[3] for e in ev], dtype=np.float64),
        req=np.asarray([e[4] for e in ev], dtype=np.int32),
        req_hinting=np.full(b.requests + 1, p.kv_client_hints, dtype=bool),
    )
    trace.summary = summarize(trace)
    return trace


def summarize(trace: Trace) -> dict[str, Any]:
    out: dict[str, Any] = {"objects": trace.objects, "operations": len(trace)}
    names = {KV_BLOCK: "kv", VECTOR: "vector", BLOB: "blob", SCRATCH: "scratch"}
    gets = trace.op == GET
    puts = trace.op == PUT
    for k, name in names.items():
        mine = trace.kind == k
        ev_kind = mine[trace.obj]
        out[name] = {
            "objects": int(mine.sum()),
            "bytes": int(trace.size[mine].sum()),
            "gets": int((gets & ev_kind).sum()),
            "puts": int((puts & ev_kind).sum()),
            "get_bytes": int(trace.size[trace.obj[gets & ev_kind]].sum()),
        }
    return out


def _kv(rng: np.random.Generator, p: MixParams, b: _Builder) -> None:
    blk = p.kv_block_bytes
    weights = _zipf_weights(p.kv_prefixes, p.kv_zipf)
    rank_to_prefix = rng.permutation(p.kv_prefixes)
    prefixes: dict[int, list[int]] = {}

    def read_prefix(t: float, pid: int, req: int = 0) -> None:
        blocks = prefixes.get(pid)
        if blocks is None:
            n = int(rng.integers(p.kv_prefix_blocks[0], p.kv_prefix_blocks[1] + 1))
            blocks = [b.new(blk, KV_BLOCK, HOT, False) for _ in range(n)]
            prefixes[pid] = blocks
            for i, o in enumerate(blocks):
                b.add(t + i * 1e-4, PUT, o, req=req)
        else:
            for i, o in enumerate(blocks):
                b.add(t + i * 1e-4, GET, o, req=req)

    draws = iter(rank_to_prefix[rng.choice(p.kv_prefixes, size=200_000, p=weights)].tolist())

    def pick_prefix() -> int:
        return int(next(draws))

    for t in _arrivals(rng, p.kv_request_rate_per_s, p):
        req = b.request()
        read_prefix(float(t), pick_prefix(), req)
        n = int(rng.integers(p.kv_suffix_blocks[0], p.kv_suffix_blocks[1] + 1))
        for i in range(n):
            b.add(float(t) + 0.01 + i * 1e-4, PUT, b.new(blk, KV_BLOCK, HOT, False), req=req)

    for sid, t0 in enumerate(_arrivals(rng, p.kv_session_rate_per_s, p), start=1):
        pid = pick_prefix()
        turns = int(rng.integers(p.kv_turns[0], p.kv_turns[1] + 1))
        history: list[int] = []
        t = float(t0)
        for turn in range(turns):
            if t >= p.duration_s:
                break
            read_prefix(t, pid)
            for i, o in enumerate(history):
                b.add(t + 0.005 + i * 1e-4, GET, o)
            n = int(rng.integers(p.kv_turn_blocks[0], p.kv_turn_blocks[1] + 1))
            for i in range(n):
                o = b.new(blk, KV_BLOCK, HOT, False, session=sid)
                history.append(o)
                b.add(t + 0.02 + i * 1e-4, PUT, o)
            think = float(rng.exponential(p.kv_think_s))
            nxt = t + 0.05 + think
            if turn + 1 < turns and rng.random() < p.kv_prefetch_fraction:
                at = max(t + 0.05, nxt - p.kv_prefetch_lead_s)
                for o in history:
                    b.add(at, PREFETCH, o, nxt)
            t = nxt
        if rng.random() < p.kv_session_delete_fraction and t < p.duration_s:
            for o in history:
                b.add(t, DELETE, o)


def _vectors(rng: np.random.Generator, p: MixParams, b: _Builder) -> None:
    if p.vec_shards == 0:
        return
    sizes = rng.lognormal(np.log(p.vec_shard_median_bytes), p.vec_shard_sigma, p.vec_shards)
    shards = [b.new(int(s), VECTOR, WARM, True) for s in sizes]
    for i, o in enumerate(shards):
        b.add(i * 1e-3, PUT, o)
    weights = _zipf_weights(p.vec_shards, p.vec_zipf)
    times = _arrivals(rng, p.vec_query_rate_per_s, dataclasses.replace(p, spike=None))
    times = times[times > 0.1]
    phases = (times // p.vec_phase_s).astype(np.int64)
    rankings = np.stack(
        [rng.permutation(p.vec_shards) for _ in range(int(phases.max(initial=0)) + 1)]
    )
    picks = rankings[phases, rng.choice(p.vec_shards, size=len(times), p=weights)]
    for t, s in zip(times, picks, strict=True):
        b.add(float(t), GET, shards[int(s)])


def _blobs(rng: np.random.Generator, p: MixParams, b: _Builder) -> None:
    if p.blob_count == 0:
        return

    def blob_size() -> int:
        s = rng.lognormal(np.log(p.blob_median_bytes), p.blob_sigma)
        return int(min(max(s, 64 * KiB), p.blob_max_bytes))

    blobs = [b.new(blob_size(), BLOB, COLD, True) for _ in range(p.blob_count)]
    for i, o in enumerate(blobs):
        b.add(0.05 + i * 1e-5, PUT, o)
    weights = _zipf_weights(p.blob_count, p.blob_zipf)
    order = rng.permutation(p.blob_count)
    times = _arrivals(rng, p.blob_read_rate_per_s, dataclasses.replace(p, spike=None))
    times = times[times > 0.2]
    for t, r in zip(times, rng.choice(p.blob_count, size=len(times), p=weights), strict=True):
        b.add(float(t), GET, blobs[int(order[r])])
    uploads = _arrivals(rng, p.blob_upload_rate_per_s, dataclasses.replace(p, spike=None))
    for t in uploads:
        o = b.new(blob_size(), BLOB, COLD, True)
        b.add(float(t), PUT, o)
        if rng.random() < p.blob_upload_reread_fraction:
            for _ in range(int(rng.integers(1, 4))):
                b.add(float(t) + float(rng.exponential(10.0)), GET, o)


def _scratch(rng: np.random.Generator, p: MixParams, b: _Builder) -> None:
    agents = _arrivals(rng, p.scratch_agent_rate_per_s, dataclasses.replace(p, spike=None))
    for t0 in agents:
        life = float(rng.exponential(p.scratch_agent_life_s))
        end = min(float(t0) + life, p.duration_s)
        records: list[int] = []
        t = float(t0)
        next_replay = t + float(rng.exponential(p.scratch_replay_interval_s))
        while True:
            t += float(rng.exponential(1.0 / p.scratch_append_rate_per_s))
            while next_replay < min(t, end):
                for i, o in enumerate(records):
                    b.add(next_replay + i * 1e-4, GET, o)
                next_replay += float(rng.exponential(p.scratch_replay_interval_s))
            if t >= end:
                break
            size = rng.lognormal(np.log(p.scratch_record_median_bytes), 1.0)
            o = b.new(int(min(max(size, 100), 100 * KiB)), SCRATCH, WARM, True)
            records.append(o)
            b.add(t, PUT, o)
        if end < p.duration_s and rng.random() < p.scratch_delete_fraction:
            for o in records:
                b.add(end + 1e-3, DELETE, o)


#: The standard mixes of bench/placement_sim.py.
MIXES: dict[str, MixParams] = {
    "balanced": MixParams(name="balanced"),
    "kv_heavy_spike": MixParams(
        name="kv_heavy_spike",
        kv_request_rate_per_s=16.0,
        kv_session_rate_per_s=1.0,
        spike=(240.0, 360.0, 4.0),
        vec_shards=32,
        vec_query_rate_per_s=60.0,
        blob_count=600,
        blob_read_rate_per_s=1.5,
        scratch_agent_rate_per_s=0.15,
    ),
    "longtail_blobs_vectors": MixParams(
        name="longtail_blobs_vectors",
        kv_request_rate_per_s=3.0,
        kv_session_rate_per_s=0.2,
        vec_shards=160,
        vec_shard_median_bytes=24 * MiB,
        vec_query_rate_per_s=150.0,
        vec_zipf=0.9,
        blob_count=4000,
        blob_read_rate_per_s=8.0,
        blob_zipf=0.9,
        blob_upload_rate_per_s=1.0,
    ),
}

__all__ = ["DELETE", "GET", "MIXES", "PREFETCH", "PUT", "MixParams", "Trace", "generate"]
