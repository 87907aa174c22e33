"""Start-up recovery: rebuild the in-memory index from the catalog records.

Records without an SSD copy described objects that lived only in HBM/DRAM; their
bytes died with the previous process, so the records are purged (CACHE objects
may be lost on restart; DURABLE objects always have an SSD copy). Segment live
counts and inline byte totals are rebuilt from the surviving records, and
segments nothing references any more (left by a crash mid-write or mid-
compaction) are deleted.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np

from tiermem.server.catalog.catalog import Catalog
from tiermem.server.catalog.index import (
    FLAG_DURABLE,
    FLAG_LIVE,
    FLAG_PINNED,
    HINT_MASK,
    HINT_SHIFT,
    SEG_INLINE,
)
from tiermem.server.model import Durability, Tier
from tiermem.server.tiers.ssd import SsdEngine
from tiermem.storage.v1 import records_pb2

log = logging.getLogger(__name__)

_BATCH_ROWS = 100_000


@dataclass(slots=True)
class RecoveryReport:
    objects: int = 0
    purged_volatile: int = 0
    missing_segment: int = 0
    dropped_segments: int = 0
    seconds: float = 0.0


def recover(catalog: Catalog, ssd: SsdEngine) -> RecoveryReport:
    started = time.perf_counter()
    report = RecoveryReport()
    rec = records_pb2.ObjectRecord()
    purge: list[bytes] = []
    keys: list[bytes] = []
    cols: dict[str, list[int]] = {
        name: []
        for name in (
            "kind",
            "ns",
            "size",
            "seg",
            "seg_off",
            "checksum",
            "flags",
            "expires",
            "sess",
        )
    }
    namespaces = catalog.namespaces
    segments = ssd.segments
    for encoded, raw in catalog.rocks.scan("objects"):
        rec.ParseFromString(raw)
        if not rec.HasField("ssd"):
            purge.append(encoded)
            continue
        m = rec.meta
        seg = int(rec.ssd.segment)
        if seg == SEG_INLINE:
            ssd.count_inline(int(m.size_bytes))
        elif not segments.add_live(seg, len(encoded), int(m.size_bytes)):
            # The segment file is gone: the record stays so reads report DATA_LOSS
            # and `tiermem fsck` lists it, instead of the object silently vanishing.
            report.missing_segment += 1
        flags = FLAG_LIVE
        if int(m.profile.durability) == int(Durability.DURABLE):
            flags |= FLAG_DURABLE
        if m.profile.pin:
            flags |= FLAG_PINNED
        flags |= (int(m.profile.hint) << HINT_SHIFT) & HINT_MASK
        keys.append(encoded)
        c = cols
        c["kind"].append(m.key.kind)
        c["ns"].append(namespaces.get(m.key.namespace, 0))
        c["size"].append(m.size_bytes)
        c["seg"].append(seg)
        c["seg_off"].append(rec.ssd.offset)
        c["checksum"].append(m.checksum.value)
        c["flags"].append(flags)
        c["expires"].append(m.expires_unix_ms)
        c["sess"].append(catalog.sessions.acquire(m.session))
        if len(keys) >= _BATCH_ROWS:
            _load(catalog, keys, cols)
            report.objects += len(keys)
            keys.clear()
            for values in cols.values():
                values.clear()
    if keys:
        _load(catalog, keys, cols)
        report.objects += len(keys)
    if purge:
        batch = catalog.rocks.batch()
        for encoded in purge:
            rec.ParseFromString(catalog.rocks.get("objects", encoded) or b"")
            catalog.stage_removal(batch, encoded, rec.meta.session, rec.meta.expires_unix_ms)
        batch.commit(sync=True)
        report.purged_volatile = len(purge)
    report.dropped_segments = len(segments.drop_unreferenced())
    report.seconds = time.perf_counter() - started
    log.info(
        "recovered %d objects in %.2fs (purged %d volatile records, dropped %d segments, "
        "%d records name a missing segment)",
        report.objects,
        report.seconds,
        report.purged_volatile,
        report.dropped_segments,
        report.missing_segment,
    )
    return report


def _load(catalog: Catalog, keys: list[bytes], cols: dict[str, list[int]]) -> None:
    index = catalog.index
    rows = index.insert_many(keys)
    c = index.cols
    for name, values in cols.items():
        c[name][rows] = np.asarray(values, dtype=c[name].dtype)
    c["tier"][rows] = int(Tier.SSD)
    c["loc"][rows] = -1
    c["atime"][rows] = time.time()
    # what reads taught died with the previous process: start from the hint priors
    hints = (c["flags"][rows] & HINT_MASK) >> HINT_SHIFT
    c["rate"][rows] = catalog.access.priors(c["kind"][rows], hints)
