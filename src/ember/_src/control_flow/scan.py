"""``scan``: a loop carrying state and stacking per-step outputs, as ``jax.lax.scan``.

``scan_p`` operands are ``[consts, init carries, xs]``; its ``body`` Program takes
``[consts, carries, x slices]`` and returns ``[new carries, y slices]``; the primitive returns
``[final carries, stacked ys]``. Params: ``body``, ``num_consts``, ``num_carry``, ``length`` (an
int or a named dynamic axis), ``reverse``, ``unroll`` (body copies per native loop iteration), ``checkpoint``
(reverse-mode policy, see below) and ``require_native``.

Rules (JAX's design):

* **JVP**: one scan over primal and tangent carries; which carries have nonzero tangents is a
  fixpoint over the body (a tangent that appears after one step stays).
* **Partial evaluation** (reverse mode = JVP + partial evaluation + transposition): the body is
  split into a known part (the primal computation) and an unknown part (the tangent map), with a
  fixpoint over which carries are unknown. The known part runs as one scan now; it returns the
  residuals the tangent map needs. Residuals computed from loop-invariant inputs only are
  computed once outside the loop; residuals that *are* an input slice ``x[i]`` are not copied
  (the staged scan reads ``xs``); the others are stacked per step. The unknown part is staged
  as a second scan over the residuals.
* **Checkpointing**: with ``checkpoint`` enabled (default: segments of ``ceil(sqrt(N))`` steps;
  an int sets the segment length; ``False`` stores every step), partial evaluation instead runs
  the known part as an outer scan over segments that stores only the carries at segment
  starts, and stages an outer scan whose body first *recomputes* the segment's residuals from the
  stored carry (a known inner scan) and then runs the tangent map over the segment. In the
  backward pass the transposed outer scan evaluates that recomputation forward and transposes the
  tangent map: memory is ``N / s`` carries plus one segment's residuals, for one extra forward.
* **Transpose**: the tangent map is linear in the carries, the tangent consts and the tangent
  xs; the transpose is a scan in the opposite direction whose carries are the carry cotangents
  and the accumulated cotangents of the linear consts, and whose per-step outputs are the
  cotangents of the linear xs.
* **Batching**: one scan over batched carries (fixpoint over which carries become batched);
  batched xs are mapped on their axis 1 (after the scan axis).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ember._src import ad, core
from ember._src import dtypes as dt
from ember._src import partial_eval as peval
from ember._src import shapes as sh
from ember._src import tree as tu
from ember._src.ad_util import UndefPrimal, Zero, is_zero, tangent_aval
from ember._src.batching import batch_program, matchaxis, moveaxis, vmap
from ember._src.control_flow import common as cf
from ember._src.core import Primitive, ShapedArray
from ember._src.prims.elementwise import add, convert_element_type
from ember._src.prims.movement import concatenate, reshape, slice_in_dim
from ember._src.program import Program

__all__ = ["map", "scan", "scan_p"]

scan_p = Primitive("scan", multiple_results=True)


def _split3(seq: Sequence, a: int, b: int) -> tuple[list, list, list]:
    seq = list(seq)
    return seq[:a], seq[a:a + b], seq[a + b:]


def _stacked(aval: ShapedArray, length: Any) -> ShapedArray:
    return ShapedArray((length, *aval.shape), aval.dtype, aval.weak_type)


def _unstacked(aval: ShapedArray) -> ShapedArray:
    return ShapedArray(aval.shape[1:], aval.dtype, aval.weak_type)


# ---------------------------------------------------------------------------------------------
# abstract evaluation and the reference implementation
# ---------------------------------------------------------------------------------------------


def _scan_abstract(*avals: ShapedArray, body: Program, num_consts: int, num_carry: int, length: Any,
                   **_: Any) -> list[ShapedArray]:
    if len(avals) != len(body.invars):
        raise TypeError(f"scan: {len(avals)} operands for a body with {len(body.invars)} inputs")
    nck = num_consts + num_carry
    for i, (a, v) in enumerate(zip(avals, body.invars)):
        b = v.aval
        want = tuple(b.shape) if i < nck else (length, *b.shape)
        if tuple(a.shape) != want or a.dtype != b.dtype:
            kind = "constant" if i < num_consts else "carry" if i < nck else "xs"
            raise TypeError(f"scan: {kind} operand {i} has type {a.str_short()}, the body expects "
                            f"{ShapedArray(want, b.dtype).str_short()}")
    outs = body.out_avals
    for i, (a, b) in enumerate(zip(outs[:num_carry], body.in_avals[num_consts:nck])):
        msg = cf.type_mismatch("carry output", f"carry input {i}", b, a)
        if msg:
            raise TypeError(f"scan: the body's {msg}")
    return [*outs[:num_carry], *(_stacked(a, length) for a in outs[num_carry:])]


def _scan_impl(*args: np.ndarray, body: Program, num_consts: int, num_carry: int, length: int,
               reverse: bool, **params: Any) -> list[np.ndarray]:
    cf.report_loop_path("scan", body, dict(params, length=length), cf.REFERENCE_LOOP,
                        "scan_p.impl calls the body from Python once per step")
    consts, carry, xs = _split3(args, num_consts, num_carry)
    run = cf.numpy_runner(body)
    length = int(length)
    ys = [np.empty((length, *(int(d) for d in a.shape)), a.dtype) for a in body.out_avals[num_carry:]]
    for k in range(length):
        i = length - 1 - k if reverse else k
        outs = run([*consts, *carry, *(x[i] for x in xs)])
        carry = outs[:num_carry]
        for buf, y in zip(ys, outs[num_carry:]):
            buf[i] = y
    return [*(np.asarray(c) for c in carry), *ys]


# ---------------------------------------------------------------------------------------------
# JVP
# ---------------------------------------------------------------------------------------------


def _scan_jvp(primals: list, tangents: list, **params: Any) -> tuple[list, list]:
    body, nc, nk = params["body"], params["num_consts"], params["num_carry"]
    ny = len(body.outvars) - nk
    nz = [not is_zero(t) for t in tangents]
    const_nz, carry_nz, xs_nz = _split3(nz, nc, nk)
    while True:
        jbody, out_nz = cf.jvp_body(body, const_nz + carry_nz + xs_nz, carry_nz + [False] * ny)
        new = [a or b for a, b in zip(carry_nz, out_nz[:nk])]
        if new == carry_nz:
            break
        carry_nz = new
    nzs = const_nz + carry_nz + xs_nz
    n_in = len(body.invars)
    # jbody inputs: [consts, carry, xs, tangents of nonzero ones]; outputs [carry, ys, nonzero tangents]
    t_pos = {}
    for i, z in enumerate(nzs):
        if z:
            t_pos[i] = n_in + len(t_pos)
    groups = [range(0, nc), range(nc, nc + nk), range(nc + nk, n_in)]
    in_perm = [j for g in groups for j in (*g, *(t_pos[i] for i in g if i in t_pos))]
    n_out = len(body.outvars)
    out_tpos = {}
    for i, z in enumerate(out_nz):
        if z:
            out_tpos[i] = n_out + len(out_tpos)
    out_groups = [range(0, nk), range(nk, n_out)]
    out_perm = [j for g in out_groups for j in (*g, *(out_tpos[i] for i in g if i in out_tpos))]
    jbody = cf.derived(jbody, ("scan-order", tuple(in_perm), tuple(out_perm)),
                       lambda: cf.reorder(jbody, in_perm, out_perm))
    avals = [v.aval for v in body.invars]
    ops = []
    for g in groups:
        for i in g:
            ops.append(primals[i])
        for i in g:
            if nzs[i]:
                a = avals[i] if i < nc + nk else _stacked(avals[i], params["length"])
                ops.append(cf.instantiate_zero(tangents[i], a))
    n_ct = sum(const_nz)
    n_kt = sum(carry_nz)
    outs = scan_p.bind(*ops, **dict(params, body=jbody, num_consts=nc + n_ct, num_carry=nk + n_kt))
    carry, carry_t = outs[:nk], iter(outs[nk:nk + n_kt])
    ys, ys_t = outs[nk + n_kt:nk + n_kt + ny], iter(outs[nk + n_kt + ny:])
    touts = [next(carry_t) if z else Zero(tangent_aval(core.get_aval(p))) for p, z in zip(carry, carry_nz)]
    touts += [next(ys_t) if z else Zero(tangent_aval(core.get_aval(p))) for p, z in zip(ys, out_nz[nk:])]
    return [*carry, *ys], touts


# ---------------------------------------------------------------------------------------------
# Partial evaluation (reverse mode), with checkpointed segments
# ---------------------------------------------------------------------------------------------


def segments(length: Any, checkpoint: Any) -> tuple[Any, Any, Any] | None:
    """``(segment length s, number of full segments n, remaining steps r)``, or ``None`` when every
    step's residuals are stored (``checkpoint=False``, tiny lengths).

    A symbolic (named-axis) length ``L`` gets symbolic sizes chosen per binding: ``s =
    ceil_sqrt(L)`` (or the given int), ``n = L // s``, ``r = L - n*s`` (``r`` and, for an int ``s >
    L``, ``n`` may be 0 under some bindings)."""
    if checkpoint is False or checkpoint is None:
        return None
    if isinstance(length, sh.DimExpr):
        s = sh.ceil_sqrt(length) if checkpoint is True else int(checkpoint)
        if s == 1:
            return None
        n = sh.floordiv(length, s)
        return s, n, length - n * s
    length = int(length)
    if checkpoint is True:
        if length < 4:
            return None
        s = math.isqrt(length - 1) + 1  # ceil(sqrt(length))
    else:
        s = int(checkpoint)
        if length < 2 or s < 1:
            return None
    s = min(s, length)
    n = length // s
    return s, n, length - n * s


def _is_zero_dim(d: Any) -> bool:
    return isinstance(d, (int, np.integer)) and int(d) == 0


def _inst(trace: peval.PartialEvalTrace, v: Any) -> Any:
    return trace.instantiate_const(trace.full_raise(v))


def _cut(x: Any, lo: int, hi: int) -> Any:
    if lo == 0 and hi == core.get_aval(x).shape[0]:
        return x
    return slice_in_dim(x, lo, hi, 1, 0)


def _fold(x: Any, n: int, s: int) -> Any:
    return reshape(x, (n, s, *core.get_aval(x).shape[1:]))


def _unfold(x: Any) -> Any:
    shape = core.get_aval(x).shape
    return reshape(x, (shape[0] * shape[1], *shape[2:]))


def _join(main: Any, rest: Any, reverse: bool) -> Any:
    main = _unfold(main)
    if rest is None:
        return main
    return concatenate([rest, main] if reverse else [main, rest], 0)


class _Split:
    """The known/unknown split of one scan (after the carry fixpoint), with residual bookkeeping."""

    def __init__(self, body: Program, nc: int, nk: int, in_uk: list[bool]):
        self.nc, self.nk = nc, nk
        self.ny = len(body.outvars) - nk
        const_uk, carry_uk, xs_uk = _split3(in_uk, nc, nk)
        self.in_uk = in_uk
        self.pe = pe = cf.partial_eval_body(body, in_uk, carry_uk + [False] * self.ny)
        self.n_kc = nc - sum(const_uk)
        self.n_kk = nk - sum(carry_uk)
        self.n_kx = len(xs_uk) - sum(xs_uk)
        self.n_uc, self.n_ukk, self.n_ux = sum(const_uk), sum(carry_uk), sum(xs_uk)
        self.n_kout = pe.num_known_out
        self.n_ky = self.n_kout - self.n_kk
        self.kinds = cf.classify_residuals(pe, self.n_kc, self.n_kc + self.n_kk)
        self.step = [k[0] == "step" for k in self.kinds]
        self.fwd = [k[1] - self.n_kc - self.n_kk for k in self.kinds if k[0] == "forward"]
        kinds = self.kinds
        inv = [j for j, k in enumerate(kinds) if k[0] == "invariant"]
        fw = [j for j, k in enumerate(kinds) if k[0] == "forward"]
        st = [j for j, k in enumerate(kinds) if k[0] == "step"]
        self.n_inv = len(inv)
        r = pe.num_res
        perm = inv + list(range(r, r + self.n_uc + self.n_ukk + self.n_ux)) + fw + st
        # the staged scan's body: [inv res, unknown consts] [unknown carries] [unknown xs, fwd, step res]
        self.staged_body = cf.derived(pe.unknown, ("scan-staged", tuple(perm)),
                                      lambda: cf.reorder(pe.unknown, perm))
        keep = [True] * self.n_kout
        self.known_body = cf.derived(pe.known, ("scan-known", tuple(self.step)),
                                     lambda: cf.select_outputs(pe.known, keep + self.step))
        self.known_fwd = cf.derived(pe.known, ("scan-known-fwd",),
                                    lambda: cf.select_outputs(pe.known, keep + [False] * r))
        self.known_res = cf.derived(pe.known, ("scan-known-res", tuple(self.step)),
                                    lambda: cf.select_outputs(pe.known, [True] * self.n_kk +
                                                              [False] * self.n_ky + self.step))


def _scan_partial_eval(trace: peval.PartialEvalTrace, tracers: list, **params: Any) -> list:
    body, nc, nk = params["body"], params["num_consts"], params["num_carry"]
    length, reverse = params["length"], params["reverse"]
    ny = len(body.outvars) - nk
    uk = [not t.pval.is_known for t in tracers]
    const_uk, carry_uk, xs_uk = _split3(uk, nc, nk)
    while True:
        pe = cf.partial_eval_body(body, const_uk + carry_uk + xs_uk, carry_uk + [False] * ny)
        new = [a or b for a, b in zip(carry_uk, pe.out_unknown[:nk])]
        if new == carry_uk:
            break
        carry_uk = new
    in_uk = const_uk + carry_uk + xs_uk
    sp = _Split(body, nc, nk, in_uk)
    known_in = [t.pval.const for t, u in zip(tracers, in_uk) if not u]
    kc, kk, kx = _split3(known_in, sp.n_kc, sp.n_kk)
    unk = [t for t, u in zip(tracers, in_uk) if u]
    uc, ukk, ux = _split3(unk, sp.n_uc, sp.n_ukk)
    out_uk = sp.pe.out_unknown
    seg = segments(length, params["checkpoint"]) if any(out_uk) else None

    def bind(ops: list, body: Program, n_consts: int, n_carry: int, steps: Any) -> list:
        return scan_p.bind(*ops, **dict(params, body=body, num_consts=n_consts, num_carry=n_carry,
                                        length=steps))

    def stage(ops: list, body: Program, n_consts: int, n_carry: int, steps: Any) -> list:
        ins = [_inst(trace, v) for v in ops]
        p = dict(params, body=body, num_consts=n_consts, num_carry=n_carry, length=steps)
        return trace.new_staged(scan_p, ins, p, scan_p.abstract([t.aval for t in ins], p))

    if not any(out_uk):
        outs = bind([*kc, *kk, *kx], sp.known_fwd, sp.n_kc, sp.n_kk, length)
        return list(outs)
    inv = cf.invariant_values(sp.pe, sp.kinds, kc)
    n_uconsts = sp.n_inv + sp.n_uc
    if seg is None:
        ko = bind([*kc, *kk, *kx], sp.known_body, sp.n_kc, sp.n_kk, length)
        k_carry, k_ys, stacked = ko[:sp.n_kk], ko[sp.n_kk:sp.n_kout], ko[sp.n_kout:]
        fwd = [kx[i] for i in sp.fwd]
        uo = stage([*inv, *uc, *ukk, *ux, *fwd, *stacked], sp.staged_body, n_uconsts, sp.n_ukk, length)
        u_carry, u_ys = uo[:sp.n_ukk], uo[sp.n_ukk:]
    else:
        s, n, r = seg
        main = (0, n * s) if not reverse else (r, length)
        rest = (n * s, length) if not reverse else (0, r)
        # known: an outer scan over segments keeps the carries at segment starts
        kx_main = [_fold(_cut(x, *main), n, s) for x in kx]
        outer_known = _outer_known_body(sp, params, s)
        ko = bind([*kc, *kk, *kx_main], outer_known, sp.n_kc, sp.n_kk, n)
        k_mid, kys_main, bounds = ko[:sp.n_kk], ko[sp.n_kk:sp.n_kout], ko[sp.n_kout:]
        if not _is_zero_dim(r):
            kx_rest = [_cut(x, *rest) for x in kx]
            ko2 = bind([*kc, *k_mid, *kx_rest], sp.known_body, sp.n_kc, sp.n_kk, r)
            k_carry, kys_rest, stacked_rest = ko2[:sp.n_kk], ko2[sp.n_kk:sp.n_kout], ko2[sp.n_kout:]
        else:
            k_carry, kys_rest = k_mid, [None] * sp.n_ky
        k_ys = [_join(m, rr, reverse) for m, rr in zip(kys_main, kys_rest)]
        # unknown: an outer scan over segments recomputes each segment's residuals, then runs
        # the tangent map over it
        outer_staged = _outer_staged_body(sp, params, s)
        ux_main = [_fold(_cut(x, *main), n, s) for x in ux]
        uo = stage([*inv, *uc, *kc, *ukk, *ux_main, *bounds, *kx_main], outer_staged,
                   n_uconsts + sp.n_kc, sp.n_ukk, n)
        u_mid, uys_main = uo[:sp.n_ukk], uo[sp.n_ukk:]
        if not _is_zero_dim(r):
            ux_rest = [_cut(x, *rest) for x in ux]
            fwd = [kx_rest[i] for i in sp.fwd]
            uo2 = stage([*inv, *uc, *u_mid, *ux_rest, *fwd, *stacked_rest], sp.staged_body, n_uconsts,
                        sp.n_ukk, r)
            u_carry, uys_rest = uo2[:sp.n_ukk], uo2[sp.n_ukk:]
        else:
            u_carry, uys_rest = u_mid, [None] * len(uys_main)
        u_ys = [_join(m, rr, reverse) for m, rr in zip(uys_main, uys_rest)]
    kit, uit = iter([*k_carry, *k_ys]), iter([*u_carry, *u_ys])
    return [next(uit) if u else next(kit) for u in out_uk]


def _outer_known_body(sp: _Split, params: dict, s: int) -> Program:
    """Body of the known outer scan: runs one segment, also returns the segment's start carries."""

    def build() -> Program:
        k = sp.known_fwd
        c_av, k_av, x_av = _split3(k.in_avals, sp.n_kc, sp.n_kk)

        def f(*args: Any) -> list:
            c, kk, x = _split3(args, sp.n_kc, sp.n_kk)
            o = scan_p.bind(*c, *kk, *x, **dict(params, body=k, num_consts=sp.n_kc, num_carry=sp.n_kk,
                                                length=s))
            return [*o, *kk]

        return cf.trace_internal(f, [*c_av, *k_av, *(_stacked(a, s) for a in x_av)])

    return cf.derived(sp.known_fwd, ("scan-outer-known", s, _pkey(params)), build)


