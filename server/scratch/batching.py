"""What a flush writes: duplicates dropped, updates of one key merged.

* Records with a ``key`` update one entry per (session, key): within a batch
  the latest version wins (``merged`` counts the versions folded away); the
  merged record is a key node if any version was. Across batches the stored
  entry is overwritten in place.
* Plain records that repeat an earlier record of the same batch exactly
  (session, kind, payload and tags) are dropped (``deduplicated``); the first
  copy, with the lowest id, is kept. Records are never compared with what
  earlier flushes stored.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tiermem.server.scratch.records import Record


@dataclass(slots=True)
class BatchPlan:
    records: list[Record] = field(default_factory=list)  # kept, in id order
    deduplicated: int = 0
    merged: int = 0


def plan_batch(records: list[Record]) -> BatchPlan:
    plan = BatchPlan()
    latest: dict[tuple[str, str], Record] = {}
    sticky_key_node: set[tuple[str, str]] = set()
    seen: set[tuple[str, int, bytes, tuple[str, ...]]] = set()
    plain: list[Record] = []
    for r in records:
        if r.key:
            k = (r.session, r.key)
            if k in latest:
                plan.merged += 1
            latest[k] = r
            if r.key_node:
                sticky_key_node.add(k)
            continue
        ident = (r.session, r.kind, r.payload, r.tags)
        if ident in seen:
            plan.deduplicated += 1
            continue
        seen.add(ident)
        plain.append(r)
    for k, r in latest.items():
        if k in sticky_key_node:
            r.key_node = True
    plan.records = sorted([*plain, *latest.values()], key=lambda r: r.id)
    return plan
