"""C for batch-interleaved ``gemm -> row kernel -> gemm`` groups (attention), tiled or per batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember._src.native.emit import support
from ember._src.native.emit.c_ops import literal
from ember._src.native.emit.context import CodegenOptions, EmitContext
from ember._src.native.emit.gemm import batch_offset, gemm_batch, step_layouts
from ember._src.native.emit.kernels import KernelEmitter
from ember._src.native.emit.pooled import POOL_CHUNKS, parallel_clause, pool_call, pool_task
from ember._src.native.plan import scratch as scratch_mod


def _emit_tiled_group(group: Any, index: dict[int, int], ctx: EmitContext, opts: CodegenOptions,
                      funcs: list[str], local_bufs: dict[int, int], helpers: dict[str, str]) -> list[str]:
    """A float32 group on :mod:`.group_kernel`: per batch, pack op(B1) and op(B2), then per row
    block: rows of S, the row kernel on them, rows of O."""
    from ember._src.native.emit import group_kernel

    g1, r, g2 = group
    nb, m, n, mr_ = group.nb, group.m, group.n, group.block
    helpers.setdefault("em_gk", group_kernel.c_source())
    s1 = index[id(g1)]
    pooled = ctx.pooled and group.copies > 1  # batches on the pool, a copy of the storage per thread
    kt, vp = (ctx.base(scratch_mod.buffer(ctx.plan, s1, name)) for name in scratch_mod.GROUP_PANELS)
    if pooled:
        kt, vp = (f"({base} + tid_ * {stride})" for base, stride in zip((kt, vp), group.panel_strides()))
    (ba1, (_, rsa1), (_, csa1)), (bb1, (_, rsb1), (_, csb1)), _ = step_layouts(g1)
    _, (bb2, (_, rsb2), (_, csb2)), (bo2, (_, ldo), _) = step_layouts(g2)
    np1, np2 = group_kernel.panel_width(n), group_kernel.panel_width(group.n2)
    e1, e2 = g1.eqns[0], g2.eqns[0]
    a1, b1, s_ = ctx.ptr(e1.inputs[0]), ctx.ptr(e1.inputs[1]), ctx.ptr(g1.outputs[0])
    p_, b2, o_ = ctx.ptr(e2.inputs[0]), ctx.ptr(e2.inputs[1]), ctx.ptr(g2.outputs[0])
    al1, al2 = literal(e1.params["alpha"], np.float32), literal(e2.params["alpha"], np.float32)
    rows = f"bb_ * {m} + i0_", f"bb_ * {m} + i0_ + mr_"
    fn, call = KernelEmitter(r, index[id(r)], ctx, opts, row_range=rows, local_rows=local_bufs,
                              pool=pooled).emit()
    funcs.append(fn)
    if pooled:  # this thread's copy of each group-local (float32) buffer: S, P and their reshapes
        stride = group.local_stride(g1.outputs[0])
        for base in sorted({ctx.base(ctx.plan.value_buffer[vid]) for vid in group.local}):
            mine = f"({base} + tid_ * {stride})"
            call, s_, p_ = (x.replace(base, mine) for x in (call, s_, p_))
    head = "/* " + " -> ".join(st.name for st in group) + f": one batch at a time ({nb} batches), " \
           f"{mr_}-row blocks */"
    lines = [f"for (int64_t bb_ = {'lo_' if pooled else 0}; bb_ < {'hi_' if pooled else nb}; ++bb_) {{",
            f"    float *kt_ = (float *){kt}, *vp_ = (float *){vp};",
            f"    em_gk_pack({group.k1}, {n}, {np1}, {b1} + {batch_offset(bb1)}, {rsb1}, {csb1}, kt_);",
            f"    em_gk_pack({n}, {group.n2}, {np2}, {b2} + {batch_offset(bb2)}, {rsb2}, {csb2}, vp_);",
            f"    const float *a_ = {a1} + {batch_offset(ba1)};",
            f"    float *o_ = {o_} + {batch_offset(bo2)};",
            f"    for (int64_t i0_ = 0; i0_ < {m}; i0_ += {mr_}) {{",
            f"        const int64_t mr_ = {m} - i0_ < {mr_} ? {m} - i0_ : {mr_};",
            f"        em_gk_rows(mr_, {n}, {np1}, {group.k1}, {al1}, a_ + i0_ * {rsa1}, {rsa1}, {csa1}, kt_, "
            f"{s_}, {n});",
            "        " + call,
            f"        em_gk_rows(mr_, {group.n2}, {np2}, {n}, {al2}, {p_}, {n}, 1, vp_, o_ + i0_ * {ldo}, "
            f"{ldo});",
            "    }",
            "}"]
    if not pooled:
        return [head, *lines]
    task = f"em_task{s1}"
    funcs.append(pool_task(task, "\n    ".join(lines), opts))
    if not parallel_clause(opts, 2 * nb * m * n * (group.k1 + group.n2), nb)[0]:  # too little work
        support.need("main_ctx")
        return [head, f"{task}(&em_mctx_, 0, {nb}, 0);"]
    return [head, pool_call(task, nb, f"{opts.num_threads or 0}, {group.copies}", POOL_CHUNKS)]



def emit_group(group: Any, index: dict[int, int], ctx: EmitContext, opts: CodegenOptions,
                funcs: list[str], helpers: dict[str, str]) -> list[str]:
    """A batch-interleaved ``gemm -> row kernel -> gemm`` group (.batch_groups): one loop over the
    batch running each member on that batch's slice."""
    g1, r, g2 = group
    nb, m, n = group.nb, group.m, group.n
    local_bufs = {ctx.plan.value_buffer[vid].id: n for vid in group.local}
    if group.tiled:
        return _emit_tiled_group(group, index, ctx, opts, funcs, local_bufs, helpers)
    rows = f"bb_ * {m}", f"(bb_ + 1) * {m}"
    fn, call = KernelEmitter(r, index[id(r)], ctx, opts, row_range=rows, local_rows=local_bufs).emit()
    funcs.append(fn)
    return ["/* " + " -> ".join(st.name for st in group) + f": one batch at a time ({nb} batches) */",
            f"for (int64_t bb_ = 0; bb_ < {nb}; ++bb_) {{",
            "    " + gemm_batch(g1, ctx, opts, group.local),
            "    " + call,
            "    " + gemm_batch(g2, ctx, opts, group.local),
            "}"]
