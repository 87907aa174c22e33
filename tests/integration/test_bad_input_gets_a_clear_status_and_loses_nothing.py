"""Every malformed request gets its status code and a message that says what was
wrong; nothing already stored changes."""

from collections.abc import Iterator

import grpc
import pytest

from tiermem.client import Client, Kind
from tiermem.server.app import Daemon
from tiermem.v1 import common_pb2, object_pb2, object_pb2_grpc

KEY = common_pb2.ObjectKey(namespace="default", kind=common_pb2.BLOB, key="victim")


@pytest.fixture
def stub(daemon: Daemon, client: Client) -> Iterator[object_pb2_grpc.ObjectServiceStub]:
    client.put(Kind.BLOB, "victim", b"precious")
    channel = grpc.insecure_channel(daemon.address)
    yield object_pb2_grpc.ObjectServiceStub(channel)
    assert client.get(Kind.BLOB, "victim") == b"precious"  # nothing stored was lost
    channel.close()


def put(stub: object_pb2_grpc.ObjectServiceStub, *messages: object_pb2.PutRequest) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        stub.Put(iter(messages), timeout=10)
    return info.value  # type: ignore[return-value]


def header(key: common_pb2.ObjectKey = KEY, size: int = 4, **kw: object) -> object_pb2.PutRequest:
    return object_pb2.PutRequest(header=object_pb2.PutHeader(key=key, size_bytes=size, **kw))


def chunk(data: bytes) -> object_pb2.PutRequest:
    return object_pb2.PutRequest(chunk=data)


def check(err: grpc.RpcError, code: grpc.StatusCode, words: str) -> None:
    assert err.code() == code, (err.code(), err.details())
    assert words in err.details(), err.details()


def test_missing_or_empty_key(stub: object_pb2_grpc.ObjectServiceStub) -> None:
    empty = common_pb2.ObjectKey(namespace="default", kind=common_pb2.BLOB, key="")
    check(
        put(stub, header(empty), chunk(b"abcd")), grpc.StatusCode.INVALID_ARGUMENT, "key is missing"
    )


def test_unknown_kind(stub: object_pb2_grpc.ObjectServiceStub) -> None:
    bad = common_pb2.ObjectKey(namespace="default", kind=9, key="victim")  # type: ignore[arg-type]
    check(put(stub, header(bad), chunk(b"abcd")), grpc.StatusCode.INVALID_ARGUMENT, "unknown kind")
    with pytest.raises(grpc.RpcError) as e:
        stub.Stat(object_pb2.StatRequest(key=common_pb2.ObjectKey(namespace="default", key="x")))
    check(e.value, grpc.StatusCode.INVALID_ARGUMENT, "unknown kind")  # type: ignore[arg-type]


def test_object_over_the_size_limit(stub: object_pb2_grpc.ObjectServiceStub) -> None:
    err = put(stub, header(size=1 << 40), chunk(b"abcd"))  # a size cap, not a malformed request
    check(err, grpc.StatusCode.RESOURCE_EXHAUSTED, "limits.max_object_bytes")


def test_chunk_before_header_and_second_header(stub: object_pb2_grpc.ObjectServiceStub) -> None:
    check(put(stub, chunk(b"ab"), header()), grpc.StatusCode.INVALID_ARGUMENT, "first message")
    err = put(stub, header(), chunk(b"ab"), header(), chunk(b"cd"))
    check(err, grpc.StatusCode.INVALID_ARGUMENT, "only the first message may be the header")


def test_stream_shorter_or_longer_than_announced(stub: object_pb2_grpc.ObjectServiceStub) -> None:
    check(put(stub, header(size=10), chunk(b"abcd")), grpc.StatusCode.INVALID_ARGUMENT, "4 of 10")
    err = put(stub, header(size=3), chunk(b"abcd"))
    check(err, grpc.StatusCode.INVALID_ARGUMENT, "longer than the announced")


def test_checksum_mismatch_on_upload(stub: object_pb2_grpc.ObjectServiceStub) -> None:
    for algorithm in (common_pb2.XXH3_64, common_pb2.CRC32):
        bad = common_pb2.Checksum(algorithm=algorithm, value=12345)
        err = put(stub, header(checksum=bad), chunk(b"abcd"))
        check(err, grpc.StatusCode.DATA_LOSS, "nothing was stored")


def test_namespace_not_found_and_invalid(stub: object_pb2_grpc.ObjectServiceStub) -> None:
    missing = common_pb2.ObjectKey(namespace="nope", kind=common_pb2.BLOB, key="k")
    check(put(stub, header(missing), chunk(b"abcd")), grpc.StatusCode.NOT_FOUND, "namespace 'nope'")
    invalid = common_pb2.ObjectKey(namespace="../etc", kind=common_pb2.BLOB, key="k")
    check(put(stub, header(invalid), chunk(b"abcd")), grpc.StatusCode.INVALID_ARGUMENT, "namespace")


def test_tensor_shape_that_does_not_match_the_bytes(
    stub: object_pb2_grpc.ObjectServiceStub,
) -> None:
    tensor = common_pb2.TensorInfo(dtype="float32", shape=[3])
    err = put(stub, header(tensor=tensor), chunk(b"abcd"))
    check(err, grpc.StatusCode.INVALID_ARGUMENT, "is 12 bytes but size_bytes is 4")
    err = put(
        stub, header(tensor=common_pb2.TensorInfo(dtype="complex7", shape=[1])), chunk(b"abcd")
    )
    check(err, grpc.StatusCode.INVALID_ARGUMENT, "unknown dtype")


def test_if_absent_refuses_to_overwrite(stub: object_pb2_grpc.ObjectServiceStub) -> None:
    check(
        put(stub, header(if_absent=True), chunk(b"abcd")), grpc.StatusCode.ALREADY_EXISTS, "exists"
    )


def test_range_outside_the_object(stub: object_pb2_grpc.ObjectServiceStub) -> None:
    with pytest.raises(grpc.RpcError) as e:
        list(stub.Get(object_pb2.GetRequest(key=KEY, offset=5, length=10)))
    check(e.value, grpc.StatusCode.OUT_OF_RANGE, "outside object")  # type: ignore[arg-type]


def test_capacity_exhausted(make_daemon) -> None:  # type: ignore[no-untyped-def]
    daemon = make_daemon(
        name="tiny", tiers={"dram": {"capacity_bytes": 1 << 20}, "ssd": {"capacity_bytes": 2 << 20}}
    )
    with Client(daemon.address) as client:
        client.put(Kind.BLOB, "keep", b"k" * 1_500_000)
        with pytest.raises(Exception) as e:
            client.put(Kind.BLOB, "too-much", b"x" * 1_500_000)
        assert e.value.code == "RESOURCE_EXHAUSTED" and "SSD" in str(e.value)  # type: ignore[attr-defined]
        assert client.get(Kind.BLOB, "keep") == b"k" * 1_500_000


def test_bad_page_token_and_page_size(stub: object_pb2_grpc.ObjectServiceStub) -> None:
    with pytest.raises(grpc.RpcError) as e:
        stub.List(object_pb2.ListRequest(namespace="default", page_token="!!notbase64"))
    check(e.value, grpc.StatusCode.INVALID_ARGUMENT, "page_token")  # type: ignore[arg-type]
    with pytest.raises(grpc.RpcError) as e:
        stub.List(object_pb2.ListRequest(namespace="default", page_size=10**6))
    check(e.value, grpc.StatusCode.INVALID_ARGUMENT, "page_size")  # type: ignore[arg-type]
