"""A torch-free, JSON-serializable form of an exported ATen graph.

The importer turns a ``torch.export.ExportedProgram`` into a :class:`Graph` (see ``export.py``);
the interpreter (``interpret.py``) turns a :class:`Graph` into an ember function. Only the first
step needs torch, so a saved graph can be run where torch is not installed.

Values in ``args``/``kwargs`` are JSON: numbers, strings, booleans, ``None``, lists, and tagged
objects ``{"ref": name}`` (another node's value), ``{"float": "inf"|"-inf"|"nan"}``,
``{"dtype": "float32"}``, ``{"dim": <dim expression>}``. A dim expression is an ``int``, an axis
name (``str``) or ``{"op": "add"|"mul"|"floordiv"|"mod"|"max"|"min", "args": [...]}``.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any

from ember._src import shapes

FORMAT = "ember.torch_graph"
FORMAT_VERSION = 1


@dataclasses.dataclass
class Node:
    """One ATen call: ``op`` is its name (``"aten.add.Tensor"``), ``shape``/``dtype`` the output's
    (``None`` for a non-tensor or tuple output), ``source`` the user's source line, if known."""
    name: str
    op: str
    args: list
    kwargs: dict
    shape: list | None = None
    dtype: str | None = None
    source: str = ""


@dataclasses.dataclass
class Input:
    """A graph input: ``kind`` is ``"user"`` (an argument of ``f``), ``"param"`` (a weight in
    ``params``), ``"constant"`` (a tensor baked into the graph), ``"literal"`` (a non-tensor argument
    torch baked in; ``target`` holds its JSON) or ``"state"`` (a buffer the graph mutates);
    ``target`` names it in the model's state dict."""
    name: str
    kind: str
    target: str
    shape: list
    dtype: str


@dataclasses.dataclass
class Graph:
    """The whole program: inputs in call order, nodes in execution order, the names of the user
    outputs (``output_names`` holds their public names) and ``mutations`` (state target -> node)."""
    inputs: list[Input]
    nodes: list[Node]
    outputs: list[Any]
    output_names: list[str]
    mutations: dict[str, str] = dataclasses.field(default_factory=dict)
    ranges: dict[str, list] = dataclasses.field(default_factory=dict)
    guards: list[dict] = dataclasses.field(default_factory=list)  # (guards.py)

    def user_inputs(self) -> list[Input]:
        return [i for i in self.inputs if i.kind == "user"]

    def to_json(self) -> dict:
        return {"format": FORMAT, "version": FORMAT_VERSION,
                "inputs": [dataclasses.asdict(i) for i in self.inputs],
                "nodes": [dataclasses.asdict(n) for n in self.nodes],
                "outputs": self.outputs, "output_names": self.output_names,
                "mutations": self.mutations, "ranges": self.ranges, "guards": self.guards}

    @classmethod
    def from_json(cls, obj: dict) -> Graph:
        """The graph of a ``to_json`` document, checked against the schema (``schema.check_graph``;
        raises ``schema.SchemaError``, a ``ValueError``, naming the field)."""
        from ember._src.torch_import.schema import check_graph  # schema builds on this module
        return check_graph(obj)


_DIM_OPS = {"add": operator.add, "mul": operator.mul, "floordiv": operator.floordiv, "mod": operator.mod}
_BOUNDED_OPS = {"max": shapes.dmax, "min": shapes.dmin}  # decided over the axes' ranges where they can be


def eval_dim(expr: Any, axes: dict[str, Any], ranges: dict | None = None) -> Any:
    """Evaluate a dim expression with ``axes`` mapping axis names to sizes (ints or symbolic dims);
    a symbolic ``max``/``min`` is decided with ``ranges`` (:func:`axis_ranges`) where it can be."""
    if isinstance(expr, int):
        return expr
    if isinstance(expr, str):
        return axes[expr]
    op = expr["op"]
    vals = [eval_dim(a, axes, ranges) for a in expr["args"]]
    out = vals[0]
    for v in vals[1:]:
        out = _BOUNDED_OPS[op](out, v, ranges) if op in _BOUNDED_OPS else _DIM_OPS[op](out, v)
    return out


def axis_ranges(graph: Graph, axes: dict[str, Any]) -> dict[str, tuple]:
    """The export's size range of each named axis that ``axes`` binds to a symbolic axis, keyed by
    that axis's name. A lower bound of 2 or less is 1: torch's guard against its 0/1 specialization
    is not a limit of the model."""
    out = {}
    for name, (lo, hi) in graph.ranges.items():
        d = axes.get(name)
        if shapes.is_symbolic(d) and len(d.axes()) == 1:
            (a,) = d.axes()
            if d == shapes.axis(a):
                out[a] = (1 if (lo or 0) <= 2 else lo, hi)
    return out


def range_error(graph: Graph, axis: str, n: int, where: str) -> str | None:
    """Why size ``n`` of the named axis ``axis`` is outside the range torch's export recorded (its
    graph was traced for sizes in that range: a branch on a size may be baked in), or None."""
    lo, hi = graph.ranges.get(axis, [1, None])
    lo = 1 if (lo or 0) <= 2 else lo  # torch's 0/1 specialization guard (>= 2) is not a limit
    if n < lo or (hi is not None and n > hi):
        return (f"{where}: axis {axis!r} = {n} is outside the exported range "
                f"[{lo}, {hi if hi is not None else 'inf'}]")
    return None


def dim_names(expr: Any) -> set[str]:
    """The axis names a dim expression uses."""
    if isinstance(expr, str):
        return {expr}
    if isinstance(expr, dict):
        return set().union(*(dim_names(a) for a in expr["args"]))
    return set()
