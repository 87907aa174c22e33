"""Writes deploy/grafana/dashboards/tiermem.json, the Grafana dashboard of
tiermem's metrics (server/metrics.py).

    python deploy/grafana/build_dashboard.py

The JSON is generated so every panel has the same shape and the queries live
in one readable list; a test fails when the checked-in file differs from this
script's output, and another runs every query against a real Prometheus.
"""

# PromQL reads best unbroken, so long query lines are allowed here.
# ruff: noqa: E501

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "dashboards" / "tiermem.json"
DATASOURCE = {"type": "prometheus", "uid": "tiermem-prometheus"}
RATE = "$__rate_interval"
I = 'instance=~"$instance"'  # noqa: E741 - the selector every query carries
NS = f'{I}, namespace=~"$namespace"'
MEMORY = 'tier=~"HBM|DRAM"'

# (title, unit, [(expr, legend)], kind, width); kind: timeseries | stacked | stat
Panel = tuple[str, str, list[tuple[str, str]], str, int]


def _quantiles(
    metric: str, by: str = "", qs: tuple[float, ...] = (0.5, 0.9, 0.99)
) -> list[tuple[str, str]]:
    group = f"le, {by}" if by else "le"
    out = []
    for q in qs:
        legend = f"p{int(q * 100)}" + (f" {{{{{by}}}}}" if by else "")
        expr = f"histogram_quantile({q}, sum by ({group}) (rate({metric}_bucket{{{I}}}[{RATE}])))"
        out.append((expr, legend))
    return out


def _rate(metric: str, by: str, selector: str = "") -> str:
    sel = f"{I}, {selector}" if selector else I
    return f"sum by ({by}) (rate({metric}{{{sel}}}[{RATE}]))"


