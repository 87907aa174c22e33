"""Transport-free domain types: the object model of DESIGN.md §3.

Enum values equal the wire enums in ``proto/tiermem/v1/common.proto`` so
conversion is a cast. Per-kind defaults live here, in one table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import IntEnum

from tiermem.server.errors import InvalidArgument


class Kind(IntEnum):
    KV_BLOCK = 1
    VECTOR = 2
    BLOB = 3
    SCRATCH = 4


class Tier(IntEnum):
    HBM = 1
    DRAM = 2
    SSD = 3
    REMOTE = 4


class AccessHint(IntEnum):
    UNSPECIFIED = 0
    HOT = 1
    WARM = 2
    COLD = 3


class Precision(IntEnum):
    UNSPECIFIED = 0
    LOSSLESS = 1
    LOSSY_OK = 2


class Durability(IntEnum):
    UNSPECIFIED = 0
    CACHE = 1
    DURABLE = 2


#: What a profile field means when the client leaves it unspecified, per kind.
#: KV blocks are hot, short-lived and recomputable; everything else is durable.
KIND_DEFAULTS: dict[Kind, tuple[AccessHint, Durability]] = {
    Kind.KV_BLOCK: (AccessHint.HOT, Durability.CACHE),
    Kind.VECTOR: (AccessHint.WARM, Durability.DURABLE),
    Kind.BLOB: (AccessHint.COLD, Durability.DURABLE),
    Kind.SCRATCH: (AccessHint.WARM, Durability.DURABLE),
}

MAX_NAMESPACE_BYTES = 128
MAX_KEY_BYTES = 1024
MAX_SESSION_BYTES = 256
#: ``fullmatch`` only: with ``match``, ``$`` also matched before a final newline
_NAMESPACE_RE = re.compile(r"[A-Za-z0-9._-]{1,128}")


#: Kinds by wire value: a dict lookup costs a fraction of ``Kind(value)``, and
#: every object of every request names one.
KIND_BY_VALUE: dict[int, Kind] = {int(m): m for m in Kind}
#: Namespaces that passed ``validate_namespace``: requests name a few, over and
#: over (remembering them halved ``ObjectKey.checked``, 2.5 to 1.2 µs a key).
#: Bounded: cleared when this many were remembered.
_VALID_NAMESPACES: set[str] = set()
MAX_REMEMBERED_NAMESPACES = 4096


def validate_namespace(namespace: str) -> str:
    if not namespace:
        raise InvalidArgument("namespace is missing (use e.g. 'default')")
    if not _NAMESPACE_RE.fullmatch(namespace) or not namespace.strip("."):
        raise InvalidArgument(
            f"namespace {namespace[:64]!r} is invalid: use 1..{MAX_NAMESPACE_BYTES} "
            "characters from A-Z a-z 0-9 . _ -, not only dots"
        )
    return namespace


#: Longest time-to-live (and session lease) a request may ask for, in seconds:
#: 100 years. Expiry times are unsigned 64-bit milliseconds on the wire; a
#: larger ``ttl_s`` overflowed them and failed the request with INTERNAL.
MAX_TTL_S = 100 * 365 * 86_400


def validate_ttl(ttl_s: int, field: str) -> int:
    """``ttl_s`` if at most ``MAX_TTL_S``; else INVALID_ARGUMENT naming ``field``."""
    if ttl_s > MAX_TTL_S:
        raise InvalidArgument(
            f"{field} is {ttl_s} s; at most {MAX_TTL_S} s (100 years), 0 for none"
        )
    return ttl_s


def validate_session(session: str) -> str:
    if len(session.encode()) > MAX_SESSION_BYTES or "\x00" in session:
        raise InvalidArgument(f"session id must be at most {MAX_SESSION_BYTES} bytes without NUL")
    return session


@dataclass(frozen=True, slots=True)
class ObjectKey:
    """Identity of an object: unique per (namespace, kind, key)."""

    namespace: str
    kind: Kind
    key: str

    @classmethod
    def checked(cls, namespace: str, kind: int, key: str) -> ObjectKey:
        """Build a key from untrusted input, raising InvalidArgument with the reason."""
        if namespace not in _VALID_NAMESPACES:
            validate_namespace(namespace)
            if len(_VALID_NAMESPACES) >= MAX_REMEMBERED_NAMESPACES:
                _VALID_NAMESPACES.clear()
            _VALID_NAMESPACES.add(namespace)
        member = KIND_BY_VALUE.get(kind)
        if member is None:
            raise InvalidArgument(f"unknown kind {kind}: use KV_BLOCK, VECTOR, BLOB or SCRATCH")
        if not key:
            raise InvalidArgument("key is missing or empty")
        raw = key.encode()
        if len(raw) > MAX_KEY_BYTES:
            raise InvalidArgument(f"key is {len(raw)} bytes; the limit is {MAX_KEY_BYTES}")
        if "\x00" in key:
            raise InvalidArgument("key must not contain NUL characters")
        return cls(namespace, member, key)

    def encode(self) -> bytes:
        """Catalog key: ``namespace NUL kind-byte key``; sorts by namespace, kind, key."""
        return self.namespace.encode() + b"\x00" + bytes((self.kind,)) + self.key.encode()

    @classmethod
    def decode(cls, raw: bytes) -> ObjectKey:
        ns, _, rest = raw.partition(b"\x00")
        return cls(ns.decode(), Kind(rest[0]), rest[1:].decode())

    def __str__(self) -> str:
        return f"{self.namespace}/{self.kind.name}/{self.key}"


def key_prefix(namespace: str, kind: Kind | None, prefix: str) -> bytes:
    """The catalog-key prefix that selects a namespace, optionally a kind and key prefix."""
    base = namespace.encode() + b"\x00"
    if kind is None:
        return base
    return base + bytes((kind,)) + prefix.encode()


@dataclass(slots=True)
class Profile:
    """How the client expects an object to be used (see common.proto for fields)."""

    hint: AccessHint = AccessHint.UNSPECIFIED
    ttl_s: int = 0
    next_access_unix_ms: int = 0
    precision: Precision = Precision.UNSPECIFIED
    lossy_max_error: float = 0.0
    durability: Durability = Durability.UNSPECIFIED
    pin: bool = False
    preferred_tier: Tier | None = None

    def resolved(self, kind: Kind) -> Profile:
        """Copy with unspecified fields replaced by the kind's defaults."""
        hint, durability = KIND_DEFAULTS[kind]
        # built field by field: ``dataclasses.replace`` costs several times as
        # much, and every put resolves its profile
        return Profile(
            hint=self.hint or hint,
            ttl_s=self.ttl_s,
            next_access_unix_ms=self.next_access_unix_ms,
            precision=self.precision or Precision.LOSSLESS,
            lossy_max_error=self.lossy_max_error,
            durability=self.durability or durability,
            pin=self.pin,
            preferred_tier=self.preferred_tier,
        )