def _outer_staged_body(sp: _Split, params: dict, s: int) -> Program:
    """Body of the staged outer scan: recompute one segment's residuals, then its tangent map."""

    def build() -> Program:
        kr, u = sp.known_res, sp.staged_body
        kc_av, kk_av, kx_av = _split3(kr.in_avals, sp.n_kc, sp.n_kk)
        n_uconsts = sp.n_inv + sp.n_uc
        u_consts_av = u.in_avals[:n_uconsts]
        ukk_av = u.in_avals[n_uconsts:n_uconsts + sp.n_ukk]
        ux_av = u.in_avals[n_uconsts + sp.n_ukk:n_uconsts + sp.n_ukk + sp.n_ux]
        in_avals = [*u_consts_av, *kc_av, *ukk_av, *(_stacked(a, s) for a in ux_av), *kk_av,
                    *(_stacked(a, s) for a in kx_av)]
        sizes = [n_uconsts, sp.n_kc, sp.n_ukk, sp.n_ux, sp.n_kk, sp.n_kx]

        def f(*args: Any) -> list:
            parts, i = [], 0
            for n in sizes:
                parts.append(list(args[i:i + n]))
                i += n
            ucs, kcs, ukk, ux, bounds, kx = parts
            ro = scan_p.bind(*kcs, *bounds, *kx, **dict(params, body=kr, num_consts=sp.n_kc,
                                                        num_carry=sp.n_kk, length=s))
            stacked = ro[sp.n_kk:]
            fwd = [kx[i] for i in sp.fwd]
            return scan_p.bind(*ucs, *ukk, *ux, *fwd, *stacked,
                               **dict(params, body=u, num_consts=n_uconsts, num_carry=sp.n_ukk, length=s))

        return cf.trace_internal(f, in_avals)

    return cf.derived(sp.staged_body, ("scan-outer-staged", s, _pkey(params)), build)


