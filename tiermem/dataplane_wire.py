"""Wire contract of the data plane beyond protobuf, shared by daemon and client:
the framing of the bulk TCP channel and the host identity that tells a client
it runs on the daemon's host (so it may use the shared-memory path).

A connection carries one transfer after another; each is authorised by a
ticket from ``DataPlaneService.BeginPut`` / ``BeginGet``::

    client                                      daemon
    ── PREAMBLE: magic "TMB1", version u16,  ──▶
       credential length u16, ticket id (16 B),
       credential (the authorization value, may be empty)
                                             ◀── STATUS frame: "OK" = go ahead, else refused
    put: ── raw bytes of every streamed object, in ticket order ──▶
                                             ◀── STATUS frame: committed metas, or the error
    get:                                     ◀── raw bytes of every streamed object, in order

A STATUS frame is a little-endian u32 length followed by a serialized
``tiermem.v1.TransferStatus``. Raw bytes carry no framing: the ticket told both
sides every size. A connection that breaks or ends early mid-transfer is an
error on both sides (the daemon stores nothing of it) and is not reused.
"""

from __future__ import annotations

import hashlib
import socket
import struct
from pathlib import Path

MAGIC = b"TMB1"
VERSION = 1
TICKET_ID_BYTES = 16
MAX_CREDENTIAL_BYTES = 4096
#: Largest STATUS frame either side accepts (metas of a full batch fit easily).
MAX_STATUS_BYTES = 16 << 20

PREAMBLE = struct.Struct(f"<4sHH{TICKET_ID_BYTES}s")
LENGTH = struct.Struct("<I")


def preamble(ticket_id: bytes, credential: bytes) -> bytes:
    """The bytes a client sends to start the transfer of ``ticket_id``."""
    if len(ticket_id) != TICKET_ID_BYTES:
        raise ValueError(f"ticket id must be {TICKET_ID_BYTES} bytes, got {len(ticket_id)}")
    if len(credential) > MAX_CREDENTIAL_BYTES:
        raise ValueError(f"credential is longer than {MAX_CREDENTIAL_BYTES} bytes")
    return PREAMBLE.pack(MAGIC, VERSION, len(credential), ticket_id) + credential


def frame(payload: bytes) -> bytes:
    """A STATUS frame around a serialized ``TransferStatus``."""
    return LENGTH.pack(len(payload)) + payload


def host_id() -> str:
    """Identity of this host as the data plane sees it: the kernel's boot id and
    the host name, hashed. Equal on client and daemon = same kernel and UTS
    namespace; the client still checks it can open the very arena file
    (device and inode) before using shared memory."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = ""
    return hashlib.sha256(f"{boot}|{socket.gethostname()}".encode()).hexdigest()[:32]