#: Bytes per element of the dtypes tensors may carry (torch names).
DTYPE_SIZES: dict[str, int] = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint64": 8,
    "uint32": 4,
    "uint16": 2,
    "uint8": 1,
    "bool": 1,
}


@dataclass(frozen=True, slots=True)
class TensorInfo:
    dtype: str
    shape: tuple[int, ...]
    memory_format: str = ""

    def checked(self, size_bytes: int) -> TensorInfo:
        """Raise InvalidArgument unless dtype is known and shape matches the byte size."""
        itemsize = DTYPE_SIZES.get(self.dtype)
        if itemsize is None:
            raise InvalidArgument(
                f"unknown dtype {self.dtype!r}; known: {', '.join(sorted(DTYPE_SIZES))}"
            )
        if any(d < 0 for d in self.shape):
            raise InvalidArgument(f"shape {list(self.shape)} has a negative dimension")
        count = 1
        for d in self.shape:
            count *= d
        if count * itemsize != size_bytes:
            raise InvalidArgument(
                f"tensor {self.dtype}{list(self.shape)} is {count * itemsize} bytes "
                f"but size_bytes is {size_bytes}"
            )
        return self


@dataclass(slots=True)
class ObjectMeta:
    """Everything the daemon knows about one object."""

    key: ObjectKey
    size_bytes: int
    checksum: int
    profile: Profile
    tier: Tier
    session: str = ""
    codec: str = ""
    tensor: TensorInfo | None = None
    created_unix_ms: int = 0
    accessed_unix_ms: int = 0
    persisted: bool = False
    version: int = 1
    expires_unix_ms: int = 0

    @property
    def durable(self) -> bool:
        return self.profile.durability == Durability.DURABLE