def _pkey(params: dict) -> tuple:
    return tuple((k, v) for k, v in sorted(params.items()) if k not in ("body", "num_consts", "num_carry",
                                                                      "length"))


# ---------------------------------------------------------------------------------------------
# Transpose
# ---------------------------------------------------------------------------------------------


def _scan_transpose(cts: list, *args: Any, **params: Any) -> list:
    body, nc, nk = params["body"], params["num_consts"], params["num_carry"]
    length, reverse = params["length"], params["reverse"]
    consts, init, xs = _split3(args, nc, nk)
    const_lin = [isinstance(a, UndefPrimal) for a in consts]
    xs_lin = [isinstance(a, UndefPrimal) for a in xs]
    ct_carry, ct_ys = cts[:nk], cts[nk:]
    ys_nz = [not is_zero(c) for c in ct_ys]
    avals = body.in_avals
    c_av, k_av, x_av = _split3(avals, nc, nk)
    lin_c_av = [a for a, lin in zip(c_av, const_lin) if lin]
    bt = cf.derived(body, ("scan-transpose", tuple(const_lin), tuple(xs_lin), tuple(ys_nz)),
                    lambda: _transpose_body(body, nc, nk, const_lin, xs_lin, ys_nz))
    res_c = [c for c, lin in zip(consts, const_lin) if not lin]
    res_x = [x for x, lin in zip(xs, xs_lin) if not lin]
    acc0 = [cf.zeros(tangent_aval(a)) for a in lin_c_av]
    ct_k = [cf.instantiate_zero(c, a) for c, a in zip(ct_carry, k_av)]
    ct_y = [c for c, z in zip(ct_ys, ys_nz) if z]
    n_lc = len(acc0)
    outs = scan_p.bind(*res_c, *acc0, *ct_k, *ct_y, *res_x,
                       **dict(params, body=bt, num_consts=len(res_c), num_carry=n_lc + nk,
                              reverse=not reverse, length=length))
    ct_consts, ct_init, ct_xs = iter(outs[:n_lc]), outs[n_lc:n_lc + nk], iter(outs[n_lc + nk:])
    res = [next(ct_consts) if lin else None for lin in const_lin]
    res += [c if isinstance(a, UndefPrimal) else None for c, a in zip(ct_init, init)]
    res += [next(ct_xs) if lin else None for lin in xs_lin]
    return res


