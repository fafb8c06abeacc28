"""``while_loop`` and ``fori_loop``, as ``jax.lax``.

``while_p`` operands are ``[cond consts, body consts, init carries]``; params ``cond`` (a Program
``[cond consts, carries] -> [bool scalar]``), ``body`` (``[body consts, carries] -> carries``),
``cond_nconsts``, ``body_nconsts`` and ``require_native``. Rules:

* **JVP**: a while loop over primal and tangent carries (fixpoint over nonzero tangents); the
  predicate only sees the primals.
* **Partial evaluation**: known carries (those not depending on unknown inputs, with a known
  predicate) are computed by a known loop; the unknown ones by staging the whole loop, which
  recomputes the known part (JAX's design). This makes ``linearize``/``jacfwd`` work.
* **Reverse mode** is not supported (the trip count is dynamic, so no residuals can be stacked):
  transposition raises, as in JAX. ``fori_loop`` with static bounds is a ``scan`` and supports it.
* **Batching**: with an unbatched predicate, one loop over batched carries; with a batched
  predicate (JAX's approach) every carry is batched, the loop runs while any example's predicate
  holds, and each step keeps the old carry where that example's predicate is false.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember._src import core
from ember._src import dtypes as dt
from ember._src import partial_eval as peval
from ember._src import tree as tu
from ember._src.ad_util import Zero, is_zero, tangent_aval
from ember._src.batching import batch_program, matchaxis, moveaxis
from ember._src.control_flow import common as cf
from ember._src.control_flow.scan import scan
from ember._src.core import Primitive, ShapedArray
from ember._src.prims.elementwise import convert_element_type, select
from ember._src.prims.movement import broadcast_in_dim
from ember._src.prims.reductions import reduce_or
from ember._src.program import Program
from ember.errors import TracerError

__all__ = ["fori_loop", "while_loop", "while_p"]

while_p = Primitive("while", multiple_results=True)


def _split3(seq: Any, a: int, b: int) -> tuple[list, list, list]:
    seq = list(seq)
    return seq[:a], seq[a:a + b], seq[a + b:]


def _drop_inputs(prog: Program, keep: list[bool]) -> Program:
    """``prog`` without the inputs not flagged in ``keep`` (they must be unused)."""
    return Program(prog.constvars, [v for v, k in zip(prog.invars, keep) if k], prog.eqns, prog.outvars,
                   prog.consts)


def _while_abstract(*avals: ShapedArray, cond: Program, body: Program, cond_nconsts: int,
                    body_nconsts: int, **_: Any) -> list[ShapedArray]:
    cc, bc, carry = _split3(avals, cond_nconsts, body_nconsts)
    for what, got, want in (("cond", [*cc, *carry], cond.in_avals), ("body", [*bc, *carry], body.in_avals)):
        if len(got) != len(want):
            raise TypeError(f"while: {len(got)} operands for a {what} program with {len(want)} inputs")
        for i, (a, b) in enumerate(zip(got, want)):
            if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
                raise TypeError(f"while: {what} operand {i} has type {a.str_short()}, expected "
                                f"{b.str_short()}")
    (p,) = cond.out_avals
    if p.shape != () or p.dtype != dt.bool_:
        raise TypeError(f"while: the predicate must be a boolean scalar, got {p.str_short()}")
    for i, (a, b) in enumerate(zip(carry, body.out_avals)):
        msg = cf.type_mismatch("body output", f"carry {i}", a, b)
        if msg:
            raise TypeError(f"while: {msg}")
    return list(body.out_avals)


def _while_impl(*args: np.ndarray, cond: Program, body: Program, cond_nconsts: int, body_nconsts: int,
                **params: Any) -> list[np.ndarray]:
    cf.report_loop_path("while", body, params, cf.REFERENCE_LOOP,
                        "while_p.impl calls the body from Python once per iteration")
    cc, bc, carry = _split3(args, cond_nconsts, body_nconsts)
    crun, brun = cf.numpy_runner(cond), cf.numpy_runner(body)
    while bool(crun([*cc, *carry])[0]):
        carry = brun([*bc, *carry])
    return [np.asarray(c) for c in carry]


def _while_jvp(primals: list, tangents: list, *, cond: Program, body: Program, cond_nconsts: int,
               body_nconsts: int, **params: Any) -> tuple[list, list]:
    ncc, nbc = cond_nconsts, body_nconsts
    nz = [not is_zero(t) for t in tangents]
    _, bc_nz, carry_nz = _split3(nz, ncc, nbc)
    while True:
        jbody, out_nz = cf.jvp_body(body, bc_nz + carry_nz, carry_nz)
        new = [a or b for a, b in zip(carry_nz, out_nz)]
        if new == carry_nz:
            break
        carry_nz = new
    n_bt, n_kt = sum(bc_nz), sum(carry_nz)
    nk = len(carry_nz)
    # jbody inputs [bc, carry, bc_t, carry_t] -> [bc, bc_t, carry, carry_t]
    perm = [*range(nbc), *range(nbc + nk, nbc + nk + n_bt), *range(nbc, nbc + nk),
            *range(nbc + nk + n_bt, nbc + nk + n_bt + n_kt)]
    jbody = cf.derived(jbody, ("while-order", tuple(perm)), lambda: cf.reorder(jbody, perm))
    k_av = body.in_avals[nbc:]
    jcond = cf.derived(cond, ("while-jvp-cond", tuple(carry_nz)), lambda: cf.add_unused_inputs(
        cond, [tangent_aval(a) for a, z in zip(k_av, carry_nz) if z]))
    cc, bc, carry = _split3(primals, ncc, nbc)
    _, bct, kt = _split3(tangents, ncc, nbc)
    bct = [t for t, z in zip(bct, bc_nz) if z]
    kt = [cf.instantiate_zero(t, a) for t, a, z in zip(kt, k_av, carry_nz) if z]
    outs = while_p.bind(*cc, *bc, *bct, *carry, *kt, cond=jcond, body=jbody, cond_nconsts=ncc,
                        body_nconsts=nbc + n_bt, **params)
    it = iter(outs[nk:])
    touts = [next(it) if z else Zero(tangent_aval(core.get_aval(o))) for o, z in zip(outs[:nk], carry_nz)]
    return list(outs[:nk]), touts


def _while_partial_eval(trace: peval.PartialEvalTrace, tracers: list, *, cond: Program, body: Program,
                        cond_nconsts: int, body_nconsts: int, **params: Any) -> list:
    ncc, nbc = cond_nconsts, body_nconsts
    p = dict(params, cond=cond, body=body, cond_nconsts=ncc, body_nconsts=nbc)
    uk = [not t.pval.is_known for t in tracers]
    cc_uk, bc_uk, carry_uk = _split3(uk, ncc, nbc)
    while True:
        new = [a or b for a, b in zip(carry_uk, cf.depends_on(body, bc_uk + carry_uk))]
        if new == carry_uk:
            break
        carry_uk = new

    def stage_all() -> list:
        ins = [trace.instantiate_const(t) for t in tracers]
        return trace.new_staged(while_p, ins, p, while_p.abstract([t.aval for t in ins], p))

    if cf.depends_on(cond, cc_uk + carry_uk)[0]:  # the predicate is unknown: stage everything
        return stage_all()
    known = [not u for u in carry_uk]
    body_k = cf.derived(body, ("while-known", tuple(bc_uk), tuple(carry_uk)), lambda: _drop_inputs(
        cf.select_outputs(body, known), [not u for u in bc_uk + carry_uk]))
    cond_k = cf.derived(cond, ("while-known-cond", tuple(cc_uk), tuple(carry_uk)), lambda: _drop_inputs(
        cf.select_outputs(cond, [True]), [not u for u in cc_uk + carry_uk]))
    kvals = [t.pval.const for t, u in zip(tracers, cc_uk + bc_uk + carry_uk) if not u]
    n_kcc, n_kbc = ncc - sum(cc_uk), nbc - sum(bc_uk)
    kouts = while_p.bind(*kvals, **dict(p, cond=cond_k, body=body_k, cond_nconsts=n_kcc, body_nconsts=n_kbc))
    if not any(carry_uk):
        return list(kouts)
    staged = stage_all()  # the unknown carries: the whole loop, recomputing the known ones
    kit = iter(kouts)
    return [s if u else next(kit) for s, u in zip(staged, carry_uk)]


def _while_batch(vals: list, dims: list, *, cond: Program, body: Program, cond_nconsts: int,
                 body_nconsts: int, **params: Any) -> tuple[list, list]:
    ncc, nbc = cond_nconsts, body_nconsts
    size = next(core.get_aval(v).shape[d] for v, d in zip(vals, dims) if d is not None)
    cc_b, bc_b, carry_b = _split3([d is not None for d in dims], ncc, nbc)
    nk = len(carry_b)

    def batched(prog: Program, flags: list[bool], inst: Any) -> tuple[Program, list]:
        in_dims = [0 if b else None for b in flags]
        key = ("while-batch", tuple(in_dims), size, inst if isinstance(inst, bool) else tuple(inst))
        return cf.derived(prog, key, lambda: batch_program(prog, in_dims, size, instantiate=inst))

    while True:
        _, out_dims = batched(body, bc_b + carry_b, carry_b)
        new = [a or d is not None for a, d in zip(carry_b, out_dims)]
        if new == carry_b:
            break
        carry_b = new
    pred_batched = batched(cond, cc_b + carry_b, False)[1][0] is not None
    if pred_batched:
        carry_b = [True] * nk
    body_b, _ = batched(body, bc_b + carry_b, carry_b)
    cond_b, _ = batched(cond, cc_b + carry_b, False)
    cc, bc, carry = _split3(vals, ncc, nbc)
    dcc, dbc, dk = _split3(dims, ncc, nbc)
    cc = [v if d is None else moveaxis(v, d, 0) for v, d in zip(cc, dcc)]
    bc = [v if d is None else moveaxis(v, d, 0) for v, d in zip(bc, dbc)]
    carry = [matchaxis(v, d, 0 if b else None, size) for v, d, b in zip(carry, dk, carry_b)]
    if not pred_batched:
        outs = while_p.bind(*cc, *bc, *carry, cond=cond_b, body=body_b, cond_nconsts=ncc, body_nconsts=nbc,
                            **params)
    else:
        new_cond, new_body = cf.derived(body_b, ("while-select", cond_b, ncc), lambda: _select_loop(
            cond_b, body_b, ncc, nbc))
        outs = while_p.bind(*cc, *cc, *bc, *carry, cond=new_cond, body=new_body, cond_nconsts=ncc,
                            body_nconsts=ncc + nbc, **params)
    return list(outs), [0 if b else None for b in carry_b]


def _select_loop(cond_b: Program, body_b: Program, ncc: int, nbc: int) -> tuple[Program, Program]:
    """A loop running while any example's predicate holds; finished examples keep their carry."""
    cc_av, k_av = cond_b.in_avals[:ncc], cond_b.in_avals[ncc:]
    bc_av = body_b.in_avals[:nbc]

    def c(*args: Any) -> list:
        (pred,) = cf.run_program(cond_b, args)
        return [reduce_or(pred, (0,))]

    def b(*args: Any) -> list:
        cc, bc, carry = _split3(args, ncc, nbc)
        (pred,) = cf.run_program(cond_b, [*cc, *carry])
        new = cf.run_program(body_b, [*bc, *carry])
        out = []
        for n, o in zip(new, carry):
            shape = core.get_aval(o).shape
            out.append(select(broadcast_in_dim(pred, shape, (0,)), n, o))
        return out

    return cf.trace_internal(c, [*cc_av, *k_av]), cf.trace_internal(b, [*cc_av, *bc_av, *k_av])


