"""C for ``gemm`` steps: BLAS calls (SciPy's), ember's GEMM kernel (packing, prepacked and
argument-packed ``B``, pooled row blocks and batches), epilogues, and the inline loops of
loop bodies; which strategy a product takes is decided here.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable
from typing import Any

import numpy as np

from ember._src.native import abi, csrc
from ember._src.native.base import symdims as sd
from ember._src.native.emit import c_ops, gemm_kernel, support
from ember._src.native.emit.c_ops import ctype, literal
from ember._src.native.emit.context import CodegenOptions, EmitContext
from ember._src.native.emit.pooled import parallel_clause, pool_call, pool_task, pool_threads
from ember._src.native.runtime import threadpool
from ember._src.native.scheduling import index as ixm
from ember._src.native.scheduling.gemm_strategy import (
    BLAS_DTYPES,
    BSource,
    GemmRoute,
    gemm_dims,
    gemm_views,
    kernel_rows,
    packable_b,
    step_layouts,
)
from ember._src.native.scheduling.schedule import Step
from ember._src.program import Literal, Var

# dtype -> (C element type, name suffix, BLAS prefix) of the em_gemm_* helpers
GEMM_TYPES = {np.dtype(np.float32): ("float", "f32", "s"),
              np.dtype(np.float64): ("double", "f64", "d"),
              np.dtype(np.complex64): ("em_c64", "c64", "c"),
              np.dtype(np.complex128): ("em_c128", "c128", "z")}
assert set(GEMM_TYPES) == BLAS_DTYPES  # the strategy routes to BLAS exactly the dtypes rendered here



def gemm_fn(dt: Any, strided: bool = False) -> str:
    """The name of the ``em_gemm_*`` helper (``em_gemm_sv_*`` with ``strided``) for dtype ``dt``,
    recorded as used (``emit/support.py``)."""
    name = f"em_gemm_{'sv_' if strided else ''}{GEMM_TYPES[np.dtype(dt)][1]}"
    support.need(name)
    return name





def blas_helpers(needs: Iterable[str]) -> str:
    """The typedefs and ``static`` wrappers of the BLAS ``gemm``/``gemv`` calls among ``needs``
    (the ``em_gemm_<type>`` / ``em_gemm_sv_<type>`` names :func:`gemm_fn` recorded)."""
    used = {n for n in needs if n.startswith("em_gemm_")}
    if not used:
        return ""
    complex_ = any(n.startswith(("em_gemm_c", "em_gemm_sv_c")) for n in used)
    sec = csrc.sections("blas_wrap.h")
    out = ""
    for d, (t, name, pre) in GEMM_TYPES.items():
        if not (complex_ or d.kind == "f"):
            continue
        out += (f"#define ELT {t}\n#define EM_P(name) em_{pre}##name\n"
                f"#define EM_GEMM_SLOT {abi.slot(pre + 'gemm')}\n"
                f"#define EM_GEMV_SLOT {abi.slot(pre + 'gemv')}\n" + sec["types"][1])
        for fn, part in ((f"em_gemm_{name}", "gemm"), (f"em_gemm_sv_{name}", "gemm_sv")):
            if fn in used:
                out += f"#define EM_FN {fn}\n" + sec[part][1] + "#undef EM_FN\n"
        out += "#undef EM_GEMV_SLOT\n#undef EM_GEMM_SLOT\n#undef EM_P\n#undef ELT\n"
    return out

















def _prepacked_b(step: Step, ctx: EmitContext) -> str | None:
    """C pointer to ``op(B)`` packed for the kernel (:func:`.gemm_kernel.prepack_b`) when ``B`` of
    this unbatched product is a program constant: packed once here, kept as a derived constant."""
    b, k, n, rsb, csb = packable_b(step, ctx.consts)
    value = np.ascontiguousarray(getattr(ctx.consts[b.id], "value", ctx.consts[b.id]))
    # one packed copy per weight and layout: an unrolled recurrent layer's steps share one matrix
    # (64 copies of a 1 MB matrix streamed from memory where one stays in L2), and a NumPy array a
    # function uses several times becomes one constant per use
    key = (value.shape, value.dtype.str, hashlib.blake2b(value.data, digest_size=16).digest(), k, n, rsb, csb)
    slot = ctx.gen.prepacked.get(key)
    if slot is None:
        slot = ctx.gen.prepacked[key] = len(ctx.gen.extra_consts)
        ctx.gen.extra_consts.append(gemm_kernel.prepack_b(gemm_kernel.op_b(value, k, n, rsb, csb)))
    return f"((const float *){abi.const_ref(slot)})"



def _argument_packed_b(step: Step, ctx: EmitContext) -> str | None:
    """For an unbatched float32 product whose ``B`` is a program argument: a C expression of the
    packed copy the runtime may keep for that argument (``const float *``, null when none), read
    from an 8-byte cell of this program's derived constants. The C dispatcher fills the cell when an
    ember Array (immutable) comes back as that argument (``dispatch_src.py``); the copy's header
    holds the address it was packed from, and the program uses it only while the argument's data
    pointer is that address (:func:`.gemm_kernel.packed_argument`)."""
    b, k, n, rsb, csb = packable_b(step, ctx.inputs)
    slot = len(ctx.gen.extra_consts)
    ctx.gen.extra_consts.append(np.zeros(1, np.uint64))
    ctx.gen.packed_args.append((slot, ctx.inputs[b.id], k, n, rsb, csb))
    return f"(*(const float *const *){abi.const_ref(slot)})"






def _rows_guard(step: Step, prepacked: bool) -> str:
    """C condition that a dynamic ``m`` (or ``n``, ``k``) is within the kernel's rule ("" for
    static sizes)."""
    _, m, n, k = gemm_dims(step)
    if sd.is_sym(n) or sd.is_sym(k):
        return gemm_kernel.c_size_rule(sd.cdim(m), sd.cdim(n), sd.cdim(k))
    if not sd.is_sym(m):
        return ""
    rows, cm = gemm_kernel.kernel_rows(n, k, prepacked), sd.cdim(m)
    return f"{cm} >= {gemm_kernel.PREPACKED_MIN_ROWS if prepacked else 2} && {cm} <= {rows}"



def _small_sgemm_call(step: Step, ctx: EmitContext, opts: CodegenOptions | None, alpha: float,
                      beta: float, packed: str | None = None) -> str | None:
    """The arguments of :mod:`.gemm_kernel`'s kernel for a float32 product its size rule takes
    (None otherwise, or where this machine cannot run it): A and B as (row, column) strides, so
    transposes are free; batch ``bb_`` of a batched product; a dynamic ``m`` as its C expression
    (the caller adds :func:`_rows_guard`). With ``packed`` (a C pointer to a packed ``B``: from
    :func:`_prepacked_b`, or the argument copy of :func:`_argument_packed_b`), the arguments of its
    prepacked-B entry instead."""
    if np.dtype(step.outputs[0].aval.dtype) != np.float32:
        return None
    nb, m, n, k = gemm_dims(step)
    if kernel_rows(step, packed is not None) is None:
        return None
    if gemm_kernel.kernel_symbol() is None:
        return None
    gemm_kernel.load()  # builds the kernel library in the background (once); BLAS runs until then
    e = step.eqns[0]
    nthreads = 1
    panels = (n + 23) // 24 if sd.is_sym(n) else gemm_kernel.panel_count(n)  # the units its threads share
    pool_opts = opts if opts is None or opts.pool_threshold is None else \
        dataclasses.replace(opts, parallel_threshold=opts.pool_threshold)
    if pool_opts is not None and parallel_clause(pool_opts, m * n * k, panels)[0]:
        nthreads = opts.num_threads or 0
        # the kernel shares its panels out on ember's pool once that library is loaded (else an
        # OpenMP region per call, whose sleeping threads took ~50 us to wake for each step of a loop)
        threadpool.load()
    (ba, (_, rsa), (_, csa)), (bb, (_, rsb), (_, csb)), (bo, (_, ldc), _) = step_layouts(step)
    a, b, out = e.inputs[0], e.inputs[1], step.outputs[0]
    epi = step.epilogue
    bias = ctx.ptr(epi.bias) if epi is not None and epi.bias is not None else "0"
    relu = int(epi is not None and epi.relu)
    oa, ob, oo = (batch_offset(bt) for bt in (ba, bb, bo))
    bargs = packed if packed is not None else f"{ctx.ptr(b)} + {ob}, {sd.cdim(rsb)}, {sd.cdim(csb)}"
    m, n, k, rsa, csa, ldc = (sd.cdim(x) for x in (m, n, k, rsa, csa, ldc))
    return (f"{m}, {n}, {k}, {literal(alpha, np.float32)}, {ctx.ptr(a)} + {oa}, {rsa}, {csa}, "
            f"{bargs}, {literal(beta, np.float32)}, {ctx.ptr(out)} + {oo}, {ldc}, {bias}, {relu}, {nthreads}")



def batch_offset(batch: tuple, var: str = "bb_") -> str:
    """C offset of batch ``var`` in a view whose batch digits are ``batch`` ((size, stride), ...)."""
    terms, inner = [], 1
    for size, stride in reversed(batch):
        if size == 1:
            continue
        digit = var if inner == 1 else f"{var} / {sd.cdim(inner)}"
        if len(terms) < sum(sz != 1 for sz, _ in batch) - 1:  # not the outermost digit
            digit = f"({digit}) % {sd.cdim(size)}"
        terms.append(f"({digit}) * {sd.cdim(stride)}")
        inner *= size
    return "(" + " + ".join(terms[::-1]) + ")" if terms else "0"



def _pooled_batches(step: Step, s: int, opts: CodegenOptions, small: str, nb: Any, fallback: str,
                    funcs: list[str]) -> str:
    """A batched product on the GEMM kernel with its batches shared out on the thread pool, each
    batch on one thread (a product per head is too small to split its columns, and one pool loop
    replaces a fork/join per batch): the strategy's ``pooled_batches``."""
    _, m, n, k = gemm_dims(step)
    _, par_if = parallel_clause(opts, nb * m * n * k, nb)
    one = small.rsplit(", ", 1)[0] + ", 1"  # each batch on one thread
    task = f"em_task{s}"
    support.need("gemm_kernel")
    funcs.append(pool_task(task, f"em_sk_fn_t f_ = em_sk_fn(); "
                                  f"for (int64_t bb_ = lo_; bb_ < hi_; ++bb_) f_({one});", opts))
    # dynamic sizes: the pool when the work is large enough, the kernel when its rule holds
    cond = par_if[len(" if(parallel: "):-1] if par_if else ""
    par = pool_call(task, nb, pool_threads(opts, False), 2, cond)
    guard = _rows_guard(step, False)
    test = f"f_ && ({guard})" if guard else "f_"
    return f"{{ em_sk_fn_t f_ = em_sk_fn(); if ({test}) {{ {par} }} else {{ {fallback} }} }}"



