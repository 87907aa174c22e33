"""``tiermem fsck``: list objects whose stored bytes are damaged.

Online (``--addr``, the default): the daemon checks itself (admin role) and
registers what it finds, so reads answer DATA_LOSS at once. Offline
(``--data-dir``): the catalog is opened read-only, so it also works beside a
running daemon (seeing the state as of the open) and on a copy of a data dir.
Exit status: 0 clean, 1 damage found (objects, or unreadable catalog ranges),
2 the check could not run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def fsck(args: argparse.Namespace) -> int:
    namespace = "" if args.all else args.namespace
    if args.data_dir:
        try:
            from tiermem.server.services.integrity import check_offline
        except ImportError as exc:
            print(f"tiermem fsck --data-dir needs the server extra: {exc}", file=sys.stderr)
            return 2
        try:
            report = check_offline(
                Path(args.data_dir), namespace, read_bytes=not args.quick, max_damaged=args.max
            )
        except (FileNotFoundError, OSError, Exception) as exc:
            print(f"tiermem fsck: cannot check {args.data_dir}: {exc}", file=sys.stderr)
            return 2
        result: dict[str, Any] = {
            "objects_checked": report.objects_checked,
            "bytes_checked": report.bytes_checked,
            "damaged_total": report.damaged_total,
            "damaged": [
                {"key": d.key, "where": d.where, "reason": d.reason} for d in report.damaged
            ],
            "notes": report.notes,
            "seconds": round(report.seconds, 3),
        }
    else:
        from tiermem.cli.commands import connect
        from tiermem.client.errors import TiermemClientError

        try:
            with connect(args) as client:
                checked = client.integrity.check(
                    namespace=namespace, metadata_only=args.quick, max_damaged=args.max,
                    timeout_s=args.timeout,
                )  # fmt: skip
        except (TiermemClientError, OSError, ValueError) as exc:
            print(f"tiermem fsck: {exc}", file=sys.stderr)
            return 2
        result = {
            "objects_checked": checked.objects_checked,
            "bytes_checked": checked.bytes_checked,
            "damaged_total": checked.damaged_total,
            "damaged": [
                {
                    "key": f"{d.namespace}/{d.kind.name if d.kind else '?'}/{d.key}",
                    "where": d.where,
                    "reason": d.reason,
                }
                for d in checked.damaged
            ],
            "notes": checked.notes,
            "seconds": round(checked.seconds, 3),
        }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"checked {result['objects_checked']} objects ({result['bytes_checked']} bytes) "
            f"in {result['seconds']} s: {result['damaged_total']} damaged"
        )
        for d in result["damaged"]:
            print(f"DAMAGED {d['key']}  [{d['where']}] {d['reason']}")
        for note in result["notes"]:
            print(f"NOTE {note}")
    return 1 if result["damaged_total"] else 0
