"""Run a :class:`~ember._src.torch_import.graph.Graph` as an ember function (no torch needed)."""

from __future__ import annotations

import json
from typing import Any

import ember.numpy as jnp
from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src.prims.movement import ensure_shape
from ember._src.torch_import.graph import Graph, axis_ranges, eval_dim
from ember._src.torch_import.guards import assert_in_program
from ember._src.torch_import.ops import OPS, Ctx
from ember._src.torch_import.unsupported import NOT_SUPPORTED
from ember.errors import EmberError, ShapeError


class UnsupportedOpError(EmberError, NotImplementedError):
    """The graph uses ATen ops that have no ember handler; ``ops`` maps each one to the source
    lines that call it."""

    def __init__(self, ops: dict[str, list[str]]):
        self.ops = ops
        lines = []
        for op, where in ops.items():
            loc = "; ".join(dict.fromkeys(w for w in where if w)) or "source line unknown"
            why = f"{NOT_SUPPORTED[op]}; " if op in NOT_SUPPORTED else ""
            lines.append(f"  {op}  ({why}used at: {loc})")
        super().__init__(f"{len(ops)} ATen op(s) have no ember handler:\n" + "\n".join(lines)
                         + "\nSee docs/torch.md for the supported ops.")


def check_supported(graph: Graph) -> None:
    """Raise :class:`UnsupportedOpError` listing every op of ``graph`` without a handler."""
    missing: dict[str, list[str]] = {}
    for n in graph.nodes:
        if n.op not in OPS:
            missing.setdefault(n.op, []).append(n.source)
    if missing:
        raise UnsupportedOpError(missing)


def _check_shape(n: Any, got: tuple, want: tuple) -> None:
    """The handler's output has the rank and the static sizes the graph recorded for the node."""
    if len(got) != len(want):
        raise AssertionError(f"{n.op} ({n.name[:80]!r}): rank {len(got)}, torch says {len(want)}")
    for i, (a, b) in enumerate(zip(got, want)):
        if isinstance(a, int) and isinstance(b, int) and a != b:
            raise ShapeError(f"{n.op} ({n.name[:80]!r}): dimension {i} is {a}, the graph records {b}")


def _as_torch_recorded(n: Any, out: Any, want: tuple) -> Any:
    """``out`` with its symbolic sizes restated as the ones torch recorded where the two are
    different expressions (``ensure_shape``). torch's export may bake in a branch on a size (a
    "same" padding computed from ``h % 2``): its recorded sizes then hold only for the sizes that
    take that branch, and a binding where ember's sizes and torch's differ raises ``ShapeError``
    naming the node instead of running on with shapes torch's graph did not mean."""
    got = tuple(out.shape)
    if got == want or not any(sh.is_symbolic(a) or sh.is_symbolic(b) for a, b in zip(got, want)):
        return out
    reason = f"{n.op} ({n.name[:80]!r}) where torch's export recorded {sh.shape_str(want)}"
    out = ensure_shape(out, want, reason)
    # both checked equal at each binding, the shorter of the two is the one later nodes build on:
    # torch's sizes can be long restatements of ember's (Funnel's attention: p * ((2 p + s) // p)
    # for 2 p + s), which every index expression downstream would repeat
    plain = tuple(g if len(str(g)) < len(str(w)) else w for g, w in zip(got, want))
    return out if plain == want else ensure_shape(out, plain, reason)


def _decode(v: Any, env: dict[str, Any], axes: dict[str, Any], ranges: dict | None = None) -> Any:
    if isinstance(v, list):
        return [_decode(x, env, axes, ranges) for x in v]
    if isinstance(v, dict):
        if "ref" in v:
            return env[v["ref"]]
        if "float" in v:
            return float(v["float"])
        if "dtype" in v:  # torch's int64 indices are int32 while 64-bit dtypes are off
            return dt.canonicalize(v["dtype"])
        if "dim" in v:
            return eval_dim(v["dim"], axes, ranges)
        return {k: _decode(x, env, axes, ranges) for k, x in v.items()}
    return v


def _bind_axes(graph: Graph, inputs: list[Any]) -> dict[str, Any]:
    axes: dict[str, Any] = {}
    for spec, x in zip(graph.user_inputs(), inputs):
        for d, size in zip(spec.shape, x.shape):
            if isinstance(d, str) and d not in axes:
                axes[d] = size
    return axes


_SAME_VALUES = ("view", "reshape", "_unsafe_view", "unsqueeze", "squeeze", "expand", "clone", "_to_copy",
                "alias", "detach", "lift_fresh_copy")


