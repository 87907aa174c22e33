"""``tiermem cost``: what the memory the daemon holds costs per hour."""

from __future__ import annotations

from tiermem.cli.commands import human_bytes as _human
from tiermem.client import CostLine, Stats


def _usd(x: float) -> str:
    return f"${x:.6f}" if x < 0.01 else f"${x:.4f}"


def _section(title: str, lines: list[CostLine]) -> list[str]:
    out = ["", f"{title:<24} {'BYTES':>11} {'USD/HOUR':>12}"]
    for line in lines:
        out.append(f"{line.name[:24]:<24} {_human(line.bytes):>11} {_usd(line.usd_per_hour):>12}")
    if not lines:
        out.append("(none)")
    return out


def format_cost(stats: Stats) -> str:
    cost = stats.cost
    if cost is None:
        return "this daemon reports no cost (it predates the placement cost model)"
    out = [
        f"memory held costs {_usd(cost.used_usd_per_hour)}/h "
        f"(the tiers' whole budgets: {_usd(cost.capacity_usd_per_hour)}/h)",
        "",
        f"{'TIER':<6} {'$/GiB-h':>9} {'USED':>11} {'USD/HOUR':>12} "
        f"{'CAPACITY':>11} {'USD/HOUR':>12}",
    ]
    for t in cost.tiers:
        out.append(
            f"{t.tier.name:<6} {t.price_per_gib_hour:>9.5f} {_human(t.used_bytes):>11} "
            f"{_usd(t.used_usd_per_hour):>12} {_human(t.capacity_bytes):>11} "
            f"{_usd(t.capacity_usd_per_hour):>12}"
        )
    out += _section("KIND", cost.kinds)
    out += _section("NAMESPACE", cost.namespaces)
    out += _section("SESSION", cost.sessions)
    if cost.sessions_omitted:
        out.append(f"... and {cost.sessions_omitted} more sessions")
    return "\n".join(out)
