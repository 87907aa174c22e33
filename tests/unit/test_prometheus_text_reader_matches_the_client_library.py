"""``tiermem top`` reads /metrics with its own small parser: it must read what
prometheus_client writes, label escapes and special values included."""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from tiermem.cli.promtext import parse
from tiermem.cli.top import _quantile


def test_parser_reads_counters_gauges_histograms_and_escaped_labels() -> None:
    r = CollectorRegistry()
    Counter("c", "help", ["a"], registry=r).labels('quote " back \\ nl \n end').inc(3)
    Gauge("g", "help", registry=r).set(-math.inf)
    h = Histogram("h_seconds", "help", ["m"], buckets=(0.1, 1.0), registry=r)
    for v in (0.05, 0.5, 0.5, 5.0):
        h.labels("x").observe(v)
    scrape = parse(generate_latest(r).decode())
    assert scrape.total("c_total", a='quote " back \\ nl \n end') == 3
    assert scrape.total("g") == -math.inf
    buckets = {lab["le"]: v for lab, v in scrape.series("h_seconds_bucket", m="x")}
    assert buckets == {"0.1": 1.0, "1.0": 3.0, "+Inf": 4.0}
    assert scrape.total("h_seconds_count") == 4


def test_quantile_interpolates_like_histogram_quantile() -> None:
    buckets = [(0.1, 1.0), (1.0, 3.0), (math.inf, 4.0)]
    assert _quantile(0.5, buckets) == 0.1 + 0.9 * (2.0 - 1.0) / 2.0
    assert _quantile(0.99, buckets) == 1.0  # in the +Inf bucket: the highest finite bound
    assert math.isnan(_quantile(0.5, [(0.1, 0.0), (math.inf, 0.0)]))
