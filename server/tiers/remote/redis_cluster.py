"""Redis Cluster backend (redis-py's ``RedisCluster``).

Batches are cluster pipelines: redis-py groups their commands by the node that
owns each key's slot and sends one pipeline per node. Values are plain strings
(at most 512 MiB each, Redis's ``proto-max-bulk-len``); a value is written
with one ``SET`` of header + payload. Reads (``get_many``) go over raw RESP
connections of the backend's own, straight into reused buffers (``resp``:
half the time and a third of the CPU of a redis-py pipeline), and fall back to
redis-py when a node answers with an error (a MOVED after a resharding). A
read that cannot reach a node refreshes redis-py's slot map, as redis-py's own
commands do after a connection error, and is tried once more against the
owners the map names then (a node stopped or failed over). A read that times
out (a slow node that took the connection) is a plain failure: no refresh, no
second read.
Connection and cluster errors raise ``RemoteError``; redis-py's own retries are
turned off so the engine's deadline and retry budget are the only ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tiermem.server.config import RedisClusterConfig
from tiermem.server.errors import InvariantViolation
from tiermem.server.tiers.remote.base import Landed, Lander, RemoteBackend, RemoteError
from tiermem.server.tiers.remote.resp import (
    BufferPool,
    RawGetter,
    Redirected,
    RespError,
    Unreachable,
)


def _node(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"tiers.remote.redis.nodes: {address!r} is not HOST:PORT")
    return host, int(port)


class RedisClusterBackend(RemoteBackend):
    name = "redis_cluster"

    def __init__(self, config: RedisClusterConfig, op_timeout_s: float) -> None:
        import redis
        from redis.backoff import NoBackoff
        from redis.cluster import ClusterNode, RedisCluster
        from redis.retry import Retry

        self._config = config
        self._errors: tuple[type[BaseException], ...] = (
            redis.exceptions.ConnectionError,
            redis.exceptions.TimeoutError,
            redis.exceptions.ClusterError,
            redis.exceptions.RedisClusterException,
            redis.exceptions.BusyLoadingError,
            OSError,
        )
        # Per-value refusals of a SET: the store is fine, it will not keep this
        # value ("OOM" under maxmemory with noeviction; a plain "ERR", such as a
        # value past proto-max-bulk-len). Every other error reply (CLUSTERDOWN,
        # MASTERDOWN, TRYAGAIN, READONLY, NOPERM, ...) is the store failing.
        self._refusals: tuple[type[BaseException], ...] = (redis.exceptions.OutOfMemoryError,)
        self._plain_error = redis.exceptions.ResponseError
        nodes = [ClusterNode(*_node(a)) for a in config.nodes]  # type: ignore[no-untyped-call]
        try:
            self._client: Any = RedisCluster(
                startup_nodes=nodes,
                password=config.password or None,
                socket_timeout=op_timeout_s,
                socket_connect_timeout=min(op_timeout_s, 1.0),
                retry=Retry(NoBackoff(), 0),
                max_connections=config.max_connections,
            )
        except self._errors as exc:
            raise RemoteError(f"Redis Cluster at {self.address}: {exc}") from exc
        self._pool = BufferPool()
        self._raw = RawGetter(op_timeout_s, config.password, self._pool)

    @property
    def address(self) -> str:
        return ",".join(self._config.nodes)

    def _run(self, commands: list[tuple[str, tuple[Any, ...]]]) -> list[Any]:
        """One cluster pipeline; per-command Redis errors come back as values."""
        try:
            pipe = self._client.pipeline(transaction=False)
            for command, args in commands:
                getattr(pipe, command)(*args)
            return list(pipe.execute(raise_on_error=False))
        except self._errors as exc:
            raise RemoteError(f"Redis Cluster at {self.address}: {exc}") from exc

    def _check(self, results: list[Any], refusals_allowed: bool = False) -> None:
        """Raise RemoteError for an error reply among ``results``; with
        ``refusals_allowed``, a SET's per-value refusal is left in place (the
        caller reads it as "not stored"). A cluster that is down answers every
        command with an error reply: that must never read as a missing key,
        a refused value or a delete done."""
        for r in results:
            if not isinstance(r, BaseException):
                continue
            if refusals_allowed and (isinstance(r, self._refusals) or type(r) is self._plain_error):
                continue
            raise RemoteError(f"Redis Cluster at {self.address}: {type(r).__name__}: {r}")

    def put_many(self, names: Sequence[str], values: Sequence[bytes]) -> list[bool]:
        ttl = self._config.ttl_s or None
        results = self._run([("set", (n, v, ttl)) for n, v in zip(names, values, strict=True)])
        self._check(results, refusals_allowed=True)
        return [r is True for r in results]

    def get_many(self, names: Sequence[str]) -> list[tuple[memoryview, object] | None]:
        """Each value in a pooled buffer (``release`` gives it back), read over the
        raw connections; through redis-py when a node redirects."""
        out: list[tuple[memoryview, object] | None] = []
        for got in self._get(names, None):
            if isinstance(got, Landed):  # nothing lands without a lander
                raise InvariantViolation("a value landed in a read without a lander")
            out.append(got)
        return out

    def get_many_into(
        self, names: Sequence[str], lander: Lander
    ) -> list[tuple[memoryview, object] | Landed | None]:
        """``get_many``, each value past its head received straight from the
        socket into the buffer ``lander`` gives (no copy on the way). After a
        redirection, through redis-py (nothing lands)."""
        return self._get(names, lander)

    def _get(
        self, names: Sequence[str], lander: Lander | None
    ) -> list[tuple[memoryview, object] | Landed | None]:
        try:
            try:
                got = self._raw.get(names, self._nodes_of(names), lander)
            except Unreachable:  # refused, reset, closed; never a timeout
                # A node is gone (stopped, failed over, its slots moved) and the
                # slot map may still name it: refresh the map and read once more
                # from the owners it names now. Without the lander: what the
                # failed try placed there is the lander's to give back, and a
                # value must not be placed twice.
                self._client.nodes_manager.initialize()
                got = self._raw.get(names, self._nodes_of(names), None)
        except Redirected:
            return list(self._get_many_client(names))
        except RespError as exc:
            raise RemoteError(f"Redis Cluster at {self.address}: {exc}") from exc
        except self._errors as exc:  # the slot map could not be refreshed
            raise RemoteError(f"Redis Cluster at {self.address}: {exc}") from exc
        return [g if not isinstance(g, tuple) else (memoryview(g[0])[: g[1]], g[0]) for g in got]

    def _nodes_of(self, names: Sequence[str]) -> list[tuple[str, int]]:
        """The node that holds each name's slot, by redis-py's slot map."""
        nodes = []
        for name in names:
            node = self._client.get_node_from_key(name)
            nodes.append((node.host, node.port))
        return nodes

    def _get_many_client(self, names: Sequence[str]) -> list[tuple[memoryview, object] | None]:
        results = self._run([("get", (n,)) for n in names])
        self._check(results)
        out: list[tuple[memoryview, object] | None] = []
        for r in results:
            if isinstance(r, BaseException):
                raise RemoteError(f"Redis Cluster at {self.address}: {r}")
            out.append(None if r is None else (memoryview(r), None))
        return out

    def exists_many(self, names: Sequence[str]) -> list[bool]:
        results = self._run([("exists", (n,)) for n in names])
        self._check(results)
        return [isinstance(r, int) and r > 0 for r in results]

    def delete_many(self, names: Sequence[str]) -> None:
        self._check(self._run([("delete", (n,)) for n in names]))

    def ping(self) -> None:
        try:
            self._client.exists("tiermem/ping")
        except self._errors as exc:
            raise RemoteError(f"Redis Cluster at {self.address}: {exc}") from exc

    def release(self, owner: object) -> None:
        if isinstance(owner, bytearray):
            self._pool.give(owner)

    def close(self) -> None:
        self._raw.close()
        self._client.close()
