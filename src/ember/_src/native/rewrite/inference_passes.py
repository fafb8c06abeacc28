"""Passes for inference programs of imported CNNs (registered in :data:`.passes.PASSES`).

* ``fold_batch_norm``: a convolution with a constant kernel whose output goes (each value used once)
  through a chain of ``add``/``sub``/``mul``/``div`` by per-output-channel constants -- an eval-mode
  batch norm ``(conv - mean) * (gamma / sqrt(var + eps)) + beta``, a conv bias -- becomes one
  convolution by the scaled kernel ``w * s`` (``s`` along the kernel's output-feature axis) plus one
  per-channel shift ``t``: ``s * conv(x, w) + t == conv(x, s * w) + t``. The scaled kernel and the
  shift are constant equations that ``fold_constants`` evaluates once. The batch norm's three
  elementwise passes over each convolution output become one bias add, which ``conv_gemm`` products
  take into the GEMM's store (:mod:`..scheduling.gemm_epilogue`). Statistics or affine parameters
  that are not constants (training mode, a batch norm of a program's argument) are left alone, as is
  a convolution whose output is read by anything else too.
* ``absorb_residual``: ``reshape*(gemm(a, b)) [+ bias] + r`` with ``r`` a full-shape value (a ResNet
  block's residual add) becomes ``reshape*(gemm(a, b, r, beta=1)) [+ bias]``: the product
  accumulates into the residual (in ``r``'s buffer when ``r`` dies there, see the planner), and what
  is left after it (bias, ReLU) is the GEMM epilogue. Unlike ``absorb_bias``, this applies also when
  the sum flows on into elementwise work.
"""

from __future__ import annotations

import numpy as np

from ember._src.native.base import prim_refs as pr
from ember._src.native.rewrite.analysis import consumers, producers, use_counts
from ember._src.native.rewrite.fused import gemm_p
from ember._src.native.rewrite.gemm_passes import gemm_chain
from ember._src.native.rewrite.layout_passes import constant_ids
from ember._src.native.rewrite.passes import Builder, dce, lit, reemit, register
from ember._src.prims.conv import conv_p
from ember._src.program import Atom, Eqn, Literal, Program, Var

__all__ = ["absorb_residual", "absorb_residual_in_loop_body", "fold_batch_norm"]

_AFFINE = ("add", "sub", "mul", "div")


def _channel_vector(a: Atom, feat: int, o: int, consts: set[int], prod: dict[int, Eqn]) -> Atom | None:
    """``a`` as a constant per-channel operand: a scalar literal, or a constant broadcast along
    output axis ``feat`` (``o`` channels) only. Returns the operand it was broadcast from (shape
    ``()``, or with every dim 1 but the one mapped to ``feat``), or None."""
    if isinstance(a, Literal):
        return a if a.aval.shape == () else None
    e = prod.get(a.id)
    if e is None or e.prim is not pr.BROADCAST_IN_DIM:
        return None
    src = e.inputs[0]
    if isinstance(src, Var) and src.id not in consts:
        return None
    dims = tuple(e.params["broadcast_dimensions"])
    for d, size in zip(dims, src.aval.shape):
        if size != 1 and not (d == feat and size == o):
            return None
    return src


def _as_vector(b: Builder, src: Atom, o: int, dtype: np.dtype) -> Atom:
    """A per-channel operand (:func:`_channel_vector`) as an ``(o,)`` vector."""
    if src.aval.shape != () and int(np.prod(src.aval.shape)) == o:
        return b.reshape(src, (o,))
    scalar = b.reshape(src, ()) if src.aval.shape != () else src
    return b.emit1(pr.BROADCAST_IN_DIM, [scalar], {"shape": (o,), "broadcast_dimensions": ()})


