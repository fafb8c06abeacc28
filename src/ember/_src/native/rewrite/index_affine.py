"""Affine index analysis: which integer and boolean values of a Program are functions of their own
array index alone (built from ``iota``, sizes and constants), and which ones.

An integer value ``v`` of shape ``shape`` is :class:`Aff` when ``v[idx] = sum(coef[a] * idx[a]) + c0``
for every index (``c0`` an int or a ``DimExpr`` over named axes); a boolean value is :class:`Cons`
when it is the conjunction of constraints ``aff(idx) <= 0`` (no constraint: all true). Values that
depend on program inputs, or on ops this analysis does not model, are ``None``. Every rule is
exact for every binding of the named axes: a case split (``select_n``, ``ne``) or a gather is
resolved only when the index ranges prove it (:func:`.symdims.proves_le`), never by testing sizes.

Used by the attention passes (:mod:`.attention_passes`) to recognize a causal mask however an
exporter built it (``arange`` compares, ``tril``, gathers of position ids, cumulative sums of
constant flags) and turn it into the attention step's ``causal`` flag, so the ``L x S`` mask is
never materialized.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ember._src.native.base import prim_refs as pr
from ember._src.native.base import symdims as sd
from ember._src.program import Atom, Eqn, Literal, Program


@dataclass(frozen=True)
class Aff:
    """``sum(coef[axis] * idx[axis]) + c0`` over the value's own index (``coef``: sorted pairs)."""

    coef: tuple[tuple[int, int], ...]
    c0: Any

    def get(self, axis: int) -> int:
        return dict(self.coef).get(axis, 0)


@dataclass(frozen=True)
class Cons:
    """A boolean: the conjunction of ``term(idx) <= 0`` (``false``: never true)."""

    terms: tuple[Aff, ...] = ()
    false: bool = False


TRUE, FALSE = Cons(), Cons((), True)


def _aff(coef: dict[int, int], c0: Any) -> Aff:
    return Aff(tuple(sorted((a, c) for a, c in coef.items() if c)), c0)


def _lin(a: Aff, b: Aff, sb: int = 1) -> Aff:
    """``a + sb * b``."""
    coef = dict(a.coef)
    for ax, c in b.coef:
        coef[ax] = coef.get(ax, 0) + sb * c
    return _aff(coef, a.c0 + sb * b.c0)


def _scale(a: Aff, k: Any) -> Aff | None:
    if a.coef and not isinstance(k, int):
        return None
    return _aff({ax: c * k for ax, c in a.coef}, a.c0 * k)


def bounds(a: Aff, shape: tuple) -> tuple[Any, Any]:
    """(least, greatest) value of ``a`` over the index range of ``shape`` (every dim >= 1)."""
    lo = hi = a.c0
    for ax, c in a.coef:
        span = c * (shape[ax] - 1)
        lo, hi = (lo + span, hi) if c < 0 else (lo, hi + span)
    return lo, hi


def _remap(v: Aff | Cons, mapping: dict[int, int]) -> Aff | Cons:
    """Re-index onto another shape: input axis ``a`` becomes ``mapping[a]`` (dropped when absent:
    the caller only drops axes of size 1)."""
    def one(a: Aff) -> Aff:
        return _aff({mapping[ax]: c for ax, c in a.coef if ax in mapping}, a.c0)

    if isinstance(v, Aff):
        return one(v)
    return Cons(tuple(one(t) for t in v.terms), v.false)


def simplify(v: Cons, shape: tuple) -> Cons:
    """Drop constraints that always hold; FALSE when one never holds."""
    if v.false:
        return FALSE
    keep = []
    for t in v.terms:
        lo, hi = bounds(t, shape)
        if sd.proves_le(hi, 0):
            continue
        if sd.proves_le(1, lo):
            return FALSE
        if t not in keep:
            keep.append(t)
    return Cons(tuple(keep))


class IndexAnalysis:
    """Memoized :class:`Aff` / :class:`Cons` / None of the values of one Program."""

    def __init__(self, p: Program):
        self.prod: dict[int, Eqn] = {v.id: e for e in p.eqns for v in e.outvars}
        self.memo: dict[int, Aff | Cons | None] = {}

    def of(self, a: Atom) -> Aff | Cons | None:
        if isinstance(a, Literal):
            return _literal(a.val)
        if a.id not in self.memo:
            e = self.prod.get(a.id)
            self.memo[a.id] = None  # a cycle cannot happen in SSA; this guards recursion depth
            self.memo[a.id] = self._eqn(e) if e is not None and len(e.outvars) == 1 else None
        return self.memo[a.id]

    def _eqn(self, e: Eqn) -> Aff | Cons | None:
        rule = _RULES.get(e.prim.name)
        if rule is None:
            return None
        try:
            return rule(self, e)
        except (TypeError, ValueError, ZeroDivisionError):  # a symbolic case the rules do not decide
            return None