while_p.impl = _while_impl
while_p.abstract_eval = _while_abstract
while_p.jvp = _while_jvp
while_p.batch = _while_batch
while_p.na("transpose", "Reverse-mode differentiation does not work for lax.while_loop or lax.fori_loop "
           "with dynamic start/stop values (the trip count is not known when tracing, so no residuals "
           "can be stored). Try using lax.scan, or lax.fori_loop with static (Python int) bounds")
peval.partial_eval_rules[while_p] = _while_partial_eval


# ---------------------------------------------------------------------------------------------
# Public functions
# ---------------------------------------------------------------------------------------------


def _trace_loop_fns(cond_fun: Callable, body_fun: Callable, init_val: Any, what: str) -> tuple:
    leaves, tree = tu.flatten(init_val)
    paths = cf.leaf_paths(init_val, "init_val")
    avals = [cf.leaf_aval(x, p, what) for x, p in zip(leaves, paths)]

    def trace_cond(avals: list[ShapedArray]) -> tuple[Program, list]:
        def flat(*xs: Any) -> list:
            out = cond_fun(tu.unflatten(tree, xs))
            o_leaves = tu.leaves(out)
            if len(o_leaves) != 1:
                raise TypeError(f"{what}: cond_fun must return a boolean scalar, but got pytree "
                                f"{tu.structure(out)}")
            a = core.get_aval(o_leaves[0])
            if a.shape != () or a.dtype != dt.bool_:
                raise TypeError(f"{what}: cond_fun must return a boolean scalar, but got output type "
                                f"{a.str_short()}")
            return o_leaves

        return cf.trace_user_fun(flat, avals)

    def trace_body(avals: list[ShapedArray]) -> tuple[Program, list, list]:
        box: list = []

        def flat(*xs: Any) -> list:
            out = body_fun(tu.unflatten(tree, xs))
            o_leaves, o_tree = tu.flatten(out)
            if o_tree != tree:
                raise TypeError(f"{what}: body_fun output and input must have the same pytree structure, but "
                                f"they differ:\n  the input is {tree}\n  the output is {o_tree}")
            box.append([cf.leaf_aval(o, f"output leaf {i}", what) for i, o in enumerate(o_leaves)])
            return [cf.match_aval(o, a) for o, a in zip(o_leaves, avals)]

        prog, consts = cf.trace_user_fun(flat, avals)
        return prog, consts, box[0]

    body, bconsts, out_avals = trace_body(avals)
    weak = [i for i, (a, b) in enumerate(zip(avals, out_avals))
            if a.weak_type and a.shape == b.shape and (a.dtype, a.weak_type) != (b.dtype, b.weak_type)]
    if weak:
        for i in weak:
            new = dt.promote((avals[i].dtype, True), (out_avals[i].dtype, out_avals[i].weak_type))
            leaves[i] = convert_element_type(leaves[i], new[0], weak_type=new[1])
            avals[i] = core.get_aval(leaves[i])
        body, bconsts, out_avals = trace_body(avals)
    msgs = [cf.type_mismatch("output carry component", f"the input carry component {p}", a, b)
            for p, a, b in zip(paths, avals, out_avals)]
    msgs = [m for m in msgs if m]
    if msgs:
        raise TypeError(f"{what}: body_fun output and input must have identical types, but they differ:\n"
                        + "\n".join(f"  * {m}" for m in msgs))
    cond, cconsts = trace_cond(avals)
    return cond, cconsts, body, bconsts, leaves, tree