def value_names(graph: Graph) -> dict[str, str]:
    """How error messages name each graph value: ``input 'x'`` for a user input (and its reshapes,
    casts and copies), the state-dict name for a weight, ``the value computed at <source line>``
    for an intermediate."""
    out = {}
    for i in graph.inputs:
        out[i.name] = f"input '{i.name}'" if i.kind == "user" else f"'{i.target}'"
    for n in graph.nodes:
        first = n.args[0] if n.args else None
        if n.op.split(".")[1:2] and n.op.split(".")[1] in _SAME_VALUES and isinstance(first, dict) \
                and first.get("ref") in out:
            out[n.name] = out[first["ref"]]
        else:
            out[n.name] = f"the value computed at {n.source}" if n.source else f"'{n.name}'"
    return out


def _ref_names(a: Any, names: dict[str, str]) -> Any:
    if isinstance(a, list):
        return [_ref_names(x, names) for x in a]
    return names.get(a["ref"], a["ref"]) if isinstance(a, dict) and "ref" in a else None


# elementwise ops whose operands broadcast against each other: where torch's recorded output size
# and an operand's size (not 1) are different expressions, torch's broadcast found them equal
BROADCASTING = frozenset(f"aten.{n}" for n in (
    "add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor", "div.Tensor_mode", "where.self",
    "maximum.default", "minimum.default", "pow.Tensor_Tensor", "eq.Tensor", "ne.Tensor", "lt.Tensor",
    "le.Tensor", "gt.Tensor", "ge.Tensor", "logical_and.default", "logical_or.default",
    "bitwise_and.Tensor", "bitwise_or.Tensor", "masked_fill.Tensor", "masked_fill.Scalar"))


def _broadcast_as_recorded(n: Any, a: Any, want: tuple) -> Any:
    """The operand ``a`` of a broadcasting node with each size that is neither 1 nor the recorded
    output's (right-aligned) restated as the output's, checked equal at each binding: torch's
    export may know them equal from a guard (Longformer's padded length ``4 * (s // 4)`` is ``s``
    for the multiples of 8 its export assumed) where ember's expressions differ."""
    if not hasattr(a, "shape") or a.ndim > len(want) or a.ndim == 0:
        return a
    got = tuple(a.shape)
    new = tuple(w if g != w and not (isinstance(g, int) and g == 1)
                and (sh.is_symbolic(g) or sh.is_symbolic(w)) else g
                for g, w in zip(got, want[len(want) - len(got):]))
    if new == got:
        return a
    return ensure_shape(a, new, f"{n.op} ({n.name[:80]!r}) broadcast to torch's recorded "
                                f"{sh.shape_str(want)}")


def build_function(graph: Graph, constants: dict[str, Any]) -> Any:
    """``f(params, *inputs) -> (outputs, new_state)``: ``outputs`` a tuple in ``graph.output_names``
    order, ``new_state`` a dict of the mutated buffers (state target -> new value)."""
    check_supported(graph)
    names = value_names(graph)

    def f(params: dict[str, Any], *inputs: Any) -> tuple[tuple, dict]:
        users = graph.user_inputs()
        if len(inputs) != len(users):
            raise TypeError(f"expected {len(users)} inputs ({', '.join(i.name for i in users)}), "
                            f"got {len(inputs)}")
        inputs = [jnp.asarray(x) for x in inputs]
        axes = _bind_axes(graph, inputs)
        ranges = axis_ranges(graph, axes)
        assert_in_program(graph, axes, ranges)
        env: dict[str, Any] = {}
        it = iter(inputs)
        for spec in graph.inputs:
            if spec.kind == "user":
                env[spec.name] = next(it)
            elif spec.kind == "literal":
                env[spec.name] = _decode(json.loads(spec.target), env, axes, ranges)
            elif spec.kind in ("param", "state"):
                env[spec.name] = params[spec.target]
            else:
                env[spec.name] = constants[spec.target]
        for n in graph.nodes:
            args = _decode(n.args, env, axes, ranges)
            kwargs = {k: _decode(v, env, axes, ranges) for k, v in n.kwargs.items()}
            shape = None if n.shape is None else tuple(eval_dim(d, axes, ranges) for d in n.shape)
            dtype = None if n.dtype is None else dt.canonicalize(n.dtype)
            refs = tuple(_ref_names(a, names) for a in n.args)
            ctx = Ctx(shape, dtype, n.op[5:] if n.op.startswith("aten.") else n.op, refs, n.source, ranges)
            if n.op in BROADCASTING and shape is not None:
                args = [_broadcast_as_recorded(n, a, shape) for a in args]
            try:
                out = OPS[n.op].fn(ctx, *args, **kwargs)
            except Exception as e:
                e.add_note(f"in graph node {n.name[:80]!r} ({n.op})")
                raise
            if dtype is not None and hasattr(out, "dtype") and out.dtype != dtype:
                out = out.astype(dtype)
            if n.shape is not None and hasattr(out, "shape"):
                _check_shape(n, tuple(out.shape), shape)
                out = _as_torch_recorded(n, out, shape)
            env[n.name] = out
        outs = tuple(_decode(o, env, axes, ranges) for o in graph.outputs)
        state = {t: env[name] for t, name in graph.mutations.items()}
        return outs, state

    return f