def _literal(val: Any) -> Aff | Cons | None:
    arr = np.asarray(val)
    if arr.ndim:
        return None
    if arr.dtype == np.bool_:
        return TRUE if bool(arr) else FALSE
    if arr.dtype.kind in "iu":
        return Aff((), int(arr))
    return None


def _shape(a: Atom) -> tuple:
    return tuple(a.aval.shape)


def _is_int(a: Atom) -> bool:
    return np.dtype(a.aval.dtype).kind in "iu"


_RULES: dict[str, Any] = {}


def _rule(*names: str) -> Any:
    def deco(fn: Any) -> Any:
        for n in names:
            _RULES[n] = fn
        return fn
    return deco


@_rule("iota")
def _iota(an: IndexAnalysis, e: Eqn) -> Aff | None:
    return _aff({e.params["dimension"]: 1}, 0) if np.dtype(e.params["dtype"]).kind in "iu" else None


@_rule("dim_as_value")
def _dim_value(an: IndexAnalysis, e: Eqn) -> Aff:
    return Aff((), e.params["dim"])


@_rule("broadcast_in_dim")
def _broadcast(an: IndexAnalysis, e: Eqn) -> Aff | Cons | None:
    x = e.inputs[0]
    v = an.of(x)
    if v is None:
        return None
    shp = _shape(x)
    return _remap(v, {k: d for k, d in enumerate(e.params["broadcast_dimensions"])
                      if not (isinstance(shp[k], int) and shp[k] == 1)})


@_rule("reshape")
def _reshape(an: IndexAnalysis, e: Eqn) -> Aff | Cons | None:
    """Only reshapes that insert or drop size-1 dims."""
    v = an.of(e.inputs[0])
    if v is None:
        return None
    def big(s: tuple) -> list[int]:
        return [k for k, d in enumerate(s) if not (isinstance(d, int) and d == 1)]

    src, dst = _shape(e.inputs[0]), _shape(e.outvars[0])
    a, b = big(src), big(dst)
    if len(a) != len(b) or any(src[i] != dst[j] for i, j in zip(a, b)):
        return None
    return _remap(v, dict(zip(a, b)))


@_rule("transpose")
def _transpose(an: IndexAnalysis, e: Eqn) -> Aff | Cons | None:
    v = an.of(e.inputs[0])
    return None if v is None else _remap(v, {src: k for k, src in enumerate(e.params["permutation"])})


@_rule("check_index")
def _check_index(an: IndexAnalysis, e: Eqn) -> Aff | Cons | None:
    """The indices themselves (the step raises when one is out of range)."""
    return an.of(e.inputs[0])


@_rule("convert_element_type")
def _convert(an: IndexAnalysis, e: Eqn) -> Aff | Cons | None:
    v = an.of(e.inputs[0])
    out = np.dtype(e.params["new_dtype"])
    if isinstance(v, Aff) and out.kind in "iu":
        return v
    if isinstance(v, Cons) and out == np.bool_:
        return v
    if isinstance(v, Cons) and out.kind in "iu":
        v = simplify(v, _shape(e.inputs[0]))
        if v.false or not v.terms:
            return Aff((), 0 if v.false else 1)
    return None


def _two(an: IndexAnalysis, e: Eqn) -> tuple[Aff, Aff] | None:
    if not (_is_int(e.inputs[0]) and _is_int(e.inputs[1])):
        return None
    a, b = an.of(e.inputs[0]), an.of(e.inputs[1])
    return (a, b) if isinstance(a, Aff) and isinstance(b, Aff) else None


@_rule("add", "sub")
def _add(an: IndexAnalysis, e: Eqn) -> Aff | None:
    ab = _two(an, e)
    return None if ab is None else _lin(ab[0], ab[1], 1 if e.prim is pr.ADD else -1)


@_rule("mul")
def _mul(an: IndexAnalysis, e: Eqn) -> Aff | None:
    ab = _two(an, e)
    if ab is None:
        return None
    a, b = ab
    if not b.coef:
        return _scale(a, b.c0)
    if not a.coef:
        return _scale(b, a.c0)
    return None


@_rule("neg")
def _neg(an: IndexAnalysis, e: Eqn) -> Aff | None:
    a = an.of(e.inputs[0])
    return _scale(a, -1) if isinstance(a, Aff) and _is_int(e.inputs[0]) else None


@_rule("le", "lt", "ge", "gt", "eq", "ne")
def _compare(an: IndexAnalysis, e: Eqn) -> Cons | None:
    ab = _two(an, e)
    if ab is None:
        return None
    a, b = ab
    d = _lin(a, b, -1)  # a - b
    name = e.prim.name
    if name == "le":
        return Cons((d,))
    if name == "lt":
        return Cons((_lin(d, Aff((), 1)),))
    if name == "ge":
        return Cons((_scale(d, -1),))
    if name == "gt":
        return Cons((_lin(_scale(d, -1), Aff((), 1)),))
    if name == "eq":
        return TRUE if not d.coef and d.c0 == 0 else Cons((d, _scale(d, -1)))
    lo, hi = bounds(d, _shape(e.inputs[0]))  # ne: decided only when d is never / always zero
    if not d.coef and d.c0 == 0:
        return FALSE
    if sd.proves_le(1, lo) or sd.proves_le(hi, -1):
        return TRUE
    return None


