"""Byte ranges of a blob come back exact wherever they fall (inside one
checksum block, across several, at the end); ranges outside it are OUT_OF_RANGE."""

from __future__ import annotations

import pytest

from tests.blobs.helpers import MiB, pattern
from tiermem.client import Client
from tiermem.client.errors import TiermemClientError

SIZE = 5 * MiB + 333


@pytest.mark.parametrize("path", ["grpc", "bulk"])
def test_ranges_anywhere_in_a_blob_are_exact(client: Client, path: str) -> None:
    data = pattern(SIZE, seed=5)
    client.blobs.put("ranged.bin", data)
    for offset, length in (
        (0, 1), (1, 10), (MiB - 3, 6), (MiB, MiB), (MiB + 17, 3 * MiB + 5),
        (SIZE - 1, 1), (SIZE - 400, 0), (0, 0), (4 * MiB, SIZE - 4 * MiB), (SIZE, 0),
    ):  # fmt: skip
        want = data[offset : offset + length] if length else data[offset:]
        got = client.blobs.get("ranged.bin", offset=offset, length=length, path=path)
        assert got == want, (offset, length)


@pytest.mark.parametrize(("offset", "length"), [(SIZE + 1, 0), (SIZE - 5, 6), (0, SIZE + 1)])
def test_ranges_past_the_end_are_out_of_range(client: Client, offset: int, length: int) -> None:
    client.blobs.put("bounded.bin", pattern(SIZE, seed=6))
    with pytest.raises(TiermemClientError) as err:
        client.blobs.get("bounded.bin", offset=offset, length=length, path="grpc")
    assert err.value.code == "OUT_OF_RANGE"
    assert "bounded.bin" in err.value.message
