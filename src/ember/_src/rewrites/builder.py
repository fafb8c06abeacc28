"""The helpers every Program -> Program rewrite uses: :class:`Builder` (re-emit a program with
substitutions), :func:`lit` (a scalar literal) and :func:`splat_value` (the scalar of a literal or
of a broadcast literal)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ember._src import core
from ember._src.core import ShapedArray
from ember._src.prims import movement as mv
from ember._src.program import Atom, Eqn, Literal, Program, Var


def lit(value: Any, dtype: np.dtype) -> Literal:
    """A 0-d literal of ``value`` as ``dtype``."""
    return Literal(np.asarray(value, dtype=dtype), ShapedArray((), dtype))


def splat_value(a: Atom, prod: dict[int, Eqn]) -> Any:
    """The scalar of a Literal or a broadcast of a Literal, else None."""
    if isinstance(a, Literal):
        return a.val
    e = prod.get(a.id)
    if e is not None and e.prim is mv.broadcast_in_dim_p and isinstance(e.inputs[0], Literal):
        return e.inputs[0].val
    return None


def same_aval(a: Atom, aval: ShapedArray) -> bool:
    """Whether ``a`` has the shape and dtype of ``aval``."""
    return tuple(a.aval.shape) == tuple(aval.shape) and a.aval.dtype == aval.dtype


class Builder:
    """Re-emits a program: ``sub`` maps old var ids to replacement atoms."""

    def __init__(self, p: Program):
        self.p = p
        self.sub: dict[int, Atom] = {}
        self.eqns: list[Eqn] = []
        self.prod: dict[int, Eqn] = {}
        self.constvars = list(p.constvars)
        self.consts = list(p.consts)

    def read(self, a: Atom) -> Atom:
        """The atom that replaces ``a`` (``a`` itself when none does)."""
        while isinstance(a, Var) and a.id in self.sub:
            a = self.sub[a.id]
        return a

    def emit(self, prim: core.Primitive, inputs: Sequence[Atom], params: dict,
             outvars: Sequence[Var] | None = None) -> list[Var]:
        """Append an equation (new output variables unless ``outvars`` is given)."""
        if outvars is None:
            avals = prim.abstract([a.aval for a in inputs], params)
            outvars = [Var(a) for a in avals]
        e = Eqn(prim, inputs, params, outvars)
        self.eqns.append(e)
        for v in outvars:
            self.prod[v.id] = e
        return list(outvars)

    def emit1(self, prim: core.Primitive, inputs: Sequence[Atom], params: dict) -> Var:
        """:meth:`emit` of a primitive with one result."""
        return self.emit(prim, inputs, params)[0]

    def splat(self, value: Any, aval: ShapedArray) -> Atom:
        """``value`` broadcast to ``aval`` (a literal when ``aval`` is 0-d)."""
        lv = lit(value, aval.dtype)
        if aval.shape == ():
            return lv
        return self.emit1(mv.broadcast_in_dim_p, [lv], {"shape": tuple(aval.shape),
                                                        "broadcast_dimensions": ()})

    def reshape(self, a: Atom, shape: tuple) -> Atom:
        """``a`` reshaped to ``shape`` (``a`` itself when it has that shape)."""
        if tuple(a.aval.shape) == tuple(shape):
            return a
        return self.emit1(mv.reshape_p, [a], {"new_sizes": tuple(shape)})

    def finish(self) -> Program:
        """The re-emitted program (same inputs; outputs read through the substitutions)."""
        outs = [self.read(a) for a in self.p.outvars]
        return Program(self.constvars, self.p.invars, self.eqns, outs, self.consts)