def while_loop(cond_fun: Callable, body_fun: Callable, init_val: Any, *,
               require_native: bool | None = None) -> Any:
    """Call ``body_fun`` repeatedly while ``cond_fun`` is true, as ``jax.lax.while_loop``::

        val = init_val
        while cond_fun(val):
            val = body_fun(val)
        return val

    ``body_fun`` must return a value with the structure, shapes and dtypes of ``init_val``;
    ``cond_fun`` a boolean scalar. Forward-mode differentiation and ``vmap`` work (a batched
    predicate runs until every example is done); reverse mode raises (use ``scan``, or
    ``fori_loop`` with static bounds).
    """
    cond, cconsts, body, bconsts, leaves, tree = _trace_loop_fns(cond_fun, body_fun, init_val, "while_loop")
    outs = while_p.bind(*cconsts, *bconsts, *leaves, cond=cond, body=body, cond_nconsts=len(cconsts),
                        body_nconsts=len(bconsts), require_native=cf.require_native_default(require_native))
    return tu.unflatten(tree, outs)


def _static_int(x: Any) -> int | None:
    if isinstance(x, (bool, np.bool_)):
        return None
    if isinstance(x, (int, np.integer)):
        return int(x)
    try:
        v = core.concrete_or_error(x, "fori_loop bound")
    except TracerError:
        return None
    v = np.asarray(v)
    if v.shape != () or not dt.is_integer(v.dtype):
        return None
    return int(v)


