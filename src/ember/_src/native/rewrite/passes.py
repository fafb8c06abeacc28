"""Program -> Program rewrites run before scheduling. Each pass is a named function, independently
testable and switchable (``run_passes(program, names)``; the backend's ``passes=`` option).

* ``inline_calls``: ``checkpoint``, ``custom_jvp_call`` and ``custom_vjp_call`` are plain calls of a
  sub-program in forward evaluation; their equations (and captured constants) are spliced into the
  parent with fresh variables, recursively, so they fuse with their surroundings.
* ``split_threefry``: ``threefry2x32`` becomes its two halves, fusible elementwise ops (see
  :mod:`.threefry`), so random bits are generated inside the kernels that consume them.
* ``simplify``: algebraic identities (``x*1``, ``x+0``, ``x-0``, ``x/1``, ``neg(neg x)``, converts
  to the same dtype, ``copy``/``stop_gradient``), elementwise ops on splats (scalars broadcast) are
  evaluated, and trivial movement is removed or merged (identity reshape/transpose/broadcast/slice/
  pad/rev, reshape-of-reshape, transpose-of-transpose, broadcast-of-broadcast, squeeze and size-1
  transposes become reshapes, movement of a splat is a splat). ``x + 0 -> x`` follows XLA and
  differs from IEEE only for ``x = -0.0`` (the result keeps the sign of zero).
* ``cse``: equal equations (primitive, inputs, params) computed once.
* ``dce``: equations and captured constants whose results are unused are dropped.
* ``fuse_attention`` (registered by :mod:`.attention_passes`): ``softmax(Q K^T s [+ b] [masked]) V``
  written out becomes one ``attention`` step (the native tiled online-softmax kernel).
* ``absorb_causal_mask`` (registered by :mod:`.attention_passes`): an ``attention`` step's mask
  factors that are functions of the index alone (a causal mask however it was built) become its
  ``causal`` flag; the ``L x S`` mask is not materialized.
* ``hoist_loop_transposes`` (registered by :mod:`.loops`): ``W @ h`` in a loop body with ``W``
  loop-invariant and small becomes ``h @ W.T``, ``W.T`` computed once before the loop.
* ``dce_loop_outputs`` (registered by :mod:`.loops`): also drops a ``scan``'s unused stacked
  outputs and a ``cond``'s unused outputs, with the body computations feeding only them.
* ``absorb_transposes``: ``dot_general(transpose(x), y)`` reads ``x`` directly (the permutation
  moves into the dimension numbers) when the free dims keep their order.
* ``lower_matmul``: ``dot_general`` -> ``native_gemm`` over ``[B,] M, K`` views of the operands
  (reshapes, which the planner turns into aliases), with transpose flags chosen so that operands
  are read in place; an explicit transpose (a copy kernel) is inserted only when no flag fits.
* ``absorb_scale``: ``s * gemm``, ``gemm / s``, ``-gemm`` and ``gemm(s * a, b)`` for a literal
  scalar ``s`` fold into ``alpha`` (and ``beta``).
* ``absorb_bias``: ``gemm + c`` with ``c`` a full-shape value, a scalar, or a vector broadcast along
  the output's last (N) dim becomes ``gemm(..., c, beta=1)`` -- unless the sum flows into further
  elementwise work (e.g. an activation), whose fused kernel adds the bias for free.
* ``absorb_output_transpose``: ``transpose(gemm(x, y))`` swapping the matrix dims of a product used
  only there becomes ``gemm(y, x)`` with flipped flags (a dense layer's weight gradient).
* ``gemm_views``: a float ``native_gemm`` operand that is a transpose (through reshapes) of another
  value, or a result that is only transposed (through reshapes), is read / written in place through
  strides (the gemm's ``views``): attention's head splits and merges cost no copy kernels.
* ``fold_constants``: equations whose inputs are all captured constants, literals or splats are
  evaluated with the reference implementations; the results become constants (never larger than
  their inputs: broadcasts and iotas are not materialized).

Absorption runs before constant folding, so a captured weight is never materialized transposed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ember._src import core
from ember._src import dtypes as dt
from ember._src.array import aligned_copy
from ember._src.core import ShapedArray
from ember._src.native import opinfo
from ember._src.native.opinfo import OpCategory
from ember._src.native.rewrite import threefry
from ember._src.native.rewrite.analysis import consumers, producers, use_counts
from ember._src.native.rewrite.fused import gemm_p
from ember._src.native.rewrite.fused import layouts as fused_layouts
from ember._src.prims import elementwise as ew
from ember._src.prims import movement as mv
from ember._src.program import Atom, Eqn, Literal, Program, Var, eqn_effectful
from ember._src.program import dce as program_dce

PASSES: dict[str, Callable[[Program], Program]] = {}
DEFAULT_PASSES = ("inline_calls", "split_threefry", "simplify", "cse", "fuse_attention", "absorb_causal_mask",
                  "hoist_loop_transposes", "absorb_transposes", "lower_matmul", "absorb_scale", "absorb_bias",
                  "absorb_scale", "absorb_output_transpose", "fold_constants", "gemm_views", "simplify",
                  "cse", "dce_loop_outputs", "dce")


def register(fn: Callable[[Program], Program]) -> Callable[[Program], Program]:
    PASSES[fn.__name__] = fn
    return fn


def run_passes(p: Program, names: Sequence[str] | None = None) -> Program:
    """Apply the named passes in order (``DEFAULT_PASSES`` when ``names`` is None)."""
    for n in DEFAULT_PASSES if names is None else names:
        if n not in PASSES:
            raise ValueError(f"unknown pass {n!r}; available: {sorted(PASSES)}")
        p = PASSES[n](p)
    return p


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------

def lit(value: Any, dtype: np.dtype) -> Literal:
    return Literal(np.asarray(value, dtype=dtype), ShapedArray((), dtype))


def splat_value(a: Atom, prod: dict[int, Eqn]) -> Any:
    """The scalar of a Literal or a broadcast of a Literal, else None."""
    if isinstance(a, Literal):
        return a.val
    e = prod.get(a.id)
    if e is not None and e.prim.name == "broadcast_in_dim" and isinstance(e.inputs[0], Literal):
        return e.inputs[0].val
    return None


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
        while isinstance(a, Var) and a.id in self.sub:
            a = self.sub[a.id]
        return a

    def emit(self, prim: core.Primitive, inputs: Sequence[Atom], params: dict,
             outvars: Sequence[Var] | None = None) -> list[Var]:
        if outvars is None:
            avals = prim.abstract([a.aval for a in inputs], params)
            outvars = [Var(a) for a in avals]
        e = Eqn(prim, inputs, params, outvars)
        self.eqns.append(e)
        for v in outvars:
            self.prod[v.id] = e
        return list(outvars)

    def emit1(self, prim: core.Primitive, inputs: Sequence[Atom], params: dict) -> Var:
        return self.emit(prim, inputs, params)[0]

    def splat(self, value: Any, aval: ShapedArray) -> Atom:
        lv = lit(value, aval.dtype)
        if aval.shape == ():
            return lv
        return self.emit1(mv.broadcast_in_dim_p, [lv], {"shape": tuple(aval.shape),
                                                        "broadcast_dimensions": ()})

    def reshape(self, a: Atom, shape: tuple) -> Atom:
        if tuple(a.aval.shape) == tuple(shape):
            return a
        return self.emit1(mv.reshape_p, [a], {"new_sizes": tuple(shape)})

    def finish(self) -> Program:
        outs = [self.read(a) for a in self.p.outvars]
        return Program(self.constvars, self.p.invars, self.eqns, outs, self.consts)


def _same(a: Atom, aval: ShapedArray) -> bool:
    return tuple(a.aval.shape) == tuple(aval.shape) and a.aval.dtype == aval.dtype


# ---------------------------------------------------------------------------------------------
# inline_calls
# ---------------------------------------------------------------------------------------------

for _name, _param in (("checkpoint", "program"), ("custom_jvp_call", "call"), ("custom_vjp_call", "call")):
    opinfo.register(_name, OpCategory.INLINED, "the sub-program's equations fuse with the caller "
                    "(passes.inline_calls)", inline_param=_param)


def _inline_target(e: Eqn) -> Program | None:
    """The sub-program ``e`` calls when it is a plain call (forward evaluation), else None."""
    i = opinfo.info(e.prim)
    key = i.inline_param if i is not None else None
    sub = e.params.get(key) if key else None
    if not isinstance(sub, Program) or len(sub.invars) != len(e.inputs):
        return None
    if sub.constvars and len(sub.consts) != len(sub.constvars):
        return None
    return sub


def _splice(b: Builder, sub: Program, ins: Sequence[Atom]) -> list[Atom]:
    """Emit ``sub``'s equations into ``b`` reading ``ins``; returns ``sub``'s outputs."""
    env: dict[int, Atom] = {v.id: a for v, a in zip(sub.invars, ins)}
    for v, c in zip(sub.constvars, sub.consts):
        nv = Var(v.aval)
        b.constvars.append(nv)
        b.consts.append(c)
        env[v.id] = nv

    def rd(a: Atom) -> Atom:
        return env[a.id] if isinstance(a, Var) else a

    for e in sub.eqns:
        eins = [rd(a) for a in e.inputs]
        inner = _inline_target(e)
        if inner is not None and (not inner.constvars or len(b.consts) == len(b.constvars)):
            outs = _splice(b, inner, eins)
        else:
            outs = b.emit(e.prim, eins, e.params, [Var(v.aval) for v in e.outvars])
        env.update((v.id, o) for v, o in zip(e.outvars, outs))
    return [rd(a) for a in sub.outvars]


@register
def inline_calls(p: Program) -> Program:
    """Splice the sub-programs of checkpoint / custom_jvp_call / custom_vjp_call into ``p``."""
    if not any(_inline_target(e) is not None for e in p.eqns):
        return p
    b = Builder(p)
    for e in p.eqns:
        ins = [b.read(a) for a in e.inputs]
        sub = _inline_target(e)
        # captured constants of the callee join the parent's (only when the parent's are concrete)
        if sub is None or (sub.constvars and len(b.consts) != len(b.constvars)):
            b.emit(e.prim, ins, e.params, e.outvars)
            continue
        for v, o in zip(e.outvars, _splice(b, sub, ins)):
            b.sub[v.id] = o
    return b.finish()


@register
def split_threefry(p: Program) -> Program:
    """``threefry2x32`` -> ``native_threefry_lo`` + ``native_threefry_hi`` (unused halves go in dce)."""
    if not any(e.prim.name == "threefry2x32" for e in p.eqns):
        return p
    b = Builder(p)
    for e in p.eqns:
        ins = [b.read(a) for a in e.inputs]
        if e.prim.name == "threefry2x32":
            b.emit(threefry.threefry_lo_p, ins, {}, [e.outvars[0]])
            b.emit(threefry.threefry_hi_p, ins, {}, [e.outvars[1]])
        else:
            b.emit(e.prim, ins, e.params, e.outvars)
    return b.finish()


# ---------------------------------------------------------------------------------------------
# simplify
# ---------------------------------------------------------------------------------------------


def _eval_scalar(e: Eqn, vals: list) -> Any:
    outs = e.prim.impl(*[np.asarray(v) for v in vals], **e.params)
    return np.asarray(outs).astype(e.outvars[0].aval.dtype)


@register
def simplify(p: Program) -> Program:
    b = Builder(p)
    for e in p.eqns:
        ins = [b.read(a) for a in e.inputs]
        out = e.outvars[0] if len(e.outvars) == 1 else None
        r = _simplify_eqn(b, e, ins) if out is not None and not e.prim.multiple_results else None
        if r is None:
            b.emit(e.prim, ins, e.params, e.outvars)
        else:
            b.sub[out.id] = r
    return b.finish()


def _simplify_eqn(b: Builder, e: Eqn, ins: list[Atom]) -> Atom | None:
    name, out, prm = e.prim.name, e.outvars[0].aval, e.params
    prod = b.prod
    if name in ("copy", "stop_gradient"):
        return ins[0]
    if opinfo.is_elementwise(e.prim) and ins:
        svals = [splat_value(a, prod) for a in ins]
        if all(s is not None for s in svals) and name != "copy":
            try:
                return b.splat(_eval_scalar(e, svals), out)
            except Exception:  # noqa: BLE001 - leave it to the runtime to report
                return None
    if name == "convert_element_type" and _same(ins[0], out):
        return ins[0]
    if name == "neg":
        pe = prod.get(ins[0].id) if isinstance(ins[0], Var) else None
        if pe is not None and pe.prim.name == "neg":
            return pe.inputs[0]
    # complex x * 1 and x / 1 are not x: NumPy's complex product and quotient mix the parts, so a
    # NaN or infinite part spreads (mean of [nan - 1.31j] is nan + nan j)
    if name in ("mul", "add", "sub", "div") and not (name in ("mul", "div") and out.dtype.kind == "c"):
        x, y = ins
        sx, sy = splat_value(x, prod), splat_value(y, prod)
        unit = 1 if name in ("mul", "div") else 0
        if name == "mul" and out.dtype == dt.bool_:
            unit = True
        if sy is not None and sy == unit and _same(x, out) and not (name == "mul" and np.isnan(sy)):
            return x
        if name in ("mul", "add") and sx is not None and sx == unit and _same(y, out):
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
    if opinfo.is_movement(e.prim):
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
        if pe is not None and pe.prim.name == "reshape":
            return b.reshape(pe.inputs[0], tuple(out.shape))
    if name == "transpose":
        perm = tuple(prm["permutation"])
        if perm == tuple(range(len(perm))):
            return x
        if pe is not None and pe.prim.name == "transpose":
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
        if pe is not None and pe.prim.name == "broadcast_in_dim":
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


# ---------------------------------------------------------------------------------------------
# cse / dce
# ---------------------------------------------------------------------------------------------


def _freeze(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    if isinstance(v, np.dtype):
        return ("dtype", str(v))
    if isinstance(v, Program):
        return ("program", id(v))
    if isinstance(v, np.ndarray):
        return ("array", v.dtype.str, v.shape, v.tobytes())
    try:
        hash(v)
        return v
    except TypeError:
        return ("repr", repr(v))


def _atom_key(a: Atom) -> Any:
    if isinstance(a, Literal):
        return ("lit", a.val.dtype.str, a.val.tobytes())
    return ("var", a.id)


@register
def cse(p: Program) -> Program:
    b = Builder(p)
    seen: dict[Any, list[Var]] = {}
    for e in p.eqns:
        ins = [b.read(a) for a in e.inputs]
        key = (e.prim.name, tuple(_atom_key(a) for a in ins), _freeze(e.params))
        prev = None if eqn_effectful(e) else seen.get(key)
        if prev is not None:
            for old, new in zip(e.outvars, prev):
                b.sub[old.id] = new
            continue
        seen[key] = list(e.outvars)
        b.emit(e.prim, ins, e.params, e.outvars)
    return b.finish()


@register
def dce(p: Program) -> Program:
    """Drop equations and captured constants whose results are unused (:func:`program.dce`)."""
    return program_dce(p)


# ---------------------------------------------------------------------------------------------
# matmul absorption and lowering
# ---------------------------------------------------------------------------------------------


@register
def absorb_transposes(p: Program) -> Program:
    b = Builder(p)
    for e in p.eqns:
        ins = [b.read(a) for a in e.inputs]
        params = e.params
        if e.prim.name == "dot_general":
            (xc, yc), (xb, yb) = params["dimension_numbers"]
            new_ins = list(ins)
            for side in (0, 1):
                a = ins[side]
                pe = b.prod.get(a.id) if isinstance(a, Var) else None
                if pe is None or pe.prim.name != "transpose":
                    continue
                perm = pe.params["permutation"]
                c, bt = (xc, xb) if side == 0 else (yc, yb)
                free = [i for i in range(len(perm)) if i not in c and i not in bt]
                mapped = [perm[i] for i in free]
                if mapped != sorted(mapped):
                    continue  # the output's free dims would come out permuted
                c2, b2 = tuple(perm[i] for i in c), tuple(perm[i] for i in bt)
                if side == 0:
                    xc, xb = c2, b2
                else:
                    yc, yb = c2, b2
                new_ins[side] = pe.inputs[0]
            if new_ins != ins:
                params = dict(params, dimension_numbers=((tuple(xc), tuple(yc)), (tuple(xb), tuple(yb))))
                ins = new_ins
        b.emit(e.prim, ins, params, e.outvars)
    return b.finish()


def _operand_layout(ndim: int, batch: Sequence[int], contract: Sequence[int]) -> tuple[list[int], list[int]]:
    free = [i for i in range(ndim) if i not in contract and i not in batch]
    return list(batch), free


opinfo.register("dot_general", OpCategory.CONTRACTION, "BLAS ?gemm/?gemv via passes.lower_matmul")


@register
def lower_matmul(p: Program) -> Program:
    b = Builder(p)
    for e in p.eqns:
        ins = [b.read(a) for a in e.inputs]
        if e.prim.name == "dot_general":
            r = _lower_dot(b, e, ins)
            if r is not None:
                b.sub[e.outvars[0].id] = r
                continue
        b.emit(e.prim, ins, e.params, e.outvars)
    return b.finish()


def _lower_dot(b: Builder, e: Eqn, ins: list[Atom]) -> Atom | None:
    x, y = ins
    if isinstance(x, Literal) or isinstance(y, Literal):
        return None
    (xc, yc), (xb, yb) = e.params["dimension_numbers"]
    pet = e.params.get("preferred_element_type")
    out_aval = e.outvars[0].aval
    if dt.is_low_precision(x.aval.dtype):
        return None
    if pet is not None and np.dtype(pet) != x.aval.dtype:
        if dt.is_inexact(np.dtype(pet)) != dt.is_inexact(x.aval.dtype):
            x = b.emit1(ew.convert_element_type_p, [x], {"new_dtype": np.dtype(pet), "weak_type": False})
            y = b.emit1(ew.convert_element_type_p, [y], {"new_dtype": np.dtype(pet), "weak_type": False})
        else:
            r = _lower_dot(b, Eqn(e.prim, [x, y], dict(e.params, preferred_element_type=None),
                                  [Var(ShapedArray(out_aval.shape, x.aval.dtype))]), [x, y])
            if r is None:
                return None
            return b.emit1(ew.convert_element_type_p, [r], {"new_dtype": np.dtype(pet), "weak_type": False})
    xs, ys = x.aval.shape, y.aval.shape
    _, xf = _operand_layout(len(xs), xb, xc)
    _, yf = _operand_layout(len(ys), yb, yc)
    best = None
    for order in (np.argsort(xc, kind="stable"), np.argsort(yc, kind="stable")):
        xc2 = [xc[i] for i in order]
        yc2 = [yc[i] for i in order]
        for ta in (False, True):
            pa = list(xb) + (xc2 + xf if ta else xf + xc2)
            for tb in (False, True):
                pb = list(yb) + (yf + yc2 if tb else yc2 + yf)
                cost = (pa != sorted(pa)) + (pb != sorted(pb))
                if best is None or cost < best[0]:
                    best = (cost, ta, tb, pa, pb, xc2, yc2)
    _, ta, tb, pa, pb, xc2, yc2 = best
    if pa != list(range(len(xs))):  # copy into [batch, M, K] with the chosen contraction order
        ta = False
        x = b.emit1(mv.transpose_p, [x], {"permutation": tuple(list(xb) + xf + xc2)})
    if pb != list(range(len(ys))):
        tb = False
        y = b.emit1(mv.transpose_p, [y], {"permutation": tuple(list(yb) + yc2 + yf)})
    prod_ = lambda dims, shape: math.prod(shape[i] for i in dims)  # noqa: E731 - dims may be symbolic
    bsz, m, k = prod_(xb, xs), prod_(xf, xs), prod_(xc, xs)
    n = prod_(yf, ys)
    lead = (bsz,) if xb else ()
    x = b.reshape(x, (*lead, k, m) if ta else (*lead, m, k))
    y = b.reshape(y, (*lead, n, k) if tb else (*lead, k, n))
    g = b.emit1(gemm_p, [x, y], {"trans_a": ta, "trans_b": tb, "alpha": 1.0, "beta": 0.0, "c_dims": None})
    return b.reshape(g, tuple(out_aval.shape))


@register
def absorb_output_transpose(p: Program) -> Program:
    """``transpose(gemm(x, y))`` (the matrix dims swapped, the product's only use) becomes
    ``gemm(y, x)`` with both transpose flags flipped: ``(op(x) op(y))^T = op(y)^T op(x)^T``. The
    weight gradients of a dense layer come out of autodiff this way (``dW = (dY^T X)^T``); the
    512 x 512 copy kernel per layer disappears."""
    uses = use_counts(p)
    prod = producers(p)
    swap: dict[int, Eqn] = {}  # id(transpose eqn) -> the gemm it absorbs
    for e in p.eqns:
        if e.prim.name != "transpose" or not isinstance(e.inputs[0], Var):
            continue
        g = prod.get(e.inputs[0].id)
        if g is None or g.prim is not gemm_p or len(g.inputs) != 2 or g.params.get("views") is not None:
            continue
        nd = len(g.outvars[0].aval.shape)
        if uses[g.outvars[0].id] != 1 or tuple(e.params["permutation"]) != (*range(nd - 2), nd - 1, nd - 2):
            continue
        swap[id(e)] = g
    if not swap:
        return p
    dropped = {id(g) for g in swap.values()}
    b = Builder(p)
    for e in p.eqns:
        if id(e) in dropped:
            continue
        g = swap.get(id(e))
        if g is None:
            b.emit(e.prim, [b.read(a) for a in e.inputs], e.params, e.outvars)
            continue
        x, y = (b.read(a) for a in g.inputs)
        params = dict(g.params, trans_a=not g.params["trans_b"], trans_b=not g.params["trans_a"])
        b.emit(gemm_p, [y, x], params, e.outvars)
    return b.finish()


def _gemm_chain(a: Atom, prod: dict[int, Eqn], uses: dict[int, int]) -> tuple[Eqn, list[Eqn]] | None:
    """``a`` = reshape*(gemm(...)) with every intermediate used once: (gemm eqn, reshape eqns)."""
    chain: list[Eqn] = []
    while isinstance(a, Var):
        e = prod.get(a.id)
        if e is None or uses.get(a.id, 0) != 1:
            return None
        if e.prim is gemm_p:
            return e, chain
        if e.prim.name != "reshape":
            return None
        chain.append(e)
        a = e.inputs[0]
    return None


def _float_scalar(s: Any) -> float | None:
    if s is None:
        return None
    v = np.asarray(s)
    if v.dtype.kind != "f" or not np.isfinite(v):
        return None
    return float(v)


def _replace_gemm(p: Program, at: Eqn, old: Eqn, chain: list[Eqn],
                  make: Callable[[Builder], Atom]) -> Program:
    """Re-emit ``p`` with ``old`` and its reshape ``chain`` dropped and ``make(builder)`` emitted at
    the position of ``at`` (whose single output it replaces)."""
    drop = {id(old), *(id(c) for c in chain)}
    b = Builder(p)
    for e in p.eqns:
        if e is at:
            b.sub[at.outvars[0].id] = make(b)
            continue
        if id(e) in drop:
            continue
        b.emit(e.prim, [b.read(a) for a in e.inputs], e.params, e.outvars)
    return b.finish()


def _rebuild_gemm(b: Builder, old: Eqn, final_shape: tuple, **changes: Any) -> Atom:
    inputs = changes.pop("inputs", old.inputs)
    g = b.emit1(gemm_p, [b.read(a) for a in inputs], dict(old.params, **changes))
    return b.reshape(g, final_shape)


@register
def absorb_scale(p: Program) -> Program:
    changed = True
    while changed:
        changed = False
        prod, uses = producers(p), use_counts(p)
        for e in p.eqns:
            name = e.prim.name
            if name in ("mul", "div", "neg") and e.outvars[0].aval.dtype.kind == "f":
                for side in ((0, 1) if name == "mul" else (0,)):
                    g = _gemm_chain(e.inputs[side], prod, uses)
                    if g is None:
                        continue
                    if name == "neg":
                        s = -1.0
                    else:
                        s = _float_scalar(splat_value(e.inputs[1 - side], prod))
                        if s is None or (name == "div" and s == 0):
                            continue
                        s = 1.0 / s if name == "div" else s
                    old, chain = g
                    prm = old.params
                    p = _replace_gemm(p, e, old, chain, lambda b, old=old, s=s, prm=prm, e=e: _rebuild_gemm(
                        b, old, e.outvars[0].aval.shape, alpha=prm["alpha"] * s, beta=prm["beta"] * s))
                    changed = True
                    break
            elif e.prim is gemm_p and e.outvars[0].aval.dtype.kind == "f":
                for side in (0, 1):
                    r = _scaled_operand(e.inputs[side], prod, uses)
                    if r is None:
                        continue
                    s, src, reshape_to = r
                    prm = e.params

                    def make(b: Builder, e: Eqn = e, s: float = s, src: Atom = src, side: int = side,
                             reshape_to: tuple = reshape_to, prm: dict = prm) -> Atom:
                        ins = list(e.inputs)
                        ins[side] = b.reshape(b.read(src), reshape_to)
                        return b.emit1(gemm_p, [b.read(a) for a in ins], dict(prm, alpha=prm["alpha"] * s))

                    p = _replace_gemm(p, e, e, [], make)
                    changed = True
                    break
            if changed:
                break
    return p


def _scaled_operand(a: Atom, prod: dict[int, Eqn], uses: dict[int, int]) -> tuple[float, Atom, tuple] | None:
    """``a`` = reshape*(mul(x, splat s)) used once: (s, x, shape of a)."""
    shape = tuple(a.aval.shape)
    while isinstance(a, Var) and uses.get(a.id, 0) == 1:
        e = prod.get(a.id)
        if e is None:
            return None
        if e.prim.name == "reshape":
            a = e.inputs[0]
            continue
        if e.prim.name == "mul":
            for side in (0, 1):
                s = _float_scalar(splat_value(e.inputs[1 - side], prod))
                if s is not None and splat_value(e.inputs[side], prod) is None:
                    return s, e.inputs[side], shape
        return None
    return None


def _feeds_elementwise(v: Var, cons: dict[int, list[Eqn]], prod: dict[int, Eqn]) -> bool:
    """Whether ``v`` flows (through scalar scales, which become alpha/beta) into elementwise work.

    Then the bias is better added by that fused epilogue kernel for free than filled into C
    before the gemm (which costs a write pass and makes gemm read C)."""
    for e in cons.get(v.id, ()):
        name = e.prim.name
        scale = name == "neg" or (name in ("mul", "div") and any(
            a is not v and splat_value(a, prod) is not None for a in e.inputs))
        if scale and _feeds_elementwise(e.outvars[0], cons, prod):
            return True
        if not scale and opinfo.category(e.prim) in (OpCategory.ELEMENTWISE, OpCategory.IDENTITY):
            return True
    return False


@register
def absorb_bias(p: Program) -> Program:
    changed = True
    while changed:
        changed = False
        prod, uses = producers(p), use_counts(p)
        cons = consumers(p)
        for e in p.eqns:
            if e.prim.name != "add" or e.outvars[0].aval.dtype.kind != "f":
                continue
            if _feeds_elementwise(e.outvars[0], cons, prod):
                continue
            for side in (0, 1):
                g = _gemm_chain(e.inputs[side], prod, uses)
                if g is None or len(g[0].inputs) != 2:
                    continue
                old, chain = g
                plan = _bias_operand(e.inputs[1 - side], old.outvars[0].aval.shape, e.outvars[0].aval.shape,
                                     prod)
                if plan is None:
                    continue
                c, c_shape, c_dims = plan

                def make(b: Builder, old: Eqn = old, c: Atom = c, c_shape: tuple = c_shape,
                         c_dims: tuple = c_dims, e: Eqn = e) -> Atom:
                    cc = b.reshape(b.read(c), c_shape) if not isinstance(c, Literal) else c
                    return _rebuild_gemm(b, old, e.outvars[0].aval.shape, inputs=[*old.inputs, cc],
                                         beta=1.0, c_dims=c_dims)

                p = _replace_gemm(p, e, old, chain, make)
                changed = True
                break
            if changed:
                break
    return p


def _bias_operand(c: Atom, gshape: tuple, fshape: tuple, prod: dict[int, Eqn]) -> tuple | None:
    """How addend ``c`` (of the final shape ``fshape``) enters a gemm of output ``gshape``:
    (atom, shape to reshape it to, c_dims) or None."""
    s = splat_value(c, prod)
    if s is not None:
        return lit(s, c.aval.dtype), (), ()
    e = prod.get(c.id) if isinstance(c, Var) else None
    n = gshape[-1]
    if e is not None and e.prim.name == "broadcast_in_dim":
        v, bd = e.inputs[0], tuple(e.params["broadcast_dimensions"])
        vs = tuple(v.aval.shape)
        if bd == () and vs == ():
            return v, (), ()
        # a vector along the trailing dims that make up N (e.g. the bias of x @ w + b)
        tail = len(fshape)
        acc = 1
        while acc < n and tail > 0:
            tail -= 1
            acc *= fshape[tail]
        if acc == n and bd == tuple(range(tail, len(fshape))) and vs == tuple(fshape[tail:]):
            return v, (n,), (len(gshape) - 1,)
        return None
    if tuple(c.aval.shape) == tuple(fshape):
        return c, tuple(gshape), tuple(range(len(gshape)))
    return None


# ---------------------------------------------------------------------------------------------
# gemm_views: reshape/transpose chains around a matrix product become strides
# ---------------------------------------------------------------------------------------------

# A strided view of a value's elements in a contiguous buffer: one entry per dim, each a list of
# (size, stride) sub-dims (row-major digits of that dim's index; size-1 digits dropped).
_View = list


def _contiguous_view(shape: Sequence[int]) -> _View:
    dims, acc = [], 1
    for d in reversed(tuple(shape)):
        dims.append([(d, acc)] if d != 1 else [])
        acc *= d
    return dims[::-1]


def _view_transpose(view: _View, perm: Sequence[int]) -> _View:
    return [view[p] for p in perm]


def _view_reshape(view: _View, shape: Sequence[int]) -> _View | None:
    """The view after a reshape to ``shape``, or None when a new dim would straddle sub-dims in a
    way no stride describes (a size that does not divide the digit it cuts)."""
    subs = [sd for dim in view for sd in dim]
    out: _View = []
    for size in shape:
        dim, need = [], size
        while need > 1:
            if not subs:
                return None
            z, st = subs[0]
            if z <= need:
                if need % z:
                    return None
                dim.append((z, st))
                subs.pop(0)
                need //= z
            else:
                if z % need:
                    return None
                dim.append((need, st * (z // need)))
                subs[0] = (z // need, st)
                need = 1
        out.append(dim)
    return out if not subs else None


def _merged(dim: list) -> list:
    """Adjacent digits ``(z1, s1), (z2, s2)`` with ``s1 == z2 * s2`` merged into one."""
    out: list = []
    for z, st in dim:
        if out and out[-1][1] == z * st:
            z0, _ = out.pop()
            out.append((z0 * z, st))
        else:
            out.append((z, st))
    return out


def _simple(dim: list, size: int) -> tuple[int, int] | None:
    """(size, stride) of a dim with one stride (stride 0 standing for 'any' when size is 1)."""
    m = _merged(dim)
    if not m:
        return (size, 0)
    return m[0] if len(m) == 1 else None


def _blas_matrix(rows: tuple[int, int], cols: tuple[int, int]) -> tuple | None:
    """Fill in the strides of size-1 dims and check that BLAS can read the matrix in place (one of
    the strides 1, the other a leading dimension at least as large as the extent it spans)."""
    (r, rs), (c, cs) = rows, cols
    if c == 1:
        cs = 1
    if r == 1:
        rs = max(c, 1) if cs == 1 else 1
    if cs == 1 and rs >= max(c, 1):
        return (r, rs), (c, cs)
    if rs == 1 and cs >= max(r, 1):
        return (r, rs), (c, cs)
    return None


def _matrix_view(view: _View, batched: bool, trans: bool) -> tuple | None:
    """A gemm operand's view as fused.MatView of op(x), or None."""
    rows, cols = view[-2:]
    size_r = math.prod(z for z, _ in rows)
    size_c = math.prod(z for z, _ in cols)
    r, c = _simple(rows, size_r), _simple(cols, size_c)
    if r is None or c is None:
        return None
    if trans:
        r, c = c, r
    rc = _blas_matrix(r, c)
    if rc is None:
        return None
    batch = tuple(_merged(view[0])) if batched else ()
    return (batch, *rc)


def _movement_chain_back(a: Atom, prod: dict[int, Eqn], uses: dict[int, int]) -> tuple[Atom, list[Eqn]]:
    """Walk from ``a`` back through reshapes/transposes whose results are used only along the
    chain: (the source value, the chain's equations from the source on)."""
    chain: list[Eqn] = []
    while isinstance(a, Var) and uses.get(a.id, 0) == 1:
        e = prod.get(a.id)
        if e is None or e.prim.name not in ("reshape", "transpose"):
            break
        chain.append(e)
        a = e.inputs[0]
    return a, chain[::-1]


def _movement_chain_forward(v: Var, cons: dict[int, list[Eqn]], uses: dict[int, int]) -> list[Eqn]:
    """Reshapes/transposes applied to ``v`` one after another, each intermediate used once."""
    chain: list[Eqn] = []
    while uses.get(v.id, 0) == 1 and len(cons.get(v.id, ())) == 1:
        e = cons[v.id][0]
        if e.prim.name not in ("reshape", "transpose"):
            break
        chain.append(e)
        v = e.outvars[0]
    return chain


def _apply_chain(view: _View | None, chain: Sequence[Eqn]) -> _View | None:
    for e in chain:
        if view is None:
            return None
        if e.prim.name == "transpose":
            view = _view_transpose(view, e.params["permutation"])
        else:
            view = _view_reshape(view, e.outvars[0].aval.shape)
    return view


def _unapply_chain(view: _View | None, chain: Sequence[Eqn]) -> _View | None:
    """The view of the chain's first input, given its last output's view."""
    for e in reversed(chain):
        if view is None:
            return None
        if e.prim.name == "transpose":
            perm = e.params["permutation"]
            view = _view_transpose(view, [perm.index(i) for i in range(len(perm))])
        else:
            view = _view_reshape(view, e.inputs[0].aval.shape)
    return view


def _moves_data(chain: Sequence[Eqn]) -> bool:
    return any(e.prim.name == "transpose" for e in chain)


def _static_shapes(*avals: Any) -> bool:
    return all(isinstance(d, int) for a in avals for d in a.shape)


@register
def gemm_views(p: Program) -> Program:
    """A float ``native_gemm`` whose operand is a transpose (through reshapes) of another value, or
    whose result is only transposed (through reshapes), reads / writes that value in place through
    strides (``views``): the copy kernel disappears. Only where every matrix stays readable by BLAS
    (one unit stride), so the product can always run on BLAS too."""
    prod, uses, cons = producers(p), use_counts(p), consumers(p)
    plans: dict[int, tuple] = {}  # id(gemm eqn) -> (inputs, views, output chain)
    # chain equations taken (a producer's result chain can be its consumer's operand chain)
    claimed: set[int] = set()
    for e in p.eqns:
        if e.prim is not gemm_p or e.params.get("views") is not None or len(e.inputs) not in (2, 3):
            continue
        if np.dtype(e.outvars[0].aval.dtype) not in (np.float32, np.float64):
            continue
        if not _static_shapes(*(a.aval for a in e.inputs), e.outvars[0].aval):
            continue
        if any(isinstance(a, Literal) for a in e.inputs[:2]):
            continue
        batched = len(e.inputs[0].aval.shape) == 3
        va, vb, vo, _ = fused_layouts(e.inputs[0].aval.shape, e.inputs[1].aval.shape, e.params)
        new_ins, views, changed = list(e.inputs[:2]), [va, vb], False
        for side in (0, 1):
            src, chain = _movement_chain_back(e.inputs[side], prod, uses)
            if not chain or not _moves_data(chain) or not _static_shapes(src.aval):
                continue
            if any(id(c) in claimed for c in chain):
                continue
            view = _apply_chain(_contiguous_view(src.aval.shape), chain)
            mv_ = None if view is None else _matrix_view(view, batched, bool(e.params["trans_" + "ab"[side]]))
            if mv_ is not None:
                new_ins[side], views[side], changed = src, mv_, True
                claimed.update(id(c) for c in chain)
        out, out_chain = e.outvars[0], []
        chain = _movement_chain_forward(out, cons, uses) if len(e.inputs) == 2 else []
        while chain and _moves_data(chain):
            end = chain[-1].outvars[0]
            view = _unapply_chain(_contiguous_view(end.aval.shape), chain)
            mv_ = None if view is None else _matrix_view(view, batched, False)
            if mv_ is not None and mv_[2][1] == 1 and _static_shapes(end.aval):
                vo = (tuple(end.aval.shape), mv_[0], mv_[1][1])
                out_chain, changed = chain, True
                claimed.update(id(c) for c in chain)
                break
            chain = chain[:-1]
        else:
            vo = (tuple(out.aval.shape), vo[0], vo[1][1])
        if changed:
            plans[id(e)] = (new_ins + list(e.inputs[2:]), (views[0], views[1], vo), out_chain)
    if not plans:
        return p
    b = Builder(p)
    skip: set[int] = set()
    for e in p.eqns:
        if id(e) in skip:
            continue
        plan = plans.get(id(e))
        if plan is None:
            b.emit(e.prim, [b.read(a) for a in e.inputs], e.params, e.outvars)
            continue
        ins, views, out_chain = plan
        params = dict(e.params, trans_a=False, trans_b=False, views=views)
        outvars = [out_chain[-1].outvars[0]] if out_chain else list(e.outvars)
        b.emit(e.prim, [b.read(a) for a in ins], params, outvars)
        skip.update(id(c) for c in out_chain)
    return dce(b.finish())


# ---------------------------------------------------------------------------------------------
# constant folding
# ---------------------------------------------------------------------------------------------

NO_FOLD = frozenset({"broadcast_in_dim", "iota"})


@register
def fold_constants(p: Program) -> Program:
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
        foldable = e.prim.name not in NO_FOLD and e.prim.impl is not None and ins and static and \
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
            else:
                foldable = False
                break
        out_bytes = sum(math.prod(v.aval.shape) * v.aval.dtype.itemsize for v in e.outvars) if static else 0
        if foldable and any(not isinstance(a, Literal) for a in ins) and out_bytes <= max(in_bytes, 64):
            try:
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

