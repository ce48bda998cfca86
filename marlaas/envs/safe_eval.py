"""A safe arithmetic evaluator: numbers, + - * / // % ** and parentheses, nothing else."""

from __future__ import annotations

import ast
import operator

_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
MAX_EXPONENT = 64
MAX_ABS = 10**18
MAX_CHARS = 200


class UnsafeExpression(ValueError):
    """An expression the calculator refuses (not pure arithmetic, too long or too large)."""


def safe_eval(expr: str) -> int | float:
    """Evaluate an arithmetic expression without `eval`; raise UnsafeExpression otherwise."""
    if len(expr) > MAX_CHARS:
        raise UnsafeExpression(f"expression longer than {MAX_CHARS} characters")
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as exc:
        raise UnsafeExpression(f"not an expression: {expr!r}") from exc
    return _eval(tree.body)


def _eval(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _checked(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise UnsafeExpression(f"exponent larger than {MAX_EXPONENT}")
        try:
            return _checked(_BINOPS[type(node.op)](left, right))
        except (ZeroDivisionError, OverflowError) as exc:
            raise UnsafeExpression(str(exc)) from exc
    raise UnsafeExpression(f"not allowed: {ast.dump(node)[:60]}")


def _checked(value: int | float) -> int | float:
    if isinstance(value, complex) or abs(value) > MAX_ABS:
        raise UnsafeExpression("result out of range")
    return value
