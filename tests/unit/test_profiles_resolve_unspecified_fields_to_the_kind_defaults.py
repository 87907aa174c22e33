"""A put's profile is resolved field by field: unspecified hint, durability and
precision take the kind's defaults, and every other field is kept as given
(a field added to Profile later must be carried over too)."""

from __future__ import annotations

import dataclasses

import pytest

from tiermem.server.model import (
    KIND_DEFAULTS,
    AccessHint,
    Durability,
    Kind,
    Precision,
    Profile,
    Tier,
)


@pytest.mark.parametrize("kind", list(Kind))
def test_unspecified_fields_take_the_kind_defaults(kind: Kind) -> None:
    hint, durability = KIND_DEFAULTS[kind]
    resolved = Profile().resolved(kind)
    assert (resolved.hint, resolved.durability, resolved.precision) == (
        hint,
        durability,
        Precision.LOSSLESS,
    )


@pytest.mark.parametrize("kind", list(Kind))
def test_every_field_given_is_kept(kind: Kind) -> None:
    given = Profile(
        hint=AccessHint.COLD,
        ttl_s=7,
        next_access_unix_ms=11,
        precision=Precision.LOSSY_OK,
        lossy_max_error=0.25,
        durability=Durability.CACHE,
        pin=True,
        preferred_tier=Tier.SSD,
    )
    defaults = Profile()
    unset = [
        f.name
        for f in dataclasses.fields(Profile)
        if getattr(given, f.name) == getattr(defaults, f.name)
    ]
    assert unset == [], f"set every field of Profile in this test: {unset}"
    assert given.resolved(kind) == given