def _transpose_body(body: Program, nc: int, nk: int, const_lin: list[bool], xs_lin: list[bool],
                    ys_nz: list[bool]) -> Program:
    """``[res consts] [ct acc of linear consts, ct carries] [ct ys (nonzero), res xs]`` ->
    ``[new ct acc, ct carries] [ct of linear xs]``."""
    c_av, k_av, x_av = _split3(body.in_avals, nc, nk)
    y_av = body.out_avals[nk:]
    n_rc = len(const_lin) - sum(const_lin)
    n_lc = sum(const_lin)
    n_y = sum(ys_nz)
    in_avals = [*(a for a, lin in zip(c_av, const_lin) if not lin),
                *(tangent_aval(a) for a, lin in zip(c_av, const_lin) if lin),
                *(tangent_aval(a) for a in k_av),
                *(tangent_aval(a) for a, z in zip(y_av, ys_nz) if z),
                *(a for a, lin in zip(x_av, xs_lin) if not lin)]

    def f(*args: Any) -> list:
        rc = iter(args[:n_rc])
        acc = args[n_rc:n_rc + n_lc]
        ctk = args[n_rc + n_lc:n_rc + n_lc + nk]
        cty = iter(args[n_rc + n_lc + nk:n_rc + n_lc + nk + n_y])
        rx = iter(args[n_rc + n_lc + nk + n_y:])
        b_args = [UndefPrimal(a) if lin else next(rc) for a, lin in zip(c_av, const_lin)]
        b_args += [UndefPrimal(a) for a in k_av]
        b_args += [UndefPrimal(a) if lin else next(rx) for a, lin in zip(x_av, xs_lin)]
        cts_out = [*ctk, *(next(cty) if z else Zero(tangent_aval(a)) for a, z in zip(y_av, ys_nz))]
        cts_in = ad.backward_pass(body, body.consts, b_args, cts_out)
        cc, ck, cx = _split3(cts_in, nc, nk)
        lin_cc = [c for c, lin in zip(cc, const_lin) if lin]
        new_acc = [a if is_zero(c) else add(a, c) for a, c in zip(acc, lin_cc)]
        new_k = [cf.instantiate_zero(c, a) for c, a in zip(ck, k_av)]
        new_x = [cf.instantiate_zero(c, a) for c, a, lin in zip(cx, x_av, xs_lin) if lin]
        return [*new_acc, *new_k, *new_x]

    return cf.trace_internal(f, in_avals)


