"""Distinct LMCache keys map to distinct tiermem scopes. The connector joined
the configured salt, request tags and the layer with separators, so a tag
named "layer" equalled a layerwise key, a tenant salted "team%x" equalled an
unsalted tenant whose requests carry the tag team=x (the two shared blocks),
and tag values holding a separator equalled other tag sets. The salt is now
an unambiguous JSON list whenever tags or a layer take part."""

from __future__ import annotations

from tiermem.client.lmcache.convert import scope_of
from tiermem.server.services.kv import KvScope as ServerScope


def _prefix(**kw: object) -> str:
    s = scope_of("m", 1, 0, "bfloat16", namespace=None, **kw)  # type: ignore[arg-type]
    return ServerScope("default", s.model, s.world_size, s.worker_id, s.dtype, s.salt).key_prefix()


def test_keys_that_used_to_collide_are_apart() -> None:
    assert _prefix(salt="", tags=(("layer", 3),)) != _prefix(salt="", layer_id=3)
    assert _prefix(salt="team%x") != _prefix(salt="", tags=(("team", "x"),))
    two_tags = (("a", "b"), ("c", "d"))
    assert _prefix(salt="", tags=(("a", "b@c%d"),)) != _prefix(salt="", tags=two_tags)


def test_a_plain_salt_keeps_its_scope_and_equal_keys_stay_equal() -> None:
    assert scope_of("m", 1, 0, "bfloat16", salt="tenant", namespace=None).salt == "tenant"
    tags = (("lang", "en"),)
    assert _prefix(salt="t", tags=tags, layer_id=2) == _prefix(salt="t", tags=tags, layer_id=2)
