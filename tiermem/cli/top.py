"""``tiermem top``: a live view of a running daemon, refreshed every interval.

It reads the daemon's Prometheus endpoint (``metrics.listen``), so it needs
nothing but the standard library: tier usage, objects per tier and kind, reads
and hit ratios, requests per RPC with latency percentiles, data-path
throughput, moves and state. Rates are over the last interval; the first frame
shows averages since the daemon started.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable

from tiermem.cli.commands import human_bytes
from tiermem.cli.promtext import Scrape, fetch

MEMORY_TIERS = ("HBM", "DRAM")
TIER_ORDER = {"HBM": 0, "DRAM": 1, "SSD": 2, "REMOTE": 3}
MAX_RPC_ROWS = 12


def _quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """histogram_quantile over cumulative (le, count) pairs; NaN without data."""
    buckets = sorted(buckets)
    if not buckets or buckets[-1][1] <= 0:
        return math.nan
    rank = q * buckets[-1][1]
    prev_le, prev_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if math.isinf(le):
                return prev_le
            if count == prev_count:
                return le
            return prev_le + (le - prev_le) * (rank - prev_count) / (count - prev_count)
        prev_le, prev_count = le, count
    return prev_le


def _ms(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds * 1000:.2f}"


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole > 0 else "-"


def render(address: str, cur: Scrape, prev: Scrape | None, interval_s: float) -> str:
    """One frame. Rates over ``interval_s`` against ``prev``, or since start."""
    started = cur.total("process_start_time_seconds")
    uptime_s = max(time.time() - started, 1e-9) if started else 0.0
    span = interval_s if prev is not None else uptime_s

    def delta(name: str, **match: str) -> float:
        now = cur.total(name, **match)
        return now - prev.total(name, **match) if prev is not None else now

    def rate(name: str, **match: str) -> float:
        return delta(name, **match) / span if span > 0 else 0.0

    def delta_by(name: str, label: str, **match: str) -> dict[str, float]:
        now = cur.by(name, label, **match)
        before = prev.by(name, label, **match) if prev is not None else {}
        return {k: v - before.get(k, 0.0) for k, v in now.items()}

    version = next((lab["version"] for lab, _ in cur.series("tiermem_build_info")), "?")
    ready = "READY" if cur.total("tiermem_ready") == 1 else "NOT READY"
    hours, rest = divmod(int(uptime_s), 3600)
    window = f"rates over {interval_s:.1f} s" if prev is not None else "averages since start"
    lines = [
        f"tiermem {version} @ {address}  {ready}  up {hours}h{rest // 60:02d}m  "
        f"rss {human_bytes(cur.total('process_resident_memory_bytes'))}  "
        f"cost {cur.total('tiermem_cost_usd_per_hour'):.4f} USD/h  [{window}]",
        "",
        f"{'TIER':<6} {'USED':>11} {'CAPACITY':>11} {'USE%':>6} {'HIGH':>5} "
        f"{'COPIES':>9} {'HITS/s':>9} {'HIT%':>6}",
    ]
    capacity = cur.by("tiermem_tier_capacity_bytes", "tier")
    used = cur.by("tiermem_tier_used_bytes", "tier")
    copies = cur.by("tiermem_objects", "tier")
    hits = delta_by("tiermem_hits_total", "tier")
    misses = delta_by("tiermem_misses_total", "tier")
    for tier in sorted(capacity, key=lambda t: TIER_ORDER.get(t, 9)):
        high = next(
            (v for lab, v in cur.series("tiermem_tier_watermark_ratio", tier=tier, level="high")),
            0.0,
        )
        tier_hits = hits.get(tier, 0.0)
        lines.append(
            f"{tier:<6} {human_bytes(used.get(tier, 0)):>11} {human_bytes(capacity[tier]):>11} "
            f"{_pct(used.get(tier, 0), capacity[tier]):>6} {high:>5.2f} "
            f"{int(copies.get(tier, 0)):>9} {tier_hits / span if span else 0:>9.1f} "
            f"{_pct(tier_hits, tier_hits + misses.get(tier, 0.0)):>6}"
        )

    lines += [
        "",
        f"{'TIER':<6} {'KIND':<9} {'COPIES':>9} {'BYTES':>11} {'READS/s':>9} {'MEM-HIT%':>9}",
    ]
    rows: dict[tuple[str, str], list[float]] = {}
    for lab, value in cur.series("tiermem_objects"):
        rows.setdefault((lab["tier"], lab["kind"]), [0.0, 0.0])[0] += value
    for lab, value in cur.series("tiermem_object_bytes"):
        rows.setdefault((lab["tier"], lab["kind"]), [0.0, 0.0])[1] += value
    kind_hits = delta_by("tiermem_hits_total", "kind")
    mem_hits = {
        kind: sum(
            delta_by("tiermem_hits_total", "kind", tier=t).get(kind, 0.0) for t in MEMORY_TIERS
        )
        for kind in kind_hits
    }
    for (tier, kind), (count, nbytes) in sorted(
        rows.items(), key=lambda kv: (TIER_ORDER.get(kv[0][0], 9), kv[0][1])
    ):
        if count == 0:
            continue
        reads = kind_hits.get(kind, 0.0)
        lines.append(
            f"{tier:<6} {kind:<9} {int(count):>9} {human_bytes(nbytes):>11} "
            f"{reads / span if span else 0:>9.1f} {_pct(mem_hits.get(kind, 0.0), reads):>9}"
        )

    lines += ["", f"{'RPC':<32} {'REQ/s':>8} {'ERR/s':>8} {'P50 ms':>8} {'P99 ms':>8}"]
    calls = delta_by("tiermem_requests_total", "method")
    errors: dict[str, float] = {}
    for lab, _ in cur.series("tiermem_requests_total"):
        if lab["code"] != "OK":
            errors[lab["method"]] = errors.get(lab["method"], 0.0) + delta(
                "tiermem_requests_total", method=lab["method"], code=lab["code"]
            )
    for method, n in sorted(calls.items(), key=lambda kv: -kv[1])[:MAX_RPC_ROWS]:
        buckets = _buckets(cur, prev, method)
        lines.append(
            f"{method:<32} {n / span if span else 0:>8.1f} "
            f"{errors.get(method, 0.0) / span if span else 0:>8.1f} "
            f"{_ms(_quantile(0.5, buckets)):>8} {_ms(_quantile(0.99, buckets)):>8}"
        )

    lines += ["", f"{'DATA PATH':<10} {'IN/s':>11} {'OUT/s':>11}"]
    paths = sorted({lab["path"] for lab, _ in cur.series("tiermem_data_bytes_total")})
    for path in paths:
        bytes_in = rate("tiermem_data_bytes_total", path=path, direction="in")
        bytes_out = rate("tiermem_data_bytes_total", path=path, direction="out")
        lines.append(f"{path:<10} {human_bytes(bytes_in):>11} {human_bytes(bytes_out):>11}")
    lines += [
        "",
        f"moves      migrations {rate('tiermem_migrations_total'):.1f}/s "
        f"({human_bytes(rate('tiermem_migrated_bytes_total'))}/s)  "
        f"evictions {rate('tiermem_evictions_total'):.1f}/s  "
        f"expirations {rate('tiermem_expirations_total'):.1f}/s  "
        f"compactions {int(cur.total('tiermem_segment_compactions_total'))}",
        f"state      leases {int(cur.total('tiermem_leases_active'))}  "
        f"sessions {int(cur.total('tiermem_sessions_open'))}  "
        f"write-back {int(cur.total('tiermem_writeback_buffer_records'))} records / "
        f"{human_bytes(cur.total('tiermem_writeback_buffer_bytes'))}  "
        f"checksum failures {int(cur.total('tiermem_checksum_failures_total'))}",
    ]
    return "\n".join(lines)


def _buckets(cur: Scrape, prev: Scrape | None, method: str) -> list[tuple[float, float]]:
    name = "tiermem_request_duration_seconds_bucket"

    def by_le(scrape: Scrape) -> dict[float, float]:
        out: dict[float, float] = {}
        for lab, value in scrape.series(name, method=method):
            le = float(lab["le"])
            out[le] = out.get(le, 0.0) + value
        return out

    now = by_le(cur)
    before = by_le(prev) if prev is not None else {}
    return [(le, count - before.get(le, 0.0)) for le, count in now.items()]


def run_top(
    args: argparse.Namespace,
    scrape: Callable[[str], Scrape] = fetch,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    iterations = 1 if args.once else args.iterations
    clear = sys.stdout.isatty() and iterations != 1
    prev: Scrape | None = None
    prev_at = 0.0
    n = 0
    try:
        while True:
            try:
                cur = scrape(args.metrics_addr)
                now = time.monotonic()
            except OSError as exc:
                print(f"tiermem top: cannot read http://{args.metrics_addr}/metrics: {exc}",
                      file=sys.stderr)  # fmt: skip
                return 1
            frame = render(args.metrics_addr, cur, prev, now - prev_at)
            if clear:
                sys.stdout.write("\x1b[H\x1b[2J")
            elif n:
                sys.stdout.write("\n")
            sys.stdout.write(frame + "\n")
            sys.stdout.flush()
            n += 1
            if iterations and n >= iterations:
                return 0
            prev, prev_at = cur, now
            sleep(args.interval)
    except KeyboardInterrupt:
        return 0