# ---------------------------------------------------------------------------------------------
# Batching
# ---------------------------------------------------------------------------------------------


def _scan_batch(vals: list, dims: list, **params: Any) -> tuple[list, list]:
    body, nc, nk = params["body"], params["num_consts"], params["num_carry"]
    ny = len(body.outvars) - nk
    size = next(core.get_aval(v).shape[d] for v, d in zip(vals, dims) if d is not None)
    const_b, carry_b, xs_b = _split3([d is not None for d in dims], nc, nk)
    while True:
        in_dims = [0 if b else None for b in const_b + carry_b + xs_b]
        key = ("batch", tuple(in_dims), size, tuple(carry_b))
        bbody, out_dims = cf.derived(body, key, lambda d=in_dims, b=carry_b: batch_program(
            body, d, size, instantiate=b + [False] * ny))
        new = [a or d is not None for a, d in zip(carry_b, out_dims[:nk])]
        if new == carry_b:
            break
        carry_b = new
    ops = []
    for i, (v, d) in enumerate(zip(vals, dims)):
        if i < nc:
            ops.append(v if d is None else moveaxis(v, d, 0))
        elif i < nc + nk:
            ops.append(matchaxis(v, d, 0 if carry_b[i - nc] else None, size))
        else:
            ops.append(v if d is None else moveaxis(v, d, 1))
    outs = scan_p.bind(*ops, **dict(params, body=bbody))
    out_bdims = [0 if b else None for b in carry_b] + [None if d is None else 1 for d in out_dims[nk:]]
    return list(outs), out_bdims


