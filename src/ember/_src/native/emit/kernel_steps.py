"""The kernel steps that run on the thread pool or in blocks: :func:`pooled_kernel` (a kernel's
outer rows as chunks of a pool task) and :func:`block_reduce_kernel` (a whole-array reduction in
fixed blocks, then the kernel combining their partials). Both emit their C through
:class:`.kernels.KernelEmitter`; other kernels are emitted by it directly (``codegen``)."""

from __future__ import annotations

from ember._src.native.base import symdims as sd
from ember._src.native.emit import support
from ember._src.native.emit.context import CodegenOptions, EmitContext
from ember._src.native.emit.kernels import KernelEmitter
from ember._src.native.emit.pooled import (
    POOL_CHUNKS,
    POOL_GRAIN,
    body_options,
    parallel_clause,
    pool_call,
    pool_task,
    pool_threads,
)
from ember._src.native.plan import scratch as scratch_mod
from ember._src.native.scheduling import blockreduce
from ember._src.native.scheduling.schedule import Step


def pooled_kernel(step: Step, s: int, ctx: EmitContext, opts: CodegenOptions, funcs: list[str]) -> str | None:
    """A kernel whose flattened outer loop goes parallel, as a chunk function on the thread pool
    (:mod:`.threadpool`): the kernel takes rows ``[lo_, hi_)`` and the thread id for its row
    caches; ember_main or the loop body calls ``em_par``. None where the kernel is not such a loop
    (split and accumulating kernels, one-row kernels, see :func:`.pooled.body_options`), or runs
    serially: those stay as before."""
    ir = step.ir
    if not ctx.pooled or ir is None or ir.parts or ir.natural is not None:
        return None
    opts = body_options(opts, bool(ir.scratch)) if ctx.in_body else opts
    if opts is None:
        return None
    grain = 1
    if ir.n_outer:
        rows = ir.outer_size
        range_: tuple[str, str] | None = ("lo_", "hi_")
    else:  # a map: one loop nest, no reductions, whose first loop is split
        if ir.n_loops != 1 or ir.reduces or ir.scratch or len(ir.domain) == 0:
            return None
        inner = KernelEmitter(step, s, ctx, opts).inner_sizes
        rows, range_ = inner[0], None
        if len(inner) == 1:  # the split loop is the vectorized one: see POOL_GRAIN
            grain = POOL_GRAIN
    go, par_if = parallel_clause(opts, ir.flops(), rows)
    if not go:
        return None
    fn, call = KernelEmitter(step, s, ctx, opts, row_range=range_, pool=True).emit()
    funcs.append(fn)
    task = f"{step.name}_task"
    if grain != 1:
        n = sd.cdim(rows)
        hi = f"(hi_ * {grain} < {n} ? hi_ * {grain} : {n})"
        call = call.replace("lo_, hi_, tid_)", f"lo_ * {grain}, {hi}, tid_)")
        rows = (rows + grain - 1) // grain
    funcs.append(pool_task(task, call, opts, ctx))
    cond = par_if[len(" if(parallel: "):-1] if par_if else ""
    return pool_call(task, rows, pool_threads(opts, bool(ir.scratch)), POOL_CHUNKS, cond, ctx)



def block_reduce_kernel(step: Step, s: int, ctx: EmitContext, opts: CodegenOptions,
                         funcs: list[str]) -> list[str] | None:
    """A whole-array reduction kernel in fixed blocks (:mod:`.blockreduce`): the part function per
    block (on the thread pool at the top level when the work is large enough, else in order), then
    the kernel combining the partials. None where the planner gave the kernel no partials or its
    loop is not one merged loop."""
    ir = step.ir
    nblk = blockreduce.blocks(ir)
    if nblk is None or any(scratch_mod.buffer(ctx.plan, s, blockreduce.partial_key(r.rid)) is None
                           for r in ir.reduces):
        return None
    if len(KernelEmitter(step, s, ctx, opts).inner_names) != 1:
        return None
    n, nb = nblk
    g = blockreduce.BLOCK
    part_fn, part_call = KernelEmitter(step, s, ctx, opts, block="part").emit()
    fin_fn, fin_call = KernelEmitter(step, s, ctx, opts, block="finish").emit()
    funcs += [part_fn, fin_fn]
    cn, cnb = sd.cdim(n), sd.cdim(nb)  # C text (size expressions under named dynamic axes)
    end = f"(b_ * {g} + {g} < {cn} ? b_ * {g} + {g} : {cn})"
    one = part_call.replace("lo_, hi_, tid_)", f"b_ * {g}, {end}, tid_)")
    loop = f"for (int64_t b_ = lo_; b_ < hi_; ++b_) {one}"
    par, par_if = parallel_clause(opts, ir.flops(), nb)
    if ctx.pooled and par:
        task = f"{step.name}_task"
        polled = f"for (int64_t b_ = lo_; b_ < hi_; ++b_) {{ if ({support.poll()}) break; {one} }}"
        funcs.append(pool_task(task, polled, opts, ctx))
        cond = par_if[len(" if(parallel: "):-1] if par_if else ""  # symbolic sizes: decided at run time
        return [pool_call(task, nb, pool_threads(opts, False), POOL_CHUNKS, cond, ctx), fin_call]
    serial = loop.replace("lo_", "0").replace("hi_", cnb).replace("tid_)", "0)")
    return [serial, fin_call]
