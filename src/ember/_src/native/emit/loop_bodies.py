"""C emission of native loops (:mod:`ember._src.native.scheduling.loops` decides and lays them
out): each body becomes a ``static inline`` function of the translation unit, and a ``loop`` /
``cond`` step becomes the C loop or ``switch`` that calls it (see the scheduling module's docstring
for the carry slots, the scan's two steps per iteration, ``while`` and ``cond``). Matrix products in
bodies with at most :data:`.gemm_strategy.SMALL_GEMM_FLOPS` multiply-adds are inlined C loops
(:func:`small_gemm`)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from ember._src.native import abi
from ember._src.native.base import prim_refs as pr
from ember._src.native.base import symdims as sd
from ember._src.native.base.gemm_sizes import SMALL_GEMM_FLOPS
from ember._src.native.emit import support
from ember._src.native.emit.c_ops import ctype, literal
from ember._src.native.emit.context import CodegenOptions, EmitContext, Generated
from ember._src.native.emit.gemm import gemm_fn
from ember._src.native.emit.pooled import axis_decls, body_context
from ember._src.native.plan import scratch
from ember._src.native.plan.planner import EXTERNAL_IN, EXTERNAL_OUT, PARAMS, Buffer
from ember._src.native.scheduling.gemm_strategy import gemm_dims
from ember._src.native.scheduling.loops import Body, LoopLowering, aval_nbytes, maybe_nonzero, unroll_factor
from ember._src.native.scheduling.schedule import Step
from ember._src.program import Atom, Eqn, Literal


def _poll_break() -> str:
    """The first statement of every iteration of a scan/while loop: Ctrl-C stops the loop
    (:mod:`.interrupt`)."""
    return f"if ({support.poll()}) break;"


# ---------------------------------------------------------------------------------------------
# C emission
# ---------------------------------------------------------------------------------------------


class _BodyCtx(EmitContext):
    """Buffer addresses inside a body function: inputs/outputs are its pointer parameters,
    constants come from ``fns``, intermediates from its own ``arena``."""

    in_body = True

    def __init__(self, body: Body):
        super().__init__(body.plan, len(body.program.invars), len(body.program.constvars))
        self.body = body

    def base(self, b: Buffer) -> str:
        if b.cls == EXTERNAL_IN:
            return f"in{b.index}"
        if b.cls == PARAMS:
            return f"((char *)fns[{self.body.const_slots[b.index]}])"
        if b.cls == EXTERNAL_OUT:
            i = self.body.inplace.get(b.index)
            return f"out{b.index}" if i is None else f"in{i}"
        return f"(arena + {b.offset})"

    def inline_gemm(self, step: Step, has_c: bool, alpha: float, beta: float) -> list[str]:
        return small_gemm(step, self, has_c, alpha, beta)


def small_gemm(step: Step, ctx: EmitContext, has_c: bool, alpha: float, beta: float) -> list[str]:
    """C loops for a float ``gemm`` with at most :data:`.gemm_strategy.SMALL_GEMM_FLOPS`
    multiply-adds (a matrix-vector product or rank-1 update of an RNN step; the strategy's
    ``INLINE`` route, :func:`.gemm_strategy.inline_fits`). Forms: a
    matrix times a vector as dot products over four rows at a time (four independent vector
    accumulators); with ``B`` not transposed, rows of ``C`` accumulated as ``a_ip * B[p, :]``
    (vectorized over ``j``); else one dot product per element. ``C = alpha AB (+ beta C)``.

    With symbolic extents (named dynamic axes) the choice is made at run time: the C loops when
    the product has at most :data:`SMALL_GEMM_FLOPS` multiply-adds for the binding, else BLAS."""
    e = step.eqns[0]
    out = step.outputs[0]
    dt = np.dtype(out.aval.dtype)
    nb, m, n, k = gemm_dims(step)
    flops = nb * m * n * k
    ta, tb = bool(e.params["trans_a"]), bool(e.params["trans_b"])
    t = ctype(dt)
    fma = "EM_FMAF" if dt == np.float32 else "EM_FMA"
    al, be = literal(alpha, dt), literal(beta, dt)

    def store(target: str, val: str) -> str:
        v = val if alpha == 1.0 else f"{al} * {val}"
        if has_c and beta != 0.0:
            return f"{target} = {v} + {target};" if beta == 1.0 else f"{target} = {v} + {be} * {target};"
        return f"{target} = {v};"

    def aix(i: str, p: str) -> str:
        return f"{p} * {m} + {i}" if ta else f"{i} * {k} + {p}"

    mk, kn, mn = sd.cdim(m * k), sd.cdim(k * n), sd.cdim(m * n)
    acc_n = 1 if sd.is_sym(n) else max(n, 1)
    nb, m, n, k = (sd.cdim(x) for x in (nb, m, n, k))
    lines = [f"for (int64_t bb_ = 0; bb_ < {nb}; ++bb_) {{",
             f"    const {t} *restrict A_ = {ctx.ptr(e.inputs[0])} + bb_ * {mk};",
             f"    const {t} *restrict B_ = {ctx.ptr(e.inputs[1])} + bb_ * {kn};",
             f"    {t} *restrict C_ = {ctx.ptr(out)} + bb_ * {mn};"]
    if n == "1" and not ta:
        lines += ["    int64_t i_ = 0;",
                  f"    for (; i_ + 4 <= {m}; i_ += 4) {{",
                  f"        {t} s0 = 0, s1 = 0, s2 = 0, s3 = 0;",
                  "        #pragma omp simd reduction(+:s0,s1,s2,s3)",
                  f"        for (int64_t p_ = 0; p_ < {k}; ++p_) {{",
                  f"            const {t} b_ = B_[p_];",
                  *(f"            s{r} = {fma}(A_[(i_ + {r}) * {k} + p_], b_, s{r});" for r in range(4)),
                  "        }",
                  *(f"        {store(f'C_[i_ + {r}]', f's{r}')}" for r in range(4)),
                  "    }",
                  f"    for (; i_ < {m}; ++i_) {{",
                  f"        {t} s = 0;",
                  "        #pragma omp simd reduction(+:s)",
                  f"        for (int64_t p_ = 0; p_ < {k}; ++p_) s = {fma}(A_[i_ * {k} + p_], B_[p_], s);",
                  f"        {store('C_[i_]', 's')}",
                  "    }"]
    elif not tb:
        lines += [f"    for (int64_t i_ = 0; i_ < {m}; ++i_) {{",
                  f"        {t} acc_[{acc_n}];",
                  "        #pragma omp simd",
                  f"        for (int64_t j_ = 0; j_ < {n}; ++j_) acc_[j_] = 0;",
                  f"        for (int64_t p_ = 0; p_ < {k}; ++p_) {{",
                  f"            const {t} a_ = A_[{aix('i_', 'p_')}];",
                  "            #pragma omp simd",
                  f"            for (int64_t j_ = 0; j_ < {n}; ++j_)",
                  f"                acc_[j_] = {fma}(a_, B_[p_ * {n} + j_], acc_[j_]);",
                  "        }",
                  "        #pragma omp simd",
                  f"        for (int64_t j_ = 0; j_ < {n}; ++j_) {store(f'C_[i_ * {n} + j_]', 'acc_[j_]')}",
                  "    }"]
    else:
        lines += [f"    for (int64_t i_ = 0; i_ < {m}; ++i_)",
                  f"    for (int64_t j_ = 0; j_ < {n}; ++j_) {{",
                  f"        {t} s = 0;",
                  "        #pragma omp simd reduction(+:s)",
                  f"        for (int64_t p_ = 0; p_ < {k}; ++p_)",
                  f"            s = {fma}(A_[{aix('i_', 'p_')}], B_[j_ * {k} + p_], s);",
                  f"        {store(f'C_[i_ * {n} + j_]', 's')}",
                  "    }"]
    lines.append("}")
    if sd.is_sym(flops):  # per binding: these loops for small products, BLAS for the others
        name = gemm_fn(dt)
        blas_call = (f"{name}(fns, {int(ta)}, {int(tb)}, {nb}, {m}, {n}, {k}, {al}, "
                     f"{literal(beta if has_c else 0.0, dt)}, {ctx.ptr(e.inputs[0])}, "
                     f"{ctx.ptr(e.inputs[1])}, {ctx.ptr(out)});")
        lines = [f"if ({sd.cdim(flops)} <= {SMALL_GEMM_FLOPS}) {{", *("    " + ln for ln in lines),
                 "} else {", "    " + blas_call, "}"]
    return lines


def emit_body(body: Body, opts: CodegenOptions, gen: Generated, funcs: list[str]) -> None:
    """Append ``body``'s C function (after its kernels and nested bodies) to ``funcs``."""
    if body.name in gen.emitted_bodies:
        return
    gen.emitted_bodies.add(body.name)
    body.const_slots = []
    for c in body.program.consts:
        body.const_slots.append(abi.const_slot(len(gen.extra_consts)))
        gen.extra_consts.append(np.ascontiguousarray(getattr(c, "value", c)))
    # a body's loops run once per step: an OpenMP region there wakes its sleeping threads each step
    # (~50 us apiece on a 2-vCPU VM with the PASSIVE wait policy the compiler module sets), and
    # contends with the pool's spinning workers, so only loops of BODY_REGION_FACTOR times the
    # threshold's work go parallel; products keep the threshold, on the pool (an LSTM step's gate
    # map of 8 x 256 sigmoids/tanhs went parallel: batch 8 took 4.0 ms at two threads, 2.9 at one),
    # and so do the map kernels the pool runs (pooled.body_options)
    base = opts.parallel_threshold if opts.pool_threshold is None else opts.pool_threshold  # nested: once
    opts = dataclasses.replace(opts, parallel_threshold=base * BODY_REGION_FACTOR, pool_threshold=base)
    ctx = _BodyCtx(body)
    ctx.pooled = opts.openmp and opts.num_threads != 1  # map kernels on the pool (kernel_steps.pooled_kernel)
    # the body's constants, so a product with a constant B reads it prepacked (one copy per program)
    ctx.consts, ctx.gen = {v.id: c for v, c in zip(body.program.constvars, body.program.consts)}, gen
    from ember._src.native.emit.codegen import emit_steps  # codegen emits loop steps through this module
    lines = emit_steps(body.schedule, body.plan, ctx, opts, gen, funcs)
    if any("&em_bctx_" in ln for ln in lines):
        lines = body_context(ctx) + lines
    params = ["char *arena", "void **fns", "const int64_t *dims"]
    params += [f"char *in{i}" for i in range(len(body.program.invars))]
    params += [f"char *out{k}" for k in range(body.plan.n_outputs)]
    decls = "".join(ln + "\n" for ln in axis_decls(opts))  # symbolic: axis values and offsets in dims
    if opts.axes:  # each size expression named once, after the axis values (symdims.hoist_sizes)
        hoisted, lines = sd.hoist_sizes(lines)
        decls += "".join(ln + "\n" for ln in hoisted)
    funcs.append(f"static inline void {body.name}({', '.join(params)}) {{\n    (void)arena; (void)fns; "
                 "(void)dims;\n" + decls + "\n".join(lines) + "\n}\n")


