"""What the language renderers share: the dispatch over the op table (:mod:`.ops`).

A renderer subclasses :class:`BaseRenderer` and fills :attr:`FNS` (generic function name ->
template over ``{0}``, ``{1}``) and its type names; :meth:`BaseRenderer.op` renders any entry of
:data:`.ops.OPS` from them, so adding an op to the table and one template per language is all a
new elementwise primitive needs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ember._src.gpu import ops
from ember.errors import CompileError

_REDUCE_OPS = {"sum": "{0} + {1}", "prod": "{0} * {1}", "and": "{0} && {1}", "or": "{0} || {1}"}


class BaseRenderer:
    """Table-driven rendering of elementwise ops; subclasses add types, literals and skeletons."""

    device = "?"
    FNS: dict[str, str] = {}  # generic function -> template (float operands)
    INT_FNS: dict[str, str] = {}  # overrides for integer operands
    TYPES: dict[np.dtype, str] = {}
    MAXMIN = ("max({0}, {1})", "min({0}, {1})")

    def vtype(self, dtype: np.dtype) -> str:
        return self.TYPES[np.dtype(dtype)]

    def check_dtype(self, dtype: np.dtype, what: str) -> None:
        if np.dtype(dtype) not in self.TYPES:
            raise TypeError(self.dtype_message(np.dtype(dtype), what))

    def dtype_message(self, dtype: np.dtype, what: str) -> str:
        return f"the {self.device} backend does not support dtype {dtype} ({what})"

    def op(self, name: str, args: Sequence[str], in_dtypes: Sequence[np.dtype], out_dtype: np.dtype,
           params: dict) -> str:
        entry = ops.OPS[name]
        d = np.dtype(in_dtypes[0])
        if entry.kind == "infix":
            return self.infix(entry.sym, args, d)
        if entry.kind == "cmp":
            return f"({args[0]} {entry.sym} {args[1]})"
        if entry.kind == "prefix":
            return self.prefix(entry.sym, args[0], d)
        if entry.kind == "fn":
            table = self.FNS if is_float(d) else self.INT_FNS
            tpl = table.get(entry.sym) if (entry.ints or is_float(d)) else None
            if tpl is None:
                raise NotImplementedError(f"the {self.device} backend has no kernel for primitive '{name}' "
                                          f"on {d}")
            return tpl.format(*args, s=self.suffix(d))
        raise NotImplementedError(f"the {self.device} backend has no kernel for primitive '{name}'")

    def suffix(self, d: np.dtype) -> str:
        """The suffix of a math function's name for operands of ``d`` (C's ``expf``)."""
        return ""

    def infix(self, sym: str, args: Sequence[str], d: np.dtype) -> str:
        return f"({args[0]} {sym} {args[1]})"

    def prefix(self, sym: str, a: str, d: np.dtype) -> str:
        if sym == "!" and d != np.bool_:
            sym = "~"
        return f"({sym}{a})"

    def combine(self, kind: str, a: str, b: str) -> str:
        if kind in ("max", "min"):
            return self.MAXMIN[kind == "min"].format(a, b)
        return _REDUCE_OPS[kind].format(a, b)

    def better(self, kind: str, v: str, vi: str, a: str, ai: str, dtype: np.dtype) -> str:
        """Whether ``(v, vi)`` replaces ``(a, ai)`` in an arg reduction: a larger (argmax) or
        smaller (argmin) value, the lower index on ties, and NaN first (NumPy's rule)."""
        cmp = ">" if kind == "argmax" else "<"
        out = f"({v} {cmp} {a}) || ({v} == {a} && {vi} < {ai})"
        if is_float(dtype):
            out += f" || ({self.isnan(v)} && (!{self.isnan(a)} || {vi} < {ai}))"
        return out

    def isnan(self, x: str) -> str:
        return f"({x} != {x})"

    def identity(self, kind: str, dtype: np.dtype) -> str:
        kind = {"argmax": "max", "argmin": "min"}.get(kind, kind)
        d = np.dtype(dtype)
        if kind in ("sum", "or"):
            v: Any = 0
        elif kind in ("prod", "and"):
            v = 1
        elif is_float(d):
            v = -np.inf if kind == "max" else np.inf
        elif d == np.bool_:
            v = kind == "min"
        else:
            info = np.iinfo(d)
            v = info.min if kind == "max" else info.max
        return self.literal(v, d)

    def literal(self, value: Any, dtype: np.dtype) -> str:  # pragma: no cover - abstract
        raise NotImplementedError


def dim_text(d: Any, axis: Callable[[str], str]) -> str:
    """A size expression (:class:`~ember._src.shapes.DimExpr`) as 32-bit integer kernel text, the
    value of each named axis given by ``axis(name)``. Sizes are never negative, so ``floordiv`` and
    ``mod`` are the language's ``/`` and ``%``."""
    def atom(a: Any) -> str:
        if a.kind == "var":
            return axis(a.args[0])
        if a.kind == "ceil_sqrt":
            raise NotImplementedError("the size ceil_sqrt(...) has no kernel form")
        x, y = (dim_text(v, axis) for v in a.args)
        if a.kind == "floordiv":
            return f"({x} / {y})"
        if a.kind == "mod":
            return f"({x} % {y})"
        return f"max({x}, {y})"

    if not hasattr(d, "terms"):
        return str(int(d))
    parts = []
    for mono, c in d.terms:
        factors = [atom(a) for a, p in mono for _ in range(p)]
        if not factors:
            parts.append(str(c))
            continue
        body = " * ".join(factors)
        parts.append(body if c == 1 else f"-{body}" if c == -1 else f"{c} * {body}")
    return "(" + " + ".join(parts).replace("+ -", "- ") + ")"


def is_float(d: np.dtype) -> bool:
    """Floating point (bfloat16, NumPy kind 'V', included)."""
    return np.dtype(d).kind == "f" or np.dtype(d).name == "bfloat16"


def compile_error(device: str, path: str, message: str) -> CompileError:
    """The error of a kernel that failed to compile: where its source is and the compiler's words."""
    return CompileError(f"{device}: a kernel failed to compile (source: {path}):\n{message}")


def float_text(v: float) -> str:
    """A finite float32 value as a decimal literal body (round-trips through float32)."""
    r = repr(float(np.float32(v)))
    return r if ("e" in r or "." in r) else r + ".0"
