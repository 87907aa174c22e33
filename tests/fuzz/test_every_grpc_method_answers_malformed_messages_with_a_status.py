"""Random and malformed messages at every gRPC method the daemon registered:
raw random bytes and structured messages with hostile values, 10 000+ calls.
No crash, no hang, every failure a gRPC status with a message (never INTERNAL
or UNKNOWN), and data the fuzzer cannot name is unchanged afterwards."""

from __future__ import annotations

import os
import random
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import grpc

from tests.fuzz.messages import Method, methods, random_bytes, random_message
from tiermem.client import Client, Kind
from tiermem.server.app import Daemon

CASES = int(os.environ.get("TIERMEM_FUZZ_CASES", "10400"))
#: Statuses a bad request may get. INTERNAL/UNKNOWN (a bug), UNAVAILABLE (a
#: crash) and DEADLINE_EXCEEDED (a hang: every call has a 20 s deadline) fail.
ALLOWED = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.DATA_LOSS,
    grpc.StatusCode.UNIMPLEMENTED,
}


#: Streams that run until the client ends them, by design (bounded server-side by
#: limits.max_request_s): sending them anything cannot end in a status.
ENDLESS = {"/grpc.health.v1.Health/Watch"}
#: Third-party services (grpcio-health-checking) answer some errors without details.
NO_DETAILS_OK = ("/grpc.health.v1.Health/",)


def call(channel: grpc.Channel, method: Method, payloads: list[bytes]) -> tuple[str, str]:
    """Send raw payloads to a method; (status name, details)."""
    try:
        if method.client_streaming and method.server_streaming:
            for _ in channel.stream_stream(method.path)(iter(payloads), timeout=20):
                pass
        elif method.client_streaming:
            channel.stream_unary(method.path)(iter(payloads), timeout=20)
        elif method.server_streaming:
            for _ in channel.unary_stream(method.path)(payloads[0], timeout=20):
                pass
        else:
            channel.unary_unary(method.path)(payloads[0], timeout=20)
    except grpc.RpcError as exc:
        return exc.code().name, exc.details() or ""  # type: ignore[attr-defined]
    return "OK", ""


def cases(found: list[Method], seed: int) -> Iterator[tuple[Method, list[bytes]]]:
    rng = random.Random(seed)
    for i in range(CASES):
        method = found[i % len(found)]
        count = rng.randrange(1, 4) if method.client_streaming else 1
        structured = rng.random() < 0.6
        payloads = [
            random_message(method, rng) if structured else random_bytes(rng) for _ in range(count)
        ]
        yield method, payloads


def test_every_method_answers_malformed_messages_with_a_status(make_daemon) -> None:  # type: ignore[no-untyped-def]
    daemon: Daemon = make_daemon(
        namespaces=["default", "fuzz", "victims"],
        limits={"max_object_bytes": "64MiB", "max_inflight_bytes": "256MiB"},
    )
    victims = {f"v{i}": os.urandom(200 if i % 2 else 200_000) for i in range(10)}
    with Client(daemon.address, namespace="victims") as client:
        for key, data in victims.items():
            client.put(Kind.SCRATCH, key, data)

    channel = grpc.insecure_channel(
        daemon.address, options=[("grpc.max_send_message_length", 64 << 20)]
    )
    found = [m for m in methods(channel) if m.path not in ENDLESS]
    paths = {m.path for m in found}
    assert "/tiermem.v1.ObjectService/Put" in paths and "/tiermem.v1.AdminService/Stats" in paths
    assert len(found) >= 10

    outcomes: Counter[tuple[str, str]] = Counter()
    bad: list[tuple[str, str, str]] = []
    with ThreadPoolExecutor(8) as pool:
        results = pool.map(lambda c: (c[0].path, *call(channel, *c)), cases(found, seed=9))
        for path, code, details in results:
            outcomes[(path.rsplit("/", 1)[-1], code)] += 1
            silent = code != "OK" and not details.strip() and not path.startswith(NO_DETAILS_OK)
            if grpc.StatusCode[code] not in ALLOWED or silent:
                bad.append((path, code, details[:200]))
    channel.close()
    assert sum(outcomes.values()) >= CASES
    assert not bad, f"{len(bad)} bad answers, e.g. {bad[:5]}"
    # Every method was reached and at least some requests were refused for a reason.
    assert {p.rsplit("/", 1)[-1] for p, _ in outcomes} >= {m.path.rsplit("/", 1)[-1] for m in found}
    assert any(code == "INVALID_ARGUMENT" for _, code in outcomes)

    # Still alive, nothing it could not name changed, its accounting consistent.
    with Client(daemon.address, namespace="victims") as client:
        for key, data in victims.items():
            assert client.get(Kind.SCRATCH, key) == data
        assert sorted(o.key for o in client.list()) == sorted(victims)
        for ns in client.list_namespaces():
            listed = list(client.list(namespace=ns))
            assert daemon.store.catalog.namespace_usage(ns) == (
                len(listed),
                sum(o.size_bytes for o in listed),
            ), ns
        assert client.integrity.check().clean
        client.put(Kind.BLOB, "after", b"still works", namespace="default")
    assert daemon.store.guard.inflight_bytes == 0
