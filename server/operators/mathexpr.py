"""``math.eval``: arithmetic parsed with ``ast`` and evaluated over a whitelist.

No Python ``eval``: only numbers, + - * / // % **, unary +/-, the names in
``NAMES`` and ``vars``, and calls of the functions in ``FUNCTIONS``. Sizes are
bounded: the expression, its node count, and integers (``MAX_INT_BITS``), so
``9**9**9`` is refused before it is computed."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

from tiermem.server.errors import InvalidArgument
from tiermem.server.operators.registry import OperatorContext

MAX_EXPR_CHARS = 10_000
MAX_NODES = 2_000
MAX_INT_BITS = 4_096

Number = int | float

BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": abs,
    "min": min,
    "max": max,
    "round": round,
    "sqrt": math.sqrt,
    "exp": math.exp,
    "log": math.log,
    "log2": math.log2,
    "log10": math.log10,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "asin": math.asin,
    "acos": math.acos,
    "atan": math.atan,
    "atan2": math.atan2,
    "hypot": math.hypot,
    "floor": math.floor,
    "ceil": math.ceil,
}
NAMES: dict[str, Number] = {"pi": math.pi, "e": math.e, "tau": math.tau}


def _bounded(value: Any) -> Number:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(f"math.eval: {value!r} is not a number")
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise InvalidArgument(f"math.eval: an intermediate integer exceeds {MAX_INT_BITS} bits")
    if isinstance(value, float) and math.isnan(value):
        raise InvalidArgument("math.eval: the result is not a number (NaN)")
    return value


class _Evaluator:
    def __init__(self, variables: dict[str, Number]) -> None:
        self.names = {**NAMES, **variables}

    def eval(self, node: ast.AST) -> Number:
        if isinstance(node, ast.Expression):
            return self.eval(node.body)
        if isinstance(node, ast.Constant):
            return _bounded(node.value)
        if isinstance(node, ast.Name):
            if node.id not in self.names:
                raise InvalidArgument(f"math.eval: unknown name {node.id!r}")
            return self.names[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd | ast.USub):
            value = self.eval(node.operand)
            return -value if isinstance(node.op, ast.USub) else +value
        if isinstance(node, ast.BinOp) and type(node.op) in BINOPS:
            left, right = self.eval(node.left), self.eval(node.right)
            both_int = isinstance(left, int) and isinstance(right, int)
            if (
                both_int
                and isinstance(node.op, ast.Pow)
                and right > 0
                and abs(left) > 1
                and right * int(left).bit_length() > MAX_INT_BITS
            ):
                raise InvalidArgument(f"math.eval: the power would exceed {MAX_INT_BITS} bits")
            if (
                both_int
                and isinstance(node.op, ast.Mult)
                and int(left).bit_length() + int(right).bit_length() > MAX_INT_BITS + 1
            ):
                raise InvalidArgument(f"math.eval: a product exceeds {MAX_INT_BITS} bits")
            return _bounded(BINOPS[type(node.op)](left, right))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
            fn = FUNCTIONS.get(node.func.id)
            if fn is None:
                raise InvalidArgument(f"math.eval: unknown function {node.func.id!r}")
            return _bounded(fn(*(self.eval(a) for a in node.args)))
        raise InvalidArgument(f"math.eval: {type(node).__name__} is not allowed")


def evaluate(expression: str, variables: dict[str, Any] | None = None) -> Number:
    if len(expression) > MAX_EXPR_CHARS:
        raise InvalidArgument(f"math.eval: the expression exceeds {MAX_EXPR_CHARS} characters")
    variables = variables or {}
    for name, value in variables.items():
        if not name.isidentifier() or isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidArgument(f"math.eval: variable {name!r} must be a number")
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as exc:
        raise InvalidArgument(f"math.eval: cannot parse the expression: {exc.msg}") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise InvalidArgument(f"math.eval: the expression has more than {MAX_NODES} nodes")
    try:
        return _Evaluator(variables).eval(tree)
    except ZeroDivisionError:
        raise InvalidArgument("math.eval: division by zero") from None
    except OverflowError:
        raise InvalidArgument("math.eval: the result overflows a float") from None
    except (ValueError, TypeError) as exc:
        raise InvalidArgument(f"math.eval: {exc}") from None


def math_eval(args: dict[str, Any], ctx: OperatorContext) -> dict[str, Any]:
    value = evaluate(args["expression"], args["vars"])
    if isinstance(value, float) and math.isinf(value):
        raise InvalidArgument("math.eval: the result is infinite")
    return {"value": value}
