"""Server reflection works with the standard reflection client (the protocol
grpcurl and grpcui use; neither is packaged for Debian here): a client without
tiermem's generated code lists the services, resolves their descriptors and
calls an RPC with messages built from them."""

from __future__ import annotations

import grpc
from google.protobuf import descriptor_pool, json_format
from google.protobuf.message_factory import GetMessageClass
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from tiermem.client import Client, Kind
from tiermem.server.app import Daemon


def test_generic_client_lists_resolves_and_calls(daemon: Daemon) -> None:
    with Client(daemon.address) as c:
        c.put(Kind.BLOB, "seen-by-reflection", b"x" * 10)
    with grpc.insecure_channel(daemon.address) as channel:
        database = ProtoReflectionDescriptorDatabase(channel)
        services = set(database.get_services())
        assert {
            "tiermem.v1.ObjectService",
            "tiermem.v1.AdminService",
            "grpc.health.v1.Health",
            "grpc.reflection.v1alpha.ServerReflection",
        } <= services
        pool = descriptor_pool.DescriptorPool(database)
        admin = pool.FindServiceByName("tiermem.v1.AdminService")
        assert {m.name for m in admin.methods} >= {"Stats", "CreateNamespace", "ListNamespaces"}
        objects = pool.FindServiceByName("tiermem.v1.ObjectService")
        stat = objects.methods_by_name["Stat"]
        request_cls = GetMessageClass(stat.input_type)
        reply_cls = GetMessageClass(stat.output_type)
        request = json_format.ParseDict(
            {"key": {"namespace": "default", "kind": "BLOB", "key": "seen-by-reflection"}},
            request_cls(),
        )
        call = channel.unary_unary(
            f"/{objects.full_name}/{stat.name}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=reply_cls.FromString,
        )
        reply = json_format.MessageToDict(call(request, timeout=10))
    assert reply["meta"]["sizeBytes"] == "10"
    assert reply["meta"]["key"]["key"] == "seen-by-reflection"
