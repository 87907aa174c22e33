"""Placement policies on simulated mixed workloads (issue 3).

Every policy replays the same trace against the same engine and cost model
(``tiermem.placement.sim``): tiermem (the daemon's own planner), tiermem
without prefetch hints (ablation), siloed static partitions (each kind its own
share of HBM and DRAM, sized by its average working set, each with its own
LRU), one global LRU across kinds, and an offline oracle with future
knowledge (per-epoch knapsack over exact future read counts; the best of a few
epoch/look-ahead settings is kept). Three mixes: balanced; KV-heavy with an
inference spike; long-tail blobs and vectors. The traces model a KV client
that marks the chunks a one-shot request stores after a prefix hit COLD
(``MixParams.kv_client_hints``; every policy sees the same hints: the LRU
baselines put COLD objects straight to SSD, tiermem's admission drops COLD
cache blocks not worth a copy anywhere, the oracle ignores hints).

Headline metric: mean access cost per read = (read time + copy time of moves
+ writes not every policy must do) / reads, in seconds of device time from the
cost model. Goals on every mix: tiermem <= 0.5x siloed, <= 0.8x global LRU,
<= 1.15x the oracle.

    python -m bench.placement_sim [--quick] [--mix NAME] [--jobs N]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from bench.common import RESULTS, goal, write_result
from tiermem.placement.model import KINDS, TIER_NAMES
from tiermem.placement.sim import (
    MIXES,
    GlobalLru,
    OracleKnapsack,
    SiloedLru,
    SimConfig,
    Tiermem,
    generate,
    run,
    silo_shares,
)

#: (epoch s, look-ahead s) settings tried for the oracle; the best is reported.
ORACLE_SETTINGS = ((1.0, 8.0), (1.0, 30.0))


def run_mix(name: str, quick: bool) -> dict[str, Any]:
    params = MIXES[name]
    if quick:
        params = dataclasses.replace(params, duration_s=150.0)
        if params.spike is not None:
            params = dataclasses.replace(params, spike=(60.0, 90.0, params.spike[2]))
    started = time.perf_counter()
    trace = generate(params)
    cfg = SimConfig()
    allowed = {k: set(cfg.cost.kinds[k].tiers) for k in KINDS}
    shares = silo_shares(trace, cfg.capacities, allowed)
    policies: list[Any] = [
        Tiermem(),
        Tiermem(use_hints=False, name="tiermem_no_hints"),
        GlobalLru(cfg.capacities),
        SiloedLru(shares),
    ]
    policies += [OracleKnapsack(e, w, name=f"oracle_e{e:g}_w{w:g}") for e, w in ORACLE_SETTINGS]
    results = {}
    for policy in policies:
        results[policy.name] = run(trace, policy, cfg).as_dict()
        if isinstance(policy, Tiermem):
            results[policy.name]["admission_dropped_puts"] = policy.dropped_puts
            results[policy.name]["admission_ssd_fallbacks"] = policy.ssd_fallbacks
    oracles = {k: v for k, v in results.items() if k.startswith("oracle_")}
    best = min(oracles, key=lambda k: oracles[k]["mean_access_cost_s"])
    results["oracle"] = dict(oracles[best], policy="oracle", setting=best)
    return {
        "mix": name,
        "params": params.as_dict(),
        "trace": trace.summary,
        "silo_shares_bytes": {
            TIER_NAMES[t]: {str(k): shares[k].get(t, 0) for k in KINDS} for t in (1, 2)
        },
        "results": results,
        "seconds": time.perf_counter() - started,
    }


def plot(mixes: list[dict[str, Any]], path: Any) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order = ["siloed_lru", "global_lru", "tiermem_no_hints", "tiermem", "oracle"]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.16
    for i, pol in enumerate(order):
        xs = [j + (i - 2) * width for j in range(len(mixes))]
        ys = [m["results"][pol]["mean_access_cost_s"] * 1e3 for m in mixes]
        ax.bar(xs, ys, width, label=pol)
    ax.set_xticks(range(len(mixes)), [m["mix"] for m in mixes])
    ax.set_ylabel("mean access cost per read (ms)")
    ax.set_title("Placement policies on the same traces (lower is better)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="150 s traces instead of 600 s")
    ap.add_argument("--mix", action="append", choices=sorted(MIXES), help="only these mixes")
    ap.add_argument("--jobs", type=int, default=3, help="mixes simulated in parallel")
    args = ap.parse_args(argv if argv is not None else sys.argv[1:])
    names = args.mix or list(MIXES)
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        mixes = list(pool.map(run_mix, names, [args.quick] * len(names)))
    goals = []
    for m in mixes:
        r = m["results"]
        ours = r["tiermem"]["mean_access_cost_s"]
        for base, target in (("siloed_lru", 0.5), ("global_lru", 0.8), ("oracle", 1.15)):
            goals.append(
                goal(f"{m['mix']}: tiermem / {base} mean access cost",
                     ours / r[base]["mean_access_cost_s"], target, "ratio", higher_is_better=False)
            )  # fmt: skip
    cfg = SimConfig()
    details = {
        "metric": "mean access cost per read = (reads + move copies + optional writes) / reads, "
        "seconds of device time from the cost model",
        "cost_model": {
            "tiers": {TIER_NAMES[t]: dataclasses.asdict(c) for t, c in cfg.cost.tiers.items()},
            "kinds": {
                str(k): {**dataclasses.asdict(c), "tiers": sorted(c.tiers)}
                for k, c in cfg.cost.kinds.items()
            },
        },
        "sim": {
            "capacities_bytes": {TIER_NAMES[t]: c for t, c in cfg.capacities.items()},
            "tiermem_watermarks": {TIER_NAMES[t]: w for t, w in cfg.watermarks.items()},
            "tick_s": cfg.tick_s,
            "migrate_bandwidth_bytes_per_s": cfg.migrate_bandwidth_bytes_per_s,
            "oracle_settings": ORACLE_SETTINGS,
            "client_hints": "a one-shot request's KV chunks stored after a prefix hit are put "
            "COLD (decided during replay from what the client saw: its first prefix read hit); "
            "session chunks and chunks of requests with no hit keep the trace's hint",
            "silo_sizing": "each kind's share of a tier = its time-averaged working set "
            "(bytes touched in a trailing 60 s window) over the sum of the kinds the tier takes",
        },
        "quick": args.quick,
        "mixes": mixes,
    }
    path = write_result("placement_sim", goals, details)
    try:
        plot(mixes, RESULTS / "placement_sim.png")
    except ImportError:
        print("matplotlib not installed (pip install -e '.[bench]'): no plot", file=sys.stderr)
    for g in goals:
        status = "MET  " if g["met"] else "UNMET"
        print(f"{status} {g['name']}: {g['value']:.3f} (target {g['target']})")
    for m in mixes:
        print(
            m["mix"], {k: round(v["mean_access_cost_s"] * 1e3, 4) for k, v in m["results"].items()}
        )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
