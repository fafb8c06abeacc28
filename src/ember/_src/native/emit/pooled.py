"""Parallel loops on ember's thread pool: chunk functions, the ``em_par`` call, and the OpenMP
``parallel`` decision (static sizes now, symbolic ones at run time).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ember._src.native.base import symdims as sd
from ember._src.native.emit import support
from ember._src.native.emit.context import CodegenOptions
from ember._src.native.runtime import interrupt

# chunks per thread of a pooled kernel's rows: a late thread's share is taken over in pieces
POOL_CHUNKS = 4



# a split vectorized loop (a 1-D map) is cut at multiples of this many elements: two threads never
# write into one cache line (64 elements span whole lines when the array is 64-byte aligned), and
# every element but the array's last few runs in the vector body, as on one thread, so a vector
# code path that rounded differently from the scalar remainder could not make results depend on
# the thread count
POOL_GRAIN = 64



def pool_threads(opts: CodegenOptions, scratch: bool) -> str:
    """``nt, cap`` arguments of ``em_par``: the configured thread count (0: the OpenMP default),
    capped by the planned per-thread row caches when the loop uses them."""
    return f"{opts.num_threads or 0}, {opts.workspace_threads if scratch else 0}"



def _body_io(ctx: Any) -> tuple[int, int] | None:
    """(inputs, outputs) of the loop body whose steps ``ctx`` emits; None at ember_main's level."""
    if ctx is None or not ctx.in_body:
        return None
    return len(ctx.body.program.invars), ctx.body.plan.n_outputs


def pool_task(name: str, statement: str, opts: CodegenOptions, ctx: Any = None) -> str:
    """A chunk function of a pooled loop: ``statement`` (which may read ``lo_``, ``hi_``,
    ``tid_``, the parameters of the function it came from and the axis values) on rows
    ``[lo_, hi_)``. The parameters come from an ``em_main_ctx`` (ember_main's steps) or, where
    ``ctx`` emits a loop body, an ``em_body_ctx`` (:func:`body_context`)."""
    decls = "".join(ln.strip() + "\n    " for ln in axis_decls(opts))
    if opts.axes:  # each size expression named once, after the axis values (symdims.hoist_sizes)
        hoisted, stmt_lines = sd.hoist_sizes([statement], indent="")
        statement = "\n".join(stmt_lines)
        decls += "".join(ln + "\n    " for ln in hoisted)
    support.need("threadpool")
    io = _body_io(ctx)
    if io is None:
        ctype, unpack = "em_main_ctx", "EM_MAIN_UNPACK(c_)"
    else:
        names = [f"in{i}" for i in range(io[0])] + [f"out{k}" for k in range(io[1])]
        ctype = "em_body_ctx"
        unpack = "EM_BODY_UNPACK(c_)" + "".join(f" char *{x} = io_[{j}]; (void){x};"
                                                for j, x in enumerate(names))
    head = f"static EM_TASK_ATTR void {name}{{}}(void *c_, int64_t lo_, int64_t hi_, int64_t tid_) {{{{\n"
    body = (head.format("_rows" if interrupt.POLLING else "")
            + f"    {unpack} (void)lo_; (void)hi_; (void)tid_;\n"
            f"    if ({support.poll()}) return;\n    {decls}{statement}\n}}\n")
    if not interrupt.POLLING:
        return body
    # a pool worker polls the flag of the call it works for (the caller's, in the context), so a
    # chunk stops on Ctrl-C wherever it runs; restored after, as the worker serves other calls
    return (body + head.format("")
            + f"    volatile int *const outer_ = em_intr_flag_;\n"
            f"    if ((({ctype} *)c_)->intr) em_intr_flag_ = (({ctype} *)c_)->intr;\n"
            f"    {name}_rows(c_, lo_, hi_, tid_);\n"
            f"    em_intr_flag_ = outer_;\n}}\n")


def body_options(opts: CodegenOptions, scratch: bool) -> CodegenOptions | None:
    """The options a loop body's pooled kernel is emitted with: the pool's threshold (the
    ``pool_threshold`` option), not the raised one of the body's OpenMP loops, since the pool's
    spinning workers take a chunk within a microsecond where an OpenMP region woke sleeping threads
    each step (an LSTM's gate map at batch 32, two threads: 7.2 -> 6.7 ms a call); None for a
    kernel with per-thread row caches (``scratch``), which stays serial in a body."""
    if scratch:
        return None
    if opts.pool_threshold is None:
        return opts
    return dataclasses.replace(opts, parallel_threshold=opts.pool_threshold)


def body_context(ctx: Any) -> list[str]:
    """A loop body's declarations of the ``em_body_ctx`` its pooled loops pass to their chunk
    functions (the body's arena, tables, dims and in/out pointers, and the interrupt flag)."""
    n_in, n_out = _body_io(ctx)
    names = [f"in{i}" for i in range(n_in)] + [f"out{k}" for k in range(n_out)]
    intr = "em_intr_flag_" if interrupt.POLLING else "0"
    if interrupt.POLLING:
        support.poll()  # (records the flag's block)
    return [f"    char *io_[] = {{{', '.join(names) or '0'}}};",
            f"    em_body_ctx em_bctx_ = {{arena, fns, dims, io_, {intr}}};"]


def pool_call(task: str, rows: Any, threads: str, chunks: int, cond: str = "", ctx: Any = None) -> str:
    """The statement running ``task`` over ``rows`` on the pool (serially unless the run-time
    condition ``cond`` holds, when given), from ember_main or, where ``ctx`` emits one, a loop
    body (whose function then declares :func:`body_context`)."""
    if _body_io(ctx) is None:
        support.need("main_ctx")
        arg = "&em_mctx_"
    else:
        support.need("threadpool")
        arg = "&em_bctx_"
    par = f"em_par({task}, {arg}, {sd.cdim(rows)}, {threads}, {chunks});"
    if not cond:
        return par
    return f"if ({cond}) {par} else {task}({arg}, 0, {sd.cdim(rows)}, 0);"


def axis_decls(opts: CodegenOptions, indent: str = "    ") -> list[str]:
    """``const int64_t em_d_batch = dims[0];`` for each axis of a symbolic schedule."""
    return [f"{indent}const int64_t {sd.axis_c_name(a)} = dims[{k}]; (void){sd.axis_c_name(a)};"
            for k, a in enumerate(opts.axes)]



def parallel_clause(opts: CodegenOptions, work: Any, extent: Any) -> tuple[bool, str]:
    """(whether to emit a parallel pragma, its ``if`` clause): static sizes decide now, symbolic
    ones at run time. The clause names ``parallel`` so that a combined ``parallel for simd`` stays
    vectorized when it runs on one thread."""
    if not opts.openmp:
        return False, ""
    if not sd.is_sym(work) and not sd.is_sym(extent):
        return work >= opts.parallel_threshold and extent >= 2, ""
    return True, f" if(parallel: {sd.cdim(work)} >= {opts.parallel_threshold} && {sd.cdim(extent)} >= 2)"
