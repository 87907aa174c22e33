"""`tiermem health` encodes the two grpc.health.v1 messages itself (to stay on
the light client's dependencies); they must match the real protobuf classes."""

from grpc_health.v1 import health_pb2

from tiermem.cli.health import decode_status, encode_request


def test_request_and_response_match_the_generated_health_messages() -> None:
    for service in ("", "tiermem.v1.ObjectService", "x" * 300):
        raw = encode_request(service)
        assert health_pb2.HealthCheckRequest.FromString(raw).service == service
    for status in (0, 1, 2, 3):
        reply = health_pb2.HealthCheckResponse(status=status)  # type: ignore[arg-type]
        assert decode_status(reply.SerializeToString()) == status