def _affine_chain(e: Eqn, consts: set[int], prod: dict[int, Eqn], cons: dict[int, list[Eqn]],
                  uses: dict[int, int]) -> list[tuple[Eqn, str, Atom]]:
    """The per-channel ops after convolution ``e``: (eqn, op, channel operand), each value before the
    last used once (``c - v`` and ``c / v`` end the chain)."""
    out = e.outvars[0]
    feat, o = e.params["dimension_numbers"][2][1], out.aval.shape[e.params["dimension_numbers"][2][1]]
    chain: list[tuple[Eqn, str, Atom]] = []
    v = out
    while uses.get(v.id, 0) == 1 and len(cons.get(v.id, ())) == 1:
        u = cons[v.id][0]
        if u.prim.name not in _AFFINE or len(u.inputs) != 2 or tuple(u.outvars[0].aval.shape) != tuple(
                out.aval.shape) or u.outvars[0].aval.dtype != out.aval.dtype:
            break
        left = u.inputs[0] is v
        other = u.inputs[1] if left else u.inputs[0]
        if other is v or (not left and u.prim.name in ("sub", "div")):
            break
        vec = _channel_vector(other, feat, o, consts, prod)
        if vec is None:
            break
        chain.append((u, u.prim.name, vec))
        v = u.outvars[0]
    return chain


def _foldable_conv(e: Eqn, consts: set[int]) -> bool:
    if e.prim is not conv_p or len(e.outvars) != 1 or len(e.inputs) != 2:
        return False
    w, out = e.inputs[1], e.outvars[0]
    return (isinstance(w, Var) and w.id in consts and np.dtype(out.aval.dtype).kind == "f"
            and np.dtype(w.aval.dtype) == np.dtype(out.aval.dtype)
            and isinstance(out.aval.shape[e.params["dimension_numbers"][2][1]], int))


@register
def fold_batch_norm(p: Program) -> Program:
    """Per-channel affine chains after constant-kernel convolutions folded into the kernel and one
    shift (module docstring)."""
    consts = constant_ids(p)
    if not any(_foldable_conv(e, consts) for e in p.eqns):
        return p
    prod, uses = producers(p), use_counts(p)
    cons = consumers(p)
    plans: dict[int, tuple[Eqn, list]] = {}  # id(last chain eqn) -> (conv eqn, its chain)
    skip: set[int] = set()  # ids of the convolutions and chain equations (emitted at the chain's end)
    for e in p.eqns:
        if not _foldable_conv(e, consts):
            continue
        chain = _affine_chain(e, consts, prod, cons, uses)
        if any(op in ("mul", "div") for _, op, _ in chain) or len(chain) >= 2:
            plans[id(chain[-1][0])] = (e, chain)
            skip.update([id(e), *(id(u) for u, _, _ in chain[:-1])])
    if not plans:
        return p
    return dce(reemit(p, skip, dict.fromkeys(plans, lambda b, at: _emit_folded(b, *plans[id(at)]))))


def _emit_folded(b: Builder, e: Eqn, chain: list[tuple[Eqn, str, Atom]]) -> None:
    """Convolution ``e`` by its scaled kernel plus the shift, into the outputs of ``chain``'s end
    (emitted there: the chain's constants are all defined by then)."""
    ins = [b.read(a) for a in e.inputs]
    out = e.outvars[0]
    dt = np.dtype(out.aval.dtype)
    rhs, ospec = e.params["dimension_numbers"][1], e.params["dimension_numbers"][2]
    o = out.aval.shape[ospec[1]]
    s: Atom | None = None  # value = s * conv + t, per channel
    t: Atom | None = None
    for _, op, src in chain:
        c = _as_vector(b, b.read(src), o, dt)
        if op in ("add", "sub"):
            if op == "sub":
                c = b.emit1(pr.NEG, [c], {})
            t = c if t is None else b.emit1(pr.ADD, [t, c], {})
        else:
            prim = pr.MUL if op == "mul" else pr.DIV
            s = c if s is None and op == "mul" else b.emit1(
                prim, [s if s is not None else _as_vector(b, lit(1, dt), o, dt), c], {})
            if t is not None:
                t = b.emit1(prim, [t, c], {})
    w = ins[1]
    if s is not None:
        sw = b.emit1(pr.BROADCAST_IN_DIM, [s], {"shape": tuple(w.aval.shape),
                                                 "broadcast_dimensions": (rhs[0],)})
        w = b.emit1(pr.MUL, [w, sw], {})
    last = chain[-1][0].outvars
    if t is None:
        b.emit(e.prim, [ins[0], w], e.params, last)
        return
    y = b.emit1(e.prim, [ins[0], w], e.params)
    tb = b.emit1(pr.BROADCAST_IN_DIM, [t], {"shape": tuple(out.aval.shape),
                                            "broadcast_dimensions": (ospec[1],)})
    b.emit(pr.ADD, [y, tb], {}, last)