@_rule("and")
def _and(an: IndexAnalysis, e: Eqn) -> Cons | None:
    a, b = an.of(e.inputs[0]), an.of(e.inputs[1])
    if not (isinstance(a, Cons) and isinstance(b, Cons)):
        return None
    return FALSE if a.false or b.false else Cons(a.terms + b.terms)


def negate(v: Cons) -> Cons | None:
    """``not v`` for a boolean of at most one constraint (``not (t <= 0)`` is ``1 - t <= 0``)."""
    if v.false:
        return TRUE
    if not v.terms:
        return FALSE
    if len(v.terms) == 1:
        return Cons((_lin(Aff((), 1), v.terms[0], -1),))
    return None


@_rule("not")
def _not(an: IndexAnalysis, e: Eqn) -> Cons | None:
    v = an.of(e.inputs[0])
    return negate(simplify(v, _shape(e.inputs[0]))) if isinstance(v, Cons) else None


@_rule("select_n")
def _select(an: IndexAnalysis, e: Eqn) -> Aff | Cons | None:
    """A decided predicate picks its case; ``select(p, False, x)`` is ``p and x`` and
    ``select(p, x, False)`` is ``not p and x`` (booleans, as ``tril``/``where`` build masks)."""
    which = an.of(e.inputs[0])
    if not isinstance(which, Cons) or len(e.inputs) != 3:
        return None
    which = simplify(which, _shape(e.inputs[0]))
    if which.false:
        return an.of(e.inputs[1])
    if not which.terms:
        return an.of(e.inputs[2])
    a, b = an.of(e.inputs[1]), an.of(e.inputs[2])
    if isinstance(a, Cons) and isinstance(b, Cons):
        if a.false:
            return FALSE if b.false else Cons(which.terms + b.terms)
        if b.false and (nw := negate(which)) is not None:
            return Cons(nw.terms + a.terms)
    return None


@_rule("slice")
def _slice(an: IndexAnalysis, e: Eqn) -> Aff | None:
    a = an.of(e.inputs[0])
    if not isinstance(a, Aff):
        return None
    strides = e.params.get("strides") or (1,) * len(e.params["start_indices"])
    c0 = a.c0
    for ax, c in a.coef:
        c0 = c0 + c * e.params["start_indices"][ax]
    return _aff({ax: c * strides[ax] for ax, c in a.coef}, c0)


@_rule("concatenate")
def _concatenate(an: IndexAnalysis, e: Eqn) -> Aff | None:
    """One affine function when every piece, shifted to its offset, agrees with it (a piece of
    size 1 along the axis only has to match at its one position)."""
    ax = e.params["dimension"]
    pieces, off = [], 0
    for x in e.inputs:
        a = an.of(x)
        if not isinstance(a, Aff):
            return None
        shifted = _aff(dict(a.coef), a.c0 - a.get(ax) * off)  # in the output's coordinates
        pieces.append((shifted, off, _shape(x)[ax]))
        off = off + _shape(x)[ax]
    wide = [p for p in pieces if not (isinstance(p[2], int) and p[2] == 1)]
    if not wide:
        return None
    ref = wide[0][0]
    for a, start, n in pieces:
        if isinstance(n, int) and n == 1:
            others = {k: c for k, c in a.coef if k != ax}
            if others != {k: c for k, c in ref.coef if k != ax} or \
                    a.c0 + a.get(ax) * start != ref.c0 + ref.get(ax) * start:
                return None
        elif a != ref:
            return None
    return ref


@_rule("cumsum")
def _cumsum(an: IndexAnalysis, e: Eqn) -> Aff | None:
    """The running sum of a constant ``c`` along an axis is ``c * (idx + 1)``."""
    a = an.of(e.inputs[0])
    if not isinstance(a, Aff) or a.coef or e.params.get("reverse") or not isinstance(a.c0, int):
        return None
    return _aff({e.params["axis"]: a.c0}, a.c0)


@_rule("take")
def _take(an: IndexAnalysis, e: Eqn) -> Aff | None:
    """``x[idx]`` for an affine 1-D ``x`` and indices proved in range."""
    x, idx = e.inputs
    if len(_shape(x)) != 1 or e.params["axis"] != 0:
        return None
    a, i = an.of(x), an.of(idx)
    if not (isinstance(a, Aff) and isinstance(i, Aff)):
        return None
    lo, hi = bounds(i, _shape(idx))
    if not (sd.proves_le(0, lo) and sd.proves_le(hi, _shape(x)[0] - 1)):
        return None
    k = a.get(0)
    out = _scale(i, k)
    return None if out is None else _aff(dict(out.coef), out.c0 + a.c0)
