"""Damage stored files in place and read the damage gauge: shared by the fault
tests that flip bytes in segments and vector snapshots."""

from __future__ import annotations

from pathlib import Path

from tiermem.server.app import Daemon


def flip(path: Path, offset: int) -> None:
    """XOR one byte of ``path`` at ``offset`` (a stored file damaged in place)."""
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x5A]))


def flip_current_snapshot(daemon: Daemon, namespace: str = "default", name: str = "c") -> None:
    """Flip a byte in the state.npz of the snapshot the collection's record names now."""
    rec = daemon.vectors.log.record(namespace, name)
    assert rec is not None and rec.snapshot_dir
    state = Path(daemon.config.data_dir, "vectors", str(rec.id), rec.snapshot_dir, "state.npz")
    flip(state, state.stat().st_size // 2)


def damaged_gauge(daemon: Daemon) -> float:
    """``tiermem_damaged_objects`` (0 before anything was registered)."""
    return daemon.metrics.registry.get_sample_value("tiermem_damaged_objects") or 0.0
