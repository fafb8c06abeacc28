"""Attention passes of the native backend (registered in :data:`.passes.PASSES`).

* ``fuse_attention``: ``softmax(scale * Q K^T [+ bias] [where(mask, ., fill)]) V`` written with
  ``dot_general`` and the softmax primitives (any batch layout the dimension numbers give, a
  literal scale as a product or quotient, a fill of ``-inf`` or at most ``-1e30``) becomes one
  ``attention`` step when none of its ``L x S`` intermediates is used elsewhere: the scores are no
  longer materialized. Semantics are kept: the masked logits take the fill's value
  (``mask_value``), so a row with nothing to attend is NaN for ``-inf`` and the mean of the values
  for a finite fill, as the composed softmax gives.

* ``absorb_causal_mask``: the boolean mask operand of an ``attention`` step is split at its
  ``and`` nodes; every factor that :mod:`.index_affine` proves to be a function of the index alone
  is resolved: always-true factors vanish, and ``j <= i`` (``j <= i + S - L``) becomes the step's
  ``causal="top_left"`` (``"bottom_right"``) flag. What remains (a padding mask that broadcasts
  over the query axis, say) stays the mask operand, read through its broadcast rather than
  materialized at ``L x S``. A mask with any other index-only factor is left as it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember._src.core import Primitive
from ember._src.native.base import prim_refs as pr
from ember._src.native.rewrite import index_affine as ia
from ember._src.native.rewrite.analysis import consumers, producers
from ember._src.native.rewrite.passes import Builder, register, splat_value
from ember._src.prims import elementwise as ew
from ember._src.prims import movement as mv
from ember._src.prims.attention import attention_p
from ember._src.program import Atom, Eqn, Literal, Program, Var
from ember._src.program import dce as program_dce


def _factors(a: Atom, prod: dict[int, Eqn]) -> list[Atom]:
    """The operands of the ``and`` tree rooted at ``a`` (``a`` itself when it is no ``and``)."""
    e = prod.get(a.id) if isinstance(a, Var) else None
    if e is None or e.prim is not pr.AND:
        return [a]
    return _factors(e.inputs[0], prod) + _factors(e.inputs[1], prod)


def _causal_kind(t: ia.Aff, L: Any, S: Any) -> str | None:
    """``"top_left"`` for the constraint ``j - i <= 0`` over ``[.., L, S]``, ``"bottom_right"`` for
    ``j - i - (S - L) <= 0``, else None."""
    if dict(t.coef) != {2: -1, 3: 1}:
        return None
    if t.c0 == 0:
        return "top_left"
    if t.c0 == L - S:
        return "bottom_right"
    return None


def _unbroadcast(b: Builder, a: Atom, prod: dict[int, Eqn]) -> Atom:
    """``a`` (rank 4) read through its ``broadcast_in_dim``: the operand reshaped to rank 4 with
    size-1 dims where it was broadcast, when that is all the broadcast did."""
    e = prod.get(a.id) if isinstance(a, Var) else None
    if e is None or e.prim is not pr.BROADCAST_IN_DIM or isinstance(e.inputs[0], Literal):
        return a
    src, out = tuple(e.inputs[0].aval.shape), tuple(a.aval.shape)
    shape = [1] * len(out)
    for k, d in enumerate(e.params["broadcast_dimensions"]):
        if not (isinstance(src[k], int) and src[k] == 1) and src[k] != out[d]:
            return a
        shape[d] = src[k]
    return b.reshape(b.read(e.inputs[0]), tuple(shape))


@register
def absorb_causal_mask(p: Program) -> Program:
    """Causal masks of ``attention`` steps become their ``causal`` flag (module docstring)."""
    if not any(e.prim is attention_p and e.params["has_mask"] for e in p.eqns):
        return p
    an = ia.IndexAnalysis(p)
    prod = an.prod
    b = Builder(p)
    changed = False
    for e in p.eqns:
        ins = [b.read(a) for a in e.inputs]
        if e.prim is not attention_p or not e.params["has_mask"]:
            b.emit(e.prim, ins, e.params, e.outvars)
            continue
        mask = e.inputs[-1]
        shape = tuple(mask.aval.shape)
        L, S = e.inputs[0].aval.shape[2], e.inputs[1].aval.shape[2]
        kinds, rest, ok = set(), [], shape[2] == L and shape[3] == S
        for f in _factors(mask, prod) if ok else []:
            v = an.of(f)
            if not isinstance(v, ia.Cons):
                rest.append(f)
                continue
            v = ia.simplify(v, shape)
            ks = {_causal_kind(t, L, S) for t in v.terms}
            if v.false or None in ks:
                ok = False
                break
            kinds |= ks
        if e.params["causal"] is not None:
            kinds.add(e.params["causal"])
        if L - S == 0:  # the two alignments coincide
            kinds = {"top_left" for _ in kinds}
        if not ok or len(kinds) > 1 or (not kinds and len(rest) == len(_factors(mask, prod))):
            b.emit(e.prim, ins, e.params, e.outvars)
            continue
        changed = True
        params = dict(e.params, causal=next(iter(kinds)) if kinds else None, has_mask=bool(rest))
        new_ins = ins[:-1]
        if rest:
            m = b.read(rest[0]) if len(rest) > 1 else _unbroadcast(b, rest[0], prod)
            for f in rest[1:]:
                m = b.emit1(ew.and_p, [m, b.read(f)], {})
            new_ins.append(m)
        b.emit(attention_p, new_ins, params, e.outvars)
    return b.finish() if changed else p


# ---------------------------------------------------------------------------------------------
# fuse_attention
# ---------------------------------------------------------------------------------------------

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
MASK_FILL_MAX = -1e30  # a mask fill at most this behaves as -inf beside any attended logit


@dataclass
class _Match:
    """A recognized ``softmax(scale * Q K^T [+ bias] [masked]) V``."""

    q: Atom
    q_dims: tuple  # Q's axes in [batch..., L, D] order
    k: Atom
    k_dims: tuple  # [batch..., S, D]
    v: Atom
    v_dims: tuple  # [batch..., S, Dv]
    scale: float
    bias: Atom | None
    mask: Atom | None
    fill: float  # the masked logits' value (-inf when there is no mask)
    inner: list  # the pattern's equations other than the final product


class _Matcher:
    def __init__(self, p: Program):
        self.prod, self.cons = producers(p), consumers(p)
        self.outs = {a.id for a in p.outvars if isinstance(a, Var)}

    def eqn(self, a: Atom, prim: Primitive) -> Eqn | None:
        """The equation producing ``a`` when it is an equation of ``prim``, else None."""
        assert isinstance(prim, Primitive), prim  # a name would never match
        e = self.prod.get(a.id) if isinstance(a, Var) else None
        return e if e is not None and e.prim is prim else None

    def splat(self, a: Atom) -> Any:
        return splat_value(a, self.prod)

    def is_splat(self, a: Atom, value: float) -> bool:
        c = self.splat(a)
        return c is not None and float(c) == value

    def _spreads(self, e: Eqn) -> bool:
        """A reshape adding or dropping trailing size-1 axes, or a broadcast along the last axis."""
        if isinstance(e.inputs[0], Literal):
            return False
        src, out = tuple(e.inputs[0].aval.shape), tuple(e.outvars[0].aval.shape)
        if e.prim is pr.RESHAPE:
            short, long_ = sorted((src, out), key=len)
            tail = long_[len(short):]
            return long_[:len(short)] == short and all(isinstance(d, int) and d == 1 for d in tail)
        return (tuple(e.params["broadcast_dimensions"]) == tuple(range(len(src))) and len(src) == len(out)
                and src[:-1] == out[:-1] and src[-1] == 1)

    def _max_guard(self, e: Eqn) -> Eqn | None:
        """The ``eq(m, -inf)`` of ``select_n(eq(m, -inf), m, 0)`` (a softmax's guarded maximum)."""
        if len(e.inputs) != 3 or not self.is_splat(e.inputs[2], 0):
            return None
        g = self.eqn(e.inputs[0], pr.EQ)
        ok = g is not None and g.inputs[0] is e.inputs[1] and self.is_splat(g.inputs[1], -np.inf)
        return g if ok else None

    def row_source(self, a: Atom, chain: list) -> Atom:
        """Through the broadcasts / reshapes that spread one value per row over the row, the
        max(., -inf) and the ``where(m == -inf, 0, m)`` guard of a softmax's maximum."""
        while isinstance(a, Var) and (e := self.prod.get(a.id)) is not None:
            n = e.prim.name
            if n in ("broadcast_in_dim", "reshape") and self._spreads(e):
                a = e.inputs[0]
            elif n == "max" and self.is_splat(e.inputs[1], -np.inf):
                a = e.inputs[0]
            elif n == "select_n" and (g := self._max_guard(e)) is not None:
                chain.append(g)
                a = e.inputs[1]
            else:
                break
            chain.append(e)
        return a

    def reduced(self, a: Atom, prim: Primitive, axis: int, chain: list) -> Atom | None:
        """The operand of the ``prim`` reduction over ``axis`` that ``a`` spreads over rows."""
        r = self.eqn(self.row_source(a, chain), prim)
        if r is None or tuple(r.params["axes"]) != (axis,):
            return None
        chain.append(r)
        return r.inputs[0]

    def logits(self, s: Atom, chain: list) -> tuple | None:
        """``(dot eqn, scale, bias, mask, fill)`` of ``[mask-select](scale * dot [+ bias])``."""
        mask = bias = None
        fill, scale = -np.inf, 1.0
        e = self.eqn(s, pr.SELECT_N)
        if e is not None and len(e.inputs) == 3 and self.splat(e.inputs[1]) is not None:
            fill = float(self.splat(e.inputs[1]))
            if not fill <= MASK_FILL_MAX:
                return None
            mask, s = e.inputs[0], e.inputs[2]
            chain.append(e)
        e = self.eqn(s, pr.ADD)
        if e is not None:
            for side in (0, 1):
                inner = self.prod.get(e.inputs[side].id) if isinstance(e.inputs[side], Var) else None
                if inner is not None and inner.prim in (pr.MUL, pr.DIV, pr.DOT_GENERAL):
                    bias, s = e.inputs[1 - side], e.inputs[side]
                    chain.append(e)
                    break
            else:
                return None
        e = self.prod.get(s.id) if isinstance(s, Var) else None
        if e is not None and e.prim in (pr.MUL, pr.DIV):
            for side in ((0, 1) if e.prim is pr.MUL else (0,)):
                c = self.splat(e.inputs[1 - side])
                if c is not None and np.isfinite(float(c)) and float(c) != 0:
                    scale = float(c) if e.prim is pr.MUL else 1.0 / float(c)
                    s = e.inputs[side]
                    chain.append(e)
                    break
            else:
                return None
        d = self.eqn(s, pr.DOT_GENERAL)
        if d is None:
            return None
        chain.append(d)
        return d, scale, bias, mask, fill

    def match(self, e2: Eqn) -> _Match | None:
        P, V = e2.inputs
        if not (isinstance(P, Var) and isinstance(V, Var)):
            return None
        (pc, vc), (pb, vb) = e2.params["dimension_numbers"]
        r = P.aval.ndim
        nb = len(pb)
        if tuple(pc) != (r - 1,) or tuple(pb) != tuple(range(nb)) or r != nb + 2 or V.aval.ndim != nb + 2 \
                or len(vc) != 1 or e2.params.get("preferred_element_type") not in (None, V.aval.dtype):
            return None
        chain: list = []
        div = self.eqn(P, pr.DIV)
        ex = div.inputs[0] if div is not None else None
        exp = self.eqn(ex, pr.EXP) if ex is not None else None
        sub = self.eqn(exp.inputs[0], pr.SUB) if exp is not None else None
        if sub is None or self.reduced(div.inputs[1], pr.REDUCE_SUM, r - 1, chain) is not ex:
            return None
        s = sub.inputs[0]
        if self.reduced(sub.inputs[1], pr.REDUCE_MAX, r - 1, chain) is not s:
            return None
        chain += [div, exp, sub]
        lg = self.logits(s, chain)
        if lg is None:
            return None
        dot, scale, bias, mask, fill = lg
        (qc, kc), (qb, kb) = dot.params["dimension_numbers"]
        Q, K = dot.inputs
        if len(qc) != 1 or len(qb) != nb or Q.aval.ndim != nb + 2 or K.aval.ndim != nb + 2 \
                or dot.params.get("preferred_element_type") not in (None, Q.aval.dtype):
            return None
        dts = {np.dtype(a.aval.dtype) for a in (Q, K, V, *([bias] if bias is not None else []))}
        if len(dts) != 1 or dts.pop() not in _FLOATS:
            return None
        free = [next(i for i in range(nb + 2) if i not in (*b, *c))
                for b, c in ((qb, qc), (kb, kc), (vb, vc))]
        # every intermediate is used only inside the pattern (its L x S values exist nowhere else)
        inner = {id(x) for x in chain}
        for o in (o for x in chain for o in x.outvars):
            if o.id in self.outs or any(id(c) not in inner and c is not e2 for c in self.cons.get(o.id, [])):
                return None
        return _Match(Q, (*qb, free[0], qc[0]), K, (*kb, free[1], kc[0]), V, (*vb, vc[0], free[2]), scale,
                      bias, mask, fill, chain)


def _heads_major(b: Builder, a: Atom, dims: tuple) -> Atom:
    """``a`` transposed to ``dims`` order and its batch axes folded into ``[B, H]``."""
    a = b.read(a)
    if tuple(dims) != tuple(range(len(dims))):
        a = b.emit1(mv.transpose_p, [a], {"permutation": tuple(dims)})
    shape = tuple(a.aval.shape)
    batch = shape[:-2]
    lead = (1, 1) if not batch else (1, batch[0]) if len(batch) == 1 else \
        (math.prod(batch[:-1]), batch[-1])
    return b.reshape(a, (*lead, *shape[-2:]))


@register
def fuse_attention(p: Program) -> Program:
    """``softmax(scale * Q K^T [+ bias] [where mask]) V`` -> one ``attention`` step (module
    docstring); the ``absorb_causal_mask`` pass then reads its mask."""
    if not any(e.prim is pr.DOT_GENERAL for e in p.eqns):
        return p
    m = _Matcher(p)
    found = {id(e): r for e in p.eqns if e.prim is pr.DOT_GENERAL and (r := m.match(e)) is not None}
    if not found:
        return p
    b = Builder(p)
    for e in p.eqns:
        r = found.get(id(e))
        if r is None:
            b.emit(e.prim, [b.read(a) for a in e.inputs], e.params, e.outvars)
            continue
        ops = [_heads_major(b, r.q, r.q_dims), _heads_major(b, r.k, r.k_dims), _heads_major(b, r.v, r.v_dims)]
        full = (*ops[0].aval.shape[:3], ops[1].aval.shape[2])
        for x in (r.bias, r.mask):
            if x is not None:
                ops.append(b.reshape(b.read(x), full))
        out = b.emit1(attention_p, ops, {"scale": r.scale, "causal": None, "mask_value": r.fill,
                                         "has_bias": r.bias is not None, "has_mask": r.mask is not None})
        b.sub[e.outvars[0].id] = b.reshape(out, tuple(e.outvars[0].aval.shape))
    return program_dce(b.finish())
