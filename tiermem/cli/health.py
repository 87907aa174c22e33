"""``tiermem health``: the standard gRPC health check (grpc.health.v1), exit 0
when the service is SERVING and 1 otherwise (NOT_SERVING, unknown, unreachable).

It is the container's health check, so it stays on the light client's
dependencies: the two health messages (a string field and an enum field) are
encoded here instead of importing grpcio-health-checking.
"""

from __future__ import annotations

import argparse
import sys

import grpc

CHECK_METHOD = "/grpc.health.v1.Health/Check"
STATUS_NAMES = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated varint in HealthCheckResponse")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def encode_request(service: str) -> bytes:
    """HealthCheckRequest{service = 1 (string)}."""
    raw = service.encode()
    return b"\x0a" + _varint(len(raw)) + raw if raw else b""


def decode_status(data: bytes) -> int:
    """HealthCheckResponse.status (field 1, varint); other fields are skipped."""
    pos = 0
    status = 0
    while pos < len(data):
        tag, pos = _read_varint(data, pos)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _read_varint(data, pos)
            if field == 1:
                status = value
        elif wire == 2:
            length, pos = _read_varint(data, pos)
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"unexpected wire type {wire} in HealthCheckResponse")
    return status


def check(address: str, service: str = "", timeout_s: float = 5.0) -> str:
    """The health status name of ``service`` ("" = the whole daemon). Raises
    ``grpc.RpcError`` when the daemon cannot be asked."""
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary(
            CHECK_METHOD, request_serializer=encode_request, response_deserializer=decode_status
        )
        status: int = call(service, timeout=timeout_s)
    return STATUS_NAMES.get(status, f"UNKNOWN({status})")


def run_health(args: argparse.Namespace) -> int:
    try:
        status = check(args.addr, args.service, args.timeout)
    except grpc.RpcError as exc:
        code = exc.code().name if hasattr(exc, "code") else "UNKNOWN"
        details = exc.details() if hasattr(exc, "details") else str(exc)
        print(f"{args.addr}: {code}: {details}", file=sys.stderr)
        return 1
    print(f"{args.addr}{' ' + args.service if args.service else ''}: {status}")
    return 0 if status == "SERVING" else 1
