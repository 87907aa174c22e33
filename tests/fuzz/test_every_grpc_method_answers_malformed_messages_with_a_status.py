"""Random and malformed messages at every gRPC method the daemon registered:
raw random bytes and structured messages with hostile values, 10 000+ calls.
No crash, no hang, every failure a gRPC status with a message (never INTERNAL
or UNKNOWN), every RPC declared in proto/ reached (none is left unregistered
or unfuzzed unless ``EXCLUDED`` says why), and:

* data the fuzzer cannot name is unchanged afterwards;
* method by method, a request the daemon refused left the stored data (objects,
  blobs, vector collections, open sessions) exactly as it was, the fuzzer's
  favourite names ("default", "fuzz", "k", "key-1") included;
* with tokens configured, calls without a token or with a wrong one are
  UNAUTHENTICATED whatever else is wrong with them, calls with a valid token
  reach every method's own checks, and objects in a namespace the fuzzer may
  name but only read are byte-exact afterwards."""

from __future__ import annotations

import os
import random
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc

from tests.fuzz.messages import (
    Favour,
    Method,
    declared_methods,
    methods,
    random_bytes,
    random_message,
)
from tiermem.client import Client, Kind
from tiermem.server.app import Daemon
from tiermem.v1 import common_pb2

CASES = int(os.environ.get("TIERMEM_FUZZ_CASES", "10400"))
#: Cases of the run with tokens configured (on top of CASES).
TOKEN_CASES = int(os.environ.get("TIERMEM_FUZZ_TOKEN_CASES", "6000"))
#: Cases per method of the run that compares the stored data around each call.
CASES_PER_METHOD = int(os.environ.get("TIERMEM_FUZZ_CASES_PER_METHOD", "40"))
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

#: RPCs declared in proto/ that are deliberately not fuzzed: path -> reason.
#: (None today: every declared RPC is registered by a default daemon and fuzzed.)
EXCLUDED: dict[str, str] = {}
#: Streams that run until the client ends them, by design (bounded server-side by
#: limits.max_request_s): sending them anything cannot end in a status.
ENDLESS = {"/grpc.health.v1.Health/Watch"}
#: Third-party services (grpcio-health-checking) answer some errors without details.
NO_DETAILS_OK = ("/grpc.health.v1.Health/",)
#: Methods that need no credentials (server/api/access.py OPEN_METHODS).
OPEN = ("/grpc.health.v1.Health/",)


def call(
    channel: grpc.Channel,
    method: Method,
    payloads: list[bytes],
    metadata: tuple[tuple[str, str], ...] | None = None,
) -> tuple[str, str]:
    """Send raw payloads to a method; (status name, details)."""
    try:
        if method.client_streaming and method.server_streaming:
            for _ in channel.stream_stream(method.path)(
                iter(payloads), timeout=20, metadata=metadata
            ):
                pass
        elif method.client_streaming:
            channel.stream_unary(method.path)(iter(payloads), timeout=20, metadata=metadata)
        elif method.server_streaming:
            for _ in channel.unary_stream(method.path)(payloads[0], timeout=20, metadata=metadata):
                pass
        else:
            channel.unary_unary(method.path)(payloads[0], timeout=20, metadata=metadata)
    except grpc.RpcError as exc:
        return exc.code().name, exc.details() or ""  # type: ignore[attr-defined]
    return "OK", ""


def payloads_for(method: Method, rng: random.Random, favour: Favour | None = None) -> list[bytes]:
    count = rng.randrange(1, 4) if method.client_streaming else 1
    structured = rng.random() < (0.75 if favour else 0.6)
    return [
        random_message(method, rng, favour) if structured else random_bytes(rng)
        for _ in range(count)
    ]


def cases(found: list[Method], seed: int, n: int) -> Iterator[tuple[Method, list[bytes]]]:
    rng = random.Random(seed)
    for i in range(n):
        method = found[i % len(found)]
        yield method, payloads_for(method, rng)


def fuzzed() -> list[Method]:
    """Every RPC declared in proto/ but the excluded ones."""
    return [m for m in declared_methods() if m.path not in EXCLUDED]


def name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def bad_answer(path: str, code: str, details: str) -> bool:
    silent = code != "OK" and not details.strip() and not path.startswith(NO_DETAILS_OK)
    return grpc.StatusCode[code] not in ALLOWED or silent


