"""ObjectIndex.find_many (the LookupPrefix probe) returns what find returns, key by key."""

import pytest

from tiermem.server.catalog import index as index_module
from tiermem.server.catalog.index import ObjectIndex


def test_find_many_matches_find_for_present_and_missing_keys() -> None:
    idx = ObjectIndex(initial_rows=8)
    present = [f"ns\0\1model@{i}".encode() for i in range(300)]
    for k in present:
        idx.insert(k)
    idx.remove(present[10])
    asked = [*present, b"missing", b"", present[5]]
    assert idx.find_many(asked).tolist() == [
        -1 if (row := idx.find(k)) is None else row for k in asked
    ]
    assert idx.find_many([]).tolist() == []


def test_find_many_follows_colliding_keys_into_the_overflow(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(index_module, "key_hash", lambda key: (42, len(key)))
    monkeypatch.setattr(
        index_module,
        "key_digest",
        lambda key: (42).to_bytes(8, "big") + len(key).to_bytes(8, "big"),
    )
    idx = ObjectIndex()
    a, bb, ccc = idx.insert(b"a"), idx.insert(b"bb"), idx.insert(b"ccc")
    assert idx.find_many([b"a", b"bb", b"dddd", b"ccc"]).tolist() == [a, bb, -1, ccc]
    idx.remove(b"a")
    assert idx.find_many([b"a", b"bb", b"ccc"]).tolist() == [-1, bb, ccc]