# multiply-adds of inlined products: one fused instruction where the target has FMA (the C11
# mode the backend compiles in does not contract a * b + c on its own)
BODY_REGION_FACTOR = 32  # a loop body's OpenMP loops need this times the parallel threshold's work

_FMA_MACROS = """#ifdef __FMA__
#define EM_FMAF(a, b, c) fmaf(a, b, c)
#define EM_FMA(a, b, c) fma(a, b, c)
#else
#define EM_FMAF(a, b, c) ((a) * (b) + (c))
#define EM_FMA(a, b, c) ((a) * (b) + (c))
#endif
"""


def _copy(dst: str, src: str, n: Any) -> str:
    support.need("string.h")
    return f"memcpy({dst}, {src}, {sd.cdim(n)});"


def _call(body: Body, ws: str, ins: list[str], dests: list[str]) -> list[str]:
    """Call ``body`` with input pointers ``ins`` so that output ``p`` lands at ``dests[p]``."""
    plan = body.plan
    first: dict[int, int] = {}
    for p, (kind, idx, _) in enumerate(plan.outputs):
        if kind == "output" and idx not in first:
            first[idx] = p
    outs = [dests[first[k]] for k in range(plan.n_outputs)]
    lines = [f"{body.name}({', '.join([ws, 'fns', 'dims', *ins, *outs])});"]
    for p, (kind, idx, a) in enumerate(plan.outputs):
        aval = body.program.outvars[p].aval
        n = aval_nbytes(aval)
        if not maybe_nonzero(n):
            continue
        if kind == "output":
            if first[idx] != p:
                lines.append(_copy(dests[p], dests[first[idx]], n))
        elif kind == "input":
            lines.append(_copy(dests[p], ins[idx], n))
        elif kind == "param":
            lines.append(_copy(dests[p], f"fns[{body.const_slots[idx]}]", n))
        else:
            t = ctype(aval.dtype)
            lines.append(f"*({t} *)({dests[p]}) = {literal(a.val, aval.dtype)};")
    return lines


