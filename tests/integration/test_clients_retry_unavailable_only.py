import asyncio
import os
import socket
import threading
import time

import numpy as np
import pytest
import torch

from tiermem.client import AsyncClient, Client, Kind, NotFoundError, UnavailableError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_async_client_round_trips(daemon) -> None:  # type: ignore[no-untyped-def]
    async def scenario() -> None:
        async with AsyncClient(daemon.address) as c:
            data = os.urandom(3 << 20)
            info = await c.put(Kind.KV_BLOCK, "a", data)
            assert info.size_bytes == len(data)
            assert await c.get(Kind.KV_BLOCK, "a") == data
            t = torch.randn(4, 8).bfloat16()
            await c.put_tensor(Kind.KV_BLOCK, "t", t)
            assert torch.equal(await c.get_tensor(Kind.KV_BLOCK, "t"), t)
            arr = np.arange(10, dtype=np.int32)
            await c.put_array(Kind.VECTOR, "arr", arr)
            assert np.array_equal(await c.get_array(Kind.VECTOR, "arr"), arr)
            assert (await c.stat(Kind.KV_BLOCK, "a")).checksum == info.checksum
            keys = [o.key async for o in c.list(page_size=1)]
            assert sorted(keys) == ["a", "arr", "t"]
            assert await c.delete(Kind.KV_BLOCK, "a")
            with pytest.raises(NotFoundError):
                await c.get(Kind.KV_BLOCK, "a")
            assert (await c.stats()).objects == 2

    asyncio.run(scenario())


def test_unavailable_is_retried_until_the_daemon_comes_up(make_daemon) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    started = threading.Event()

    def start_later() -> None:
        time.sleep(0.5)
        make_daemon(server={"listen": f"127.0.0.1:{port}"})
        started.set()

    t = threading.Thread(target=start_later)
    t.start()
    with Client(f"127.0.0.1:{port}", retries=8, timeout_s=5) as c:
        c.put(Kind.SCRATCH, "k", b"v")  # first attempts fail with UNAVAILABLE
        assert started.is_set()
        assert c.get(Kind.SCRATCH, "k") == b"v"
    t.join()


def test_unavailable_gives_up_after_the_retries(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with (
        Client(f"127.0.0.1:{free_port()}", retries=1, timeout_s=2) as c,
        pytest.raises(UnavailableError),
    ):
        c.stats()


def test_other_errors_are_not_retried(daemon) -> None:  # type: ignore[no-untyped-def]
    with Client(daemon.address, retries=5) as c:

        def count() -> float:  # NOT_FOUND answers of any method (the get may use a fast path)
            return sum(
                sample.value
                for family in daemon.metrics.registry.collect()
                if family.name == "tiermem_requests"
                for sample in family.samples
                if sample.name == "tiermem_requests_total" and sample.labels["code"] == "NOT_FOUND"
            )

        with pytest.raises(NotFoundError):
            c.get(Kind.BLOB, "missing")
        assert count() == 1
