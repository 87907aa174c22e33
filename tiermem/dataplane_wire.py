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

A **session** carries requests without a gRPC call each. It is opened by a
preamble presenting ``SESSION_TICKET`` (all zero) and the caller's credential,
followed by a frame naming the session the caller acts as (may be empty)::

    ── PREAMBLE(SESSION_TICKET, credential), FRAME(acting session) ──▶
                                             ◀── STATUS: "OK" = session open
    then any number of requests, one at a time:
    ── REQUEST: op u8 (1 put, 2 get, 3 lookup, 4-7 lease, release, ──▶
       reserve, commit, 8-10 stat, delete, list), flags u8,
       timeout u16 (the caller's, in centiseconds; 0 = none), length u32,
       serialized BeginPutRequest / BeginGetRequest / kv LookupPrefixRequest /
       Lease- / Release- / Reserve- / CommitRequest / Stat- / Delete- / ListRequest
    put:                                     ◀── STATUS: "OK" = send, or refused
         ── raw bytes of every object, in request order ──▶
                                             ◀── STATUS: committed metas, or the error
         (a put announcing at most PIPELINED_PUT_MAX_BYTES sends its bytes right
         after the request, without waiting for the first STATUS; the daemon
         reads and drops them when it refuses the request. With the flag
         FLAG_ACCEPT_WITH_RESULT the daemon may send the "OK" right before the
         final STATUS, in the same reply; either way the client reads both)
    get:                                     ◀── STATUS: "OK", or refused
                                             ◀── FRAME: serialized Ticket (metas,
                                                 sizes, inline values)
                                             ◀── raw bytes of every streamed object
    lookup, lease, release, reserve, commit (the request is the gRPC method's):
                                             ◀── STATUS: "OK", or refused
                                             ◀── FRAME: the method's serialized reply

Every request is checked as its gRPC twin (credentials, namespace roles,
quotas, acting session). A refused request leaves the session open; a
malformed request gets an INVALID_ARGUMENT status and the session is closed;
an idle session is closed after ``dataplane.bulk.idle_timeout_s``. A daemon
without sessions answers the opening preamble NOT_FOUND (unknown ticket).
"""

from __future__ import annotations

import hashlib
import math
import socket
import struct
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

MAGIC = b"TMB1"
#: 2: pipelined session puts up to 64 MiB (``PIPELINED_PUT_MAX_BYTES``; 4 MiB in 1).
#: A daemon refuses a preamble of another version (INVALID_ARGUMENT): clients
#: and daemons of one deployment must come from the same release.
VERSION = 2
TICKET_ID_BYTES = 16
MAX_CREDENTIAL_BYTES = 4096
#: Largest STATUS frame either side accepts (metas of a full batch fit easily).
MAX_STATUS_BYTES = 16 << 20

PREAMBLE = struct.Struct(f"<4sHH{TICKET_ID_BYTES}s")
LENGTH = struct.Struct("<I")

#: The ticket id a preamble presents to open a session instead of one transfer.
SESSION_TICKET = bytes(TICKET_ID_BYTES)
#: A session request's header: op, flags, timeout (centiseconds, 0 = none),
#: payload length. Daemons before the timeout field read it as padding.
REQUEST = struct.Struct("<BBHI")
#: Longest timeout the header carries (a longer one is sent as none, and the
#: daemon's limits.max_request_s bounds the request alone).
MAX_REQUEST_TIMEOUT_CS = 0xFFFF
OP_PUT = 1
OP_GET = 2
OP_LOOKUP = 3
#: Shared-memory control requests (DataPlaneService's Lease, Release, Reserve,
#: Commit) on a session: the request and reply are the gRPC messages.
OP_LEASE = 4
OP_RELEASE = 5
OP_RESERVE = 6
OP_COMMIT = 7
#: ObjectService's Stat, Delete and List on a session (same messages as gRPC):
#: a local client's metadata calls need no gRPC call either.
OP_STAT = 8
OP_DELETE = 9
OP_LIST = 10
#: Largest request payload (a BeginPut/BeginGet message) a daemon reads.
MAX_REQUEST_BYTES = 16 << 20
#: Longest acting-session name in a session's opening frame.
MAX_ACTING_BYTES = 1024
#: A session put announcing at most this many bytes in all is followed by its
#: bytes at once (one round trip instead of two, and the daemon's reservation
#: overlaps the transfer); larger puts wait for "OK". A refused pipelined put
#: costs its bytes' transfer (the daemon reads and drops them), so the bound
#: stays at what a loopback or LAN link moves in tens of milliseconds. Client
#: and daemon must agree on it (``VERSION``).
PIPELINED_PUT_MAX_BYTES = 64 << 20
#: Request flag of a pipelined put: the client reads the daemon's acceptance and
#: its final status together, so the daemon may hold the "OK" back and send both
#: in one reply (daemons that predate the flag ignore it and answer at once).
FLAG_ACCEPT_WITH_RESULT = 1


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


def request(op: int, payload: bytes, flags: int = 0, timeout_s: float | None = None) -> bytes:
    """A session request frame around a serialized request message; the daemon
    gives up on it after ``timeout_s`` (None: after its own limit)."""
    if len(payload) > MAX_REQUEST_BYTES:
        raise ValueError(f"a request of {len(payload)} bytes exceeds {MAX_REQUEST_BYTES}")
    return REQUEST.pack(op, flags, timeout_cs(timeout_s), len(payload)) + payload


def timeout_cs(timeout_s: float | None) -> int:
    """A timeout as the request header carries it: centiseconds, rounded up (a
    positive timeout never becomes 0 = none); 0 for none or one too long."""
    if timeout_s is None:
        return 0
    cs = max(1, math.ceil(timeout_s * 100))
    return cs if cs <= MAX_REQUEST_TIMEOUT_CS else 0


#: Most buffers handed to one ``sendmsg`` (Linux takes up to IOV_MAX = 1024).
SENDMSG_MAX_PARTS = 512


def send_parts(
    channel: Any,
    parts: Sequence[bytes | bytearray | memoryview],
    before_send: Callable[[], None] | None = None,
) -> None:
    """Write ``parts`` back to back, gathered by ``sendmsg`` where the channel has
    it: a request or reply and the values after it leave in one system call, so
    the peer is woken once rather than once per part (on a busy host each
    wake-up can cost a scheduling delay). Otherwise ``sendall`` each part.
    ``before_send`` runs before each system-call-level send (a caller bounding
    the whole write by a deadline sets the socket's timeout to the time left
    there: a socket timeout bounds one ``sendmsg``, not the loop)."""
    sendmsg = getattr(channel, "sendmsg", None)
    if sendmsg is None:
        for part in parts:
            if len(part):
                if before_send is not None:
                    before_send()
                channel.sendall(part)
        return
    pending = [view for view in (memoryview(p).cast("B") for p in parts) if view.nbytes]
    first = 0
    while first < len(pending):
        if before_send is not None:
            before_send()
        sent = sendmsg(pending[first : first + SENDMSG_MAX_PARTS])
        while sent:  # a partial send: skip the parts that left, resume mid-part
            size = pending[first].nbytes
            if sent >= size:
                sent -= size
                first += 1
            else:
                pending[first] = pending[first][sent:]
                sent = 0
