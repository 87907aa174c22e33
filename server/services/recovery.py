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

import contextlib
import ctypes
import logging
import time
from dataclasses import dataclass

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
)
from tiermem.server.model import Tier
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
    dropped_segments: int = 0
    seconds: float = 0.0


def recover(catalog: Catalog, ssd: SsdEngine) -> RecoveryReport:
    started = time.perf_counter()
    report = RecoveryReport()
    purge: list[bytes] = []
    raws: list[bytes] = []
    for raw in catalog.rocks.values("objects"):
        raws.append(raw)
        if len(raws) >= _BATCH_ROWS:
            _load(catalog, ssd, raws, purge, report)
            raws = []
    if raws:
        _load(catalog, ssd, raws, purge, report)
    if purge:
        batch = catalog.rocks.batch()
        for encoded in purge:
            rec = catalog.record(encoded)
            if rec is not None:
                catalog.stage_removal(batch, encoded, rec.meta.session, rec.meta.expires_unix_ms)
        batch.commit(sync=True)
        report.purged_volatile = len(purge)
    report.dropped_segments = len(ssd.segments.drop_unreferenced())
    _return_free_memory()
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


def _load(
    catalog: Catalog,
    ssd: SsdEngine,
    raws: list[bytes],
    purge: list[bytes],
    report: RecoveryReport,
) -> None:
    h = records.headers(raws)
    on_ssd = (h["flags"] & records.FLAG_ON_SSD) != 0
    if not on_ssd.all():
        for i in np.flatnonzero(~on_ssd).tolist():
            purge.append(records.encoded_key_of(records.decode(raws[i])))
        raws = [raw for raw, keep in zip(raws, on_ssd.tolist(), strict=True) if keep]
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
        live = np.zeros(len(seg_ids), dtype=np.int64)
        np.add.at(live, inverse, _aligned_entry_bytes(key_len[in_segments], size[in_segments]))
        for seg_id, nbytes in zip(seg_ids.tolist(), live.tolist(), strict=True):
            if not ssd.segments.add_live_bytes(seg_id, nbytes):
                # The segment file is gone: the records stay so reads report DATA_LOSS
                # (and fsck lists them) instead of the objects silently vanishing.
                report.missing_segment += int((seg == seg_id).sum())
    index = catalog.index
    kept = raws
    rows = index.insert_many(
        h["key_hi"], h["key_lo"], lambda i: records.encoded_key_of(records.decode(kept[i]))
    )
    c = index.cols
    c["kind"][rows] = h["kind"]
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


def _return_free_memory() -> None:
    """Hand the heap freed by recovery's temporaries back to the OS (glibc only)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _aligned_entry_bytes(key_len: Int64s, size: Int64s) -> Int64s:
    """Vectorised ``segments.entry_bytes``."""
    raw: Int64s = SEGMENT_HEADER.size + key_len + size
    return (raw + ALIGN - 1) // ALIGN * ALIGN
