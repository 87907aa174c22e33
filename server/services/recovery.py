"""Start-up recovery: rebuild the in-memory index from the catalog records.

Records without an SSD copy described objects that lived only in HBM/DRAM; their
bytes died with the previous process, so the records are purged (CACHE objects
may be lost on restart; DURABLE objects always have an SSD copy). Segment live
counts and inline byte totals are rebuilt from the surviving records, and
segments nothing references any more (left by a crash mid-write or mid-
compaction) are deleted.

Only the fixed-width record headers are decoded, in batches, as numpy arrays
(``catalog.records``): the per-record Python work is one iteration step and one
dict insert, so a million objects load in seconds.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from tiermem.server.catalog import records
from tiermem.server.catalog.catalog import Catalog
from tiermem.server.catalog.index import (
    FLAG_DURABLE,
    FLAG_LIVE,
    FLAG_PINNED,
    HINT_MASK,
    HINT_SHIFT,
    SEG_INLINE,
    key_hash,
)
from tiermem.server.heap import return_free_heap
from tiermem.server.model import Kind, ObjectKey, Tier
from tiermem.server.services.damage import DamageLog
from tiermem.server.storage.rocks import ScanGap
from tiermem.server.tiers.segments import ALIGN
from tiermem.server.tiers.segments import HEADER as SEGMENT_HEADER
from tiermem.server.tiers.ssd import SsdEngine

log = logging.getLogger(__name__)

Int64s = npt.NDArray[np.int64]

#: Small batches keep the temporary key/record lists small; their memory is
#: reused batch after batch instead of inflating the daemon's footprint.
_BATCH_ROWS = 20_000


@dataclass(slots=True)
class RecoveryReport:
    objects: int = 0
    purged_volatile: int = 0
    missing_segment: int = 0
    truncated_segment: int = 0
    dropped_segments: int = 0
    catalog_gaps: list[ScanGap] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def damaged(self) -> int:
        return self.missing_segment + self.truncated_segment


def recover(catalog: Catalog, ssd: SsdEngine, damage: DamageLog | None = None) -> RecoveryReport:
    """Rebuild the index. Records naming a missing segment file, or a range past
    the end of a truncated one, stay (reads answer DATA_LOSS) and go into
    ``damage``. If part of the catalog is unreadable, the readable rest is loaded
    and no segment file is deleted (fsck can still find the values in them)."""
    started = time.perf_counter()
    report = RecoveryReport()
    purge: list[bytes] = []
    keys: list[bytes] = []
    raws: list[bytes] = []
    for encoded, raw in catalog.rocks.scan_salvage("objects", report.catalog_gaps):
        if len(raw) < records.HEADER.size or raw[0] not in records.READABLE_VERSIONS:
            if damage is not None:
                damage.add(encoded, "catalog", "catalog record has an unknown format")
            continue
        keys.append(encoded)
        raws.append(raw)
        if len(keys) >= _BATCH_ROWS:
            _load(catalog, ssd, keys, raws, purge, report, damage)
            keys, raws = [], []
    if keys:
        _load(catalog, ssd, keys, raws, purge, report, damage)
    for gap in report.catalog_gaps:
        log.error(
            "catalog damaged: records after %r and before %r are unreadable (%s); "
            "segment files are kept for salvage",
            gap.after,
            gap.before,
            gap.error,
        )
    if purge:
        batch = catalog.rocks.batch()
        for encoded in purge:
            rec = catalog.record(encoded)
            if rec is not None:
                catalog.stage_removal(batch, encoded, rec.meta.session, rec.meta.expires_unix_ms)
        batch.commit(sync=True)
        report.purged_volatile = len(purge)
    if not report.catalog_gaps:
        report.dropped_segments = len(ssd.segments.drop_unreferenced())
    return_free_heap()
    report.seconds = time.perf_counter() - started
    log.info(
        "recovered %d objects in %.2fs (purged %d volatile records, dropped %d segments, "
        "%d records name a missing segment, %d a truncated one)",
        report.objects,
        report.seconds,
        report.purged_volatile,
        report.dropped_segments,
        report.missing_segment,
        report.truncated_segment,
    )
    return report


def _load(
    catalog: Catalog,
    ssd: SsdEngine,
    keys: list[bytes],
    raws: list[bytes],
    purge: list[bytes],
    report: RecoveryReport,
    damage: DamageLog | None,
) -> None:
    h = records.headers(raws)
    on_ssd = (h["flags"] & records.FLAG_ON_SSD) != 0
    if not on_ssd.all():
        keep = on_ssd.tolist()
        purge.extend(k for k, kept in zip(keys, keep, strict=True) if not kept)
        keys = [k for k, kept in zip(keys, keep, strict=True) if kept]
        raws = [raw for raw, kept in zip(raws, keep, strict=True) if kept]
        h = h[on_ssd]
    if not raws:
        return
    seg = h["seg"].astype(np.int64)
    size = h["size"].astype(np.int64)
    inline = seg == SEG_INLINE
    ssd.count_inline(int(size[inline].sum()))
    in_segments = ~inline
    if in_segments.any():
        key_len = h["key_len"].astype(np.int64)
        seg_ids, inverse = np.unique(seg[in_segments], return_inverse=True)
        # a missing file's id is never given to a new segment: its records would
        # then name someone else's bytes (a checksum error instead of "missing",
        # and their deletes would discount the new file's live bytes)
        ssd.segments.reserve_ids_through(int(seg_ids[-1]))
        live = np.zeros(len(seg_ids), dtype=np.int64)
        np.add.at(live, inverse, _aligned_entry_bytes(key_len[in_segments], size[in_segments]))
        file_bytes = np.zeros(len(seg_ids), dtype=np.int64)
        for i, (seg_id, nbytes) in enumerate(zip(seg_ids.tolist(), live.tolist(), strict=True)):
            found = ssd.segments.file_bytes(seg_id)
            file_bytes[i] = -1 if found is None else found
            ssd.segments.add_live_bytes(seg_id, nbytes)
        # A missing file, or a value ending past a truncated file's end: the records
        # stay so reads report DATA_LOSS (and fsck lists them) instead of the
        # objects silently vanishing.
        seg_rows = np.flatnonzero(in_segments)
        length = file_bytes[inverse]
        missing = length < 0
        truncated = ~missing & (h["seg_off"][seg_rows].astype(np.int64) + size[seg_rows] > length)
        report.missing_segment += int(missing.sum())
        report.truncated_segment += int(truncated.sum())
        if damage is not None:
            for i in np.flatnonzero(missing | truncated).tolist():
                row = int(seg_rows[i])
                what = "is missing" if missing[i] else f"is {int(length[i])} bytes, too short"
                damage.add(
                    keys[row],
                    "segment",
                    f"{ObjectKey.decode(keys[row])}: segment file {int(seg[row])} {what}",
                )
    index = catalog.index
    key_hi, key_lo = _key_hashes(h, keys)
    rows = index.insert_many(key_hi, key_lo, keys.__getitem__)
    c = index.cols
    c["kind"][rows] = h["kind"]
    np.add.at(catalog.ns_usage[:, 0], h["ns"].astype(np.int64), 1)
    np.add.at(catalog.ns_usage[:, 1], h["ns"].astype(np.int64), size)
    c["ns"][rows] = h["ns"]
    c["size"][rows] = size
    c["seg"][rows] = seg
    c["seg_off"][rows] = h["seg_off"]
    c["checksum"][rows] = h["checksum"]
    hints = h["hint"].astype(np.uint8)
    c["flags"][rows] = (
        FLAG_LIVE
        | (h["flags"] & (FLAG_DURABLE | FLAG_PINNED))
        | ((hints << HINT_SHIFT) & HINT_MASK)
    )
    # what reads taught died with the previous process: start from the hint priors
    c["rate"][rows] = catalog.access.priors(h["kind"], hints)
    owned = np.flatnonzero(h["flags"] & records.FLAG_HAS_SESSION)
    if len(owned):  # only records owned by a session pay for parsing the metadata
        sess = c["sess"]
        for i in owned.tolist():
            sess[rows[i]] = catalog.sessions.acquire(records.decode(raws[i]).meta.session)
    c["expires"][rows] = h["expires"]
    c["tier"][rows] = int(Tier.SSD)
    c["loc"][rows] = -1
    c["atime"][rows] = time.time()
    report.objects += len(raws)


def _aligned_entry_bytes(key_len: Int64s, size: Int64s) -> Int64s:
    """Vectorised ``segments.entry_bytes``."""
    raw: Int64s = SEGMENT_HEADER.size + key_len + size
    return (raw + ALIGN - 1) // ALIGN * ALIGN


def _key_hashes(
    h: npt.NDArray[Any], keys: list[bytes]
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64]]:
    """The records' key hashes. Version-1 records hold the xxh3 hash of every
    key; KV block keys are now hashed by ``index.kv_chain_halves``
    (``records.VERSION``), so theirs are recomputed (only those rows pay a
    Python call)."""
    hi = h["key_hi"].astype(np.uint64)
    lo = h["key_lo"].astype(np.uint64)
    for i in np.flatnonzero((h["version"] == 1) & (h["kind"] == int(Kind.KV_BLOCK))).tolist():
        hi[i], lo[i] = key_hash(keys[i])
    return hi, lo