ROWS: list[tuple[str, list[Panel]]] = [
    (
        "Overview",
        [
            ("Ready", "none", [(f"min(tiermem_ready{{{I}}})", "ready")], "stat", 4),
            (
                "Requests",
                "reqps",
                [(f"sum(rate(tiermem_requests_total{{{I}}}[{RATE}]))", "req/s")],
                "stat",
                4,
            ),
            (
                "Server error ratio",
                "percentunit",
                [
                    (
                        f'sum(rate(tiermem_requests_total{{{I}, code=~"INTERNAL|UNKNOWN|DATA_LOSS|UNAVAILABLE"}}[{RATE}]))'
                        f" / sum(rate(tiermem_requests_total{{{I}}}[{RATE}]))",
                        "errors",
                    )
                ],
                "stat",
                4,
            ),
            (
                "Reads served from memory",
                "percentunit",
                [
                    (
                        f'sum(rate(tiermem_hits_total{{{I}, tier=~"HBM|DRAM"}}[{RATE}]))'
                        f" / sum(rate(tiermem_hits_total{{{I}}}[{RATE}]))",
                        "memory",
                    )
                ],
                "stat",
                4,
            ),
            (
                "Cost",
                "currencyUSD",
                [(f"sum(tiermem_cost_usd_per_hour{{{NS}}})", "USD/h")],
                "stat",
                4,
            ),
            (
                "Checksum failures (1h)",
                "none",
                [(f"sum(increase(tiermem_checksum_failures_total{{{I}}}[1h]))", "failures")],
                "stat",
                4,
            ),
        ],
    ),
    (
        "Tiers",
        [
            (
                "Tier use vs high watermark",
                "percentunit",
                [
                    (
                        f"sum by (tier) (tiermem_tier_used_bytes{{{I}}}) / sum by (tier) (tiermem_tier_capacity_bytes{{{I}}})",
                        "{{tier}} used",
                    ),
                    (
                        f'max by (tier) (tiermem_tier_watermark_ratio{{{I}, level="high"}})',
                        "{{tier}} high watermark",
                    ),
                ],
                "timeseries",
                12,
            ),
            (
                "Bytes by tier and kind",
                "bytes",
                [(f"sum by (tier, kind) (tiermem_object_bytes{{{NS}}})", "{{tier}} {{kind}}")],
                "stacked",
                12,
            ),
            (
                "Object copies by tier and kind",
                "short",
                [(f"sum by (tier, kind) (tiermem_objects{{{NS}}})", "{{tier}} {{kind}}")],
                "stacked",
                12,
            ),
            (
                "Bytes by namespace",
                "bytes",
                [(f"sum by (namespace) (tiermem_object_bytes{{{NS}}})", "{{namespace}}")],
                "stacked",
                12,
            ),
        ],
    ),
    (
        "Hit ratios",
        [
            (
                "Hit ratio per tier (reads found in the tier / reads that looked in it)",
                "percentunit",
                [
                    (
                        f"{_rate('tiermem_hits_total', 'tier')} / ({_rate('tiermem_hits_total', 'tier')}"
                        f" + {_rate('tiermem_misses_total', 'tier')})",
                        "{{tier}}",
                    )
                ],
                "timeseries",
                8,
            ),
            (
                "Reads served from memory, by kind",
                "percentunit",
                [
                    (
                        f"{_rate('tiermem_hits_total', 'kind', MEMORY)} / {_rate('tiermem_hits_total', 'kind')}",
                        "{{kind}}",
                    )
                ],
                "timeseries",
                8,
            ),
            (
                "Reads by serving tier and misses",
                "ops",
                [
                    (_rate("tiermem_hits_total", "tier"), "hits {{tier}}"),
                    (_rate("tiermem_misses_total", "tier"), "misses {{tier}}"),
                ],
                "timeseries",
                8,
            ),
        ],
    ),
    (
        "Requests",
        [
            (
                "Requests by RPC",
                "reqps",
                [(_rate("tiermem_requests_total", "method"), "{{method}}")],
                "timeseries",
                12,
            ),
            (
                "Failed requests by RPC and status",
                "reqps",
                [
                    (
                        _rate("tiermem_requests_total", "method, code", 'code!="OK"'),
                        "{{method}} {{code}}",
                    )
                ],
                "timeseries",
                12,
            ),
            (
                "Latency percentiles (all RPCs)",
                "s",
                _quantiles("tiermem_request_duration_seconds"),
                "timeseries",
                12,
            ),
            (
                "p99 latency by RPC",
                "s",
                _quantiles("tiermem_request_duration_seconds", "method", (0.99,)),
                "timeseries",
                12,
            ),
        ],
    ),
    (
        "Data paths",
        [
            (
                "Throughput by path and direction",
                "Bps",
                [(_rate("tiermem_data_bytes_total", "path, direction"), "{{path}} {{direction}}")],
                "timeseries",
                24,
            ),
        ],
    ),
    (
        "Migrations and eviction",
        [
            (
                "Migrations by route",
                "ops",
                [
                    (
                        _rate("tiermem_migrations_total", "from_tier, to_tier"),
                        "{{from_tier}} → {{to_tier}}",
                    )
                ],
                "timeseries",
                8,
            ),
            (
                "Migrated bytes by kind",
                "Bps",
                [(_rate("tiermem_migrated_bytes_total", "kind"), "{{kind}}")],
                "timeseries",
                8,
            ),
            (
                "Evictions and drops to recompute",
                "ops",
                [
                    (_rate("tiermem_evictions_total", "tier, kind"), "evicted {{tier}} {{kind}}"),
                    (
                        _rate("tiermem_drops_to_recompute_total", "tier, kind"),
                        "dropped {{tier}} {{kind}}",
                    ),
                ],
                "timeseries",
                8,
            ),
            (
                "Planner run time",
                "s",
                _quantiles("tiermem_planner_run_duration_seconds", qs=(0.5, 0.99)),
                "timeseries",
                8,
            ),
            (
                "Expirations and compactions",
                "ops",
                [
                    (_rate("tiermem_expirations_total", "kind"), "expired {{kind}}"),
                    (
                        f"sum(rate(tiermem_segment_compactions_total{{{I}}}[{RATE}]))",
                        "segments compacted",
                    ),
                ],
                "timeseries",
                8,
            ),
            (
                "Bytes evicted and compacted",
                "Bps",
                [
                    (_rate("tiermem_evicted_bytes_total", "tier"), "evicted {{tier}}"),
                    (
                        f"sum(rate(tiermem_segment_compacted_bytes_total{{{I}}}[{RATE}]))",
                        "compaction rewrites",
                    ),
                ],
                "timeseries",
                8,
            ),
        ],
    ),
    (
        "Write-back buffer (scratchpad)",
        [
            (
                "Buffer depth (records)",
                "short",
                [(f"sum(tiermem_writeback_buffer_records{{{I}}})", "records")],
                "timeseries",
                6,
            ),
            (
                "Buffer depth (bytes)",
                "bytes",
                [(f"sum(tiermem_writeback_buffer_bytes{{{I}}})", "bytes")],
                "timeseries",
                6,
            ),
            (
                "Flushes by reason",
                "ops",
                [(_rate("tiermem_writeback_flushes_total", "reason"), "{{reason}}")],
                "timeseries",
                6,
            ),
            (
                "Records flushed, deduplicated, merged",
                "ops",
                [
                    (
                        f"sum(rate(tiermem_writeback_flushed_records_total{{{I}}}[{RATE}]))",
                        "flushed",
                    ),
                    (
                        f"sum(rate(tiermem_writeback_deduplicated_records_total{{{I}}}[{RATE}]))",
                        "deduplicated",
                    ),
                    (f"sum(rate(tiermem_writeback_merged_records_total{{{I}}}[{RATE}]))", "merged"),
                ],
                "timeseries",
                6,
            ),
            (
                "Flush time",
                "s",
                _quantiles("tiermem_writeback_flush_duration_seconds", qs=(0.5, 0.99)),
                "timeseries",
                6,
            ),
        ],
    ),
    (
        "Sessions and operators",
        [
            (
                "Open sessions",
                "short",
                [(f"sum(tiermem_sessions_open{{{I}}})", "open")],
                "timeseries",
                6,
            ),
            (
                "Sessions opened and closed",
                "ops",
                [
                    (f"sum(rate(tiermem_sessions_opened_total{{{I}}}[{RATE}]))", "opened"),
                    (f"sum(rate(tiermem_sessions_closed_total{{{I}}}[{RATE}]))", "closed"),
                ],
                "timeseries",
                6,
            ),
            (
                "Bytes reclaimed by closing sessions",
                "Bps",
                [(_rate("tiermem_session_reclaimed_bytes_total", "kind"), "{{kind}}")],
                "timeseries",
                6,
            ),
            (
                "Operator invocations",
                "ops",
                [
                    (
                        _rate("tiermem_operator_invocations_total", "operator, code"),
                        "{{operator}} {{code}}",
                    )
                ],
                "timeseries",
                6,
            ),
            (
                "Operator p99 latency",
                "s",
                _quantiles("tiermem_operator_duration_seconds", "operator", (0.99,)),
                "timeseries",
                6,
            ),
        ],
    ),
    (
        "Integrity, leases and recovery",
        [
            (
                "Checksum failures",
                "short",
                [
                    (
                        f"sum by (where) (increase(tiermem_checksum_failures_total{{{I}}}[{RATE}]))",
                        "{{where}}",
                    )
                ],
                "timeseries",
                6,
            ),
            (
                "Leases",
                "short",
                [
                    (f"sum(tiermem_leases_active{{{I}}})", "active"),
                    (f"sum(rate(tiermem_lease_expiries_total{{{I}}}[{RATE}]))", "expired/s"),
                ],
                "timeseries",
                6,
            ),
            (
                "Last recovery",
                "short",
                [
                    (f"max(tiermem_recovery_duration_seconds{{{I}}})", "seconds"),
                    (f"sum by (outcome) (tiermem_recovery_objects{{{I}}})", "{{outcome}}"),
                ],
                "stat",
                6,
            ),
            (
                "Background errors",
                "short",
                [
                    (
                        f"sum by (pass) (increase(tiermem_background_errors_total{{{I}}}[{RATE}]))",
                        "{{pass}}",
                    )
                ],
                "timeseries",
                6,
            ),
        ],
    ),
    (
        "Cost",
        [
            (
                "Cost by tier",
                "currencyUSD",
                [(f"sum by (tier) (tiermem_cost_usd_per_hour{{{NS}}})", "{{tier}}")],
                "stacked",
                8,
            ),
            (
                "Cost by kind",
                "currencyUSD",
                [(f"sum by (kind) (tiermem_cost_usd_per_hour{{{NS}}})", "{{kind}}")],
                "stacked",
                8,
            ),
            (
                "Cost by namespace",
                "currencyUSD",
                [(f"sum by (namespace) (tiermem_cost_usd_per_hour{{{NS}}})", "{{namespace}}")],
                "stacked",
                8,
            ),
        ],
    ),
    (
        "Process",
        [
            (
                "Resident memory",
                "bytes",
                [(f"process_resident_memory_bytes{{{I}}}", "{{instance}}")],
                "timeseries",
                8,
            ),
            (
                "CPU",
                "percentunit",
                [(f"rate(process_cpu_seconds_total{{{I}}}[{RATE}])", "{{instance}}")],
                "timeseries",
                8,
            ),
            (
                "Open file descriptors",
                "short",
                [(f"process_open_fds{{{I}}}", "{{instance}}")],
                "timeseries",
                8,
            ),
        ],
    ),
]


