"""The synchronous client.

Every call has a deadline (``timeout_s``, per call or the client's default) and
is retried with exponential backoff on UNAVAILABLE only (the daemon is starting
or unreachable); every other failure raises a typed ``TiermemClientError``.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np

from tiermem.client import _wire
from tiermem.client._transport import TlsOptions, Transport
from tiermem.client.blobs import BlobClient
from tiermem.client.fastpath import (
    DEFAULT_SHM_MIN_BYTES,
    DEFAULT_THRESHOLD_BYTES,
    PATHS,
    DataPlane,
    ObjectRef,
    PutItem,
    as_bytes,
)
from tiermem.client.integrity import IntegrityClient
from tiermem.client.kv import KvClient
from tiermem.client.operators import OperatorsClient
from tiermem.client.placement import PlacementClient
from tiermem.client.scratch import ScratchClient
from tiermem.client.sessions import SESSION_METADATA, SessionsClient
from tiermem.client.types import Kind, ObjectInfo, Profile, Stats
from tiermem.client.vectors import VectorClient
from tiermem.dataplane_wire import OP_DELETE, OP_LIST, OP_STAT
from tiermem.v1 import admin_pb2, admin_pb2_grpc, object_pb2, object_pb2_grpc

T = TypeVar("T")


class Client:
    """Blocking client. Thread-safe; share one per process and ``close()`` it."""

    def __init__(
        self,
        address: str,
        *,
        namespace: str = "default",
        timeout_s: float = 30.0,
        retries: int = 3,
        token: str | None = None,
        chunk_bytes: int = _wire.DEFAULT_CHUNK_BYTES,
        verify: bool = True,
        fast_paths: Sequence[str] = PATHS,
        fast_threshold_bytes: int = DEFAULT_THRESHOLD_BYTES,
        fast_shm_min_bytes: int = DEFAULT_SHM_MIN_BYTES,
        session: str = "",
        transport: Transport | None = None,
        tls: TlsOptions | None = None,
        bulk_unix: bool = True,
    ) -> None:
        """``verify``: send a checksum with every put (the daemon rejects damaged
        uploads) and check whole-object gets against the daemon's checksum.
        ``fast_paths``: data paths the client may use for values of at least
        ``fast_threshold_bytes``, picked in the order shm, bulk, grpc (see
        ``tiermem.client.fastpath``); ``("grpc",)`` turns the fast paths off.
        ``fast_shm_min_bytes``: below this mean value size a batch goes by the
        bulk channel before shared memory (one round trip instead of two; 0:
        shared memory first whatever the size).
        ``session``: act as this agent session (see ``as_session``).
        ``transport``: share an existing channel instead of opening one.
        ``bulk_unix``: on the daemon's host, reach its bulk channel by the Unix
        socket it offers instead of TCP (False: TCP, as a client on another host)."""
        self.address = address
        self.namespace = namespace
        self.chunk_bytes = chunk_bytes
        self.verify = verify
        self.session = session
        if transport is None:
            transport = Transport(
                address, token=token, timeout_s=timeout_s, retries=retries, tls=tls
            )
        if session:
            transport = transport.with_metadata((SESSION_METADATA, session))
        self.transport = transport
        self._metadata = self.transport.metadata
        self._objects = object_pb2_grpc.ObjectServiceStub(self.transport.channel)
        self._admin = admin_pb2_grpc.AdminServiceStub(self.transport.channel)
        self.dataplane = DataPlane(
            self.transport,
            namespace=namespace,
            verify=verify,
            chunk_bytes=chunk_bytes,
            threshold_bytes=fast_threshold_bytes,
            paths=fast_paths,
            shm_min_bytes=fast_shm_min_bytes,
            bulk_unix=bulk_unix,
        )
        self.kv = KvClient(
            self.transport,
            namespace=namespace,
            chunk_bytes=chunk_bytes,
            verify=verify,
            dataplane=self.dataplane,
        )
        self.placement = PlacementClient(self.transport, namespace)
        self.vectors = VectorClient(self.transport, namespace)
        self.sessions = SessionsClient(self.transport)
        self.scratch = ScratchClient(self.transport)
        self.operators = OperatorsClient(self.transport)
        self.blobs = BlobClient(
            self.transport, self.dataplane, namespace=namespace, chunk_bytes=chunk_bytes
        )
        self.integrity = IntegrityClient(self.transport)
        self._fast = (tuple(fast_paths), fast_threshold_bytes, fast_shm_min_bytes, bulk_unix)

    def as_session(self, session: str) -> Client:
        """A client on the same channel acting as ``session``: it sees that
        session's objects and records, and what its grants share, nothing of
        its siblings; what it puts, the session owns. Closing it keeps the channel."""
        base = self.transport.with_metadata()
        base.metadata = tuple(m for m in base.metadata if m[0] != SESSION_METADATA)
        return Client(
            self.address,
            namespace=self.namespace,
            chunk_bytes=self.chunk_bytes,
            verify=self.verify,
            fast_paths=self._fast[0],
            fast_threshold_bytes=self._fast[1],
            fast_shm_min_bytes=self._fast[2],
            bulk_unix=self._fast[3],
            session=session,
            transport=base,
        )

    def close(self) -> None:
        self.dataplane.close()
        self.transport.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, fn: Callable[[float], T], timeout_s: float | None) -> T:
        return self.transport.call(fn, timeout_s)

    # -- objects -----------------------------------------------------------------
    def put(
        self,
        kind: Kind,
        key: str,
        data: Any,
        *,
        namespace: str | None = None,
        profile: Profile | None = None,
        session: str = "",
        dtype: str = "",
        shape: tuple[int, ...] = (),
        memory_format: str = "",
        if_absent: bool = False,
        timeout_s: float | None = None,
    ) -> ObjectInfo:
        """Store bytes-like ``data`` (bytes, bytearray, memoryview, numpy array).
        ``dtype``/``shape`` mark the value as a tensor (checked against its size).
        Large values take the fastest data path available (``path_stats()``)."""
        item = PutItem(
            kind,
            key,
            data,
            namespace=namespace,
            profile=profile,
            session=session,
            dtype=dtype,
            shape=shape,
            memory_format=memory_format,
            if_absent=if_absent,
        )
        return self.dataplane.put_many([item], timeout_s=timeout_s)[0]

    def put_array(self, kind: Kind, key: str, array: np.ndarray[Any, Any], **kw: Any) -> ObjectInfo:
        dtype = _wire.NUMPY_DTYPES.get(array.dtype.name)
        if dtype is None:
            raise ValueError(f"numpy dtype {array.dtype} is not supported")
        return self.put(kind, key, array, dtype=dtype, shape=tuple(array.shape), **kw)

    def put_tensor(self, kind: Kind, key: str, tensor: Any, **kw: Any) -> ObjectInfo:
        """Store a torch tensor (any dtype, bfloat16 included) with its dtype and shape."""
        view, dtype, shape = _wire.tensor_view(tensor)
        return self.put(kind, key, view, dtype=dtype, shape=shape, **kw)

    def get_with_info(
        self,
        kind: Kind,
        key: str,
        *,
        namespace: str | None = None,
        offset: int = 0,
        length: int = 0,
        timeout_s: float | None = None,
    ) -> tuple[ObjectInfo, bytes]:
        if offset == 0 and length == 0:
            ref = ObjectRef(kind, key, namespace)
            fetched = self.dataplane.get_many([ref], timeout_s=timeout_s)[0]
            return fetched.info, as_bytes(fetched.data)
        request = object_pb2.GetRequest(
            key=_wire.object_key(namespace or self.namespace, kind, key),
            offset=offset,
            length=length,
        )

        def call(timeout: float) -> tuple[ObjectInfo, bytes]:
            stream = self._objects.Get(request, timeout=timeout, metadata=self._metadata)
            first = next(stream)
            meta = _wire.info(first.meta)
            data = b"".join([msg.chunk for msg in stream])
            return meta, data

        meta, data = self._call(call, timeout_s)
        if self.verify:
            _wire.verify_get(meta, data, whole=offset == 0 and length == 0)
        return meta, data

    def get_into(
        self,
        kind: Kind,
        key: str,
        out: Any,
        *,
        namespace: str | None = None,
        timeout_s: float | None = None,
    ) -> ObjectInfo:
        """Read a whole object into the writable buffer ``out`` (at least its size;
        e.g. a reused numpy array or pinned tensor): no intermediate copy on the
        fast paths."""
        ref = ObjectRef(kind, key, namespace)
        return self.dataplane.get_many([ref], out=[out], timeout_s=timeout_s)[0].info

    def path_stats(self) -> dict[str, dict[str, int]]:
        """Objects and bytes this client moved per data path (shm, bulk, grpc)."""
        return self.dataplane.path_stats()

    def get(self, kind: Kind, key: str, **kw: Any) -> bytes:
        return self.get_with_info(kind, key, **kw)[1]

    def get_array(self, kind: Kind, key: str, **kw: Any) -> np.ndarray[Any, Any]:
        meta, data = self.get_with_info(kind, key, **kw)
        return _wire.array_from(meta, data)

    def get_tensor(self, kind: Kind, key: str, **kw: Any) -> Any:
        meta, data = self.get_with_info(kind, key, **kw)
        return _wire.tensor_from(meta, data)

    def stat(
        self, kind: Kind, key: str, *, namespace: str | None = None, timeout_s: float | None = None
    ) -> ObjectInfo:
        request = object_pb2.StatRequest(
            key=_wire.object_key(namespace or self.namespace, kind, key)
        )
        deadline = self.dataplane.deadline_for(timeout_s)  # (a first call negotiates)
        left = self.dataplane.time_left
        reply = self.dataplane.unary(OP_STAT, request, object_pb2.StatResponse(), left(deadline))
        if reply is None:  # no bulk session to carry it: gRPC, in the time left
            reply = self._call(
                lambda t: self._objects.Stat(request, timeout=t, metadata=self._metadata),
                left(deadline),
            )
        return _wire.info(reply.meta)

    def delete(
        self, kind: Kind, key: str, *, namespace: str | None = None, timeout_s: float | None = None
    ) -> bool:
        request = object_pb2.DeleteRequest(
            key=_wire.object_key(namespace or self.namespace, kind, key)
        )
        deadline = self.dataplane.deadline_for(timeout_s)
        left = self.dataplane.time_left
        reply = self.dataplane.unary(
            OP_DELETE, request, object_pb2.DeleteResponse(), left(deadline)
        )
        if reply is None:
            reply = self._call(
                lambda t: self._objects.Delete(request, timeout=t, metadata=self._metadata),
                left(deadline),
            )
        return bool(reply.deleted)

    def list(
        self,
        *,
        namespace: str | None = None,
        kind: Kind | None = None,
        prefix: str = "",
        session: str = "",
        page_size: int = 0,
        timeout_s: float | None = None,
    ) -> Iterator[ObjectInfo]:
        """All matching objects, fetched page by page as the iterator advances."""
        token = ""
        while True:
            request = object_pb2.ListRequest(
                namespace=namespace or self.namespace,
                kind=int(kind or 0),  # type: ignore[arg-type]
                key_prefix=prefix,
                session=session,
                page_size=page_size,
                page_token=token,
            )
            # each page is a call of its own (the iterator is driven by its user)
            deadline = self.dataplane.deadline_for(timeout_s)
            left = self.dataplane.time_left
            reply = self.dataplane.unary(
                OP_LIST, request, object_pb2.ListResponse(), left(deadline)
            )
            if reply is None:
                reply = self._call(self._list_page(request), left(deadline))
            for meta in reply.objects:
                yield _wire.info(meta)
            token = reply.next_page_token
            if not token:
                return

    def _list_page(
        self, request: object_pb2.ListRequest
    ) -> Callable[[float], object_pb2.ListResponse]:
        return lambda t: self._objects.List(request, timeout=t, metadata=self._metadata)

    # -- admin -------------------------------------------------------------------
    def stats(self, *, timeout_s: float | None = None) -> Stats:
        reply = self._call(
            lambda t: self._admin.Stats(
                admin_pb2.StatsRequest(), timeout=t, metadata=self._metadata
            ),
            timeout_s,
        )
        return _wire.stats(reply)

    def create_namespace(self, name: str, *, timeout_s: float | None = None) -> bool:
        reply = self._call(
            lambda t: self._admin.CreateNamespace(
                admin_pb2.CreateNamespaceRequest(name=name), timeout=t, metadata=self._metadata
            ),
            timeout_s,
        )
        return bool(reply.created)

    def list_namespaces(self, *, timeout_s: float | None = None) -> builtins.list[str]:
        reply = self._call(
            lambda t: self._admin.ListNamespaces(
                admin_pb2.ListNamespacesRequest(), timeout=t, metadata=self._metadata
            ),
            timeout_s,
        )
        return list(reply.names)

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Block until the daemon answers (or raise UnavailableError)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.stats(timeout_s=min(2.0, timeout_s))
                return
            except Exception:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.1)