scan_p.impl = _scan_impl
scan_p.abstract_eval = _scan_abstract
scan_p.jvp = _scan_jvp
scan_p.transpose = _scan_transpose
scan_p.batch = _scan_batch
peval.partial_eval_rules[scan_p] = _scan_partial_eval


# ---------------------------------------------------------------------------------------------
# The public scan
# ---------------------------------------------------------------------------------------------

def _check_length(xs: Any, x_leaves: list, length: Any) -> Any:
    paths = cf.leaf_paths(xs, "xs")
    sizes = []
    for path, x in zip(paths, x_leaves):
        a = cf.leaf_aval(x, path, "scan")
        if a.ndim == 0:
            raise ValueError(f"scan got a value with no leading axis to scan over: {path} of type "
                             f"{a.str_short()}")
        sizes.append((a.shape[0], path, a))
    if length is not None:
        if isinstance(length, bool) or not isinstance(length, (int, np.integer, sh.DimExpr)):
            raise TypeError(f"scan: length must be an int, got {length!r}")
        length = sh.canonical_dim(length)
        if isinstance(length, int) and length < 0:
            raise ValueError(f"scan: length must be non-negative, got {length}")
        bad = [(n, p, a) for n, p, a in sizes if n != length]
        if bad:
            n, p, a = bad[0]
            raise ValueError(f"scan got `length` argument of {length} which disagrees with leading axis "
                             f"sizes {[s for s, _, _ in sizes]} ({p} has type {a.str_short()})")
        return length
    if not sizes:
        raise ValueError("scan got no values to scan over and `length` not provided.")
    first = sizes[0][0]
    if any(n != first for n, _, _ in sizes):
        lines = [f"  * {p} has type {a.str_short()} (leading axis {sh.dim_str(n)})" for n, p, a in sizes]
        raise ValueError("scan got values with different leading axis sizes:\n" + "\n".join(lines))
    return first


