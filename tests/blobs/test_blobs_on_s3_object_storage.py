"""``blobs.lance_uri = "s3://..."``: the search tables and the payloads (in a
LanceDB table, Lance's blob encoding) live in object storage — here a local
S3 endpoint (moto) started by the test on 127.0.0.1 and stopped by PID."""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.blobs.helpers import MiB, pattern
from tiermem.client import Client
from tiermem.server.app import Daemon


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def s3_endpoint(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    moto = Path(sys.executable).with_name("moto_server")
    log = (tmp_path / "moto.log").open("wb")
    proc = subprocess.Popen([str(moto), "-H", "127.0.0.1", "-p", str(port)],
                            stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("moto_server did not start") from None
                time.sleep(0.1)
        endpoint = f"http://127.0.0.1:{port}"
        import boto3

        boto3.client(
            "s3", endpoint_url=endpoint, region_name="us-east-1",
            aws_access_key_id="test", aws_secret_access_key="test",
        ).create_bucket(Bucket="tiermem")  # fmt: skip
        yield endpoint
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(10)
        log.close()


def test_blobs_round_trip_and_search_on_s3(
    make_daemon: Callable[..., Daemon], s3_endpoint: str
) -> None:
    options = {
        "aws_endpoint": s3_endpoint, "aws_region": "us-east-1", "allow_http": "true",
        "aws_access_key_id": "test", "aws_secret_access_key": "test",
    }  # fmt: skip
    cfg = {"blobs": {"lance_uri": "s3://tiermem/blobs", "storage_options": options}}
    data = pattern(3 * MiB + 9, seed=40)
    v = np.array([0.0, 1.0, 0.0], dtype=np.float32)
    daemon = make_daemon("s3", **cfg)
    with Client(daemon.address) as c:
        assert c.blobs.stats().payload_store == "lance"
        info = c.blobs.put("remote.bin", data, embeddings={"e": v})
        assert info.sha256 == hashlib.sha256(data).digest()
        c.blobs.put("twin.bin", data)
        assert c.blobs.stats().contents == 1
        assert daemon.blobs.payload_path(info.sha256) is None  # not in local files
    daemon.stop(grace_s=0)
    daemon = make_daemon("s3", **cfg)
    with Client(daemon.address) as c:
        assert c.blobs.get("remote.bin") == data
        assert c.blobs.get("remote.bin", offset=MiB + 1, length=10) == data[MiB + 1 : MiB + 11]
        assert c.blobs.search(vector=v, space="e", k=1)[0].info.key == "remote.bin"
        c.blobs.delete("remote.bin")
        c.blobs.delete("twin.bin")
        assert c.blobs.stats().contents == 0