def _full_addend(r: Atom, shape: tuple, prod: dict[int, Eqn]) -> bool:
    """Whether ``r`` is a full-shape value that an add reads element by element (not a broadcast)."""
    if not isinstance(r, Var) or tuple(r.aval.shape) != shape:
        return False
    e = prod.get(r.id)
    return e is None or e.prim is not pr.BROADCAST_IN_DIM


@register
def absorb_residual(p: Program, loop_body: bool = False) -> Program:
    """``gemm [+ bias] + r`` -> ``gemm(.., r, beta=1) [+ bias]`` (module docstring). In a loop body
    (``loop_body``) an ``r`` that is an input of the body stays an add."""
    if not any(e.prim is gemm_p for e in p.eqns):
        return p
    prod, uses = producers(p), use_counts(p)
    # a body's input cannot be accumulated into in place: the product starts from a copy of it, made
    # serially at each step, where the add fused into the map after the product runs on the pool
    # (an LSTM step's x_t + h W at batch 8, two threads: 2.06 -> 1.91 ms a call)
    inputs = {v.id for v in p.invars} if loop_body else set()
    plans: dict[int, tuple] = {}  # id(add) -> (gemm, dropped eqns, residual, bias eqn or None, side)
    taken: set[int] = set()
    for e in p.eqns:
        if e.prim is not pr.ADD or np.dtype(e.outvars[0].aval.dtype) != np.float32:
            continue
        shape = tuple(e.outvars[0].aval.shape)
        for side in (0, 1):
            u, r = e.inputs[side], e.inputs[1 - side]
            if not _full_addend(r, shape, prod) or (isinstance(r, Var) and r.id in inputs):
                continue
            g, bias = gemm_chain(u, prod, uses), None
            if g is None and isinstance(u, Var) and uses.get(u.id, 0) == 1:
                be = prod.get(u.id)
                if be is not None and be.prim is pr.ADD:
                    for bs in (0, 1):
                        vb = prod.get(be.inputs[1 - bs].id) if isinstance(be.inputs[1 - bs], Var) else None
                        g = gemm_chain(be.inputs[bs], prod, uses)
                        if g is not None and vb is not None and vb.prim is pr.BROADCAST_IN_DIM:
                            bias = (be, bs)
                            break
                        g = None
            if g is None:
                continue
            old, chain = g
            if (len(old.inputs) != 2 or old.params.get("views") is not None or id(old) in taken
                    or any(r is a for a in old.inputs)):
                continue
            taken.add(id(old))
            drop = [old, *chain] + ([bias[0]] if bias else [])
            plans[id(e)] = (old, drop, r, bias)
            break
    if not plans:
        return p
    dropped = {id(d) for plan in plans.values() for d in plan[1]}
    return dce(reemit(p, dropped, dict.fromkeys(plans, lambda b, e: _emit_residual(b, e, *plans[id(e)]))))


@register
def absorb_residual_in_loop_body(p: Program) -> Program:
    """``absorb_residual`` as loop bodies run it (:data:`.passes.BODY_VARIANTS`)."""
    return absorb_residual(p, loop_body=True)


def _emit_residual(b: Builder, e: Eqn, old: Eqn, _drop: list, r: Atom, bias: tuple | None) -> None:
    """The residual add ``e`` as product ``old`` accumulating into ``r`` (then its bias)."""
    gshape = tuple(old.outvars[0].aval.shape)
    c = b.reshape(b.read(r), gshape)
    g = b.emit1(gemm_p, [*(b.read(a) for a in old.inputs), c],
                dict(old.params, beta=1.0, c_dims=tuple(range(len(gshape)))))
    if bias is None:
        b.sub[e.outvars[0].id] = b.reshape(g, tuple(e.outvars[0].aval.shape))
        return
    be, bs = bias
    h = b.reshape(g, tuple(be.outvars[0].aval.shape))
    ins = [h, b.read(be.inputs[1 - bs])] if bs == 0 else [b.read(be.inputs[0]), h]
    b.emit(pr.ADD, ins, {}, e.outvars)