def _normalize_checkpoint(checkpoint: Any) -> Any:
    if checkpoint is None or checkpoint is True:
        return True
    if checkpoint is False:
        return False
    if isinstance(checkpoint, (int, np.integer)) and checkpoint >= 1:
        return int(checkpoint)
    raise ValueError(f"scan: checkpoint must be True, False or a positive segment length, got {checkpoint!r}")


def scan(f: Callable, init: Any, xs: Any = None, length: int | None = None, reverse: bool = False,
         unroll: int | bool = 1, checkpoint: bool | int = True, require_native: bool | None = None,
         _split_transpose: bool = False) -> tuple[Any, Any]:
    """Scan ``f`` over leading array axes while carrying along state, as ``jax.lax.scan``.

    Semantically::

        def scan(f, init, xs, length=None):
            if xs is None:
                xs = [None] * length
            carry = init
            ys = []
            for x in xs:
                carry, y = f(carry, x)
                ys.append(y)
            return carry, np.stack(ys)

    ``init`` and ``xs`` are pytrees of arrays; ``f(carry, x)`` returns ``(new_carry, y)`` where
    ``new_carry`` has the structure, shapes and dtypes of ``init`` (a ``TypeError`` names the
    mismatched leaf otherwise) and ``y`` is a pytree (``None`` to stack nothing). ``xs=None``
    needs ``length``. ``reverse=True`` runs from the end (outputs stay in index order).
    ``unroll`` (a positive int; ``True`` means fully, recorded as ``-1``): the native backend runs
    that many body copies per loop iteration (``True``: a static scan of up to 32 steps
    completely); the reference loop ignores it.

    ``checkpoint`` sets what reverse-mode differentiation stores: ``True`` (default) stores the
    carries at the starts of about ``sqrt(length)`` segments and recomputes each segment in the
    backward pass; ``False`` stores every step's residuals; an int sets the segment length.
    Gradients are the same either way.

    ``require_native=True`` makes the scan raise :class:`NativeLoopError` where it would not run
    as a native loop (on the reference backend: always). How each scan runs is logged by
    ``ember.set_debug(1)``.
    """
    del _split_transpose
    if not callable(f):
        raise TypeError("scan: f argument should be a callable.")
    x_leaves, x_tree = tu.flatten(xs)
    length = _check_length(xs, x_leaves, length)
    init_leaves, init_tree = tu.flatten(init)
    init_paths = cf.leaf_paths(init, "init")
    carry_avals = [cf.leaf_aval(x, p, "scan") for x, p in zip(init_leaves, init_paths)]
    x_avals = [_unstacked(core.get_aval(x)) for x in x_leaves]
    nk = len(init_leaves)
    fname = getattr(f, "__name__", "f")

    def trace(c_avals: list[ShapedArray]) -> tuple[Program, list, list, Any]:
        box: dict = {}

        def flat(*args: Any) -> list:
            carry = tu.unflatten(init_tree, args[:nk])
            x = tu.unflatten(x_tree, args[nk:])
            res = f(carry, x)
            if not (isinstance(res, (tuple, list)) and len(res) == 2):
                raise TypeError(f"scan body function {fname} must return a pair (carry, y), got "
                                f"{type(res).__name__}")
            new_carry, y = res
            c_leaves, c_tree = tu.flatten(new_carry)
            if c_tree != init_tree:
                raise TypeError("scan body function carry input and carry output must have the same pytree "
                                f"structure, but they differ:\n  the input carry is {init_tree}\n  the "
                                f"output carry is {c_tree}")
            y_leaves, y_tree = tu.flatten(y)
            for i, leaf in enumerate([*c_leaves, *y_leaves]):
                try:
                    core.get_aval(leaf)
                except TypeError:
                    what = f"carry leaf {i}" if i < nk else f"output leaf {i - nk}"
                    raise TypeError(f"scan body function {fname} returned a {type(leaf).__name__} as "
                                    f"{what}, which is not an array") from None
            box["y_tree"] = y_tree
            box["c_avals"] = [core.get_aval(c) for c in c_leaves]
            return [*(cf.match_aval(c, a) for c, a in zip(c_leaves, c_avals)), *y_leaves]

        prog, consts = cf.trace_user_fun(flat, [*c_avals, *x_avals])
        return prog, consts, box["c_avals"], box["y_tree"]

    prog, consts, out_avals, y_tree = trace(carry_avals)
    weak = [i for i, (a, b) in enumerate(zip(carry_avals, out_avals)) if a.weak_type and a.shape == b.shape
            and (a.dtype, a.weak_type) != (b.dtype, b.weak_type)]
    if weak:  # weakly typed init (a Python scalar): promote it to the body's output dtype, retrace
        for i in weak:
            new = dt.promote((carry_avals[i].dtype, True), (out_avals[i].dtype, out_avals[i].weak_type))
            init_leaves[i] = convert_element_type(init_leaves[i], new[0], weak_type=new[1])
            carry_avals[i] = core.get_aval(init_leaves[i])
        prog, consts, out_avals, y_tree = trace(carry_avals)
    msgs = [cf.type_mismatch("output carry component", f"the input carry component {p}", a, b)
            for p, a, b in zip(init_paths, carry_avals, out_avals)]
    msgs = [m for m in msgs if m]
    if msgs:
        raise TypeError("scan body function carry input and carry output must have equal types (e.g. shapes "
                        "and dtypes of arrays), but they differ:\n" + "\n".join(f"  * {m}" for m in msgs)
                        + "\nThis might be fixed by changing the initial value given to scan (e.g. its dtype "
                        "or shape) or by converting the carry output of the body.")
    req = cf.require_native_default(require_native)
    if isinstance(unroll, bool):
        unroll = -1 if unroll else 1
    elif not isinstance(unroll, (int, np.integer)) or unroll < 1:
        raise TypeError(f"scan: unroll must be a positive int or a bool, got {unroll!r}")
    outs = scan_p.bind(*consts, *init_leaves, *x_leaves, body=prog, num_consts=len(consts), num_carry=nk,
                       length=length, reverse=bool(reverse), unroll=int(unroll),
                       checkpoint=_normalize_checkpoint(checkpoint), require_native=req)
    return tu.unflatten(init_tree, outs[:nk]), tu.unflatten(y_tree, outs[nk:])


