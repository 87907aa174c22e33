"""Malformed KV requests get a clear status, and nothing of the batch is stored."""

from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
import torch

from tiermem.client import Client, KvBlock, KvScope, Precision, Profile
from tiermem.client.errors import (
    CapacityError,
    ChecksumError,
    InvalidArgumentError,
    NotFoundError,
)
from tiermem.server.app import Daemon
from tiermem.v1 import common_pb2, kv_pb2, kv_pb2_grpc

SCOPE = KvScope("bad-input-model", dtype="float32")
PB_SCOPE = kv_pb2.KvScope(namespace="default", model=SCOPE.model, world_size=1, dtype="float32")


def spec(h: bytes, shape: list[int], size: int, dtype: str = "float32") -> kv_pb2.BlockSpec:
    return kv_pb2.BlockSpec(
        chunk_hash=h, tensor=common_pb2.TensorInfo(dtype=dtype, shape=shape), size_bytes=size
    )


def raw_put(
    client: Client, blocks: list[kv_pb2.BlockSpec], chunks: list[bytes], **header: Any
) -> grpc.StatusCode:
    stub = kv_pb2_grpc.KvServiceStub(client.transport.channel)

    def requests() -> Iterator[kv_pb2.PutBlocksRequest]:
        yield kv_pb2.PutBlocksRequest(
            header=kv_pb2.PutBlocksHeader(scope=PB_SCOPE, blocks=blocks, **header)
        )
        for c in chunks:
            yield kv_pb2.PutBlocksRequest(chunk=c)

    with pytest.raises(grpc.RpcError) as info:
        stub.PutBlocks(requests(), timeout=30)
    return info.value.code()  # type: ignore[no-any-return]


def nothing_stored(client: Client, hashes: list[bytes]) -> bool:
    return client.kv.lookup_prefix(SCOPE, hashes[:1]).stored_chunks == 0 and not any(
        b.found for b in client.kv.get_blocks(SCOPE, hashes)
    )


def test_short_stream_stores_no_block_of_the_batch(client: Client) -> None:
    blocks = [spec(b"a", [4], 16), spec(b"b", [4], 16)]
    code = raw_put(client, blocks, [b"\0" * 16, b"\0" * 8])
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert nothing_stored(client, [b"a", b"b"])


def test_long_stream_stores_nothing(client: Client) -> None:
    code = raw_put(client, [spec(b"a", [4], 16)], [b"\0" * 20])
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert nothing_stored(client, [b"a"])


def test_damaged_block_fails_with_data_loss_and_stores_nothing(client: Client) -> None:
    good = spec(b"a", [4], 16)
    bad = spec(b"b", [4], 16)
    bad.checksum.CopyFrom(common_pb2.Checksum(algorithm=common_pb2.CRC32, value=12345))
    code = raw_put(client, [good, bad], [b"\1" * 32])
    assert code == grpc.StatusCode.DATA_LOSS
    assert nothing_stored(client, [b"a", b"b"])


@pytest.mark.parametrize(
    ("blocks", "why"),
    [
        ([spec(b"a", [5], 16)], "shape does not match the bytes"),
        ([spec(b"a", [4], 16, dtype="float12")], "unknown dtype"),
        ([spec(b"", [4], 16)], "empty chunk hash"),
        ([spec(b"x" * 65, [4], 16)], "chunk hash over 64 bytes"),
        ([spec(b"a", [4], 16), spec(b"a", [4], 16)], "same hash twice"),
        ([kv_pb2.BlockSpec(chunk_hash=b"a", size_bytes=16)], "no tensor metadata"),
        ([], "no blocks"),
    ],
)
def test_malformed_block_headers_are_invalid_arguments(
    client: Client, blocks: list[kv_pb2.BlockSpec], why: str
) -> None:
    code = raw_put(client, blocks, [b"\0" * 16 * len(blocks)])
    assert code == grpc.StatusCode.INVALID_ARGUMENT, why
    assert nothing_stored(client, [b"a"])


def test_wrong_shape_through_the_client_says_what_is_wrong(client: Client) -> None:
    with pytest.raises(InvalidArgumentError, match=r"float32\[3\] is 12 bytes"):
        client.kv.put_blocks(SCOPE, [KvBlock(b"x", b"\0" * 16, dtype="float32", shape=(3,))])


def test_oversize_block_is_refused(make_daemon: Callable[..., Daemon]) -> None:
    daemon = make_daemon(kv={"max_block_bytes": 1024})
    with Client(daemon.address) as client:
        with pytest.raises(CapacityError, match=r"kv\.max_block_bytes"):
            client.kv.put(SCOPE, 1, torch.zeros(1024))
        client.kv.put(SCOPE, 2, torch.zeros(256))  # exactly at the limit
        assert nothing_stored(client, [hash_of(1)])


def hash_of(h: int) -> bytes:
    from tiermem.client.kv import hash_bytes

    return hash_bytes(h)


@pytest.mark.parametrize(
    ("scope", "error"),
    [
        (KvScope("has@sign", dtype="float32"), InvalidArgumentError),
        (KvScope("m", world_size=2, worker_id=2, dtype="float32"), InvalidArgumentError),
        (KvScope("m", world_size=0, dtype="float32"), InvalidArgumentError),
        (KvScope("m", dtype="not a dtype"), InvalidArgumentError),
        (KvScope("", dtype="float32"), InvalidArgumentError),
        (KvScope("m", dtype="float32", namespace="nope"), NotFoundError),
    ],
)
def test_bad_scopes_are_refused_by_every_call(
    client: Client, scope: KvScope, error: type[Exception]
) -> None:
    with pytest.raises(error):
        client.kv.put(scope, 1, torch.zeros(4))
    with pytest.raises(error):
        client.kv.lookup_prefix(scope, [1])
    with pytest.raises(error):
        client.kv.get_blocks(scope, [1])
    with pytest.raises(error):
        client.kv.prefetch(scope, [1])


def test_codec_on_a_lossless_profile_is_refused(client: Client) -> None:
    for profile in (None, Profile(precision=Precision.LOSSLESS)):
        with pytest.raises(InvalidArgumentError, match="LOSSY_OK"):
            client.kv.put(SCOPE, 1, torch.randn(8, 8), profile=profile, codec="fp8_e4m3")
    with pytest.raises(InvalidArgumentError, match="unknown codec"):
        client.kv.put(
            SCOPE, 1, torch.randn(8), profile=Profile(precision=Precision.LOSSY_OK), codec="zip"
        )
    assert nothing_stored(client, [hash_of(1)])


def test_damaged_download_is_detected_by_the_client(client: Client, daemon: Daemon) -> None:
    client.kv.put(SCOPE, 3, torch.ones(16))
    stored = daemon.kv.get_blocks
    from tiermem.server.services.kv import BlockRead

    def damaged(*args: Any) -> Iterator[BlockRead]:
        for block in stored(*args):
            yield BlockRead(block.chunk_hash, block.tensor, memoryview(bytes(64)), block.checksum)

    daemon.kv.get_blocks = damaged  # type: ignore[method-assign]
    try:
        with pytest.raises(ChecksumError):
            client.kv.get_blocks(SCOPE, [3], path="grpc")  # the KvService stream
    finally:
        daemon.kv.get_blocks = stored  # type: ignore[method-assign]
