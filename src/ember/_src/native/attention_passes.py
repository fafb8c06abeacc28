"""Attention passes of the native backend (registered in :data:`.passes.PASSES`).

* ``absorb_causal_mask``: the boolean mask operand of an ``attention`` step is split at its
  ``and`` nodes; every factor that :mod:`.index_affine` proves to be a function of the index alone
  is resolved: always-true factors vanish, and ``j <= i`` (``j <= i + S - L``) becomes the step's
  ``causal="top_left"`` (``"bottom_right"``) flag. What remains (a padding mask that broadcasts
  over the query axis, say) stays the mask operand, read through its broadcast rather than
  materialized at ``L x S``. A mask with any other index-only factor is left as it is.
"""

from __future__ import annotations

from typing import Any

from ember._src.native import index_affine as ia
from ember._src.native.passes import Builder, register
from ember._src.prims import elementwise as ew
from ember._src.prims.attention import attention_p
from ember._src.program import Atom, Eqn, Literal, Program, Var


def _factors(a: Atom, prod: dict[int, Eqn]) -> list[Atom]:
    """The operands of the ``and`` tree rooted at ``a`` (``a`` itself when it is no ``and``)."""
    e = prod.get(a.id) if isinstance(a, Var) else None
    if e is None or e.prim.name != "and":
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
    if e is None or e.prim.name != "broadcast_in_dim" or isinstance(e.inputs[0], Literal):
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
