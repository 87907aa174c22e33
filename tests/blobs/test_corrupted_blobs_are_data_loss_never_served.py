"""A stored blob whose bytes were damaged on disk is reported as DATA_LOSS and
never served (the damaged range, the whole blob, and after that any range of
it); a fresh upload of the same bytes repairs it."""

from __future__ import annotations

import pytest

from tests.blobs.helpers import MiB, pattern
from tiermem.client import Client
from tiermem.client.errors import TiermemClientError
from tiermem.server.app import Daemon


@pytest.mark.parametrize("path", ["grpc", "bulk", "shm"])
def test_a_flipped_byte_on_disk_gives_data_loss(daemon: Daemon, client: Client, path: str) -> None:
    data = pattern(4 * MiB + 100, seed=11)
    info = client.blobs.put("photo.raw", data)
    payload = daemon.blobs.payload_path(info.sha256)
    assert payload is not None
    with payload.open("r+b") as f:  # damage one byte in the third 1 MiB block
        f.seek(2 * MiB + 12345)
        byte = f.read(1)
        f.seek(2 * MiB + 12345)
        f.write(bytes([byte[0] ^ 0x01]))
    for offset, length in ((0, 0), (2 * MiB, 100), (0, 10)):
        with pytest.raises(TiermemClientError) as err:
            client.blobs.get("photo.raw", offset=offset, length=length, path=path)
        assert err.value.code == "DATA_LOSS"
        assert "photo.raw" in err.value.message and "damaged" in err.value.message
    # once found damaged, no part of the content is served
    # uploading the same bytes again repairs the content
    client.blobs.put("copy.raw", data)
    assert client.blobs.get("photo.raw", path=path) == data
