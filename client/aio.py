"""The asyncio client: the same surface as ``Client`` with ``async`` methods."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import numpy as np

from tiermem.client import _wire
from tiermem.client._transport import AsyncTransport, TlsOptions
from tiermem.client.types import Kind, ObjectInfo, Profile, Stats
from tiermem.v1 import admin_pb2, admin_pb2_grpc, object_pb2, object_pb2_grpc

T = TypeVar("T")


class AsyncClient:
    """Client for asyncio programs. Create and use it inside one event loop."""

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
        tls: TlsOptions | None = None,
    ) -> None:
        self.address = address
        self.namespace = namespace
        self.chunk_bytes = chunk_bytes
        self.verify = verify
        self.transport = AsyncTransport(
            address, token=token, timeout_s=timeout_s, retries=retries, tls=tls
        )
        self._metadata = self.transport.metadata
        self._objects = object_pb2_grpc.ObjectServiceStub(self.transport.channel)
        self._admin = admin_pb2_grpc.AdminServiceStub(self.transport.channel)

    async def close(self) -> None:
        await self.transport.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _call(self, fn: Callable[[float], Awaitable[T]], timeout_s: float | None) -> T:
        return await self.transport.call(fn, timeout_s)

    async def put(
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
        view = _wire.as_view(data)
        header = _wire.put_header(
            namespace or self.namespace,
            kind,
            key,
            view,
            profile=profile,
            session=session,
            dtype=dtype,
            shape=shape,
            memory_format=memory_format,
            if_absent=if_absent,
            verify=self.verify,
        )

        async def call(timeout: float) -> ObjectInfo:
            reply = await self._objects.Put(
                _wire.put_requests(header, view, self.chunk_bytes),
                timeout=timeout,
                metadata=self._metadata,
            )
            return _wire.info(reply.meta)

        return await self._call(call, timeout_s)

    async def put_array(
        self, kind: Kind, key: str, array: np.ndarray[Any, Any], **kw: Any
    ) -> ObjectInfo:
        dtype = _wire.NUMPY_DTYPES.get(array.dtype.name)
        if dtype is None:
            raise ValueError(f"numpy dtype {array.dtype} is not supported")
        return await self.put(kind, key, array, dtype=dtype, shape=tuple(array.shape), **kw)

    async def put_tensor(self, kind: Kind, key: str, tensor: Any, **kw: Any) -> ObjectInfo:
        view, dtype, shape = _wire.tensor_view(tensor)
        return await self.put(kind, key, view, dtype=dtype, shape=shape, **kw)

    async def get_with_info(
        self,
        kind: Kind,
        key: str,
        *,
        namespace: str | None = None,
        offset: int = 0,
        length: int = 0,
        timeout_s: float | None = None,
    ) -> tuple[ObjectInfo, bytes]:
        request = object_pb2.GetRequest(
            key=_wire.object_key(namespace or self.namespace, kind, key),
            offset=offset,
            length=length,
        )

        async def call(timeout: float) -> tuple[ObjectInfo, bytes]:
            stream = self._objects.Get(request, timeout=timeout, metadata=self._metadata)
            meta: ObjectInfo | None = None
            chunks: list[bytes] = []
            async for msg in stream:
                if meta is None:
                    meta = _wire.info(msg.meta)
                else:
                    chunks.append(msg.chunk)
            if meta is None:
                raise ValueError("empty Get stream")
            return meta, b"".join(chunks)

        meta, data = await self._call(call, timeout_s)
        if self.verify:
            _wire.verify_get(meta, data, whole=offset == 0 and length == 0)
        return meta, data

    async def get(self, kind: Kind, key: str, **kw: Any) -> bytes:
        return (await self.get_with_info(kind, key, **kw))[1]

    async def get_array(self, kind: Kind, key: str, **kw: Any) -> np.ndarray[Any, Any]:
        meta, data = await self.get_with_info(kind, key, **kw)
        return _wire.array_from(meta, data)

    async def get_tensor(self, kind: Kind, key: str, **kw: Any) -> Any:
        meta, data = await self.get_with_info(kind, key, **kw)
        return _wire.tensor_from(meta, data)

    async def stat(
        self, kind: Kind, key: str, *, namespace: str | None = None, timeout_s: float | None = None
    ) -> ObjectInfo:
        request = object_pb2.StatRequest(
            key=_wire.object_key(namespace or self.namespace, kind, key)
        )
        reply = await self._call(
            lambda t: self._objects.Stat(request, timeout=t, metadata=self._metadata), timeout_s
        )
        return _wire.info(reply.meta)

    async def delete(
        self, kind: Kind, key: str, *, namespace: str | None = None, timeout_s: float | None = None
    ) -> bool:
        request = object_pb2.DeleteRequest(
            key=_wire.object_key(namespace or self.namespace, kind, key)
        )
        reply = await self._call(
            lambda t: self._objects.Delete(request, timeout=t, metadata=self._metadata), timeout_s
        )
        return bool(reply.deleted)

    async def list(
        self,
        *,
        namespace: str | None = None,
        kind: Kind | None = None,
        prefix: str = "",
        session: str = "",
        page_size: int = 0,
        timeout_s: float | None = None,
    ) -> AsyncIterator[ObjectInfo]:
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
            reply = await self._call(self._list_page(request), timeout_s)
            for meta in reply.objects:
                yield _wire.info(meta)
            token = reply.next_page_token
            if not token:
                return

    def _list_page(
        self, request: object_pb2.ListRequest
    ) -> Callable[[float], Awaitable[object_pb2.ListResponse]]:
        return lambda t: self._objects.List(request, timeout=t, metadata=self._metadata)

    async def stats(self, *, timeout_s: float | None = None) -> Stats:
        reply = await self._call(
            lambda t: self._admin.Stats(
                admin_pb2.StatsRequest(), timeout=t, metadata=self._metadata
            ),
            timeout_s,
        )
        return _wire.stats(reply)