def map(f: Callable, xs: Any, *, batch_size: int | None = None) -> Any:  # noqa: A001 - JAX's name
    """``f`` applied to each slice of the leading axis of ``xs`` (a pytree), stacked, as
    ``jax.lax.map``: a scan without carry. ``batch_size`` maps ``vmap(f)`` over batches of that
    many slices (the remainder is one more vmapped call)."""
    if batch_size is None:
        return scan(lambda _, x: ((), f(x)), (), xs)[1]
    leaves, tree = tu.flatten(xs)
    if not leaves:
        raise ValueError("lax.map: xs has no arrays")
    n = core.get_aval(leaves[0]).shape[0]
    b = int(batch_size)
    if b < 1:
        raise ValueError(f"lax.map: batch_size must be positive, got {batch_size}")
    nb, r = divmod(n, b)
    main = [reshape(slice_in_dim(x, 0, nb * b, 1, 0), (nb, b, *core.get_aval(x).shape[1:])) for x in leaves]
    ys = scan(lambda _, x: ((), vmap(f)(x)), (), tu.unflatten(tree, main))[1]
    ys = tu.tree_map(lambda y: reshape(y, (nb * b, *core.get_aval(y).shape[2:])), ys)
    if r:
        tail = vmap(f)(tu.unflatten(tree, [slice_in_dim(x, nb * b, n, 1, 0) for x in leaves]))
        ys = tu.tree_map(lambda a, c: concatenate([a, c], 0), ys, tail)
    return ys
