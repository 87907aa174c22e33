"""The operator registry: name -> (function, typed argument schema, limits).

An operator is a plain function ``fn(args: dict, ctx: OperatorContext) -> result``
where ``args`` has been checked against its ``ArgSpec`` list and ``result`` is
JSON-serialisable. Third-party packages register operators through the
entry-point group ``tiermem.operators``: each entry point names an
``Operator``, or a callable returning one or an iterable of them::

    [project.entry-points."tiermem.operators"]
    my_ops = "my_package.ops:OPERATORS"
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from tiermem.server.errors import DeadlineExceeded, InvalidArgument

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "tiermem.operators"
ArgType = Literal["int", "float", "str", "bool", "list", "dict", "any"]

_CHECKS: dict[str, Callable[[Any], bool]] = {
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float": lambda v: isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v),
    "str": lambda v: isinstance(v, str),
    "bool": lambda v: isinstance(v, bool),
    "list": lambda v: isinstance(v, list),
    "dict": lambda v: isinstance(v, dict),
    "any": lambda v: True,
}


@dataclass(frozen=True, slots=True)
class ArgSpec:
    name: str
    type: ArgType
    description: str = ""
    required: bool = True
    default: Any = None


class OperatorContext:
    """What a running operator may use: its deadline, the session it runs for,
    and data access the daemon hands it (``services``: e.g. "scratch",
    "indexes", "embedder"). Long loops call ``check()`` now and then: it raises
    DeadlineExceeded once the call's time is up or it was abandoned."""

    def __init__(
        self,
        limit_s: float,
        session: str,
        services: Mapping[str, Any],
        limits: Mapping[str, int],
        may_read: Callable[[str], None] | None = None,
        may_read_session: Callable[[str], None] | None = None,
    ) -> None:
        self.limit_s = limit_s
        self.deadline = time.monotonic() + limit_s
        self.session = session
        self.services = services
        self.limits = limits
        self.cancelled = threading.Event()
        self._may_read = may_read
        self._may_read_session = may_read_session

    def may_read(self, namespace: str) -> None:
        """Raise PermissionDenied unless the caller may read ``namespace``: an
        operator checks every namespace it reads data of, as the gRPC methods
        that read it directly do."""
        if self._may_read is not None:
            self._may_read(namespace)

    def may_read_session(self, session: str) -> None:
        """``may_read`` of the namespace that ``session`` belongs to."""
        if self._may_read_session is not None:
            self._may_read_session(session)

    def check(self) -> None:
        if self.cancelled.is_set() or time.monotonic() > self.deadline:
            raise DeadlineExceeded(f"the operator ran past its time limit of {self.limit_s:g} s")

    def service(self, name: str) -> Any:
        svc = self.services.get(name)
        if svc is None:
            raise InvalidArgument(f"this daemon offers operators no {name!r} service")
        return svc


OperatorFn = Callable[[dict[str, Any], OperatorContext], Any]


@dataclass(frozen=True, slots=True)
class Operator:
    name: str
    fn: OperatorFn
    description: str
    args: tuple[ArgSpec, ...] = ()
    returns: str = ""
    timeout_s: float | None = None  # None = operators.default_timeout_s
    origin: str = "builtin"

    def bind(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """Check ``raw`` against the schema; returns the arguments with defaults."""
        known = {a.name for a in self.args}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise InvalidArgument(
                f"{self.name}: unknown argument(s) {', '.join(unknown)}; "
                f"it takes {', '.join(sorted(known)) or 'none'}"
            )
        out: dict[str, Any] = {}
        for a in self.args:
            if a.name not in raw or raw[a.name] is None:
                if a.required:
                    raise InvalidArgument(
                        f"{self.name}: argument {a.name!r} ({a.type}) is required"
                    )
                out[a.name] = a.default
                continue
            value = raw[a.name]
            if not _CHECKS[a.type](value):
                raise InvalidArgument(
                    f"{self.name}: argument {a.name!r} must be {a.type}, "
                    f"got {type(value).__name__} {json.dumps(value)[:60]}"
                )
            out[a.name] = float(value) if a.type == "float" else value
        return out


@dataclass(slots=True)
class OperatorRegistry:
    _ops: dict[str, Operator] = field(default_factory=dict)

    def register(self, op: Operator) -> None:
        if not op.name or op.name in self._ops:
            raise ValueError(f"operator name {op.name!r} is empty or registered already")
        self._ops[op.name] = op

    def get(self, name: str) -> Operator | None:
        return self._ops.get(name)

    def list(self) -> list[Operator]:
        return [self._ops[n] for n in sorted(self._ops)]

    def load_entry_points(self, group: str = ENTRY_POINT_GROUP) -> int:
        """Register every operator the group's entry points provide; returns how
        many. A broken entry point fails the start with its name (no silent skip)."""
        count = 0
        for ep in importlib.metadata.entry_points(group=group):
            try:
                obj = ep.load()
                ops = _operators_of(
                    obj() if callable(obj) and not isinstance(obj, Operator) else obj
                )
            except Exception as exc:
                raise RuntimeError(
                    f"operator entry point {ep.name!r} ({ep.value}) failed to load: {exc}; "
                    "fix or uninstall it, or set agent.operators.entry_points = false"
                ) from exc
            origin = ep.dist.name if ep.dist is not None else ep.value
            for op in ops:
                self.register(
                    Operator(
                        op.name, op.fn, op.description, op.args, op.returns, op.timeout_s, origin
                    )
                )
                count += 1
        return count


def _operators_of(obj: object) -> list[Operator]:
    if isinstance(obj, Operator):
        return [obj]
    if isinstance(obj, Iterable) and not isinstance(obj, str | bytes):
        ops = list(obj)
        if all(isinstance(o, Operator) for o in ops):
            return ops
    raise TypeError(f"expected an Operator or an iterable of them, got {type(obj).__name__}")