def check_accounting(client: Client, daemon: Daemon) -> None:
    for ns in client.list_namespaces():
        listed = list(client.list(namespace=ns))
        assert daemon.store.catalog.namespace_usage(ns) == (
            len(listed),
            sum(o.size_bytes for o in listed),
        ), ns
    assert client.integrity.check().clean
    assert daemon.store.guard.inflight_bytes == 0


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
    unregistered = {m.path for m in fuzzed()} - paths
    assert not unregistered, f"declared in proto/ but not registered: {sorted(unregistered)}"

    outcomes: Counter[tuple[str, str]] = Counter()
    bad: list[tuple[str, str, str]] = []
    with ThreadPoolExecutor(8) as pool:
        results = pool.map(lambda c: (c[0].path, *call(channel, *c)), cases(found, 9, CASES))
        for path, code, details in results:
            outcomes[(path, code)] += 1
            if bad_answer(path, code, details):
                bad.append((path, code, details[:200]))
    channel.close()
    assert sum(outcomes.values()) >= CASES
    assert not bad, f"{len(bad)} bad answers, e.g. {bad[:5]}"
    # Every registered method (so every declared RPC) was reached, and at least
    # some requests were refused for a reason.
    assert {p for p, _ in outcomes} >= paths
    assert any(code == "INVALID_ARGUMENT" for _, code in outcomes)

    # Still alive, nothing it could not name changed, its accounting consistent.
    with Client(daemon.address, namespace="victims") as client:
        for key, data in victims.items():
            assert client.get(Kind.SCRATCH, key) == data
        assert sorted(o.key for o in client.list()) == sorted(victims)
        check_accounting(client, daemon)
        client.put(Kind.BLOB, "after", b"still works", namespace="default")


# -- stored data around each refused request ---------------------------------------
#: Names the fuzzer picks often (tests/fuzz/messages.py STRINGS).
NAMED_NAMESPACES = ("default", "fuzz")
NAMED_KEYS = ("k", "key-1", "default", "fuzz")
#: Most requests of the per-method run name the victims (still mostly malformed).
VICTIMS: Favour = {
    "namespace": NAMED_NAMESPACES,
    "key": NAMED_KEYS,
    "keys": NAMED_KEYS,
    "name": ("k",),
    "kind": (common_pb2.BLOB, common_pb2.SCRATCH),
}


def store_victims(client: Client) -> None:
    """Objects, blobs and a vector collection under names the fuzzer uses."""
    for ns in NAMED_NAMESPACES:
        for i, key in enumerate(NAMED_KEYS):
            for kind in (Kind.BLOB, Kind.SCRATCH):
                client.put(kind, key, f"{ns}/{kind.name}/{key}".encode() * (i + 1), namespace=ns)
            client.blobs.put(key, f"blob {ns}/{key}".encode(), namespace=ns)
        client.vectors.create("k", 4, namespace=ns, if_absent=True)
        client.vectors.upsert("k", [1, 2], [[1, 0, 0, 0], [0, 1, 0, 0]], namespace=ns)


def stored(daemon: Daemon) -> dict[str, Any]:
    """What the daemon stores, as data: every object without a TTL (one with a TTL
    may expire between two looks) by version, size and checksum; every blob; the
    vector collections of the named namespaces with their counts; open sessions."""
    objects = {
        key: (r.meta.version, r.meta.size_bytes, r.meta.checksum.SerializeToString())
        for key, r in daemon.store.catalog.scan_records(b"")
        if not r.meta.expires_unix_ms
    }
    blobs = {
        key: (r.version, r.sha256, r.size_bytes) for key, r in daemon.blobs.catalog.scan(b"", None)
    }
    vectors = {
        (ns, c.spec.name): c.count
        for ns in NAMED_NAMESPACES
        for c in daemon.vectors.list_collections(ns)
    }
    return {
        "objects": objects,
        "blobs": blobs,
        "vectors": vectors,
        "sessions": sorted(daemon.sessions.open_ids()),
    }


def intact(first: dict[str, Any], now: dict[str, Any]) -> bool:
    """The victims are all there with their first bytes (versions aside)."""
    objects, blobs = now["objects"], now["blobs"]
    return (
        all(k in objects and objects[k][1:] == v[1:] for k, v in first["objects"].items())
        and all(k in blobs and blobs[k][1:] == v[1:] for k, v in first["blobs"].items())
        and all(now["vectors"].get(k) == v for k, v in first["vectors"].items())
    )


def changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    out = []
    for part, old in before.items():
        new = after[part]
        if isinstance(old, dict):
            for k in sorted(set(old) | set(new), key=repr):
                if old.get(k) != new.get(k):
                    out.append(f"{part} {k!r}: {old.get(k)!r} -> {new.get(k)!r}")
        elif old != new:
            out.append(f"{part}: {old!r} -> {new!r}")
    return out


