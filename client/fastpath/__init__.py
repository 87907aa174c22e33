"""Fast paths for object bytes (shared memory, bulk TCP) under the clients.

``DataPlane`` (one per ``Client``, as ``client.dataplane``) picks the path and
moves batches; ``put_many`` / ``get_many`` are the buffer-level interface for
sub-clients such as the KV client.
"""

from tiermem.client.fastpath.plane import (
    DEFAULT_SHM_MIN_BYTES,
    DEFAULT_THRESHOLD_BYTES,
    PATHS,
    DataPlane,
    Fetched,
    ObjectRef,
    PutItem,
    as_bytes,
)

__all__ = [
    "DEFAULT_SHM_MIN_BYTES",
    "DEFAULT_THRESHOLD_BYTES",
    "PATHS",
    "DataPlane",
    "Fetched",
    "ObjectRef",
    "PutItem",
    "as_bytes",
]
