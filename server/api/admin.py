"""AdminService servicer."""

from __future__ import annotations

import dataclasses

import grpc

from tiermem.placement.cost import CostLine, CostReport
from tiermem.server.services.admin import AdminService
from tiermem.server.services.guard import ALL_NAMESPACES, current_principal
from tiermem.v1 import admin_pb2, admin_pb2_grpc


def _lines(lines: list[CostLine]) -> list[admin_pb2.CostLine]:
    return [
        admin_pb2.CostLine(name=x.name, bytes=x.bytes, usd_per_hour=x.usd_per_hour) for x in lines
    ]


def cost_to_proto(report: CostReport) -> admin_pb2.CostReport:
    return admin_pb2.CostReport(
        tiers=[
            admin_pb2.TierCost(
                tier=t.tier,  # type: ignore[arg-type]
                capacity_bytes=t.capacity_bytes,
                used_bytes=t.used_bytes,
                price_per_gib_hour=t.price_per_gib_hour,
                capacity_usd_per_hour=t.capacity_usd_per_hour,
                used_usd_per_hour=t.used_usd_per_hour,
            )
            for t in report.tiers
        ],
        kinds=_lines(report.kinds),
        namespaces=_lines(report.namespaces),
        sessions=_lines(report.sessions),
        sessions_omitted=report.sessions_omitted,
        used_usd_per_hour=report.used_usd_per_hour,
        capacity_usd_per_hour=report.capacity_usd_per_hour,
    )


def _visible(report: CostReport) -> CostReport:
    """The cost report as the caller may see it: the namespaces its token shows
    (as ListNamespaces does), and the sessions only for a caller that sees every
    namespace (a session line does not say its namespace; they are counted in
    ``sessions_omitted`` otherwise)."""
    who = current_principal.get()
    if who.sees(ALL_NAMESPACES):
        return report
    return dataclasses.replace(
        report,
        namespaces=[line for line in report.namespaces if who.sees(line.name)],
        sessions=[],
        sessions_omitted=report.sessions_omitted + len(report.sessions),
    )


class AdminServicer(admin_pb2_grpc.AdminServiceServicer):
    def __init__(self, admin: AdminService) -> None:
        self._admin = admin

    def Stats(
        self, request: admin_pb2.StatsRequest, context: grpc.ServicerContext
    ) -> admin_pb2.StatsResponse:
        report = self._admin.stats()
        cost = cost_to_proto(_visible(report.cost)) if report.cost is not None else None
        return admin_pb2.StatsResponse(
            cost=cost,
            version=report.version,
            objects=report.objects,
            uptime_s=report.uptime_s,
            tiers=[
                admin_pb2.TierStats(
                    tier=int(t.tier),  # type: ignore[arg-type]
                    enabled=t.enabled,
                    capacity_bytes=t.capacity_bytes,
                    used_bytes=t.used_bytes,
                    high_watermark=t.high_watermark,
                    low_watermark=t.low_watermark,
                    device=t.device,
                    by_kind=[
                        admin_pb2.KindUsage(
                            kind=int(kind),  # type: ignore[arg-type]
                            objects=count,
                            bytes=nbytes,
                        )
                        for kind, (count, nbytes) in sorted(t.by_kind.items())
                    ],
                )
                for t in report.tiers
            ],
        )

    def CreateNamespace(
        self, request: admin_pb2.CreateNamespaceRequest, context: grpc.ServicerContext
    ) -> admin_pb2.CreateNamespaceResponse:
        return admin_pb2.CreateNamespaceResponse(created=self._admin.create_namespace(request.name))

    def ListNamespaces(
        self, request: admin_pb2.ListNamespacesRequest, context: grpc.ServicerContext
    ) -> admin_pb2.ListNamespacesResponse:
        return admin_pb2.ListNamespacesResponse(names=self._admin.list_namespaces())