def test_a_refused_request_to_any_method_leaves_the_stored_data_as_it_was(make_daemon) -> None:  # type: ignore[no-untyped-def]
    daemon: Daemon = make_daemon(
        namespaces=list(NAMED_NAMESPACES),
        # no session is reaped while the calls run (their open sessions are compared)
        agent={"scratch": {"embedder": "hash"}, "sessions": {"reap_interval_s": 600.0}},
    )
    with Client(daemon.address) as client:
        store_victims(client)
    first = stored(daemon)  # the look sees the victims
    assert len(first["objects"]) == 16 and len(first["blobs"]) == 8, first
    assert first["vectors"] == {("default", "k"): 2, ("fuzz", "k"): 2}, first
    channel = grpc.insecure_channel(daemon.address)
    rng = random.Random(17)
    refused: Counter[str] = Counter()
    altered: list[tuple[str, str, str, list[str]]] = []
    for method in fuzzed():
        for _ in range(CASES_PER_METHOD):
            payloads = payloads_for(method, rng, VICTIMS)
            before = stored(daemon)
            code, details = call(channel, method, payloads)
            if code == "OK":
                if not intact(first, stored(daemon)):  # an accepted request changed them
                    with Client(daemon.address) as client:
                        store_victims(client)
                continue
            refused[method.path] += 1
            diff = changes(before, stored(daemon))
            if diff:
                altered.append((method.path, code, details[:200], diff[:3]))
    channel.close()
    assert not altered, f"{len(altered)} refused requests changed stored data: {altered[:5]}"
    never = {m.path for m in fuzzed()} - set(refused)
    assert not never, f"no request was refused, so nothing was checked: {sorted(never)}"


# -- with tokens ---------------------------------------------------------------------
#: name -> (token, namespaces, roles). The fuzzer holds "writer" and "reader";
#: "admin" stores the victims and checks them afterwards.
TOKENS = {
    "writer": ("fuzz-writer-token", ["default", "ns.with.dots"], ["read", "write"]),
    "reader": ("fuzz-reader-token", ["fuzz"], ["read"]),
    "admin": ("fuzz-admin-token", ["*"], ["read", "write", "admin"]),
}
#: Credentials that are no credentials: wrong tokens, wrong schemes, no token.
WRONG = (
    "Bearer nope", "Bearer ", "bearer", "Basic ZnV6ejpmdXp6", "fuzz-writer-token",
    "Bearer fuzz-writer-tokeN", "Bearer fuzz-writer-token2", "Bearer " + "x" * 5000,
)  # fmt: skip


def bearer(name: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {TOKENS[name][0]}"),)


def credentials(rng: random.Random) -> tuple[bool, tuple[tuple[str, str], ...] | None]:
    """(valid?, metadata): half the cases a valid token, the rest a wrong one or none."""
    r = rng.random()
    if r < 0.5:
        return True, bearer(rng.choice(["writer", "reader"]))
    if r < 0.75:
        return False, (("authorization", rng.choice(WRONG)),)
    return False, None


def test_with_tokens_configured_every_method_checks_the_caller_first(make_daemon) -> None:  # type: ignore[no-untyped-def]
    daemon: Daemon = make_daemon(
        namespaces=["default", "fuzz", "ns.with.dots"],
        security={
            "tokens": [
                {"name": n, "token": t, "namespaces": ns, "roles": roles}
                for n, (t, ns, roles) in TOKENS.items()
            ]
        },
    )
    admin = TOKENS["admin"][0]
    victims = {key: os.urandom(300 * (i + 1)) for i, key in enumerate(NAMED_KEYS)}
    with Client(daemon.address, namespace="fuzz", token=admin) as client:
        for key, data in victims.items():
            client.put(Kind.BLOB, key, data)
            client.blobs.put(key, data)

    found = [m for m in fuzzed() if m.path not in ENDLESS]

    def one(i: int) -> tuple[str, bool, str, str]:
        method = found[i % len(found)]
        rng = random.Random(i * 7919 + 23)  # each case its own stream: reproducible
        valid, metadata = credentials(rng)
        return (method.path, valid, *call(channel, method, payloads_for(method, rng), metadata))

    channel = grpc.insecure_channel(daemon.address)
    outcomes: Counter[tuple[str, bool, str]] = Counter()
    bad: list[tuple[str, bool, str, str]] = []
    with ThreadPoolExecutor(8) as pool:
        for path, valid, code, details in pool.map(one, range(TOKEN_CASES)):
            outcomes[(path, valid, code)] += 1
            allowed = code == "UNAUTHENTICATED" or grpc.StatusCode[code] in ALLOWED
            unchecked = not valid and not path.startswith(OPEN) and code != "UNAUTHENTICATED"
            silent = code != "OK" and not details.strip()
            if not allowed or unchecked or silent:
                bad.append((path, valid, code, details[:200]))
    channel.close()
    assert not bad, f"{len(bad)} bad answers, e.g. {bad[:5]}"
    declared = {m.path for m in found}
    # Valid tokens got past authentication to every method's own checks ...
    checked = {p for p, valid, code in outcomes if valid and code != "UNAUTHENTICATED"}
    assert checked >= declared, sorted(declared - checked)
    # ... and, holding no admin role, were refused what only an admin may do.
    assert any(code == "PERMISSION_DENIED" for _, valid, code in outcomes if valid)

    # The reader's namespace is as it was: the fuzzer could name it, not change it.
    with Client(daemon.address, namespace="fuzz", token=admin) as client:
        for key, data in victims.items():
            assert client.get(Kind.BLOB, key) == data
            assert client.blobs.get(key) == data
        assert sorted(o.key for o in client.list()) == sorted(victims)
        assert sorted(b.key for b in client.blobs.list()) == sorted(victims)
        check_accounting(client, daemon)
