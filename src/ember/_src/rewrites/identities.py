"""``simplify``: algebraic identities (``x*1``, ``x+0``, ``x-0``, ``x/1``, ``neg(neg x)``, converts
to the same dtype, ``copy``/``stop_gradient``), elementwise ops on splats (scalars broadcast) are
evaluated, and trivial movement is removed or merged (identity reshape/transpose/broadcast/slice/
pad/rev, reshape-of-reshape, transpose-of-transpose, broadcast-of-broadcast, squeeze and size-1
transposes become reshapes, movement of a splat is a splat). ``x + 0 -> x`` follows XLA and
differs from IEEE only for ``x = -0.0`` (the result keeps the sign of zero).

Which primitives are elementwise or movement is the backend's to say (an :class:`OpKinds`: the
native backend's op-info registry, the GPU backends' op table); the identities are the same."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from ember._src import core
from ember._src import dtypes as dt
from ember._src.prims import movement as mv
from ember._src.prims.elementwise import neg_p
from ember._src.program import Atom, Eqn, Program, Var
from ember._src.rewrites.builder import Builder, same_aval, splat_value


class OpKinds(Protocol):
    """What a backend says about a primitive for :func:`simplify`."""

    def is_elementwise(self, p: core.Primitive) -> bool: ...
    def is_movement(self, p: core.Primitive) -> bool: ...


def _eval_scalar(e: Eqn, vals: list) -> Any:
    outs = e.prim.impl(*[np.asarray(v) for v in vals], **e.params)
    return np.asarray(outs).astype(e.outvars[0].aval.dtype)


def simplify(p: Program, kinds: OpKinds) -> Program:
    """``p`` with the identities above applied (one forward sweep; run :func:`.dedup.dce` after)."""
    b = Builder(p)
    for e in p.eqns:
        ins = [b.read(a) for a in e.inputs]
        out = e.outvars[0] if len(e.outvars) == 1 else None
        r = _simplify_eqn(b, e, ins, kinds) if out is not None and not e.prim.multiple_results else None
        if r is None:
            b.emit(e.prim, ins, e.params, e.outvars)
        else:
            b.sub[out.id] = r
    return b.finish()


def _simplify_eqn(b: Builder, e: Eqn, ins: list[Atom], kinds: OpKinds) -> Atom | None:
    name, out, prm = e.prim.name, e.outvars[0].aval, e.params
    prod = b.prod
    if name in ("copy", "stop_gradient"):
        return ins[0]
    if kinds.is_elementwise(e.prim) and ins:
        svals = [splat_value(a, prod) for a in ins]
        if all(s is not None for s in svals) and name != "copy":
            try:
                return b.splat(_eval_scalar(e, svals), out)
            except Exception:  # noqa: BLE001 - leave it to the runtime to report
                return None
    if name == "convert_element_type" and same_aval(ins[0], out):
        return ins[0]
    if name == "neg":
        pe = prod.get(ins[0].id) if isinstance(ins[0], Var) else None
        if pe is not None and pe.prim is neg_p:
            return pe.inputs[0]
    # complex x * 1 and x / 1 are not x: NumPy's complex product and quotient mix the parts, so a
    # NaN or infinite part spreads (mean of [nan - 1.31j] is nan + nan j)
    if name in ("mul", "add", "sub", "div") and not (name in ("mul", "div") and out.dtype.kind == "c"):
        x, y = ins
        sx, sy = splat_value(x, prod), splat_value(y, prod)
        unit = 1 if name in ("mul", "div") else 0
        if name == "mul" and out.dtype == dt.bool_:
            unit = True
        if sy is not None and sy == unit and same_aval(x, out) and not (name == "mul" and np.isnan(sy)):
            return x
        if name in ("mul", "add") and sx is not None and sx == unit and same_aval(y, out):
            return y
    if name == "integer_pow" and prm["y"] == 1:
        return ins[0]
    if name == "select_n":
        cases = ins[1:]
        if all(c is cases[0] or (isinstance(c, Var) and isinstance(cases[0], Var) and c.id == cases[0].id)
               for c in cases):
            return cases[0]
        w = splat_value(ins[0], prod)
        if w is not None:
            return cases[int(np.clip(int(w), 0, len(cases) - 1))]
    if name.startswith("reduce_") and prm.get("axes") == ():
        return ins[0]
    if kinds.is_movement(e.prim):
        return _simplify_movement(b, e, ins)
    return None


def _simplify_movement(b: Builder, e: Eqn, ins: list[Atom]) -> Atom | None:
    name, out, prm, prod = e.prim.name, e.outvars[0].aval, e.params, b.prod
    x = ins[0]
    s = splat_value(x, prod) if name != "pad" else None
    if s is not None and name != "concatenate":
        return b.splat(s, out)
    pe = prod.get(x.id) if isinstance(x, Var) else None
    if name == "squeeze" or (name == "transpose" and _only_unit_moves(x.aval.shape, prm["permutation"])):
        return b.reshape(x, tuple(out.shape))
    if name == "reshape":
        if tuple(x.aval.shape) == tuple(out.shape):
            return x
        if pe is not None and pe.prim is mv.reshape_p:
            return b.reshape(pe.inputs[0], tuple(out.shape))
    if name == "transpose":
        perm = tuple(prm["permutation"])
        if perm == tuple(range(len(perm))):
            return x
        if pe is not None and pe.prim is mv.transpose_p:
            inner = pe.params["permutation"]
            comp = tuple(inner[q] for q in perm)
            src = pe.inputs[0]
            if comp == tuple(range(len(comp))):
                return src
            return b.emit1(mv.transpose_p, [src], {"permutation": comp})
    if name == "broadcast_in_dim":
        bd = tuple(prm["broadcast_dimensions"])
        if tuple(x.aval.shape) == tuple(out.shape) and bd == tuple(range(len(bd))):
            return x
        if pe is not None and pe.prim is mv.broadcast_in_dim_p:
            bd2 = tuple(bd[d] for d in pe.params["broadcast_dimensions"])
            return b.emit1(mv.broadcast_in_dim_p, [pe.inputs[0]],
                           {"shape": tuple(out.shape), "broadcast_dimensions": bd2})
    if name == "slice":
        st = prm["strides"] or (1,) * x.aval.ndim
        if all(s0 == 0 for s0 in prm["start_indices"]) and tuple(prm["limit_indices"]) == \
                tuple(x.aval.shape) and all(k == 1 for k in st):
            return x
    if name == "pad" and all(lo == 0 and hi == 0 and it == 0 for lo, hi, it in prm["padding_config"]):
        return x
    if name == "rev" and not prm["dimensions"]:
        return x
    if name == "rev" and all(x.aval.shape[d] == 1 for d in prm["dimensions"]):
        return x
    if name == "concatenate" and len(ins) == 1:
        return x
    return None


def _only_unit_moves(shape: Sequence[int], perm: Sequence[int]) -> bool:
    """A transpose that keeps the order of the non-unit dims is a reshape."""
    kept = [q for q in perm if shape[q] != 1]
    return kept == sorted(kept)
