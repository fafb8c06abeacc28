"""The conditions on input sizes that torch's export assumed while tracing (its guards).

``torch.export`` with dynamic dims may bake a branch on a size into the graph (MobileNetV1's "same"
padding computed from ``h % 2``): the graph is then right only for the sizes that take that
branch, and torch's own exported module checks each guard on every call. The guards come as
Python source over the inputs' sizes (``(L['pixel_values'].size()[2] % 2) == 0``); they are parsed
here, with a fixed grammar and no ``eval``, into comparisons of dim expressions over ember's axis
names (the graph's dim format, ``graph.eval_dim``), saved with the graph, and made constraints of
the program traced from it (:func:`assert_in_program`), which every way of running it checks once
per binding of its named axes."""

from __future__ import annotations

import ast
from typing import Any

from ember._src import shapes
from ember._src.prims.movement import require_equal_sizes
from ember._src.torch_import.graph import Graph, eval_dim
from ember._src.torch_import.schema import MAX_GUARDS

_CMP = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge"}
_BIN = {ast.Add: "add", ast.Mult: "mul", ast.FloorDiv: "floordiv", ast.Mod: "mod"}
_TEXT = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "add": "+", "mul": "*",
         "floordiv": "//", "mod": "%"}


class _Unsupported(Exception):
    pass


def parse_guards(texts: list[str], graph: Graph) -> tuple[list[dict], int]:
    """``(guards, skipped)``: each guard torch recorded as ``{"op": comparison, "args": [dim, dim]}``
    (a conjunction becomes several); ``skipped`` counts those outside the grammar (an ``or``, a
    size of an input ember does not name, ...), which are not checked. Only equalities are kept
    (``h % 2 == 0``, MPT's ``seq == 16 - max(0, 16 - seq)``): torch's disequalities and orderings
    (``h // 4 != 1``, ``max(1, w // 32) > 1``, and the range bounds they imply) are mostly its
    guards against its own specialization of a size to 0 or 1, which ember's symbolic program
    does not make (ConvNeXt's map of one pixel matches torch eager); an ordering a model's code
    branches on is not checked."""
    shapes = {i.name: i.shape for i in graph.user_inputs()}
    out: list[dict] = []
    skipped = 0
    for text in texts[:MAX_GUARDS]:
        try:
            out.extend(_conjuncts(ast.parse(text, mode="eval").body, shapes))
        except (_Unsupported, SyntaxError, RecursionError):
            skipped += 1
    return [g for g in out if not _constant(g) and g["op"] == "eq"], skipped


def _constant(g: dict) -> bool:
    return all(isinstance(a, int) for a in g["args"])


def _conjuncts(node: ast.AST, shapes: dict) -> list[dict]:
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
        return [g for v in node.values for g in _conjuncts(v, shapes)]
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMP:
        args = [_dim(node.left, shapes), _dim(node.comparators[0], shapes)]
        return [{"op": _CMP[type(node.ops[0])], "args": args}]
    raise _Unsupported


def _dim(node: ast.AST, shapes: dict) -> Any:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return _mul(-1, _dim(node.operand, shapes))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub):
        return {"op": "add", "args": [_dim(node.left, shapes), _mul(-1, _dim(node.right, shapes))]}
    if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
        return {"op": _BIN[type(node.op)], "args": [_dim(node.left, shapes), _dim(node.right, shapes)]}
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("max", "min")
            and node.args and not node.keywords):
        return {"op": node.func.id, "args": [_dim(a, shapes) for a in node.args]}
    return _size(node, shapes)


def _mul(k: int, d: Any) -> Any:
    return k * d if isinstance(d, int) else {"op": "mul", "args": [k, d]}


def _size(node: ast.AST, shapes: dict) -> Any:
    """``L['name'].size()[i]`` -> the input's dim ``i`` (an axis name or a static size)."""
    if not (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
            and type(node.slice.value) is int):
        raise _Unsupported
    call = node.value
    if not (isinstance(call, ast.Call) and not call.args and isinstance(call.func, ast.Attribute)
            and call.func.attr == "size"):
        raise _Unsupported
    ref = call.func.value
    if not (isinstance(ref, ast.Subscript) and isinstance(ref.value, ast.Name) and ref.value.id == "L"
            and isinstance(ref.slice, ast.Constant) and isinstance(ref.slice.value, str)):
        raise _Unsupported
    shape = shapes.get(ref.slice.value)
    i = node.slice.value
    if shape is None or not 0 <= i < len(shape) or not isinstance(shape[i], (int, str)):
        raise _Unsupported
    return shape[i]


def guard_text(g: Any) -> str:
    """A guard (or dim expression) as text over the axis names."""
    if isinstance(g, (int, str)):
        return str(g)
    if g["op"] == "mul" and g["args"][0] == -1 and len(g["args"]) == 2:
        return f"-{guard_text(g['args'][1])}"
    args = [guard_text(a) for a in g["args"]]
    if g["op"] in ("max", "min"):
        return f"{g['op']}({', '.join(args)})"
    text = f" {_TEXT[g['op']]} ".join(args)
    return "(" + (text.replace(" + -", " - ") if g["op"] == "add" else text) + ")"


_TEXT_MAX = 300  # characters of a guard quoted in an error


def _short(text: str) -> str:
    """A guard's text cut to :data:`_TEXT_MAX` characters (its start and end kept)."""
    return text if len(text) <= _TEXT_MAX else text[:_TEXT_MAX - 20] + " ... " + text[-15:]


def assert_in_program(graph: Graph, axes: dict[str, Any], ranges: dict | None = None) -> None:
    """Make the guards and the upper ends of the axis ranges constraints of the program being
    traced (``axes``: axis name -> symbolic size), so every way of running it checks them once
    per binding (the module's call, a session, ``imported.jit()`` and its ``lower``/AOT forms),
    with no cost on the call path once a binding has passed. Each is a ``require_equal_sizes``
    (``a`` restated as ``b``; ``min(n, hi)`` as ``n``), which computes nothing."""
    for g in graph.guards:
        try:
            a, b = (eval_dim(x, axes, ranges) for x in g["args"])
        except (KeyError, ZeroDivisionError):
            continue
        if g["op"] != "eq" or a == b or not (shapes.is_symbolic(a) or shapes.is_symbolic(b)):
            continue
        require_equal_sizes(a, b, f"a condition torch's export assumed: {_short(guard_text(g)[1:-1])}")
    for name, (_, hi) in graph.ranges.items():
        d = axes.get(name)
        if hi is not None and shapes.is_symbolic(d):  # (min(d, hi) == d: no ranges, so not decided)
            why = f"axis {name!r} past {hi}, the largest size torch's export traced the graph for"
            require_equal_sizes(shapes.dmin(d, hi), d, why)