def emit_gemm(step: Step, ctx: EmitContext, opts: CodegenOptions | None = None,
              funcs: list[str] | None = None, s: int = -1) -> list[str]:
    e = step.eqns[0]
    out = step.outputs[0]
    dt = np.dtype(out.aval.dtype)
    t = ctype(dt)
    a, b = e.inputs[0], e.inputs[1]
    prm = e.params
    nb, m, n, k = gemm_dims(step)
    oshape = tuple(e.outvars[0].aval.shape)  # the product's (a fused epilogue's output is a view of it)
    optr = ctx.ptr(out)
    lines: list[str] = ["{"]
    # an epilogue may hold the c of gemm(a, b, bias); a full-shape c (a residual) stays the accumulator
    has_c = len(e.inputs) == 3 and (step.epilogue is None or step.epilogue.bias is not e.inputs[2])
    in_place = has_c and isinstance(e.inputs[2], Var) and \
        (ctx.plan.value_buffer[e.inputs[2].id] is ctx.plan.value_buffer[out.id]
         or ctx.ptr(e.inputs[2]) == optr)  # a loop body updating its carry in place
    if has_c and not in_place:  # C := broadcast(c), then beta * C is accumulated by gemm
        c = e.inputs[2]
        lines.append(f"    {t} *o_ = {optr};")
        if isinstance(c, Literal):
            src = lambda idx: literal(c.val, dt)  # noqa: E731
        else:
            cptr = ctx.ptr(c)
            cstr = ixm.strides(c.aval.shape)
            cdims = prm["c_dims"]

            def src(idx: list[str]) -> str:
                terms = [f"{idx[d]} * {sd.cdim(s)}" for d, s, sz in zip(cdims, cstr, c.aval.shape) if sz != 1]
                return f"{cptr}[{' + '.join(terms) or '0'}]"
        idx = [f"e{i}" for i in range(len(oshape))]
        ostr = ixm.strides(oshape)
        for i, sz in enumerate(oshape):
            if i == len(oshape) - 1:
                lines.append("    #pragma omp simd")
            lines.append("    " * (i + 1) + f"for (int64_t e{i} = 0; e{i} < {sd.cdim(sz)}; ++e{i})")
        oidx = " + ".join(f"{nm} * {sd.cdim(s)}" for nm, s in zip(idx, ostr)) or "0"
        lines.append("    " * (len(oshape) + 1) + f"o_[{oidx}] = {src(idx)};")
    alpha, beta = prm["alpha"], prm["beta"] if has_c else 0.0
    plan = step.strategy
    if plan is None:
        raise ValueError(f"gemm step {step.name} has no strategy (scheduling.gemm_strategy.assign; "
                         "pipeline.lower runs it)")
    if plan.route is GemmRoute.INLINE:
        lines.extend("    " + ln for ln in ctx.inline_gemm(step, has_c, alpha, beta))
    elif plan.route is GemmRoute.LOOPS:
        lines.extend("    " + ln for ln in _loop_gemm(step, ctx, has_c))
    else:
        small = _small_sgemm_call(step, ctx, opts, alpha, beta) if plan.kernel else None
        nbs = nb
        views = gemm_views(step)
        if views is not None:  # per batch: BLAS on the strided matrices (one unit stride each)
            (ba, (_, rsa), (_, csa)), (bb, (_, rsb), (_, csb)), (bo, (_, ldc), _) = views
            loop = f"for (int64_t bb_ = 0; bb_ < {nb}; ++bb_) " if nb != 1 else ""
            blas = (f"{loop}{gemm_fn(dt, strided=True)}(fns, {m}, {n}, {k}, {literal(alpha, dt)}, "
                    f"{literal(beta, dt)}, {ctx.ptr(a)} + {batch_offset(ba)}, {rsa}, {csa}, "
                    f"{ctx.ptr(b)} + {batch_offset(bb)}, {rsb}, {csb}, {optr} + {batch_offset(bo)}, "
                    f"{ldc});")
            if nb == 1:
                blas = blas.replace("bb_", "0")
        else:
            nb, m, n, k = (sd.cdim(x) for x in (nb, m, n, k))
            blas = (f"{gemm_fn(dt)}(fns, {int(prm['trans_a'])}, {int(prm['trans_b'])}, {nb}, {m}, {n}, {k}, "
                    f"{literal(alpha, dt)}, {literal(beta, dt)}, {ctx.ptr(a)}, {ctx.ptr(b)}, {optr});")
            blas += _epilogue_loop(step, ctx)
        if small is None:
            plain = blas
        elif plan.pooled_batches:
            plain = _pooled_batches(step, s, opts, small, nbs, blas, funcs)
        else:
            plain = gemm_kernel.c_call(small, blas, nbs, _rows_guard(step, False))
        if plan.b is BSource.CONSTANT:  # packed once when the program was built
            packed_args = _small_sgemm_call(step, ctx, opts, alpha, beta, packed=_prepacked_b(step, ctx))
            lines.append("    " + gemm_kernel.c_call_packed(packed_args, blas, _rows_guard(step, True)))
        elif plan.b is BSource.ARGUMENT:  # B an argument: a packed copy the runtime keeps for it, if any
            cell = _argument_packed_b(step, ctx)
            pk = "pk_ + " + str(gemm_kernel.PACK_HEADER_FLOATS)
            args = _small_sgemm_call(step, ctx, opts, alpha, beta, packed=pk)
            same = f"pk_ && *(const void *const *)pk_ == (const void *)({ctx.ptr(b)})"
            guard = " && ".join(x for x in (same, _rows_guard(step, True)) if x)
            lines.append(f"    {{ const float *pk_ = {cell};")
            lines.append("      " + gemm_kernel.c_call_packed(args, plain, guard))
            lines.append("    }")
        else:  # the kernel once its library is loaded (see gemm_kernel), BLAS until then
            lines.append("    " + plain)
    if step.epilogue is not None and plan.route in (GemmRoute.INLINE, GemmRoute.LOOPS):
        lines.append("    " + _epilogue_loop(step, ctx))
    lines.append("}")
    return lines



