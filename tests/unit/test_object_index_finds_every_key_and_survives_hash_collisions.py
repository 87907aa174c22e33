import numpy as np
import pytest

from tiermem.server.catalog import index as index_module
from tiermem.server.catalog.index import ObjectIndex
from tiermem.server.errors import InvariantViolation


def test_insert_find_remove_and_row_reuse() -> None:
    idx = ObjectIndex(initial_rows=4)
    rows = {f"k{i}".encode(): idx.insert(f"k{i}".encode()) for i in range(100)}
    assert len(idx) == 100 and idx.capacity >= 100
    for key, row in rows.items():
        assert idx.find(key) == row
    assert idx.find(b"missing") is None
    freed = idx.remove(b"k7")
    assert idx.find(b"k7") is None and len(idx) == 99
    assert idx.insert(b"new") == freed  # rows are reused
    assert len(idx.live_rows()) == 100


def test_colliding_high_hash_halves_go_to_overflow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_module, "key_hash", lambda key: (42, len(key)))
    idx = ObjectIndex()
    a, b = idx.insert(b"a"), idx.insert(b"bb")
    assert a != b
    assert idx.find(b"a") == a and idx.find(b"bb") == b
    idx.remove(b"a")
    assert idx.find(b"bb") == b and idx.find(b"a") is None
    c = idx.insert(b"ccc")
    assert idx.find(b"ccc") == c and idx.find(b"bb") == b


def test_double_insert_and_missing_remove_are_invariant_violations() -> None:
    idx = ObjectIndex()
    idx.insert(b"x")
    with pytest.raises(InvariantViolation):
        idx.insert(b"x")
    with pytest.raises(InvariantViolation):
        idx.remove(b"nope")


def hashes(keys: list[bytes]) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[type-arg]
    pairs = [index_module.key_hash(k) for k in keys]
    return (
        np.array([p[0] for p in pairs], dtype=np.uint64),
        np.array([p[1] for p in pairs], dtype=np.uint64),
    )


def test_bulk_insert_matches_single_inserts() -> None:
    idx = ObjectIndex(initial_rows=16)
    keys = [f"key-{i}".encode() for i in range(5000)]
    rows = idx.insert_many(*hashes(keys), keys.__getitem__)
    assert list(rows) == list(range(5000))
    assert all(idx.find(k) == i for i, k in enumerate(keys))
    assert np.all(idx.cols["flags"][rows] == 1)


def test_bulk_insert_with_colliding_hashes_takes_the_slow_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(index_module, "key_hash", lambda key: (7 if key < b"m" else 9, len(key)))
    idx = ObjectIndex()
    first = idx.insert(b"a")
    keys = [b"bb", b"ccc", b"zz"]  # two collide with "a"'s high half, one with each other
    rows = idx.insert_many(*hashes(keys), keys.__getitem__)
    assert idx.find(b"a") == first
    assert [idx.find(k) for k in keys] == list(rows)


def test_memory_per_object_stays_compact() -> None:
    idx = ObjectIndex()
    keys = [f"k{i}".encode() for i in range(100_000)]
    idx.insert_many(*hashes(keys), keys.__getitem__)
    per_row = idx.nbytes() / idx.capacity
    assert per_row <= 80, per_row
