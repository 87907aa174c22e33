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


L2_HARNESS = Path(__file__).with_name("l2_harness.py")


def test_l2_adapter_stores_looks_up_and_loads_and_the_mp_server_loads_it(
    lmcache_python: Path, daemon: Daemon
) -> None:
    env = {**os.environ, "LMCACHE_TRACK_USAGE": "false", "PYTHONPATH": ""}
    server = subprocess.Popen(
        [str(lmcache_python), str(L2_HARNESS), daemon.address, "server"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=HARNESS.parent,
    )  # fmt: skip
    try:
        done = subprocess.run(
            [str(lmcache_python), str(L2_HARNESS), daemon.address, "adapter"],
            capture_output=True, text=True, timeout=300, env=env, cwd=HARNESS.parent,
        )  # fmt: skip
        out, err = server.communicate(timeout=300)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(30)
    assert done.returncode == 0, done.stderr[-6000:]
    adapter = json.loads(done.stdout.strip().splitlines()[-1])
    assert adapter["store_ok"] is True and adapter["bytes"] == 5 * 8192
    assert adapter["found"] == [0, 1, 2, 4, 5]  # the hole at 3 is reported
    assert adapter["loaded"] == [0, 1, 2, 4, 5] and adapter["identical"] == 5
    assert server.returncode == 0, err[-6000:]
    started = json.loads(out.strip().splitlines()[-1])
    assert started == {"server_started": True, "failure": ""}
