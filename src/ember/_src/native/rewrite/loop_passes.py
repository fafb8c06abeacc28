"""Passes that prepare ``scan``/``while``/``cond`` for native loops (run from ``passes.DEFAULT_PASSES``):
:func:`hoist_loop_transposes` turns ``W @ h`` with a loop-invariant ``W`` into ``h @ W.T`` (``W.T``
computed once; the row form vectorizes into register accumulators), :func:`dce_loop_outputs` drops
stacked outputs of a ``scan`` and outputs of a ``cond`` that nothing reads, and the equations
computing them, and the consts and xs a scan's body does not read; :func:`constant_loop_operands`
makes a loop-invariant operand that is a constant of the program a constant of the body (so the
body's products may read it prepacked)."""

from __future__ import annotations

import math

import numpy as np

from ember._src.control_flow import common as cf
from ember._src.core import ShapedArray
from ember._src.native.base import prim_refs as pr
from ember._src.native.base import symdims as sd
from ember._src.native.base.gemm_sizes import SMALL_GEMM_FLOPS
from ember._src.native.rewrite import passes as passes_mod
from ember._src.program import Eqn, Program, Var, eqn_effectful

# ---------------------------------------------------------------------------------------------
# Dead loop outputs
# ---------------------------------------------------------------------------------------------


def _trim(e: Eqn, keep: list[bool]) -> Eqn:
    outvars = [v for v, k in zip(e.outvars, keep) if k]
    if e.prim is pr.SCAN:
        body = e.params["body"]
        nb = cf.derived(body, ("native-dce-outputs", tuple(keep)), lambda: cf.select_outputs(body, keep))
        return Eqn(e.prim, e.inputs, dict(e.params, body=nb), outvars)
    key = ("native-dce-outputs", tuple(keep))
    branches = tuple(cf.derived(b, key, lambda b=b: cf.select_outputs(b, keep)) for b in e.params["branches"])
    return Eqn(e.prim, e.inputs, dict(e.params, branches=branches), outvars)


def _drop_unused_scan_inputs(e: Eqn) -> Eqn:
    """``e`` (a scan) without the consts and xs its body does not read (carries stay)."""
    body, nc, nk = e.params["body"], e.params["num_consts"], e.params["num_carry"]
    read = {a.id for b in body.eqns for a in b.inputs if isinstance(a, Var)}
    read |= {a.id for a in body.outvars if isinstance(a, Var)}
    keep = [nc <= i < nc + nk or v.id in read for i, v in enumerate(body.invars)]
    if all(keep):
        return e
    nb = cf.derived(body, ("native-drop-inputs", tuple(keep)), lambda: Program(
        body.constvars, [v for v, k in zip(body.invars, keep) if k], body.eqns, body.outvars, body.consts))
    ins = [a for a, k in zip(e.inputs, keep) if k]
    return Eqn(e.prim, ins, dict(e.params, body=nb, num_consts=sum(keep[:nc])), e.outvars)


@passes_mod.register
def dce_loop_outputs(p: Program) -> Program:
    """Dead-code elimination that also drops the unused stacked outputs (``ys``) of ``scan`` and
    the unused outputs of ``cond`` (their bodies lose the computations feeding only those), and
    the consts and xs a scan's body does not read."""
    live = {a.id for a in p.outvars if isinstance(a, Var)}
    kept: list[Eqn] = []
    changed = False
    for e in reversed(p.eqns):
        used = [v.id in live for v in e.outvars]
        if not any(used) and not eqn_effectful(e):
            changed = True
            continue
        if e.prim in (pr.SCAN, pr.COND) and not all(used):
            keep = used
            if e.prim is pr.SCAN:
                nk = e.params["num_carry"]
                keep = [True] * nk + used[nk:]
            if not all(keep):
                e = _trim(e, keep)
                changed = True
        if e.prim is pr.SCAN:
            pruned = _drop_unused_scan_inputs(e)
            changed = changed or pruned is not e
            e = pruned
        kept.append(e)
        live.update(a.id for a in e.inputs if isinstance(a, Var))
    if not changed:
        return p
    kept.reverse()
    cv = [(v, c) for v, c in zip(p.constvars, p.consts or [None] * len(p.constvars)) if v.id in live]
    consts = [c for _, c in cv] if p.consts else []
    return Program([v for v, _ in cv], p.invars, kept, p.outvars, consts)


