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
* ``hoist_loop_transposes`` (:mod:`.loop_passes`): ``W @ h`` in a loop body with ``W``
  loop-invariant and small becomes ``h @ W.T``, ``W.T`` computed once before the loop.
* ``dce_loop_outputs`` (:mod:`.loop_passes`): also drops a ``scan``'s unused stacked
  outputs and a ``cond``'s unused outputs, with the body computations feeding only them.
The passes on matrix products (:mod:`.gemm_passes`):

* ``unbatch_broadcast_dot``: a batched ``dot_general`` of an operand broadcast along exactly the
  batch axes (a weight shared by every batch, as ``torch.bmm`` of an expanded weight) becomes one
  product with the batch axes as free rows (one large GEMM, the weight read once).
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
* ``refine_transposes`` (:mod:`.movement_passes`): a transpose of a reshape that merges and splits
  axes runs over the shapes' common refinement (linear indexing in its copy kernel).
* ``channels_last`` (:mod:`.layout_passes`): NCHW convolutions take and give NHWC values, and
  the elementwise ops, pads, slices and reductions after them carry NHWC on; values go back to
  NCHW only where another consumer needs them (the max pool and residual adds of a ResNet run
  channels-last, the convolutions stage no copies).
* ``conv_gemm`` (:mod:`.layout_passes`): a 1x1 NHWC convolution, or one with small output images
  (ResNet's 7x7 stage), becomes a ``dot_general`` of its patches (im2col by strided slices) by the
  kernel as a matrix, on ember's GEMM kernel.
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
from ember._src.native.base import prim_refs as pr
from ember._src.native.opinfo import OpCategory
from ember._src.native.rewrite import threefry
from ember._src.prims import movement as mv
from ember._src.program import Atom, Eqn, Literal, Program, Var, eqn_effectful
from ember._src.program import dce as program_dce

PASSES: dict[str, Callable[[Program], Program]] = {}
DEFAULT_PASSES = ("inline_calls", "split_threefry", "simplify", "cse", "bf16_weights", "channels_last",
                  "conv_gemm",
                  "fuse_attention", "absorb_causal_mask", "hoist_loop_transposes", "unbatch_broadcast_dot",
                  "absorb_transposes", "lower_matmul", "absorb_scale", "absorb_bias", "absorb_scale",
                  "absorb_output_transpose", "fold_constants", "constant_loop_operands", "gemm_views",
                  "refine_transposes", "simplify", "cse", "dce_loop_outputs", "dce")


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
    if e is not None and e.prim is pr.BROADCAST_IN_DIM and isinstance(e.inputs[0], Literal):
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
    if not any(e.prim is pr.THREEFRY2X32 for e in p.eqns):
        return p
    b = Builder(p)
    for e in p.eqns:
        ins = [b.read(a) for a in e.inputs]
        if e.prim is pr.THREEFRY2X32:
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
        if pe is not None and pe.prim is pr.NEG:
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
        if pe is not None and pe.prim is pr.RESHAPE:
            return b.reshape(pe.inputs[0], tuple(out.shape))
    if name == "transpose":
        perm = tuple(prm["permutation"])
        if perm == tuple(range(len(perm))):
            return x
        if pe is not None and pe.prim is pr.TRANSPOSE:
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
        if pe is not None and pe.prim is pr.BROADCAST_IN_DIM:
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


NO_FOLD = frozenset({pr.BROADCAST_IN_DIM, pr.IOTA})


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


# The passes of other modules, registered by importing them here (one explicit list; they import
# ``register`` from this module, so the list comes after it).
from ember._src.native.rewrite import (  # noqa: E402,F401
    attention_passes,
    bf16_weights,
    gemm_passes,
    layout_passes,
    loop_passes,
    movement_passes,
)
from ember._src.native.rewrite.gemm_passes import (  # noqa: E402,F401  (read as passes.<name>)
    absorb_bias,
    absorb_output_transpose,
    absorb_scale,
    absorb_transposes,
    gemm_views,
    lower_matmul,
)
