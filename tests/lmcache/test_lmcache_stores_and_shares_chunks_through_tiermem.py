"""LMCache 0.5.6 (its own venv) with the tiermem remote storage plugin against a
real daemon: chunks stored by one LMCache instance come back byte-identical,
and a second instance (another process) finds and reads them."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import REPO
from tiermem.client import Client, Kind
from tiermem.server.app import Daemon

VENV_PYTHON = REPO / ".venv-lmcache" / "bin" / "python"
HARNESS = Path(__file__).with_name("lmcache_harness.py")
CHUNKS = 8


@pytest.fixture(scope="module")
def lmcache_python() -> Path:
    """The lmcache venv, built once by `make lmcache-venv` (a `make test` prerequisite)."""
    if not (REPO / ".venv-lmcache" / ".installed").exists():
        subprocess.run(["make", "-C", str(REPO), "lmcache-venv"], check=True, timeout=1800)
    return VENV_PYTHON


def harness(python: Path, address: str, mode: str, seed: int) -> dict[str, object]:
    env = {**os.environ, "LMCACHE_TRACK_USAGE": "false", "PYTHONPATH": ""}
    done = subprocess.run(
        [str(python), str(HARNESS), address, mode, str(CHUNKS), str(seed)],
        capture_output=True, text=True, timeout=300, env=env, cwd=HARNESS.parent,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-6000:]
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    assert lines, done.stdout[-2000:] + done.stderr[-6000:]
    return json.loads(lines[-1])  # type: ignore[no-any-return]


def test_lmcache_round_trips_chunks_and_a_second_instance_finds_them(
    lmcache_python: Path, daemon: Daemon, client: Client
) -> None:
    stored = harness(lmcache_python, daemon.address, "store", seed=3)
    assert stored["backends"] == ["LocalCPUBackend", "RemoteBackend-tiermem"]
    assert stored["contains"] == CHUNKS and stored["exists_first"] is True
    assert stored["contains_with_hole"] == CHUNKS // 2
    assert stored["identical"] == CHUNKS

    blocks = list(client.list(kind=Kind.KV_BLOCK))
    assert len(blocks) == CHUNKS
    assert {(b.dtype, b.memory_format) for b in blocks} == {("bfloat16", "lmcache:KV_2LTD")}
    assert all(b.key.startswith("harness/tiny-model@1@0@bfloat16@") for b in blocks)

    loaded = harness(lmcache_python, daemon.address, "load", seed=3)
    assert loaded["contains"] == CHUNKS and loaded["identical"] == CHUNKS