def _variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "definition": query,
        "query": {"query": query, "refId": f"{name}-values"},
        "refresh": 2,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 1,
    }


def _panel(panel_id: int, panel: Panel, x: int, y: int) -> dict[str, Any]:
    title, unit, targets, kind, width = panel
    height = 4 if kind == "stat" else 8
    custom: dict[str, Any] = {}
    if kind == "stacked":
        custom = {"stacking": {"mode": "normal", "group": "A"}, "fillOpacity": 30}
    elif kind == "timeseries":
        custom = {"fillOpacity": 0}
    out: dict[str, Any] = {
        "id": panel_id,
        "type": "stat" if kind == "stat" else "timeseries",
        "title": title,
        "datasource": DATASOURCE,
        "gridPos": {"h": height, "w": width, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit, "custom": custom}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True}},
        "targets": [
            {
                "refId": chr(ord("A") + n),
                "datasource": DATASOURCE,
                "expr": expr,
                "legendFormat": legend,
            }
            for n, (expr, legend) in enumerate(targets)
        ],
    }
    if kind == "stat":
        out["options"] = {
            "reduceOptions": {"calcs": ["lastNotNull"]},
            "colorMode": "value",
            "graphMode": "area",
        }
        out["fieldConfig"]["defaults"].pop("custom")
    return out


def build() -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    panel_id = 1
    y = 0
    for title, row in ROWS:
        panels.append(
            {
                "id": panel_id,
                "type": "row",
                "title": title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                "panels": [],
            }
        )
        panel_id += 1
        y += 1
        x = 0
        line_height = 0
        for panel in row:
            width = panel[4]
            if x + width > 24:
                x, y = 0, y + line_height
                line_height = 0
            built = _panel(panel_id, panel, x, y)
            panels.append(built)
            panel_id += 1
            x += width
            line_height = max(line_height, built["gridPos"]["h"])
        y += line_height
    return {
        "uid": "tiermem-overview",
        "title": "tiermem",
        "description": "Tiers, hit ratios, latency, migrations, write-back, sessions and cost of tiermem daemons.",
        "tags": ["tiermem"],
        "timezone": "browser",
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "annotations": {"list": []},
        "links": [],
        "templating": {
            "list": [
                _variable("instance", "daemon", "label_values(tiermem_build_info, instance)"),
                _variable("namespace", "namespace", "label_values(tiermem_objects, namespace)"),
            ]
        },
        "panels": panels,
    }


def render() -> str:
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    OUT.write_text(render())
    print(f"wrote {OUT}", file=sys.stderr)
