"""Shared vocabulary of the transformation rules: symbolic zero tangents and undefined primals.

Rules written beside each primitive use these so that forward mode skips work on tangents known
to be zero, and transpose rules know which inputs are the linear (undefined) ones.

Rule signatures (every primitive module follows them):

* ``jvp(primals, tangents, **params) -> (primal_outs, tangent_outs)`` with lists (a single-result
  primitive returns one-element lists); a tangent may be :class:`Zero`.
* ``transpose(cts, *args, **params) -> list`` of input cotangents (``None`` for non-linear
  inputs); ``args`` holds :class:`UndefPrimal` for the linear inputs; a cotangent may be
  :class:`Zero`.
* ``batch(vals, dims, **params) -> (outs, out_dims)`` with lists; a dim is an int or ``None``
  (not batched).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember._src.core import ShapedArray, get_aval


class _AvalOnly:
    """A stand-in for a value of which only the abstract value is known."""

    __slots__ = ("aval",)

    def __init__(self, aval: ShapedArray):
        self.aval = aval

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.aval.str_short()})"


class Zero(_AvalOnly):
    """A tangent or cotangent known to be zero, carrying only its abstract value."""

    __slots__ = ()

    @staticmethod
    def from_value(x: Any) -> Zero:
        return Zero(tangent_aval(get_aval(x)))


class UndefPrimal(_AvalOnly):
    """Marks a linear input of an equation during transposition."""

    __slots__ = ()


float0 = np.dtype([("float0", np.void, 0)])


def tangent_aval(aval: ShapedArray) -> ShapedArray:
    """Tangents have the dtype of the primal (weak typing dropped); integer primals keep theirs."""
    return ShapedArray(aval.shape, aval.dtype, False)


def is_zero(t: Any) -> bool:
    return isinstance(t, Zero)


def instantiate(t: Any) -> Any:
    """A concrete zero array for a :class:`Zero`, otherwise ``t`` itself."""
    if isinstance(t, Zero):
        from ember._src.prims.movement import full
        return full(t.aval.shape, 0, t.aval.dtype)
    return t


def add_tangents(a: Any, b: Any) -> Any:
    if isinstance(a, Zero):
        return b
    if isinstance(b, Zero):
        return a
    from ember._src.prims.elementwise import add
    return add(a, b)


def mul_tangent(t: Any, factor: Any) -> Any:
    """``t * factor`` where ``t`` may be :class:`Zero`."""
    if isinstance(t, Zero):
        return t
    from ember._src.prims.elementwise import mul
    return mul(t, factor)


def neg_tangent(t: Any) -> Any:
    if isinstance(t, Zero):
        return t
    from ember._src.prims.elementwise import neg
    return neg(t)


def bilinear_jvp(prim: Any) -> Any:
    """The JVP rule of a primitive ``prim(x, y, **params)`` linear in each operand (a product):
    ``d prim = prim(dx, y) + prim(x, dy)``, with symbolic zeros skipped."""
    def jvp(primals: list, tangents: list, **params: Any) -> tuple[list, list]:
        (x, y), (tx, ty) = primals, tangents
        out = prim.bind(x, y, **params)
        t1 = Zero.from_value(out) if is_zero(tx) else prim.bind(tx, y, **params)
        t2 = Zero.from_value(out) if is_zero(ty) else prim.bind(x, ty, **params)
        return [out], [add_tangents(t1, t2)]

    return jvp
