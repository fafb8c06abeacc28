"""``cond`` and ``switch``, as ``jax.lax``.

``cond_p`` operands are ``[index, *operands]`` (``index`` an int32 scalar, clamped into range);
param ``branches`` is a tuple of Programs with identical input and output types. The constants
every branch captures are hoisted into explicit operands shared by all branches. Rules:

* **JVP**: each branch's JVP, with the union over branches of nonzero output tangents.
* **Partial evaluation**: with a known index, a known ``cond`` computes the known outputs and
  the residuals of the selected branch (the residual slots of the other branches are zeros);
  the unknown ``cond`` selects the same branch's tangent map. An unknown index stages it whole.
* **Transpose**: a ``cond`` over the branches' transposes.
* **Batching**: with an unbatched index, one ``cond`` over batched branches; with a batched index
  every branch runs and ``select_n`` picks each example's result (as JAX).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ember._src import ad, core
from ember._src import dtypes as dt
from ember._src import partial_eval as peval
from ember._src import tree as tu
from ember._src.ad_util import UndefPrimal, Zero, is_zero, tangent_aval
from ember._src.batching import batch_program, moveaxis
from ember._src.control_flow import common as cf
from ember._src.core import Primitive, ShapedArray
from ember._src.prims import elementwise as ew
from ember._src.prims.elementwise import convert_element_type, select_n
from ember._src.prims.movement import broadcast_in_dim, full_like
from ember._src.program import Program

__all__ = ["cond", "cond_p", "switch"]

cond_p = Primitive("cond", multiple_results=True)


def _cond_abstract(index: ShapedArray, *avals: ShapedArray, branches: tuple) -> list[ShapedArray]:
    if index.shape != () or not dt.is_integer(index.dtype):
        raise TypeError(f"cond: the branch index must be an integer scalar, got {index.str_short()}")
    if not branches:
        raise TypeError("cond: no branches")
    for k, b in enumerate(branches):
        if len(b.invars) != len(avals):
            raise TypeError(f"cond: {len(avals)} operands for branch {k} with {len(b.invars)} inputs")
        for i, (a, v) in enumerate(zip(avals, b.invars)):
            if tuple(a.shape) != tuple(v.aval.shape) or a.dtype != v.aval.dtype:
                raise TypeError(f"cond: operand {i} has type {a.str_short()}, branch {k} expects "
                                f"{v.aval.str_short()}")
        if k:
            for i, (a, c) in enumerate(zip(branches[0].out_avals, b.out_avals)):
                if tuple(a.shape) != tuple(c.shape) or a.dtype != c.dtype:
                    raise TypeError(f"cond: output {i} of branch {k} has type {c.str_short()}, branch 0 "
                                    f"gives {a.str_short()}")
    return list(branches[0].out_avals)


def _cond_impl(index: np.ndarray, *args: np.ndarray, branches: tuple) -> list[np.ndarray]:
    i = int(np.clip(int(index), 0, len(branches) - 1))
    return [np.asarray(o) for o in cf.numpy_runner(branches[i])(list(args))]


def _cond_jvp(primals: list, tangents: list, *, branches: tuple) -> tuple[list, list]:
    nz = [not is_zero(t) for t in tangents[1:]]
    n_out = len(branches[0].outvars)
    out_nz = [False] * n_out
    for b in branches:
        out_nz = [a or c for a, c in zip(out_nz, cf.jvp_body(b, nz, [False] * n_out)[1])]
    jbranches = tuple(cf.jvp_body(b, nz, out_nz)[0] for b in branches)
    avals = branches[0].in_avals
    ts = [cf.instantiate_zero(t, a) for t, a, z in zip(tangents[1:], avals, nz) if z]
    outs = cond_p.bind(*primals, *ts, branches=jbranches)
    it = iter(outs[n_out:])
    touts = [next(it) if z else Zero(tangent_aval(core.get_aval(o))) for o, z in zip(outs[:n_out], out_nz)]
    return list(outs[:n_out]), touts


def _cond_partial_eval(trace: peval.PartialEvalTrace, tracers: list, *, branches: tuple) -> list:
    index, ops = tracers[0], tracers[1:]
    if not index.pval.is_known:
        ins = [trace.instantiate_const(t) for t in tracers]
        p = {"branches": branches}
        return trace.new_staged(cond_p, ins, p, cond_p.abstract([t.aval for t in ins], p))
    uk = [not t.pval.is_known for t in ops]
    n_out = len(branches[0].outvars)
    out_uk = [False] * n_out
    while True:
        new = list(out_uk)
        for b in branches:
            new = [a or c for a, c in zip(new, cf.partial_eval_body(b, uk, out_uk).out_unknown)]
        if new == out_uk:
            break
        out_uk = new
    pes = [cf.partial_eval_body(b, uk, out_uk) for b in branches]
    known_br, unknown_br = _split_branches(branches, pes, uk, out_uk)
    kvals = [t.pval.const for t in ops if t.pval.is_known]
    kouts = cond_p.bind(index.pval.const, *kvals, branches=known_br)
    n_kout = n_out - sum(out_uk)
    if not any(out_uk):
        return list(kouts)
    res = kouts[n_kout:]
    ins = [trace.instantiate_const(trace.full_raise(v)) for v in [index.pval.const, *res]]
    ins += [trace.instantiate_const(t) for t, u in zip(ops, uk) if u]
    p = {"branches": unknown_br}
    staged = trace.new_staged(cond_p, ins, p, cond_p.abstract([t.aval for t in ins], p))
    kit, uit = iter(kouts[:n_kout]), iter(staged)
    return [next(uit) if u else next(kit) for u in out_uk]


def _split_branches(branches: tuple, pes: list, uk: list[bool], out_uk: list[bool]) -> tuple[tuple, tuple]:
    """Known branches (known ops -> known outs + every branch's residual slots) and unknown ones
    (all residual slots + unknown ops -> unknown outs)."""
    key = ("cond-split", tuple(uk), tuple(out_uk))

    def build() -> tuple[tuple, tuple]:
        res_avals = [[v.aval for v in pe.unknown.invars[:pe.num_res]] for pe in pes]
        offsets = np.cumsum([0] + [len(r) for r in res_avals]).tolist()
        all_res = [a for r in res_avals for a in r]
        known_br, unknown_br = [], []
        for k, pe in enumerate(pes):
            def kf(*xs: Any, pe: Any = pe, k: int = k) -> list:
                outs = cf.run_program(pe.known, xs)
                mine = outs[pe.num_known_out:]
                slots = [cf.zeros(a) for a in all_res]
                slots[offsets[k]:offsets[k + 1]] = mine
                return [*outs[:pe.num_known_out], *slots]

            def uf(*xs: Any, pe: Any = pe, k: int = k) -> list:
                return cf.run_program(pe.unknown, [*xs[offsets[k]:offsets[k + 1]], *xs[len(all_res):]])

            known_br.append(cf.trace_internal(kf, [a for a, u in zip(branches[k].in_avals, uk) if not u]))
            unknown_br.append(cf.trace_internal(uf, [*all_res, *(a for a, u in zip(branches[k].in_avals, uk)
                                                                   if u)]))
        return tuple(known_br), tuple(unknown_br)

    return cf.derived(branches[0], key + tuple(branches), build)


def _cond_transpose(cts: list, index: Any, *args: Any, branches: tuple) -> list:
    if isinstance(index, UndefPrimal):  # pragma: no cover - integer indices are never linear
        raise TypeError("cond: the branch index cannot be linear")
    lin = [isinstance(a, UndefPrimal) for a in args]
    ct_nz = [not is_zero(c) for c in cts]
    out_av = branches[0].out_avals
    in_av = branches[0].in_avals

    def transpose_branch(b: Program) -> Program:
        def f(*xs: Any) -> list:
            res = iter(xs[:len(lin) - sum(lin)])
            cti = iter(xs[len(lin) - sum(lin):])
            b_args = [UndefPrimal(a) if lin_i else next(res) for a, lin_i in zip(in_av, lin)]
            cts_out = [next(cti) if z else Zero(tangent_aval(a)) for a, z in zip(out_av, ct_nz)]
            cts_in = ad.backward_pass(b, b.consts, b_args, cts_out)
            return [cf.instantiate_zero(c, a) for c, a, lin_i in zip(cts_in, in_av, lin) if lin_i]

        avals = [*(a for a, lin_i in zip(in_av, lin) if not lin_i),
                 *(tangent_aval(a) for a, z in zip(out_av, ct_nz) if z)]
        key = ("cond-transpose", tuple(lin), tuple(ct_nz))
        return cf.derived(b, key, lambda: cf.trace_internal(f, avals))

    bts = tuple(transpose_branch(b) for b in branches)
    res = [a for a, lin_i in zip(args, lin) if not lin_i]
    outs = iter(cond_p.bind(index, *res, *(c for c, z in zip(cts, ct_nz) if z), branches=bts))
    return [None, *(next(outs) if lin_i else None for lin_i in lin)]


def _cond_batch(vals: list, dims: list, *, branches: tuple) -> tuple[list, list]:
    size = next(core.get_aval(v).shape[d] for v, d in zip(vals, dims) if d is not None)
    index, ops = vals[0], [v if d is None else moveaxis(v, d, 0) for v, d in zip(vals[1:], dims[1:])]
    in_dims = [None if d is None else 0 for d in dims[1:]]
    n_out = len(branches[0].outvars)

    def batched(b: Program, inst: Any) -> tuple[Program, list]:
        key = ("cond-batch", tuple(in_dims), size, inst if isinstance(inst, bool) else tuple(inst))
        return cf.derived(b, key, lambda: batch_program(b, in_dims, size, instantiate=inst))

    if dims[0] is not None:  # a batched index: run every branch, select per example
        idx = moveaxis(index, dims[0], 0)
        outs_per = [cf.run_program(batched(b, True)[0], ops) for b in branches]
        res = []
        for j in range(n_out):
            cases = [o[j] for o in outs_per]
            shape = core.get_aval(cases[0]).shape
            which = broadcast_in_dim(idx, shape, (0,))
            res.append(select_n(which, *cases))
        return res, [0] * n_out
    out_b = [False] * n_out
    for b in branches:
        out_b = [a or d is not None for a, d in zip(out_b, batched(b, False)[1])]
    bb = tuple(batched(b, out_b)[0] for b in branches)
    outs = cond_p.bind(index, *ops, branches=bb)
    return list(outs), [0 if b else None for b in out_b]


cond_p.impl = _cond_impl
cond_p.abstract_eval = _cond_abstract
cond_p.jvp = _cond_jvp
cond_p.transpose = _cond_transpose
cond_p.batch = _cond_batch
peval.partial_eval_rules[cond_p] = _cond_partial_eval


# ---------------------------------------------------------------------------------------------
# Public functions
# ---------------------------------------------------------------------------------------------


def _trace_branches(funs: Sequence[Callable], operands: tuple, what: str, names: Sequence[str]) -> tuple:
    leaves, tree = tu.flatten(operands)
    paths = cf.leaf_paths(operands, "operands")
    avals = [cf.leaf_aval(x, p, what) for x, p in zip(leaves, paths)]

    def trace(fun: Callable, cast: list[ShapedArray] | None) -> tuple[Program, list, Any, list]:
        box: list = []

        def flat(*xs: Any) -> list:
            out = fun(*tu.unflatten(tree, xs))
            o_leaves, o_tree = tu.flatten(out)
            o_avals = [cf.leaf_aval(o, f"output leaf {i}", what) for i, o in enumerate(o_leaves)]
            box.append((o_tree, o_avals))
            if cast is not None:
                o_leaves = [o if (a.dtype, a.weak_type) == (c.dtype, c.weak_type) else
                            convert_element_type(o, c.dtype, weak_type=c.weak_type)
                            for o, a, c in zip(o_leaves, o_avals, cast)]
            return o_leaves

        prog, consts = cf.trace_user_fun(flat, avals)
        return prog, consts, box[0][0], box[0][1]

    traced = [trace(f, None) for f in funs]
    tree0, av0 = traced[0][2], traced[0][3]
    for k, (_, _, t, _) in enumerate(traced[1:], 1):
        if t != tree0:
            raise TypeError(f"{what}: branch outputs must have the same type structure, but {names[0]} gives "
                            f"{tree0} and {names[k]} gives {t}.")
    joined = []
    for j in range(len(av0)):
        col = [t[3][j] for t in traced]
        shapes = {tuple(a.shape) for a in col}
        if len(shapes) > 1 or (len({a.dtype for a in col}) > 1 and not any(a.weak_type for a in col)):
            desc = ", ".join(f"{names[k]} gives {a.str_short()}" for k, a in enumerate(col))
            raise TypeError(f"{what}: branch outputs must have identical types (shapes and dtypes), but "
                            f"output {j} differs: {desc}")
        joined.append(ShapedArray(col[0].shape, *dt.promote(*((a.dtype, a.weak_type) for a in col))))
    if any((a.dtype, a.weak_type) != (j.dtype, j.weak_type) for t in traced for a, j in zip(t[3], joined)):
        traced = [trace(f, joined) for f in funs]
    progs, consts = [t[0] for t in traced], [t[1] for t in traced]
    # every branch takes every branch's constants, then the operands
    c_avals = [[core.get_aval(c) for c in cs] for cs in consts]
    out = []
    for k, p in enumerate(progs):
        before = [a for cs in c_avals[:k] for a in cs]
        after = [a for cs in c_avals[k + 1:] for a in cs]
        p = cf.add_unused_inputs(p, before, 0)
        p = cf.add_unused_inputs(p, after, len(before) + len(c_avals[k]))
        out.append(p)
    all_consts = [c for cs in consts for c in cs]
    return tuple(out), all_consts, leaves, tree0


def _switch(index: Any, funs: Sequence[Callable], operands: tuple, what: str, names: Sequence[str]) -> Any:
    branches, consts, leaves, out_tree = _trace_branches(funs, operands, what, names)
    outs = cond_p.bind(index, *consts, *leaves, branches=branches)
    return tu.unflatten(out_tree, outs)


def switch(index: Any, branches: Sequence[Callable], *operands: Any) -> Any:
    """``branches[index](*operands)``, with ``index`` clamped into range, as ``jax.lax.switch``.

    Every branch is traced; their outputs must have the same structure, shapes and dtypes. Under
    ``vmap`` with a batched index every branch runs and the results are selected per example.
    """
    branches = list(branches)
    if not branches:
        raise ValueError("switch: empty branches")
    for i, b in enumerate(branches):
        if not callable(b):
            raise TypeError(f"switch: branches[{i}] is not callable: {b!r}")
    a = core.get_aval(index)
    if a.shape != ():
        raise TypeError(f"switch: branch index must be scalar, got {index!r} of shape {a.shape}.")
    if not dt.is_integer(a.dtype):
        raise TypeError(f"switch: index must be an integer scalar, got {a.str_short()}")
    if len(branches) == 1:
        return branches[0](*operands)
    idx = ew.convert_element_type(index, dt.int32)
    idx = ew.max(ew.min(idx, full_like(idx, len(branches) - 1)), full_like(idx, 0))
    return _switch(idx, branches, operands, "switch", [f"branch {i}" for i in range(len(branches))])


def cond(pred: Any, true_fun: Callable, false_fun: Callable, *operands: Any) -> Any:
    """``true_fun(*operands)`` if ``pred`` else ``false_fun(*operands)``, as ``jax.lax.cond``.

    ``pred`` is a boolean or numeric scalar (nonzero is true). Both branches are traced and must
    return the same structure, shapes and dtypes. Differentiable in both modes; under ``vmap``
    with a batched ``pred`` both branches run and ``select`` picks the results.
    """
    if not callable(true_fun) or not callable(false_fun):
        raise TypeError("cond: true_fun and false_fun arguments should be callable.")
    a = core.get_aval(pred)
    if a.shape != ():
        raise TypeError(f"cond: Pred must be a scalar, got {pred!r} of shape {a.shape}.")
    if a.dtype != dt.bool_ and not (dt.is_integer(a.dtype) or dt.is_inexact(a.dtype)):
        raise TypeError(f"cond: Pred type must be either boolean or number, got {a.dtype}.")
    if a.dtype != dt.bool_:
        pred = ew.ne(pred, full_like(pred, 0))
    idx = ew.convert_element_type(pred, dt.int32)
    return _switch(idx, [false_fun, true_fun], operands, "cond", ["false_fun", "true_fun"])
