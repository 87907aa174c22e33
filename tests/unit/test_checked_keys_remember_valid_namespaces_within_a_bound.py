"""``ObjectKey.checked`` remembers namespaces that passed validation (requests
name a few, over and over), never one that failed, and no more than
``MAX_REMEMBERED_NAMESPACES`` of them; kinds and keys are checked every time."""

from __future__ import annotations

import pytest

from tiermem.server import model
from tiermem.server.errors import InvalidArgument
from tiermem.server.model import Kind, ObjectKey


def test_an_invalid_namespace_is_refused_every_time_a_valid_one_is_remembered() -> None:
    assert ObjectKey.checked("team-a", 1, "k") == ObjectKey("team-a", Kind.KV_BLOCK, "k")
    assert "team-a" in model._VALID_NAMESPACES
    for _ in range(2):
        with pytest.raises(InvalidArgument, match="namespace"):
            ObjectKey.checked("team/a", 1, "k")
    assert "team/a" not in model._VALID_NAMESPACES
    with pytest.raises(InvalidArgument, match="unknown kind 9"):
        ObjectKey.checked("team-a", 9, "k")  # a remembered namespace skips no other check
    with pytest.raises(InvalidArgument, match="NUL"):
        ObjectKey.checked("team-a", 1, "a\x00b")


def test_the_remembered_namespaces_stay_within_their_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model, "MAX_REMEMBERED_NAMESPACES", 8)
    monkeypatch.setattr(model, "_VALID_NAMESPACES", set())
    for i in range(50):
        ObjectKey.checked(f"ns-{i}", 2, "k")
        assert len(model._VALID_NAMESPACES) <= 8
    assert "ns-49" in model._VALID_NAMESPACES