# ---------------------------------------------------------------------------------------------
# Loop-invariant transposes
# ---------------------------------------------------------------------------------------------

_MATVEC = (((1,), (0,)), ((), ()))
_VECMAT = (((0,), (0,)), ((), ()))


def _hoistable_matvecs(body: Program, consts: range) -> dict[int, int]:
    """Equations ``W @ h`` of ``body`` (``W`` one of its loop-invariant inputs, small, float;
    ``h`` a vector): eqn index -> input index of ``W``."""
    pos = {body.invars[i].id: i for i in consts}
    found = {}
    for k, e in enumerate(body.eqns):
        if e.prim is not pr.DOT_GENERAL or e.params.get("dimension_numbers") != _MATVEC:
            continue
        w, h = e.inputs
        if not (isinstance(w, Var) and w.id in pos and isinstance(h, Var) and h.aval.ndim == 1
                and w.aval.ndim == 2 and not any(sd.is_sym(d) for d in w.aval.shape)
                and np.dtype(w.aval.dtype) in (np.float32, np.float64)
                and np.dtype(h.aval.dtype) == np.dtype(w.aval.dtype)
                and int(math.prod(w.aval.shape)) <= SMALL_GEMM_FLOPS):
            continue
        found[k] = pos[w.id]
    return found


def _rewrite_matvecs(body: Program, found: dict[int, int]) -> Program:
    """``body`` with each ``W @ h`` in ``found`` computed as ``h @ transpose(W)``."""
    from ember._src import core
    transpose_p = core.PRIMITIVES["transpose"]
    wt: dict[int, Var] = {}
    head: list[Eqn] = []
    for i in sorted(set(found.values())):
        w = body.invars[i]
        wt[i] = Var(ShapedArray(w.aval.shape[::-1], w.aval.dtype))
        head.append(Eqn(transpose_p, (w,), {"permutation": (1, 0)}, (wt[i],)))
    eqns = list(body.eqns)
    for k, i in found.items():
        e = eqns[k]
        eqns[k] = Eqn(e.prim, (e.inputs[1], wt[i]), dict(e.params, dimension_numbers=_VECMAT), e.outvars)
    return Program(body.constvars, body.invars, head + eqns, body.outvars, body.consts)


def _hoist_invariant_transposes(body: Program, consts: range) -> tuple[Program, list[tuple[int, Var]]]:
    """Move the body's ``transpose`` equations of loop-invariant inputs out: each result becomes a
    new input (after the invariant ones). Returns the body and, per new input, the input index
    transposed and the new input variable."""
    pos = {body.invars[i].id: i for i in consts}
    moved: list[tuple[int, Var]] = []
    eqns = []
    for e in body.eqns:
        x = e.inputs[0] if e.inputs else None
        if e.prim is pr.TRANSPOSE and isinstance(x, Var) and x.id in pos and x.aval.ndim == 2:
            moved.append((pos[x.id], e.outvars[0]))
        else:
            eqns.append(e)
    if not moved:
        return body, []
    at = consts.stop
    invars = list(body.invars)
    invars[at:at] = [v for _, v in moved]
    return Program(body.constvars, invars, eqns, body.outvars, body.consts), moved