class _Atoms:
    """C pointers (``char *``) to a step's operands; literals become local arrays."""

    def __init__(self, ctx: EmitContext, lines: list[str]):
        self.ctx, self.lines, self.n = ctx, lines, 0

    def __call__(self, a: Atom) -> str:
        if isinstance(a, Literal):
            t = ctype(a.aval.dtype)
            name = f"lv{self.n}_"
            self.n += 1
            self.lines.append(f"    {t} {name}[1] = {{{literal(a.val, a.aval.dtype)}}};")
            return f"(char *){name}"
        return self.ctx.base(self.ctx.plan.value_buffer[a.id])


def emit_step(step: Step, s: int, ctx: EmitContext, opts: CodegenOptions, gen: Generated,
              funcs: list[str]) -> list[str]:
    """C statements running a native ``loop``/``cond`` step (its bodies go to ``funcs``)."""
    low: LoopLowering = step.sub
    if _FMA_MACROS not in funcs:
        funcs.insert(0, _FMA_MACROS)
    support.need("math.h")  # fmaf/fma in _FMA_MACROS
    for b in low.bodies:
        emit_body(b, opts, gen, funcs)
    e = step.eqns[0]
    lines = ["{", f"    char *ws_ = {ctx.base(scratch.buffer(ctx.plan, s, scratch.LOOP_WORKSPACE))};"]
    lines.append("    (void)ws_;")
    atom = _Atoms(ctx, lines)
    outs = [ctx.base(ctx.plan.value_buffer[v.id]) for v in step.outputs]
    bws = f"ws_ + {low.arena_offset}"
    if e.prim is pr.COND:
        _emit_cond(e, low, atom, outs, bws, lines)
        lines.append("}")
        return lines
    if e.prim is pr.SCAN:
        nc, nk = e.params["num_consts"], e.params["num_carry"]
        consts, init, rest = e.inputs[:nc], e.inputs[nc:nc + nk], e.inputs[nc + nk:]
    else:
        nc = e.params["cond_nconsts"] + e.params["body_nconsts"]
        consts, init, rest = e.inputs[:nc], e.inputs[nc:], ()
        nk = len(init)
    cptr = [atom(a) for a in consts]
    # carry slots
    ka, kb = [f"kA{j}_" for j in range(nk)], [f"kB{j}_" for j in range(nk)]
    sizes = [aval_nbytes(a.aval) for a in init]
    for j, a in enumerate(init):
        src = atom(a)
        if low.small_carries:
            t = ctype(a.aval.dtype)
            n = max(1, int(math.prod(a.aval.shape)))
            lines.append(f"    {t} {ka[j]}[{n}], {kb[j]}[{n}];")
            ka[j], kb[j] = f"((char *){ka[j]})", f"((char *){kb[j]})"
        else:
            oa, ob = low.slot_offsets[j]
            lines.append(f"    char *{ka[j]} = ws_ + {oa}, *{kb[j]} = ws_ + {ob};")
        if maybe_nonzero(sizes[j]):
            lines.append("    " + _copy(ka[j], src, sizes[j]))
    for j in low.inplace:
        kb[j] = ka[j]
    rotate = []
    for j in range(nk):
        if not maybe_nonzero(sizes[j]) or j in low.inplace:
            continue
        if low.small_carries:
            rotate.append(_copy(ka[j], kb[j], sizes[j]))
        else:
            rotate.append(f"{{ char *t_ = {ka[j]}; {ka[j]} = {kb[j]}; {kb[j]} = t_; }}")
    if e.prim is pr.SCAN:
        (body,) = low.bodies
        length, reverse = e.params["length"], bool(e.params["reverse"])
        length = length if sd.is_sym(length) else int(length)
        xs = [atom(a) for a in rest]
        x_step = [aval_nbytes(v.aval) for v in body.program.invars[nc + nk:]]
        y_step = [aval_nbytes(v.aval) for v in body.program.outvars[nk:]]

        def step_call(src: list[str], dst: list[str], it: str) -> list[str]:
            i = f"({sd.cdim(length - 1)} - ({it}))" if reverse else f"({it})"
            ins = [*cptr, *src, *(f"{x} + {i} * {sd.cdim(n)}" for x, n in zip(xs, x_step))]
            dests = [*dst, *(f"{y} + {i} * {sd.cdim(n)}" for y, n in zip(outs[nk:], y_step))]
            return _call(body, bws, ins, dests)

        nested = any(st.kind in ("loop", "cond") for st in body.schedule.steps)
        pingpong = low.small_carries and bool(rotate) and not nested
        u = unroll_factor(e.params.get("unroll", 1), length, pingpong)
        lines.extend("    " + ln for ln in _scan_loop(step_call, ka, kb, rotate, length, u, pingpong))
    else:
        cond, body = low.bodies
        ncc = e.params["cond_nconsts"]
        bt = ctype(np.bool_)
        nested = any(st.kind in ("loop", "cond") for b in (cond, body) for st in b.schedule.steps)

        def test(src: list[str]) -> list[str]:
            return _call(cond, bws, [*cptr[:ncc], *src], ["((char *)pr_)"])

        def advance(src: list[str], dst: list[str]) -> list[str]:
            return _call(body, bws, [*cptr[ncc:], *src], dst)

        lines.append(f"    {bt} pr_[1];")
        if low.small_carries and rotate and not nested:
            # two steps per iteration, alternating the slots (no copy between steps); leaving
            # after an odd number of steps, the carries are in the B slots
            lines.append("    int odd_ = 0;")
            lines.append("    for (;;) {")
            lines.append("        " + _poll_break())
            lines.extend("        " + ln for ln in test(ka))
            lines.append("        if (!pr_[0]) break;")
            lines.extend("        " + ln for ln in advance(ka, kb))
            lines.extend("        " + ln for ln in test(kb))
            lines.append("        if (!pr_[0]) { odd_ = 1; break; }")
            lines.extend("        " + ln for ln in advance(kb, ka))
            lines.append("    }")
            lines.append("    if (odd_) {")
            lines.extend("        " + ln for ln in rotate)
            lines.append("    }")
        else:
            lines.append("    for (;;) {")
            lines.append("        " + _poll_break())
            lines.extend("        " + ln for ln in test(ka))
            lines.append("        if (!pr_[0]) break;")
            lines.extend("        " + ln for ln in advance(ka, kb))
            lines.extend("        " + ln for ln in rotate)
            lines.append("    }")
    for j in range(nk):
        if maybe_nonzero(sizes[j]):
            lines.append("    " + _copy(outs[j], ka[j], sizes[j]))
    lines.append("}")
    return lines


