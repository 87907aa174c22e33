"""A reader for the Prometheus text exposition format (what ``/metrics``
serves), enough for ``tiermem top``: samples with labels and values.

Kept dependency-free so the CLI works from a client-only install.
"""

from __future__ import annotations

import math
import re
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}

Labels = Mapping[str, str]


def _unescape(value: str) -> str:
    return re.sub(r'\\[\\"n]', lambda m: _UNESCAPE[m.group(0)], value)


def _float(text: str) -> float:
    lowered = text.lower()
    if lowered in ("+inf", "inf"):
        return math.inf
    if lowered == "-inf":
        return -math.inf
    return float(text)


@dataclass
class Scrape:
    """Samples of one scrape: name -> [(labels, value)]."""

    samples: dict[str, list[tuple[dict[str, str], float]]] = field(default_factory=dict)

    def series(self, name: str, **match: str) -> Iterator[tuple[dict[str, str], float]]:
        for labels, value in self.samples.get(name, ()):
            if all(labels.get(k) == v for k, v in match.items()):
                yield labels, value

    def total(self, name: str, **match: str) -> float:
        return sum(value for _, value in self.series(name, **match))

    def by(self, name: str, label: str, **match: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for labels, value in self.series(name, **match):
            key = labels.get(label, "")
            out[key] = out.get(key, 0.0) + value
        return out


def parse(text: str) -> Scrape:
    scrape = Scrape()
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m is None:
            raise ValueError(f"not a Prometheus sample line: {line[:200]!r}")
        name, raw_labels, value = m.groups()
        labels: dict[str, str] = {}
        if raw_labels:
            pos = 0
            while pos < len(raw_labels):
                lm = _LABEL.match(raw_labels, pos)
                if lm is None:
                    raise ValueError(f"bad labels in line: {line[:200]!r}")
                labels[lm.group(1)] = _unescape(lm.group(2))
                pos = lm.end()
        scrape.samples.setdefault(name, []).append((labels, _float(value)))
    return scrape


def fetch(address: str, timeout_s: float = 5.0) -> Scrape:
    """Scrape ``http://ADDRESS/metrics`` (ADDRESS is HOST:PORT or a full URL)."""
    url = address if "://" in address else f"http://{address}/metrics"
    with urllib.request.urlopen(url, timeout=timeout_s) as reply:
        return parse(reply.read().decode("utf-8"))
