"""A stage's `filter`: a small expression over a row's columns, parsed and checked before the pipeline
starts and evaluated by this module alone, never by Python's `eval`.

    filter = "reward > 0.5 and finish_reason in ['stop', 'length'] and not (prompt_tokens * 2 > 100)"

The grammar is a whitelist of Python's own syntax: names (the row's columns), constants, comparisons
(chained too), `and` / `or` / `not`, `in` / `not in` over a literal list, tuple or set, the arithmetic
operators + - * / // % and unary minus, and parentheses. Anything else (a call, an attribute, a
subscript, a lambda, a comprehension, an f-string, a name starting with an underscore) is refused,
so an expression can read a row and compute with it, and do nothing else.
"""

from __future__ import annotations

import ast
import operator
from typing import Any, Callable

from bulkinfer.errors import UsageError

_COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.In: lambda left, right: left in right, ast.NotIn: lambda left, right: left not in right,
}
_ARITHMETIC: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_}
_CONSTANTS = (str, int, float, bool, type(None))


class RowError(Exception):
    """The expression cannot be evaluated on this row (a missing column, a None compared): its error row."""


class Expression:
    """A checked expression; `holds(row)` evaluates it on one row's columns."""

    def __init__(self, text: str, what: str = "filter") -> None:
        self.text = text
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError as exc:
            raise UsageError(f"{what} {text!r}: not an expression ({exc.msg})") from None
        refused = next((node for node in ast.walk(tree) if not _allowed(node)), None)
        if refused is not None:
            raise UsageError(f"{what} {text!r}: {_describe(refused)} is not allowed; a filter may use columns, "
                             f"constants, comparisons, and/or/not, in over a literal list, and + - * / // %")
        self._body = tree.body
        self.columns = sorted({node.id for node in ast.walk(tree) if isinstance(node, ast.Name)})

    def holds(self, row: dict[str, Any]) -> bool:
        """RowError when the row lacks a column the expression names, or its values do not fit the operators."""
        try:
            return bool(_evaluate(self._body, row))
        except RowError:
            raise
        except (TypeError, ValueError, ArithmeticError) as exc:
            raise RowError(f"filter {self.text!r}: {exc}") from None


def _allowed(node: ast.AST) -> bool:
    if isinstance(node, ast.Name):
        return not node.id.startswith("_") and isinstance(node.ctx, ast.Load)
    if isinstance(node, ast.Constant):
        return isinstance(node.value, _CONSTANTS)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return all(isinstance(element, ast.Constant) or _is_negative_number(element) for element in node.elts)
    if isinstance(node, ast.Compare):
        memberships = [right for op, right in zip(node.ops, node.comparators) if isinstance(op, (ast.In, ast.NotIn))]
        return all(type(op) in _COMPARE for op in node.ops) and all(map(_literal_collection, memberships))
    if isinstance(node, ast.BinOp):
        return type(node.op) in _ARITHMETIC
    if isinstance(node, ast.UnaryOp):
        return type(node.op) in _UNARY
    return isinstance(node, (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.Load, *tuple(_COMPARE),
                             *tuple(_ARITHMETIC), *tuple(_UNARY)))


def _literal_collection(node: ast.AST) -> bool:
    return isinstance(node, (ast.List, ast.Tuple, ast.Set))


def _is_negative_number(node: ast.AST) -> bool:
    return (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant)
            and isinstance(node.operand.value, (int, float)))


def _describe(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return f"the name {node.id!r} (names starting with _ are not columns)"
    if isinstance(node, ast.Compare):
        return "'in' over anything but a literal list, tuple or set"
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return "a collection of anything but constants"
    return f"{type(node).__name__.lower()} {ast.unparse(node)[:40]!r}"


def _evaluate(node: ast.AST, row: dict[str, Any]) -> Any:
    if isinstance(node, ast.Name):
        if node.id not in row:
            raise RowError(f"filter: no column {node.id!r}")
        return row[node.id]
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [_evaluate(element, row) for element in node.elts]
    if isinstance(node, ast.BoolOp):
        return _boolean(node, row)
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_evaluate(node.operand, row))
    if isinstance(node, ast.BinOp):
        return _arithmetic(node, _evaluate(node.left, row), _evaluate(node.right, row))
    return _compare(node, row)


def _arithmetic(node: ast.BinOp, left: Any, right: Any) -> Any:
    # Numbers only (and + of two strings): "x" * 10**12 or "%s" % x must not run through a row's values.
    numbers = all(isinstance(value, (int, float)) and not isinstance(value, bool) for value in (left, right))
    joined = isinstance(node.op, ast.Add) and isinstance(left, str) and isinstance(right, str)
    if not (numbers or joined):
        raise RowError(f"filter: {ast.unparse(node)} needs numbers, got {type(left).__name__} and "
                       f"{type(right).__name__}")
    return _ARITHMETIC[type(node.op)](left, right)


def _boolean(node: ast.BoolOp, row: dict[str, Any]) -> bool:
    # Short-circuits like Python: `x is not None and x > 3` style guards work on rows that lack a value.
    if isinstance(node.op, ast.And):
        return all(_evaluate(value, row) for value in node.values)
    return any(_evaluate(value, row) for value in node.values)


def _compare(node: ast.Compare, row: dict[str, Any]) -> bool:
    left = _evaluate(node.left, row)
    for op, comparator in zip(node.ops, node.comparators):
        right = _evaluate(comparator, row)
        if not _COMPARE[type(op)](left, right):
            return False
        left = right
    return True
