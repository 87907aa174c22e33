"""Conversions between LMCache's chunk keys / memory-object metadata and tiermem
KV scopes, hashes and tensor metadata. Pure functions: no lmcache import, so
they are typed and tested with the rest of the client.

A memory object's metadata travels in the block's ``memory_format`` field::

    lmcache:<FORMAT>                      one group: the block's dtype/shape are its own
    lmcache:<FORMAT>;<dtype>:<d0>,<d1>|…  several groups: the block is uint8[n] and the
                                          groups' dtypes and shapes follow, in order
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from tiermem.client.kv import KvScope

PREFIX = "lmcache:"


@dataclass(frozen=True, slots=True)
class ObjLayout:
    """What LMCache needs to allocate a memory object: format name, and the
    dtype names and shapes of its groups."""

    fmt: str
    dtypes: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]

    @property
    def nbytes(self) -> int:
        total = 0
        for dtype, shape in zip(self.dtypes, self.shapes, strict=True):
            count = 1
            for d in shape:
                count *= d
            total += count * _ITEMSIZE[dtype]
        return total

    def block_tensor(self) -> tuple[str, tuple[int, ...]]:
        """dtype and shape the tiermem block carries."""
        if len(self.dtypes) == 1:
            return self.dtypes[0], self.shapes[0]
        return "uint8", (self.nbytes,)

    def memory_format(self) -> str:
        text = PREFIX + self.fmt
        if len(self.dtypes) == 1:
            return text
        groups = "|".join(
            f"{dtype}:{','.join(map(str, shape))}"
            for dtype, shape in zip(self.dtypes, self.shapes, strict=True)
        )
        return f"{text};{groups}"


_ITEMSIZE = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1,
    "float8_e5m2": 1, "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1,
}  # fmt: skip


def parse_layout(memory_format: str, dtype: str, shape: tuple[int, ...]) -> ObjLayout:
    """Inverse of ``ObjLayout.memory_format`` (with the block's own dtype/shape)."""
    if not memory_format.startswith(PREFIX):
        raise ValueError(f"block was not stored by the LMCache plugin: {memory_format!r}")
    fmt, _, groups = memory_format[len(PREFIX) :].partition(";")
    if not groups:
        return ObjLayout(fmt, (dtype,), (tuple(shape),))
    dtypes: list[str] = []
    shapes: list[tuple[int, ...]] = []
    for group in groups.split("|"):
        name, _, dims = group.partition(":")
        dtypes.append(name)
        shapes.append(tuple(int(d) for d in dims.split(",")) if dims else ())
    return ObjLayout(fmt, tuple(dtypes), tuple(shapes))


def scope_of(
    model_name: str,
    world_size: int,
    worker_id: int,
    dtype: str,
    *,
    salt: str,
    namespace: str | None,
    tags: tuple[tuple[str, object], ...] | None = None,
    layer_id: int | None = None,
) -> KvScope:
    """The tiermem scope of an LMCache key. Request tags and the layer (layerwise
    keys) become part of the salt, so they separate blocks like LMCache's own
    key does. With either, the salt is a JSON list of the three (unambiguous:
    joining them with separators made a tag named "layer" equal a layer, a
    tenant's salt equal another's tag, and tags holding a separator equal other
    tags, so tenants could share blocks); a plain salt stays as it is."""
    if not tags and layer_id is None:
        combined = salt
    else:
        combined = json.dumps(
            [salt, [[str(k), str(v)] for k, v in tags or ()], layer_id], separators=(",", ":")
        )
    return KvScope(
        model=model_name,
        world_size=world_size,
        worker_id=worker_id,
        dtype=dtype,
        salt=combined,
        namespace=namespace,
    )


class AfterHit:
    """Chunks that prefix lookups found missing *after a hit*: the new chunks a
    request will store beyond the part of its prompt already cached. A one-shot
    request's such chunks are its own tail, unlikely to be reused; the connector
    puts them COLD (``cold_after_hit``). Lookups with no hit record nothing (the
    shared prefix cannot be told from the tail). Bounded: the oldest are
    forgotten first."""

    def __init__(self, max_chunks: int = 65_536) -> None:
        if max_chunks < 1:
            raise ValueError("max_chunks must be at least 1")
        self.max_chunks = max_chunks
        self._chunks: OrderedDict[Hashable, None] = OrderedDict()

    def record(self, chunk_hashes: Sequence[Hashable], hit: int) -> None:
        """A lookup of ``chunk_hashes`` found the first ``hit`` stored."""
        if hit <= 0:
            return
        for h in chunk_hashes[hit:]:
            self._chunks[h] = None
            self._chunks.move_to_end(h)
        while len(self._chunks) > self.max_chunks:
            self._chunks.popitem(last=False)

    def take(self, chunk_hash: Hashable) -> bool:
        """Whether ``chunk_hash`` came after a hit (forgotten once asked)."""
        return self._chunks.pop(chunk_hash, 0) is None

    def __len__(self) -> int:
        return len(self._chunks)
