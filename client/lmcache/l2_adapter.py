"""L2 adapter plugin for LMCache's multiprocess server (``lmcache server``).

Load it with::

    lmcache server ... --l2-adapter '{"type": "plugin",
        "module_path": "tiermem.client.lmcache.l2_adapter",
        "class_name": "TiermemL2Adapter",
        "adapter_params": {"address": "127.0.0.1:50051", "namespace": "default"}}'

LMCache's L2 interface is non-blocking: tasks are submitted, run here on a
small thread pool against the daemon, and completion is signalled on one event
fd per operation kind. Each L2 object becomes one tiermem KV block of raw bytes
(``uint8[n]``, memory format ``lmcache-l2:<FORMAT>``) named by a scope whose
model is the key's model, with the key's cache salt, KV rank and object group
folded into the tenant salt.

Locks are advisory: tiermem KV blocks are CACHE objects, so a block found by a
lookup may be evicted before its load; the load then reports it in the failure
bitmap, which the interface allows.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from lmcache.lmcache_native import Bitmap
from lmcache.v1.distributed.internal_api import L2StoreResult
from lmcache.v1.distributed.l2_adapters.base import L2AdapterInterface
from lmcache.v1.distributed.l2_adapters.config import L2AdapterConfigBase
from lmcache.v1.platform import create_event_notifier

from tiermem.client.kv import FetchedBlock, KvBlock, KvScope
from tiermem.client.sync import Client

log = logging.getLogger(__name__)

FORMAT_PREFIX = "lmcache-l2:"
#: The KV dtype field of L2 scopes: L2 keys carry none (objects are raw bytes).
L2_DTYPE = "l2raw"


class TiermemL2AdapterConfig(L2AdapterConfigBase):  # type: ignore[misc]
    """``adapter_params`` of the plugin: address, namespace, salt, timeout_s, workers."""

    def __init__(
        self,
        address: str = "127.0.0.1:50051",
        namespace: str = "default",
        salt: str = "",
        timeout_s: float = 30.0,
        workers: int = 2,
    ) -> None:
        super().__init__()
        self.address = address
        self.namespace = namespace
        self.salt = salt
        self.timeout_s = timeout_s
        self.workers = workers

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TiermemL2AdapterConfig:
        workers = int(d.get("workers", 2))
        if workers < 1:
            raise ValueError("workers must be at least 1")
        return cls(
            address=str(d.get("address", "127.0.0.1:50051")),
            namespace=str(d.get("namespace", "default")),
            salt=str(d.get("salt", "")),
            timeout_s=float(d.get("timeout_s", 30.0)),
            workers=workers,
        )

    @classmethod
    def help(cls) -> str:
        return (
            "tiermem L2 adapter fields: address (HOST:PORT of the tiermem daemon), "
            "namespace, salt (tenant salt), timeout_s, workers (I/O threads)"
        )


class TiermemL2Adapter(L2AdapterInterface):  # type: ignore[misc]
    config_class_name = "TiermemL2AdapterConfig"

    def __init__(self, config: TiermemL2AdapterConfig, l1_memory_desc: Any = None) -> None:
        super().__init__(max_capacity_bytes=0)
        self._config = config
        self._client = Client(
            config.address, namespace=config.namespace, timeout_s=config.timeout_s
        )
        self._pool = ThreadPoolExecutor(config.workers, thread_name_prefix="tiermem-l2")
        self._store_efd = create_event_notifier()
        self._lookup_efd = create_event_notifier()
        self._load_efd = create_event_notifier()
        self._lock = threading.Lock()
        self._next_id = 0
        self._stored: dict[int, Any] = {}
        self._looked_up: dict[int, Any] = {}
        self._loaded: dict[int, Any] = {}

    # -- event fds ------------------------------------------------------------------
    def get_store_event_fd(self) -> int:
        return int(self._store_efd.fileno())

    def get_lookup_and_lock_event_fd(self) -> int:
        return int(self._lookup_efd.fileno())

    def get_load_event_fd(self) -> int:
        return int(self._load_efd.fileno())

    # -- plumbing -------------------------------------------------------------------
    def _submit(self, work: Callable[[], Any], results: str, efd: Any) -> int:
        """Run ``work`` on the pool; its result lands in the dict attribute named
        ``results`` (looked up at completion: pops swap the store dict)."""
        with self._lock:
            task_id = self._next_id
            self._next_id += 1

        def run() -> None:
            result = work()  # never raises: failures are results (see _store etc.)
            with self._lock:
                getattr(self, results)[task_id] = result
            efd.notify()

        self._pool.submit(run)
        return task_id

    def _scope(self, key: Any) -> KvScope:
        # a JSON list, not parts joined by a separator: adapters configured with
        # different salts could otherwise name the same blocks ("a@b" + "" and
        # "a" + "b")
        salt = json.dumps(
            [self._config.salt, key.cache_salt or "", key.kv_rank, key.object_group_id],
            separators=(",", ":"),
        )
        return KvScope(
            model=key.model_name, dtype=L2_DTYPE, salt=salt, namespace=self._config.namespace
        )

    def _runs(self, keys: Sequence[Any]) -> list[tuple[KvScope, list[int]]]:
        """Indices of keys grouped by scope (first-seen order)."""
        groups: dict[KvScope, list[int]] = {}
        for i, key in enumerate(keys):
            groups.setdefault(self._scope(key), []).append(i)
        return list(groups.items())

    # -- store ----------------------------------------------------------------------
    def submit_store_task(self, keys: list[Any], objects: list[Any]) -> int:
        return self._submit(lambda: self._store(keys, objects), "_stored", self._store_efd)

    def _store(self, keys: list[Any], objects: list[Any]) -> Any:
        try:
            sizes = [0] * len(keys)
            for scope, indices in self._runs(keys):
                blocks = []
                for i in indices:
                    view = memoryview(objects[i].byte_array).cast("B")
                    sizes[i] = len(view)
                    fmt = FORMAT_PREFIX + objects[i].get_memory_format().name
                    blocks.append(KvBlock(keys[i].chunk_hash, view, "uint8", (len(view),), fmt))
                self._client.kv.put_blocks(scope, blocks)
            self._notify_keys_stored(keys, sizes)
            return L2StoreResult(True, sum(sizes))
        except Exception:
            log.exception("tiermem L2 store of %d objects failed", len(keys))
            return L2StoreResult(False, 0)

    def pop_completed_store_tasks(self) -> dict[int, Any]:
        with self._lock:
            done, self._stored = self._stored, {}
        return done

    # -- lookup -----------------------------------------------------------------------
    def submit_lookup_and_lock_task(self, keys: list[Any], group_layout_descs: Any) -> int:
        return self._submit(lambda: self._lookup(keys), "_looked_up", self._lookup_efd)

    def _lookup(self, keys: list[Any]) -> Any:
        bitmap = Bitmap(len(keys))
        try:
            for scope, indices in self._runs(keys):
                hashes = [keys[i].chunk_hash for i in indices]
                start = 0
                while start < len(hashes):  # one call per run of present keys
                    hit = self._client.kv.lookup_prefix(scope, hashes[start:]).stored_chunks
                    for j in range(start, start + hit):
                        bitmap.set(indices[j])
                    start += hit + 1
        except Exception:
            log.exception("tiermem L2 lookup of %d keys failed", len(keys))
        return bitmap

    def query_lookup_and_lock_result(self, task_id: int) -> Any:
        with self._lock:
            return self._looked_up.pop(task_id, None)

    def submit_unlock(self, keys: list[Any]) -> None:
        """Locks are advisory here (see the module docstring): nothing to undo."""

    # -- load -----------------------------------------------------------------------------
    def submit_load_task(self, keys: list[Any], objects: list[Any]) -> int:
        return self._submit(lambda: self._load(keys, objects), "_loaded", self._load_efd)

    def _load(self, keys: list[Any], objects: list[Any]) -> Any:
        bitmap = Bitmap(len(keys))
        try:
            for scope, indices in self._runs(keys):
                views = [memoryview(objects[i].byte_array).cast("B") for i in indices]

                def into(block: FetchedBlock, j: int, views: list[memoryview] = views) -> Any:
                    return views[j] if block.size_bytes == len(views[j]) else None

                fetched = self._client.kv.get_blocks(
                    scope, [keys[i].chunk_hash for i in indices], allocate=into
                )
                for j, block in enumerate(fetched):
                    if block.found and block.data is views[j]:
                        bitmap.set(indices[j])
            self._notify_keys_accessed([keys[i] for i in bitmap.get_indices_list()])
        except Exception:
            log.exception("tiermem L2 load of %d keys failed", len(keys))
        return bitmap

    def query_load_result(self, task_id: int) -> Any:
        with self._lock:
            return self._loaded.pop(task_id, None)

    # -- lifecycle ----------------------------------------------------------------------
    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._client.close()
        for efd in (self._store_efd, self._lookup_efd, self._load_efd):
            efd.close()