@passes_mod.register
def hoist_loop_transposes(p: Program) -> Program:
    """A small matrix-vector product ``W @ h`` inside a ``scan``/``while`` body, with ``W``
    loop-invariant, becomes ``h @ W.T`` with ``W.T`` computed once before the loop: inlined, the
    row form accumulates ``h_p * W.T[p, :]`` in vector registers (~3x faster than dot products
    over rows of ``W`` for 64 x 64). Nested loops first, so a transpose moves out through every
    loop it is invariant in (the segments of a checkpointed scan do not transpose again)."""
    from ember._src import core
    transpose_p = core.PRIMITIVES["transpose"]
    eqns: list[Eqn] = []
    changed = False
    for e in p.eqns:
        if e.prim not in (pr.SCAN, pr.WHILE) or (e.prim is pr.SCAN and e.params["length"] == 0):
            eqns.append(e)
            continue
        body = e.params["body"]
        if e.prim is pr.SCAN:
            nc, first, key = e.params["num_consts"], 0, "num_consts"
        else:
            nc, first, key = e.params["body_nconsts"], e.params["cond_nconsts"], "body_nconsts"
        new_body = hoist_loop_transposes(body)
        found = _hoistable_matvecs(new_body, range(nc))
        if found:
            new_body = _rewrite_matvecs(new_body, found)
        new_body, moved = _hoist_invariant_transposes(new_body, range(nc))
        if new_body is body:
            eqns.append(e)
            continue
        wts = []
        for i, v in moved:
            wt = Var(v.aval)
            eqns.append(Eqn(transpose_p, (e.inputs[first + i],), {"permutation": (1, 0)}, (wt,)))
            wts.append(wt)
        ins = list(e.inputs)
        ins[first + nc:first + nc] = wts
        eqns.append(Eqn(e.prim, ins, dict(e.params, body=new_body, **{key: nc + len(wts)}), e.outvars))
        changed = True
    if not changed:
        return p
    return Program(p.constvars, p.invars, eqns, p.outvars, p.consts)


# ---------------------------------------------------------------------------------------------
# Constant loop operands
# ---------------------------------------------------------------------------------------------


def _with_constant_inputs(body: Program, idx: list[int], values: list) -> Program:
    """``body`` with its inputs ``idx`` turned into constants holding ``values``."""
    drop = set(idx)
    return Program((*body.constvars, *(body.invars[i] for i in idx)),
                   [v for i, v in enumerate(body.invars) if i not in drop], body.eqns, body.outvars,
                   (*body.consts, *values))


@passes_mod.register
def constant_loop_operands(p: Program) -> Program:
    """A loop-invariant operand of a ``scan`` (its consts) or of a ``while``'s body that is a
    constant of ``p`` becomes a constant of the body: the body's products then see a constant
    ``B`` and may read it packed once for the whole program (an LSTM's recurrent matrix, streamed
    in place and re-packed on every step otherwise). Bodies whose constants are not known (constvars
    without values) are left alone; nested loops are handled when the body is compiled."""
    cval = {v.id: c for v, c in zip(p.constvars, p.consts)}
    if not cval:
        return p
    eqns: list[Eqn] = []
    changed = False
    for e in p.eqns:
        if e.prim is pr.SCAN:
            nc, first, key = e.params["num_consts"], 0, "num_consts"
        elif e.prim is pr.WHILE:
            nc, first, key = e.params["body_nconsts"], e.params["cond_nconsts"], "body_nconsts"
        else:
            eqns.append(e)
            continue
        body = e.params["body"]
        ops = e.inputs[first:first + nc]
        idx = [i for i, a in enumerate(ops) if isinstance(a, Var) and a.id in cval]
        if not idx or (body.constvars and not body.consts):
            eqns.append(e)
            continue
        values = [cval[e.inputs[first + i].id] for i in idx]
        new_body = _with_constant_inputs(body, idx, values)
        drop = {first + i for i in idx}
        ins = [a for j, a in enumerate(e.inputs) if j not in drop]
        eqns.append(Eqn(e.prim, ins, dict(e.params, body=new_body, **{key: nc - len(idx)}), e.outvars))
        changed = True
    if not changed:
        return p
    return Program(p.constvars, p.invars, eqns, p.outvars, p.consts)
