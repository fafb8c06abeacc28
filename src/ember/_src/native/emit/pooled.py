"""Parallel loops on ember's thread pool: chunk functions, the ``em_par`` call, and the OpenMP
``parallel`` decision (static sizes now, symbolic ones at run time).
"""

from __future__ import annotations

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



def pool_task(name: str, statement: str, opts: CodegenOptions) -> str:
    """A chunk function of ember_main's pooled loop: ``statement`` (which may read ``lo_``,
    ``hi_``, ``tid_``, ember_main's parameters and the axis values) on rows ``[lo_, hi_)``."""
    decls = "".join(ln.strip() + "\n    " for ln in axis_decls(opts))
    if opts.axes:  # each size expression named once, after the axis values (symdims.hoist_sizes)
        hoisted, stmt_lines = sd.hoist_sizes([statement], indent="")
        statement = "\n".join(stmt_lines)
        decls += "".join(ln + "\n    " for ln in hoisted)
    support.need("threadpool")
    head = f"static EM_TASK_ATTR void {name}{{}}(void *c_, int64_t lo_, int64_t hi_, int64_t tid_) {{{{\n"
    body = (head.format("_rows" if interrupt.POLLING else "")
            + f"    EM_MAIN_UNPACK(c_) (void)lo_; (void)hi_; (void)tid_;\n"
            f"    if ({support.poll()}) return;\n    {decls}{statement}\n}}\n")
    if not interrupt.POLLING:
        return body
    # a pool worker polls the flag of the call it works for (the caller's, in em_main_ctx), so a
    # chunk stops on Ctrl-C wherever it runs; restored after, as the worker serves other calls
    return (body + head.format("")
            + f"    volatile int *const outer_ = em_intr_flag_;\n"
            f"    if (((em_main_ctx *)c_)->intr) em_intr_flag_ = ((em_main_ctx *)c_)->intr;\n"
            f"    {name}_rows(c_, lo_, hi_, tid_);\n"
            f"    em_intr_flag_ = outer_;\n}}\n")



def pool_call(task: str, rows: Any, threads: str, chunks: int, cond: str = "") -> str:
    """ember_main's statement running ``task`` over ``rows`` on the pool (serially unless the
    run-time condition ``cond`` holds, when given)."""
    support.need("main_ctx")
    par = f"em_par({task}, &em_mctx_, {sd.cdim(rows)}, {threads}, {chunks});"
    if not cond:
        return par
    return f"if ({cond}) {par} else {task}(&em_mctx_, 0, {sd.cdim(rows)}, 0);"



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