def _epilogue_loop(step: Step, ctx: EmitContext) -> str:
    """C loop applying a fused ``gemm`` step's epilogue (:mod:`.gemm_epilogue`) to its output in
    place, for the paths other than the kernel (which applies it in its store); "" without one."""
    epi = step.epilogue
    if epi is None:
        return ""
    m, n = (sd.cdim(d) for d in step.eqns[0].outvars[0].aval.shape)
    o = f"o_[i_ * {n} + j_]"
    v = o + (" + b_[j_]" if epi.bias is not None else "")
    put = f"{o} = v_ > 0.0f || v_ != v_ ? v_ : 0.0f;" if epi.relu else f"{o} = v_;"
    bias = f" const float *b_ = {ctx.ptr(epi.bias)};" if epi.bias is not None else ""
    return (f" {{ float *o_ = {ctx.ptr(step.outputs[0])};{bias} for (int64_t i_ = 0; i_ < {m}; ++i_)"
            f" _Pragma(\"omp simd\") for (int64_t j_ = 0; j_ < {n}; ++j_)"
            f" {{ const float v_ = {v}; {put} }} }}")



def _loop_gemm(step: Step, ctx: EmitContext, has_c: bool) -> list[str]:
    """Integer/bool matrix product as an i-k-j loop (the j loop vectorizes)."""
    e = step.eqns[0]
    out = step.outputs[0]
    dt = np.dtype(out.aval.dtype)
    t = ctype(dt)
    nb, m, n, k = gemm_dims(step)
    mk, kn = sd.cdim(m * k), sd.cdim(k * n)
    nb, m, n, k = (sd.cdim(x) for x in (nb, m, n, k))
    ta, tb = e.params["trans_a"], e.params["trans_b"]
    a_ix = f"pa[p * {m} + i]" if ta else f"pa[i * {k} + p]"
    b_ix = f"pb[j * {k} + p]" if tb else f"pb[p * {n} + j]"
    upd = f"crow[j] |= av & {b_ix};" if c_ops.is_bool(dt) else f"crow[j] = ({t})(crow[j] + av * {b_ix});"
    zero = "" if has_c else f"for (int64_t j = 0; j < {n}; ++j) crow[j] = 0;"
    return [
        f"for (int64_t bb = 0; bb < {nb}; ++bb) {{",
        f"    const {t} *pa = {ctx.ptr(e.inputs[0])} + bb * {mk};",
        f"    const {t} *pb = {ctx.ptr(e.inputs[1])} + bb * {kn};",
        f"    for (int64_t i = 0; i < {m}; ++i) {{",
        f"        {t} *crow = {ctx.ptr(out)} + (bb * {m} + i) * {n};",
        f"        {zero}",
        f"        for (int64_t p = 0; p < {k}; ++p) {{",
        f"            const {t} av = {a_ix};",
        "            #pragma omp simd",
        f"            for (int64_t j = 0; j < {n}; ++j) {upd}",
        "        }",
        "    }",
        "}",
    ]
