"""Running operators under limits.

Each call runs on a bounded thread pool (``agent.operators.workers``) with a
deadline: the caller gets DEADLINE_EXCEEDED when it passes, whether or not the
operator noticed. Operators share the daemon's memory (they compute next to
the data: the memory index, the scratchpad), which is why they are threads and
not processes; in exchange they must be cooperative: built-ins call
``ctx.check()`` in their loops and stop at the deadline. A third-party operator
that never checks keeps its worker thread until it returns; when every worker
is busy, further calls wait in the queue and time out.

Memory is bounded by size limits instead of a per-call allocator cap: argument
documents ≤ ``max_args_bytes``, results ≤ ``max_result_bytes``, graphs ≤
``max_graph_edges`` edges and grids ≤ ``max_grid_cells`` cells, math.eval
bounds integer sizes; a MemoryError is reported as RESOURCE_EXHAUSTED.
"""

from __future__ import annotations

import contextvars
import json
import math
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from tiermem.server.config import OperatorsConfig
from tiermem.server.errors import (
    CapacityExceeded,
    DeadlineExceeded,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    TiermemError,
)
from tiermem.server.metrics import Metrics
from tiermem.server.operators.registry import Operator, OperatorContext, OperatorRegistry
from tiermem.server.services.guard import Role
from tiermem.server.sessions.service import SessionService


@dataclass(frozen=True, slots=True)
class Invocation:
    result_json: str
    elapsed_s: float


class OperatorRunner:
    def __init__(
        self,
        config: OperatorsConfig,
        registry: OperatorRegistry,
        sessions: SessionService,
        services: dict[str, Any],
        metrics: Metrics,
    ) -> None:
        self.config = config
        self.registry = registry
        self.sessions = sessions
        self.services = services
        self.metrics = metrics
        self._pool = ThreadPoolExecutor(max_workers=config.workers, thread_name_prefix="operator")
        self._limits = {
            "max_graph_edges": config.max_graph_edges,
            "max_grid_cells": config.max_grid_cells,
        }

    def list(self) -> list[Operator]:
        return self.registry.list()

    def timeout_of(self, op: Operator) -> float:
        return op.timeout_s or self.config.default_timeout_s

    def invoke(
        self, name: str, args_json: str, session: str = "", timeout_s: float = 0.0, caller: str = ""
    ) -> Invocation:
        op = self.registry.get(name)
        if op is None:
            raise NotFound(f"no operator named {name!r}; ListOperators shows what is registered")
        started = time.perf_counter()
        code = "OK"
        try:
            result = self._invoke(op, args_json, session, timeout_s, caller)
            return Invocation(result, time.perf_counter() - started)
        except TiermemError as exc:
            code = exc.code
            raise
        finally:
            self.metrics.operator_invocations.labels(name, code).inc()
            self.metrics.operator_seconds.labels(name).observe(time.perf_counter() - started)

    def _invoke(
        self, op: Operator, args_json: str, session: str, timeout_s: float, caller: str
    ) -> str:
        cfg = self.config
        size = len(args_json.encode())
        if size > cfg.max_args_bytes:
            raise CapacityExceeded(
                f"args_json is {size} bytes; the limit is {cfg.max_args_bytes} "
                "(agent.operators.max_args_bytes)"
            )
        try:
            raw = json.loads(args_json) if args_json.strip() else {}
        except (ValueError, RecursionError) as exc:  # (JSONDecodeError is a ValueError)
            raise InvalidArgument(f"args_json is not valid JSON: {exc}") from None
        if not isinstance(raw, dict):
            raise InvalidArgument("args_json must be a JSON object")
        args = op.bind(raw)
        if caller and session and caller != session:
            raise PermissionDenied(f"session {caller!r} may not invoke operators as {session!r}")
        session = session or caller
        if session:
            self.sessions.require_open(session)
            self.sessions.touch(session)
        if not math.isfinite(timeout_s) or not 0 <= timeout_s <= cfg.max_timeout_s:
            raise InvalidArgument(
                f"timeout_s {timeout_s} is outside 0..{cfg.max_timeout_s} "
                "(agent.operators.max_timeout_s)"
            )
        limit = timeout_s or self.timeout_of(op)
        guard = self.sessions.store.guard
        ctx = OperatorContext(
            limit,
            session,
            self.services,
            self._limits,
            may_read=lambda namespace: guard.authorize(namespace, Role.READ),
            may_read_session=lambda s: self.sessions.authorize(s, Role.READ),
        )
        # the operator's thread runs as the caller (its principal, deadline and
        # request id), so the checks it makes are the caller's
        future = self._pool.submit(contextvars.copy_context().run, _run, op, args, ctx)
        try:
            result = future.result(timeout=limit)
        except FutureTimeout:
            ctx.cancelled.set()
            future.cancel()
            raise DeadlineExceeded(
                f"operator {op.name} did not finish within its time limit of {limit:g} s; "
                "it was told to stop"
            ) from None
        try:
            text = json.dumps(result, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(
                f"operator {op.name} returned a value JSON cannot hold: {exc}"
            ) from None
        if len(text) > cfg.max_result_bytes:
            raise CapacityExceeded(
                f"operator {op.name} returned {len(text)} bytes; the limit is "
                f"{cfg.max_result_bytes} (agent.operators.max_result_bytes)"
            )
        return text

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _run(op: Operator, args: dict[str, Any], ctx: OperatorContext) -> Any:
    ctx.check()  # it may have waited in the queue past its deadline
    try:
        return op.fn(args, ctx)
    except MemoryError:
        raise CapacityExceeded(f"operator {op.name} ran out of memory") from None
    except RecursionError:
        raise InvalidArgument(f"operator {op.name}: the input nests too deeply") from None
    except (TypeError, ValueError, OverflowError) as exc:
        # arguments of the right JSON type but unusable (a list of lists where
        # numbers go, a number too large for a float): the caller's input, not
        # the daemon's fault
        raise InvalidArgument(
            f"operator {op.name} cannot use its arguments: {type(exc).__name__}: {exc}"
        ) from None
