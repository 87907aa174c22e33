"""Fixtures for vector collection tests: a daemon whose maintenance runs only
when a test asks (``daemon.vectors.maintain()``), small training thresholds,
and clustered data with brute-force ground truth."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from tests.conftest import daemon_config, deep_merge
from tiermem.client import Client
from tiermem.server.app import Daemon

VECTOR_CONFIG: dict[str, Any] = {
    "vectors": {
        "maintain_interval_s": 3600,  # tests drive maintenance explicitly
        "ivf_train_min_vectors": 1000,
        "pq_nbits": 6,
        "auto_hnsw_min_vectors": 1500,
    }
}


@pytest.fixture
def make_vdaemon(make_daemon: Callable[..., Daemon]) -> Callable[..., Daemon]:
    def make(name: str = "d", **overrides: Any) -> Daemon:
        return make_daemon(name, **deep_merge(VECTOR_CONFIG, overrides))

    return make


@pytest.fixture
def vdaemon(make_vdaemon: Callable[..., Daemon]) -> Daemon:
    return make_vdaemon()


@pytest.fixture
def vclient(vdaemon: Daemon) -> Iterator[Client]:
    with Client(vdaemon.address, timeout_s=60) as c:
        yield c


@pytest.fixture(scope="module")
def shared_vclient(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    """One daemon for a whole test module (tests use distinct collection names)."""
    config = daemon_config(tmp_path_factory.mktemp("shared"), **VECTOR_CONFIG)
    daemon = Daemon(config, registry=CollectorRegistry())
    daemon.start()
    try:
        with Client(daemon.address, timeout_s=60) as c:
            c.daemon = daemon  # type: ignore[attr-defined]
            yield c
    finally:
        daemon.stop(grace_s=0)


def clustered(n: int, d: int, seed: int = 0, clusters: int = 20) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((clusters, d)).astype(np.float32) * 3
    x = centers[rng.integers(0, clusters, n)] + rng.standard_normal((n, d)).astype(np.float32)
    return np.ascontiguousarray(x, dtype=np.float32)


def brute_force(x: np.ndarray, q: np.ndarray, k: int, metric: str) -> np.ndarray:
    """Row indices of the exact k nearest neighbours (metric: l2, inner_product, cosine)."""
    if metric == "cosine":
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
        q = q / np.linalg.norm(q, axis=1, keepdims=True)
    scores = -((q[:, None, :] - x[None, :, :]) ** 2).sum(-1) if metric == "l2" else q @ x.T
    return np.argsort(-scores, axis=1, kind="stable")[:, :k]


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    k = truth.shape[1]
    return float(np.mean([len(set(f) & set(t)) / k for f, t in zip(found, truth, strict=True)]))
