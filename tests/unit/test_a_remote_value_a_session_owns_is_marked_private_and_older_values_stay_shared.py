"""The remote value layout marks a session's object private (``codec``): its
metadata names ``PRIVATE_OWNER`` as its session, never the session's id, in
both head layouts, and decodes as private. A value without the marker (an
unowned object, or one written before the marker, as tiermem wrote every value
then) decodes as shared, byte for byte the layout it always had."""

from __future__ import annotations

import dataclasses
import zlib

import pytest
import xxhash

from tiermem.server.model import Kind, ObjectKey, ObjectMeta, Profile, Tier
from tiermem.server.protoconv import meta_to_proto
from tiermem.server.tiers.remote.codec import (
    HEADER,
    MAGIC,
    PRIVATE_OWNER,
    decode,
    encode_header,
    private,
)

PAYLOAD = b"kv" * 5000
NAME = "d/default/3/block"


def meta_of(session: str) -> ObjectMeta:
    return ObjectMeta(
        key=ObjectKey("default", Kind.KV_BLOCK, "block"),
        size_bytes=len(PAYLOAD),
        checksum=xxhash.xxh3_64_intdigest(PAYLOAD),
        profile=Profile(),
        tier=Tier.DRAM,
        session=session,
    )


@pytest.mark.parametrize("fixed", [False, True], ids=["packed", "fixed-head"])
def test_a_sessions_value_is_private_and_names_no_session(fixed: bool) -> None:
    meta = meta_of("3f2a-session-id")
    value = encode_header(meta, fixed) + PAYLOAD
    assert b"3f2a-session-id" not in value
    got, payload = decode(memoryview(value), meta.key, NAME)
    assert private(got) and got.session == PRIVATE_OWNER
    assert bytes(payload) == PAYLOAD


@pytest.mark.parametrize("fixed", [False, True], ids=["packed", "fixed-head"])
def test_an_unowned_value_is_shared(fixed: bool) -> None:
    meta = meta_of("")
    got, payload = decode(memoryview(encode_header(meta, fixed) + PAYLOAD), meta.key, NAME)
    assert not private(got) and got.session == ""
    assert bytes(payload) == PAYLOAD


def test_a_value_written_before_the_marker_is_shared() -> None:
    # the layout every value had before: metadata with the session cleared
    meta = meta_of("3f2a-session-id")
    old = dataclasses.replace(meta, session="", tier=Tier.REMOTE, persisted=False)
    body = meta_to_proto(old).SerializeToString()
    head = HEADER.pack(MAGIC, len(body), len(PAYLOAD), meta.checksum, zlib.crc32(body))
    assert head + body == encode_header(meta_of(""))  # unchanged for unowned objects
    got, payload = decode(memoryview(head + body + PAYLOAD), meta.key, NAME)
    assert not private(got)
    assert bytes(payload) == PAYLOAD
