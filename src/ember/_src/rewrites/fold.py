"""``fold_constants``: equations whose inputs are all captured constants, literals or splats are
evaluated with the reference implementations; the results become constants (never larger than
their inputs: broadcasts and iotas are not materialized)."""

from __future__ import annotations

import math

import numpy as np

from ember._src import core
from ember._src.array import aligned_copy
from ember._src.prims import movement as mv
from ember._src.program import Eqn, Literal, Program, Var, eqn_effectful
from ember._src.rewrites.builder import Builder, lit, splat_value
from ember._src.rewrites.dedup import dce

NO_FOLD = frozenset({mv.broadcast_in_dim_p, mv.iota_p})
"""Primitives never evaluated at compile time (their results are larger than their inputs)."""


def fold_constants(p: Program) -> Program:
    """``p`` with the equations of constant inputs evaluated into captured constants / literals."""
    known: dict[int, np.ndarray] = {}
    for v, c in zip(p.constvars, p.consts):
        val = getattr(c, "value", c)
        if isinstance(val, np.ndarray):
            known[v.id] = val
    prod: dict[int, Eqn] = {}
    b = Builder(p)
    for e in p.eqns:
        ins = [b.read(a) for a in e.inputs]
        static = all(isinstance(d, int) for v in (*e.outvars, *ins) for d in v.aval.shape)
        foldable = e.prim not in NO_FOLD and e.prim.impl is not None and ins and static and \
            not any(isinstance(v, (Program, list)) for v in e.params.values()) and not eqn_effectful(e)
        vals, in_bytes = [], 0
        for a in ins if foldable else ():
            if isinstance(a, Literal):
                vals.append(a.val)
            elif a.id in known:
                vals.append(known[a.id])
                in_bytes += known[a.id].nbytes
            elif (s := splat_value(a, prod)) is not None:
                vals.append(np.broadcast_to(np.asarray(s, a.aval.dtype), a.aval.shape))
            elif (bc := _broadcast_of_known(a, prod, known)) is not None:
                vals.append(bc)  # evaluated below only if another operand is as large (in_bytes)
            else:
                foldable = False
                break
        out_bytes = sum(math.prod(v.aval.shape) * v.aval.dtype.itemsize for v in e.outvars) if static else 0
        if foldable and any(not isinstance(a, Literal) for a in ins) and out_bytes <= max(in_bytes, 64):
            try:
                vals = [v() if callable(v) else v for v in vals]
                outs = core.eval_impl(e.prim, vals, e.params, [v.aval for v in e.outvars])
            except Exception:  # noqa: BLE001 - leave the error to run time
                outs = None
            if outs is not None:
                for v, o in zip(e.outvars, outs):
                    if o.ndim == 0:
                        b.sub[v.id] = lit(o, v.aval.dtype)
                    else:
                        nv = Var(v.aval)
                        b.constvars.append(nv)
                        b.consts.append(aligned_copy(np.ascontiguousarray(o)))
                        known[nv.id] = b.consts[-1]
                        b.sub[v.id] = nv
                continue
        outs = b.emit(e.prim, ins, e.params, e.outvars)
        for v in outs:
            prod[v.id] = b.prod[v.id]
    return dce(b.finish())


def _broadcast_of_known(a: Var, prod: dict[int, Eqn], known: dict[int, np.ndarray]):  # noqa: ANN202
    """A broadcast of a known constant (not materialized as a constant itself): a thunk evaluating it
    for an equation that reads it beside a known operand of its size (a batch norm's per-channel
    scale times a convolution kernel), else None."""
    e = prod.get(a.id)
    if e is None or e.prim is not mv.broadcast_in_dim_p or not all(isinstance(d, int) for d in a.aval.shape):
        return None
    src = e.inputs[0]
    val = src.val if isinstance(src, Literal) else known.get(src.id)
    if val is None:
        return None
    return lambda: core.eval_impl(e.prim, [val], e.params, [a.aval])[0]