def _scan_loop(step_call: Any, ka: list[str], kb: list[str], rotate: list[str], length: Any, u: int,
               pingpong: bool) -> list[str]:
    """The C loop of a scan: ``u`` body copies per iteration, then the remaining steps.

    ``step_call(src, dst, it)`` runs step ``it`` reading carries ``src`` and writing ``dst``.
    Ping-pong: the copies alternate ``A -> B``, ``B -> A`` (``u`` is even); a static remainder is
    straight-line code (a final ``rotate`` when it is odd), a symbolic one a loop. Otherwise each
    copy is followed by ``rotate`` (pointer swaps or copies)."""
    lines: list[str] = []
    clen = sd.cdim(length)
    static = not sd.is_sym(length)
    n = int(length) if static else None
    if static and n == 0:
        return lines
    if pingpong and static and n < 2:
        return [*step_call(ka, kb, "0"), *rotate]
    if u > 1 and not (static and n < u):
        lines.append(f"for (int64_t it_ = 0; it_ + {u} <= {clen}; it_ += {u}) {{")
        lines.append("    " + _poll_break())
        for c in range(u):
            it = "it_" if c == 0 else f"it_ + {c}"
            if pingpong:
                src, dst = (ka, kb) if c % 2 == 0 else (kb, ka)
                lines.extend("    " + ln for ln in step_call(src, dst, it))
            else:
                lines.extend("    " + ln for ln in step_call(ka, kb, it))
                lines.extend("    " + ln for ln in rotate)
        lines.append("}")
        done = f"({clen} / {u}) * {u}" if not static else str((n // u) * u)
    else:
        done = "0"
    if static:
        start = int(done)
        rest = n - start
        if rest == 0:
            return lines
        if rest <= u:  # straight-line remainder
            for c in range(rest):
                if pingpong:  # alternating the slots
                    src, dst = (ka, kb) if c % 2 == 0 else (kb, ka)
                    lines.extend(step_call(src, dst, str(start + c)))
                else:
                    lines.extend([*step_call(ka, kb, str(start + c)), *rotate])
            if pingpong and rest % 2:
                lines.extend(rotate)
            return lines
    lines.append(f"for (int64_t it_ = {done}; it_ < {clen}; ++it_) {{")
    lines.append("    " + _poll_break())
    lines.extend("    " + ln for ln in step_call(ka, kb, "it_"))
    lines.extend("    " + ln for ln in rotate)
    lines.append("}")
    return lines


def _emit_cond(e: Eqn, low: LoopLowering, atom: _Atoms, outs: list[str], bws: str, lines: list[str]) -> None:
    index, ops = e.inputs[0], e.inputs[1:]
    n = len(low.bodies)
    if isinstance(index, Literal):
        lines.append(f"    int64_t b_ = (int64_t){literal(index.val, index.aval.dtype)};")
    else:
        lines.append(f"    int64_t b_ = (int64_t)(*({ctype(index.aval.dtype)} *){atom(index)});")
    lines.append(f"    b_ = b_ < 0 ? 0 : (b_ > {n - 1} ? {n - 1} : b_);")
    ptrs = [atom(a) for a in ops]
    lines.append("    switch (b_) {")
    for k, b in enumerate(low.bodies):
        lines.append(f"    {'default' if k == n - 1 else f'case {k}'}: {{")
        lines.extend("        " + ln for ln in _call(b, bws, ptrs, outs))
        lines.append("        break;")
        lines.append("    }")
    lines.append("    }")
