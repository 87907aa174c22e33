"""ListBlobs resumes only from a page token it issued for that namespace:
anything else is INVALID_ARGUMENT. Tokens were decoded leniently (characters
outside the base64 alphabet skipped), so garbage such as "!!!" silently
restarted the listing from the beginning. Paging itself still walks every
blob once."""

from __future__ import annotations

import base64

import grpc
import pytest

from tiermem.client import Client
from tiermem.server.app import Daemon
from tiermem.server.blobs.catalog import blob_key
from tiermem.v1 import blobs_pb2, blobs_pb2_grpc


@pytest.fixture
def stub(daemon: Daemon) -> blobs_pb2_grpc.BlobServiceStub:
    return blobs_pb2_grpc.BlobServiceStub(grpc.insecure_channel(daemon.address))


def _token_for(namespace: str, key: str) -> str:
    return base64.urlsafe_b64encode(blob_key(namespace, key)).decode()


@pytest.mark.parametrize(
    "token",
    ["!!!", "not a token", _token_for("other", "a"), "QUJD" + "!"],
    ids=["punctuation", "words", "another namespace's key", "base64 plus junk"],
)
def test_a_token_it_never_issued_is_invalid_argument(
    client: Client, stub: blobs_pb2_grpc.BlobServiceStub, token: str
) -> None:
    client.blobs.put("a", b"hello")
    with pytest.raises(grpc.RpcError) as err:
        stub.ListBlobs(blobs_pb2.ListBlobsRequest(namespace="default", page_token=token))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "page_token" in (err.value.details() or "")


def test_pages_walk_every_blob_once(client: Client) -> None:
    for i in range(7):
        client.blobs.put(f"k{i}", f"value {i}".encode())
    assert [b.key for b in client.blobs.list(page_size=2)] == [f"k{i}" for i in range(7)]
