"""LMCache remote storage plugin backed by a tiermem daemon.

LMCache builds it as ``TiermemConnector(loop=..., local_cpu_backend=...,
config=...)`` (see ``tiermem.client.lmcache`` for the configuration keys). Every
LMCache chunk becomes one tiermem KV block: scope = (model, world size, worker,
dtype, salt + request tags), hash = the chunk hash. ``batched_async_contains``
is one ``LookupPrefix`` call; batched puts and gets are one ``PutBlocks`` /
``GetBlocks`` call per scope, and gets land straight in LMCache's own buffers.
Blocking client calls run in the default executor, never on LMCache's loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from lmcache.v1.memory_management import MemoryFormat
from lmcache.v1.storage_backend.connector.base_connector import RemoteConnector

from tiermem.client.kv import FetchedBlock, KvBlock, KvClient, KvScope
from tiermem.client.lmcache.convert import AfterHit, ObjLayout, parse_layout, scope_of
from tiermem.client.sync import Client
from tiermem.client.types import AccessHint, Precision, Profile

log = logging.getLogger(__name__)
T = TypeVar("T")

MODULE_PATH = __name__
CLASS_NAME = "TiermemConnector"


@dataclass(frozen=True, slots=True)
class PluginSettings:
    """``remote_storage_plugin.<name>.*`` keys of LMCache's ``extra_config``."""

    address: str = "127.0.0.1:50051"
    namespace: str = "default"
    salt: str = ""
    timeout_s: float = 30.0
    codec: str = ""
    lossy_max_error: float = 0.0
    cold_after_hit: bool = False
    """Put the chunks a request stores after its prefix hit COLD (the daemon drops
    rather than writes to SSD the ones memory has no room for). Only for
    deployments whose requests are one-shot: a multi-turn conversation rereads
    the chunks it stored after its hit on the next turn."""

    @classmethod
    def from_extra_config(cls, extra: dict[str, Any] | None) -> PluginSettings:
        """Find the plugin entry whose class is this one and read its keys."""
        extra = extra or {}
        name = next(
            (
                key.split(".")[1]
                for key, value in extra.items()
                if key.startswith("remote_storage_plugin.")
                and key.endswith(".module_path")
                and value == MODULE_PATH
            ),
            None,
        )
        if name is None:
            return cls()
        p = f"remote_storage_plugin.{name}."
        d = cls()
        return cls(
            address=str(extra.get(p + "address", d.address)),
            namespace=str(extra.get(p + "namespace", d.namespace)),
            salt=str(extra.get(p + "salt", d.salt)),
            timeout_s=float(extra.get(p + "timeout_s", d.timeout_s)),
            codec=str(extra.get(p + "codec", d.codec)),
            lossy_max_error=float(extra.get(p + "lossy_max_error", d.lossy_max_error)),
            cold_after_hit=str(extra.get(p + "cold_after_hit", d.cold_after_hit)).lower()
            in ("1", "true", "yes"),
        )


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class TiermemConnector(RemoteConnector):  # type: ignore[misc]
    def __init__(self, loop: asyncio.AbstractEventLoop, local_cpu_backend: Any, config: Any):
        super().__init__(config, local_cpu_backend.metadata)
        self.loop = loop
        self.local_cpu_backend = local_cpu_backend
        self.settings = PluginSettings.from_extra_config(config.extra_config)
        self.client = Client(
            self.settings.address,
            namespace=self.settings.namespace,
            timeout_s=self.settings.timeout_s,
        )
        self.kv: KvClient = self.client.kv
        self.profile = (
            Profile(precision=Precision.LOSSY_OK, lossy_max_error=self.settings.lossy_max_error)
            if self.settings.codec
            else None
        )
        self.after_hit = AfterHit() if self.settings.cold_after_hit else None
        log.info("tiermem connector: daemon %s, namespace %s", self.settings.address,
                 self.settings.namespace)  # fmt: skip

    # -- keys -----------------------------------------------------------------------
    def scope(self, key: Any) -> KvScope:
        return scope_of(
            key.model_name,
            key.world_size,
            key.worker_id,
            _dtype_name(key.dtype),
            salt=self.settings.salt,
            namespace=self.settings.namespace,
            tags=key.tags,
            layer_id=getattr(key, "layer_id", None),
        )

    def _grouped(self, keys: Sequence[Any]) -> dict[KvScope, list[int]]:
        groups: dict[KvScope, list[int]] = {}
        for i, key in enumerate(keys):
            groups.setdefault(self.scope(key), []).append(i)
        return groups

    async def _run(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(None, fn)

    # -- contains ----------------------------------------------------------------------
    def _prefix_len(self, keys: Sequence[Any]) -> int:
        """Leading keys that are stored (one LookupPrefix per run of one scope)."""
        done = 0
        while done < len(keys):
            scope = self.scope(keys[done])
            end = done
            while end < len(keys) and self.scope(keys[end]) == scope:
                end += 1
            hashes = [k.chunk_hash for k in keys[done:end]]
            done += self.kv.lookup_prefix(scope, hashes).stored_chunks
            if done < end:
                break
        if self.after_hit is not None:
            self.after_hit.record([k.chunk_hash for k in keys], done)
        return done

    async def exists(self, key: Any) -> bool:
        return await self._run(lambda: self._prefix_len([key]) == 1)

    def exists_sync(self, key: Any) -> bool:
        return self._prefix_len([key]) == 1

    def support_batched_contains(self) -> bool:
        return True

    def batched_contains(self, keys: list[Any]) -> int:
        return self._prefix_len(keys)

    def support_batched_async_contains(self) -> bool:
        return True

    async def batched_async_contains(
        self, lookup_id: str, keys: list[Any], pin: bool = False
    ) -> int:
        return await self._run(lambda: self._prefix_len(keys))

    # -- put ----------------------------------------------------------------------------
    def _put_sync(self, keys: Sequence[Any], memory_objs: Sequence[Any]) -> None:
        for scope, indices in self._grouped(keys).items():
            after = self.after_hit
            taken = {i for i in indices if after is not None and after.take(keys[i].chunk_hash)}
            cold = [i for i in indices if i in taken]
            rest = [i for i in indices if i not in taken]
            for part, profile in ((rest, self.profile), (cold, self._cold_profile())):
                if part:
                    blocks = [self._block(keys[i], memory_objs[i]) for i in part]
                    self.kv.put_blocks(scope, blocks, profile=profile, codec=self.settings.codec)

    def _cold_profile(self) -> Profile:
        return dataclasses.replace(self.profile or Profile(), hint=AccessHint.COLD)

    def _block(self, key: Any, memory_obj: Any) -> KvBlock:
        layout = ObjLayout(
            memory_obj.get_memory_format().name,
            tuple(_dtype_name(d) for d in memory_obj.get_dtypes()),
            tuple(tuple(int(x) for x in s) for s in memory_obj.get_shapes()),
        )
        view = memoryview(memory_obj.byte_array).cast("B")
        if len(view) < layout.nbytes:
            raise ValueError(f"memory object is {len(view)} bytes; its shapes need {layout.nbytes}")
        dtype, shape = layout.block_tensor()
        return KvBlock(
            key.chunk_hash,
            view[: layout.nbytes],
            dtype=dtype,
            shape=shape,
            memory_format=layout.memory_format(),
        )

    async def put(self, key: Any, memory_obj: Any) -> None:
        await self._run(lambda: self._put_sync([key], [memory_obj]))

    def support_batched_put(self) -> bool:
        return True

    async def batched_put(self, keys: list[Any], memory_objs: list[Any]) -> None:
        await self._run(lambda: self._put_sync(keys, memory_objs))

    # -- get ----------------------------------------------------------------------------
    def _get_sync(self, keys: Sequence[Any]) -> list[Any]:
        out: list[Any] = [None] * len(keys)
        for scope, indices in self._grouped(keys).items():
            objs: dict[int, Any] = {}

            def allocate(block: FetchedBlock, index: int, objs: dict[int, Any] = objs) -> Any:
                layout = parse_layout(block.memory_format, block.dtype, block.shape)
                obj = self.local_cpu_backend.allocate(
                    [torch.Size(s) for s in layout.shapes],
                    [getattr(torch, d) for d in layout.dtypes],
                    MemoryFormat[layout.fmt],
                )
                if obj is None:
                    log.warning("LMCache could not allocate %d bytes for a get", block.size_bytes)
                    return None
                objs[index] = obj
                return memoryview(obj.byte_array).cast("B")[: block.size_bytes]

            try:
                fetched = self.kv.get_blocks(
                    scope, [keys[i].chunk_hash for i in indices], allocate=allocate
                )
            except BaseException:
                for obj in objs.values():
                    obj.ref_count_down()
                raise
            for j, block in enumerate(fetched):
                if block.found and j in objs:
                    out[indices[j]] = objs[j]
        return out

    async def get(self, key: Any) -> Any:
        return (await self._run(lambda: self._get_sync([key])))[0]

    def support_batched_get(self) -> bool:
        return True

    async def batched_get(self, keys: list[Any]) -> list[Any]:
        return await self._run(lambda: self._get_sync(keys))

    # -- misc -----------------------------------------------------------------------------
    async def list(self) -> list[str]:
        """tiermem object keys of the stored KV blocks (of every model)."""
        from tiermem.client.types import Kind

        return await self._run(lambda: [o.key for o in self.client.list(kind=Kind.KV_BLOCK)])

    async def close(self) -> None:
        self.client.close()
