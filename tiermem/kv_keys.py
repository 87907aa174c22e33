"""Object keys of KV blocks, shared by the daemon's KV service and the client.

A chunk is named like LMCache's ``CacheEngineKey`` (model, world size, worker
id, dtype, chunk hash) plus a tenant salt; its object key (kind KV_BLOCK) is::

    {model}@{world_size}@{worker_id}@{dtype}@{salt_tag}@{chunk_hash_hex}

``salt_tag`` is "-" without a salt, else 16 hex digits of a BLAKE2b digest of it,
so tenants with different salts never share a block and the salt itself is not
stored. The client derives the same keys to move block bytes over the shared
memory and bulk data paths, which address objects by key.
"""

from __future__ import annotations

import hashlib
import re

MAX_MODEL_BYTES = 256
#: ``fullmatch`` only: with ``match``, ``$`` also matched before a final newline
_DTYPE_RE = re.compile(r"[A-Za-z0-9_]{1,32}")


def scope_problem(model: str, world_size: int, worker_id: int, dtype: str) -> str | None:
    """What is wrong with a scope (None when it is valid)."""
    if not model or len(model.encode()) > MAX_MODEL_BYTES:
        return f"scope.model must be 1..{MAX_MODEL_BYTES} bytes"
    if "@" in model or "\x00" in model:
        return f"scope.model {model[:64]!r} must not contain '@' or NUL"
    if world_size < 1:
        return "scope.world_size must be at least 1"
    if not 0 <= worker_id < world_size:
        return f"scope.worker_id {worker_id} is not in 0..world_size-1 ({world_size})"
    if not _DTYPE_RE.fullmatch(dtype):
        return f"scope.dtype {dtype[:40]!r} must be a dtype name like 'bfloat16'"
    return None


def salt_tag(salt: str) -> str:
    if not salt:
        return "-"
    return hashlib.blake2b(salt.encode(), digest_size=8).hexdigest()


def key_prefix(model: str, world_size: int, worker_id: int, dtype: str, salt: str) -> str:
    """Everything of a block's key but its chunk hash."""
    return f"{model}@{world_size}@{worker_id}@{dtype}@{salt_tag(salt)}@"