def fori_loop(lower: Any, upper: Any, body_fun: Callable, init_val: Any, *, unroll: int | bool | None = None,
              checkpoint: bool | int = True, require_native: bool | None = None) -> Any:
    """``body_fun(i, val)`` for ``i`` in ``range(lower, upper)``, as ``jax.lax.fori_loop``.

    With concrete bounds (Python ints or concrete arrays) this is a ``scan`` of
    ``upper - lower`` steps, so reverse-mode differentiation works; with traced bounds it is a
    ``while_loop`` (forward mode and ``vmap`` only).
    """
    la, ua = core.get_aval(lower), core.get_aval(upper)
    for name, a in (("lower", la), ("upper", ua)):
        if a.shape != () or not dt.is_integer(a.dtype):
            raise TypeError(f"fori_loop: {name} must be an integer scalar, got {a.str_short()}")
    lo, hi = _static_int(lower), _static_int(upper)
    idx_dtype, weak = dt.promote((la.dtype, la.weak_type), (ua.dtype, ua.weak_type))
    if (la.dtype, la.weak_type) != (idx_dtype, weak):
        lower = convert_element_type(lower, idx_dtype, weak_type=weak)
    if (ua.dtype, ua.weak_type) != (idx_dtype, weak):
        upper = convert_element_type(upper, idx_dtype, weak_type=weak)
    if lo is not None and hi is not None:
        def step(carry: Any, _: Any) -> tuple:
            i, x = carry
            return (i + 1, body_fun(i, x)), None

        (_, x), _ = scan(step, (lower, init_val), None, length=max(hi - lo, 0),
                         unroll=1 if unroll is None else unroll, checkpoint=checkpoint,
                         require_native=require_native)
        return x

    def cond(carry: Any) -> Any:
        return carry[0] < upper

    def body(carry: Any) -> Any:
        i, x = carry
        return i + 1, body_fun(i, x)

    return while_loop(cond, body, (lower, init_val), require_native=require_native)[1]
