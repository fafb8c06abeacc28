"""Render a planned schedule as one C translation unit with one entry point::

    int ember_main(void **bufs, char *arena, const int64_t *dims, void **fns);

``bufs`` holds the inputs, then the captured constants, then the outputs; intermediates live in
``arena`` at the planner's offsets (compile-time constants, as are all shapes: ``dims`` is reserved
for dynamic axes). ``fns`` holds run-time function pointers in the slots :mod:`.abi` names:
``sgemm``, ``dgemm``, the Python callback that runs fallback steps, ``sgemv``, ``dgemv`` (BLAS from
SciPy), the LAPACK routines of :data:`.abi.LINALG_NAMES` (used by call steps), then the derived
constants (constants of loop bodies, which :mod:`.loops` compiles into static functions, and
prepacked weights). Call steps (:mod:`.calls`) are blocks of C emitted by their lowering, with
``static`` helpers shared across steps. The result is 0,
``k + 1`` when step ``k`` (a fallback) failed, or ``EM_INTERRUPTED`` when Ctrl-C stopped a loop or
a pooled kernel (:mod:`.interrupt`: such programs poll a flag and enter through ``em_intr_call``).

Each kernel is a ``static`` function over typed ``restrict`` pointers. Loops over dims that every
access reads contiguously are merged; the innermost loop carries ``#pragma omp simd`` (with
reduction clauses), so gcc/clang vectorize it without ``-ffast-math``; the outermost loop becomes
``#pragma omp parallel for`` when the kernel's estimated work exceeds ``parallel_threshold`` and
OpenMP is available.

Symbolic schedules (named dynamic axes, ``CodegenOptions.axes`` non-empty) compile once for every
binding: ``dims`` then holds the axis values followed by the arena offsets (the planner leaves
offsets to each binding), every symbolic size renders as a C expression over the axis values
(:func:`.symdims.cdim`), kernels take ``dims`` as their first parameter, and the parallel
decision becomes an OpenMP ``if`` clause evaluated at run time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ember._src import shapes as sh
from ember._src.native import abi
from ember._src.native.csrc import load as load_csrc
from ember._src.native.emit import c_ops, gemm_kernel
from ember._src.native.emit import calls as calls_mod
from ember._src.native.emit.c_ops import ctype, literal
from ember._src.native.plan import scratch as scratch_mod
from ember._src.native.plan import symdims as sd
from ember._src.native.plan.planner import EXTERNAL_IN, EXTERNAL_OUT, PARAMS, Buffer, MemoryPlan
from ember._src.native.rewrite import fused
from ember._src.native.runtime import interrupt, threadpool
from ember._src.native.scheduling import index as ixm
from ember._src.native.scheduling.kernel import KernelIR, Node, NodeKind, is_row_exp, node_deps
from ember._src.native.scheduling.schedule import Schedule, Step
from ember._src.program import Literal, Var

INT_MAX = 2**31 - 1
# callback ids of fallback steps inside loop bodies (those of ember_main's own steps are step indices)
BODY_CALLBACK_BASE = 1 << 20


@dataclass
class CodegenOptions:
    openmp: bool = False
    num_threads: int | None = None  # None: the OpenMP default
    workspace_threads: int = 1  # per-thread row caches the planner sized (caps such loops' teams)
    parallel_threshold: int = calls_mod.DEFAULT_PARALLEL_THRESHOLD  # loops above this cost go parallel
    simd: bool = True
    axes: tuple[str, ...] = ()  # symbolic schedule: the axes read from dims[0..len(axes))
    prepack: bool = True  # a constant B, or a repeated Array argument B, packed once for the GEMM kernel


@dataclass
class Generated:
    source: str
    fallback_steps: dict[int, Step] = field(default_factory=dict)  # callback id -> step
    # derived constants (loop bodies', prepacked weights), read through abi.const_ref(k)
    extra_consts: list[np.ndarray] = field(default_factory=list)
    # products whose B is an argument: (index in extra_consts of the 8-byte cell the runtime may
    # point at a packed copy of the argument, input index, k, n, rsb, csb); see _argument_packed_b
    packed_args: list[tuple[int, int, int, int, int, int]] = field(default_factory=list)
    emitted_bodies: set[str] = field(default_factory=set)  # loop-body functions already written
    helpers: dict[str, str] = field(default_factory=dict)  # static C helpers shared by call steps


class _Ctx:
    def __init__(self, plan: MemoryPlan, n_in: int, n_par: int):
        self.plan, self.n_in, self.n_par = plan, n_in, n_par
        # the program's constants by Var id, and where derived constants go (abi.const_ref(k)):
        # set for a top-level program, so a product with a constant B can use it prepacked
        self.consts: dict[int, Any] = {}
        self.inputs: dict[int, int] = {}  # Var id -> input index (static top-level programs)
        self.gen: Generated | None = None
        # parallel loops run on ember's thread pool (.threadpool): set for ember_main's own steps,
        # whose chunk functions unpack bufs/arena/dims/fns from an em_main_ctx (not in loop bodies)
        self.pooled = False
        self.top = False  # ember_main's own steps: a loop step returns EM_INTERRUPTED once stopped

    in_body = False  # a loop body's function (loops._BodyCtx): returns void, see _fallback_call

    def base(self, b: Buffer) -> str:
        if b.cls == EXTERNAL_IN:
            return f"((char *)bufs[{b.index}])"
        if b.cls == PARAMS:
            return f"((char *)bufs[{self.n_in + b.index}])"
        if b.cls == EXTERNAL_OUT:
            return f"((char *)bufs[{self.n_in + self.n_par + b.index}])"
        return f"(arena + {b.offset})"  # an int, or "dims[k]" in a symbolic plan

    def inline_gemm(self, step: Step, has_c: bool, alpha: float, beta: float) -> list[str] | None:
        """C loops computing a ``gemm`` step in place of the BLAS call, or None (BLAS). Loop bodies
        (:mod:`.loops`) inline small products: a BLAS call per iteration costs more than them."""
        return None

    def ptr(self, v: Var, dtype: Any = None) -> str:
        b = self.plan.value_buffer[v.id]
        t = ctype(dtype if dtype is not None else v.aval.dtype)
        return f"(({t} *){self.base(b)})"


def emit_steps(sched: Schedule, plan: MemoryPlan, ctx: _Ctx, opts: CodegenOptions, gen: Generated,
               funcs: list[str]) -> list[str]:
    """The statements running ``sched``'s steps in order (indented for a function body); static
    helper functions (kernels, loop bodies) are appended to ``funcs``."""
    body: list[str] = []
    index = {id(st): s for s, st in enumerate(sched.steps)}
    for s, step in enumerate(sched.steps):
        body.append(f"    /* {step} */")
        if step.group is not None:
            if step is step.group[0]:
                lines = _emit_group(step.group, index, ctx, opts, funcs, gen.helpers)
                body.extend("    " + ln for ln in lines)
            continue
        if step.kind == "kernel":
            blocked = _block_reduce_kernel(step, s, ctx, opts, funcs)
            if blocked is not None:
                body.extend("    " + ln for ln in blocked)
                continue
            pooled = _pooled_kernel(step, s, ctx, opts, funcs)
            if pooled is not None:
                body.append("    " + pooled)
                continue
            fn, call = _KernelEmitter(step, s, ctx, opts).emit()
            funcs.append(fn)
            body.append("    " + call)
        elif step.kind == "gemm":
            body.extend("    " + ln for ln in _gemm(step, ctx, opts, funcs, s))
        elif step.kind == "call":
            body.extend("    " + ln for ln in calls_mod.emit_step(step, s, ctx, opts, gen.helpers))
        elif step.kind == "fallback":
            body.append("    " + _fallback_call(step, s, ctx, gen))
        elif step.kind in ("loop", "cond"):
            from ember._src.native.scheduling import loops
            n_cb = len(gen.fallback_steps)
            body.extend("    " + ln for ln in loops.emit_step(step, s, ctx, opts, gen, funcs))
            if not ctx.in_body and len(gen.fallback_steps) > n_cb:  # a body calls back: did it fail?
                body.append(f"    if (em_cb_failed_) {{ em_cb_failed_ = 0; return {s + 1}; }}")
            if ctx.top and interrupt.POLLING:  # stopped by Ctrl-C (runtime/interrupt.py): skip the rest
                body.append(f"    if ({interrupt.POLL}) return EM_INTERRUPTED;")
    return body


def _fallback_call(step: Step, s: int, ctx: _Ctx, gen: Generated) -> str:
    """The statement running fallback step ``s`` through the Python callback (ABI slot
    ``callback``). In
    ember_main a failure returns ``s + 1``; a loop body (a void function, allowed only effectful
    fallbacks such as debug callbacks) sets ``em_cb_failed_`` instead, which ember_main checks after
    the loop step (the backend skips the callbacks that follow a failed one in the same call)."""
    ptrs = [ctx.ptr(a) for a in step.inputs if isinstance(a, Var)]
    ptrs += [ctx.ptr(v) for v in step.outputs]
    arr = ", ".join(f"(void *){x}" for x in ptrs) or "0"
    cb = f"((em_cb_t){abi.fn_ref('callback')})"
    if not ctx.in_body:
        gen.fallback_steps[s] = step
        return f"{{ void *a_[] = {{{arr}}}; if ({cb}({s}, a_)) return {s + 1}; }}"
    cid = BODY_CALLBACK_BASE + len(gen.fallback_steps)
    gen.fallback_steps[cid] = step
    return f"{{ void *a_[] = {{{arr}}}; if ({cb}({cid}, a_)) em_cb_failed_ = 1; }}"


# chunks per thread of a pooled kernel's rows: a late thread's share is taken over in pieces
POOL_CHUNKS = 4
# a split vectorized loop (a 1-D map) is cut at multiples of this many elements: two threads never
# write into one cache line (64 elements span whole lines when the array is 64-byte aligned), and
# every element but the array's last few runs in the vector body, as on one thread, so a vector
# code path that rounded differently from the scalar remainder could not make results depend on
# the thread count
POOL_GRAIN = 64


def _pool_threads(opts: CodegenOptions, scratch: bool) -> str:
    """``nt, cap`` arguments of ``em_par``: the configured thread count (0: the OpenMP default),
    capped by the planned per-thread row caches when the loop uses them."""
    return f"{opts.num_threads or 0}, {opts.workspace_threads if scratch else 0}"


def _pool_task(name: str, statement: str, opts: CodegenOptions) -> str:
    """A chunk function of ember_main's pooled loop: ``statement`` (which may read ``lo_``,
    ``hi_``, ``tid_``, ember_main's parameters and the axis values) on rows ``[lo_, hi_)``."""
    decls = "".join(ln.strip() + "\n    " for ln in _axis_decls(opts))
    head = f"static EM_TASK_ATTR void {name}{{}}(void *c_, int64_t lo_, int64_t hi_, int64_t tid_) {{{{\n"
    body = (head.format("_rows" if interrupt.POLLING else "")
            + f"    EM_MAIN_UNPACK(c_) (void)lo_; (void)hi_; (void)tid_;\n"
            f"    if ({interrupt.poll()}) return;\n    {decls}{statement}\n}}\n")
    if not interrupt.POLLING:
        return body
    # a pool worker polls the flag of the call it works for (the caller's, in em_main_ctx), so a
    # chunk stops on Ctrl-C wherever it runs; restored after, as the worker serves other calls
    return (body + head.format("")
            + f"    volatile int *const outer_ = em_intr_flag_;\n"
            f"    if (((em_main_ctx *)c_)->intr) em_intr_flag_ = ((em_main_ctx *)c_)->intr;\n"
            f"    {name}_rows(c_, lo_, hi_, tid_);\n"
            f"    em_intr_flag_ = outer_;\n}}\n")


def _pool_call(task: str, rows: Any, threads: str, chunks: int, cond: str = "") -> str:
    """ember_main's statement running ``task`` over ``rows`` on the pool (serially unless the
    run-time condition ``cond`` holds, when given)."""
    par = f"em_par({task}, &em_mctx_, {sd.cdim(rows)}, {threads}, {chunks});"
    if not cond:
        return par
    return f"if ({cond}) {par} else {task}(&em_mctx_, 0, {sd.cdim(rows)}, 0);"


def _pooled_kernel(step: Step, s: int, ctx: _Ctx, opts: CodegenOptions, funcs: list[str]) -> str | None:
    """A kernel whose flattened outer loop goes parallel, as a chunk function on the thread pool
    (:mod:`.threadpool`): the kernel takes rows ``[lo_, hi_)`` and the thread id for its row
    caches; ember_main calls ``em_par``. None where the kernel is not such a loop (split and
    accumulating kernels, one-row kernels, loop bodies), or runs serially: those stay as before."""
    ir = step.ir
    if not ctx.pooled or ir is None or ir.parts or ir.natural is not None:
        return None
    grain = 1
    if ir.n_outer:
        rows = ir.outer_size
        range_: tuple[str, str] | None = ("lo_", "hi_")
    else:  # a map: one loop nest, no reductions, whose first loop is split
        if ir.n_loops != 1 or ir.reduces or ir.scratch or len(ir.domain) == 0:
            return None
        inner = _KernelEmitter(step, s, ctx, opts).inner_sizes
        rows, range_ = inner[0], None
        if len(inner) == 1:  # the split loop is the vectorized one: see POOL_GRAIN
            grain = POOL_GRAIN
    go, par_if = _parallel(opts, ir.flops(), rows)
    if not go:
        return None
    fn, call = _KernelEmitter(step, s, ctx, opts, row_range=range_, pool=True).emit()
    funcs.append(fn)
    task = f"{step.name}_task"
    if grain != 1:
        n = sd.cdim(rows)
        hi = f"(hi_ * {grain} < {n} ? hi_ * {grain} : {n})"
        call = call.replace("lo_, hi_, tid_)", f"lo_ * {grain}, {hi}, tid_)")
        rows = (rows + grain - 1) // grain
    funcs.append(_pool_task(task, call, opts))
    cond = par_if[len(" if(parallel: "):-1] if par_if else ""
    return _pool_call(task, rows, _pool_threads(opts, bool(ir.scratch)), POOL_CHUNKS, cond)


def _block_reduce_kernel(step: Step, s: int, ctx: _Ctx, opts: CodegenOptions,
                         funcs: list[str]) -> list[str] | None:
    """A whole-array reduction kernel in fixed blocks (:mod:`.blockreduce`): the part function per
    block (on the thread pool at the top level when the work is large enough, else in order), then
    the kernel combining the partials. None where the planner gave the kernel no partials or its
    loop is not one merged loop."""
    from ember._src.native.scheduling import blockreduce

    ir = step.ir
    nblk = blockreduce.blocks(ir)
    if nblk is None or any(scratch_mod.buffer(ctx.plan, s, blockreduce.partial_key(r.rid)) is None
                           for r in ir.reduces):
        return None
    if len(_KernelEmitter(step, s, ctx, opts).inner_names) != 1:
        return None
    n, nb = nblk
    g = blockreduce.BLOCK
    part_fn, part_call = _KernelEmitter(step, s, ctx, opts, block="part").emit()
    fin_fn, fin_call = _KernelEmitter(step, s, ctx, opts, block="finish").emit()
    funcs += [part_fn, fin_fn]
    end = f"(b_ * {g} + {g} < {n} ? b_ * {g} + {g} : {n})"
    one = part_call.replace("lo_, hi_, tid_)", f"b_ * {g}, {end}, tid_)")
    loop = f"for (int64_t b_ = lo_; b_ < hi_; ++b_) {one}"
    if ctx.pooled and _parallel(opts, ir.flops(), nb)[0]:
        task = f"{step.name}_task"
        polled = f"for (int64_t b_ = lo_; b_ < hi_; ++b_) {{ if ({interrupt.poll()}) break; {one} }}"
        funcs.append(_pool_task(task, polled, opts))
        return [_pool_call(task, nb, _pool_threads(opts, False), POOL_CHUNKS), fin_call]
    serial = loop.replace("lo_", "0").replace("hi_", str(nb)).replace("tid_)", "0)")
    return [serial, fin_call]


def generate(sched: Schedule, plan: MemoryPlan, opts: CodegenOptions) -> Generated:
    p = sched.program
    ctx = _Ctx(plan, len(p.invars), len(p.constvars))
    funcs: list[str] = []
    gen = Generated("")
    ctx.consts, ctx.gen = {v.id: c for v, c in zip(p.constvars, p.consts)}, gen
    ctx.pooled = opts.openmp and opts.num_threads != 1
    ctx.top = True
    if not opts.axes:
        ctx.inputs = {v.id: i for i, v in enumerate(p.invars)}
    body = emit_steps(sched, plan, ctx, opts, gen, funcs)
    pooled = any("&em_mctx_" in ln for ln in body)
    polls = any(interrupt.POLL in text for text in (*body, *funcs))
    intr = "em_intr_flag_" if polls else "0"  # the flag this call's chunks poll, on any thread
    pool = [f"    em_main_ctx em_mctx_ = {{bufs, arena, dims, fns, {intr}}};"] if pooled else []
    params = "(void **bufs, char *arena, const int64_t *dims, void **fns)"
    main = []
    if polls:  # entered and left through the interrupt runtime (native/runtime/interrupt.py); the steps
        # follow the entry point, as in a program that does not poll
        main = [f"static int em_main_body{params};", f"int ember_main{params} {{",
                "    return em_intr_call(em_main_body, bufs, arena, dims, fns);", "}"]
    main += [f"{'static int em_main_body' if polls else 'int ember_main'}{params} {{",
             "    (void)bufs; (void)arena; (void)dims; (void)fns;", *_axis_decls(opts), *pool, *body,
             "    return 0;", "}"]
    code = "".join(gen.helpers.values()) + "\n".join(funcs) + "\n" + "\n".join(main) + "\n"
    extra = abi.CALLBACK_C_TYPEDEF
    if "em_cb_failed_" in code:  # per thread: two calls of one shared library may run at once
        extra += "static _Thread_local int em_cb_failed_;\n"
    if polls:
        extra += interrupt.c_helpers()
    if "em_floordiv64" in code or "em_mod64" in code or "em_ceil_sqrt64" in code:
        extra += sd.C_HELPERS
    if "em_sk_fn()" in code or "em_skp_fn()" in code:
        extra += gemm_kernel.c_helpers(gemm_kernel.kernel_symbol() or "")
    if "em_exp_row_f32(" in code:  # float32 exps of row kernels, a row at a time
        extra += load_csrc("vexp.h")
    if "EM_TASK_ATTR" in code:  # chunk functions (run on the pool, or called serially)
        extra += threadpool.c_helpers()
    if "em_gemm_" in code:
        complex_ = "em_gemm_c" in code or "em_gemm_sv_c" in code
        extra += _blas_typedefs([v for d, v in GEMM_TYPES.items() if complex_ or d.kind == "f"])
        for t, name, pre in GEMM_TYPES.values():
            for fn, text in ((f"em_gemm_{name}", _GEMM_FN), (f"em_gemm_sv_{name}", _GEMM_SV_FN)):
                if f"{fn}(" in code:
                    extra += (text.replace("em_gemm_T", fn)
                              .replace("em_Sgemv_t", f"em_{pre}gemv_t")
                              .replace("em_Sgemm_t", f"em_{pre}gemm_t")
                              .replace("GEMV", str(abi.slot(pre + "gemv")))
                              .replace("GEMM", str(abi.slot(pre + "gemm"))).replace("ELT", t))
    # the prelude's #include lines are chosen for everything after them (helpers included)
    gen.source = c_ops.prelude_for(extra + code) + extra + code
    return gen


def _axis_decls(opts: CodegenOptions, indent: str = "    ") -> list[str]:
    """``const int64_t em_d_batch = dims[0];`` for each axis of a symbolic schedule."""
    return [f"{indent}const int64_t {sd.axis_c_name(a)} = dims[{k}]; (void){sd.axis_c_name(a)};"
            for k, a in enumerate(opts.axes)]


def _parallel(opts: CodegenOptions, work: Any, extent: Any) -> tuple[bool, str]:
    """(whether to emit a parallel pragma, its ``if`` clause): static sizes decide now, symbolic
    ones at run time. The clause names ``parallel`` so that a combined ``parallel for simd`` stays
    vectorized when it runs on one thread."""
    if not opts.openmp:
        return False, ""
    if not sd.is_sym(work) and not sd.is_sym(extent):
        return work >= opts.parallel_threshold and extent >= 2, ""
    return True, f" if(parallel: {sd.cdim(work)} >= {opts.parallel_threshold} && {sd.cdim(extent)} >= 2)"


# ---------------------------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------------------------


class _ExprNames(dict):
    """Node id -> C expression, resolved on demand (constants inline, reductions by name)."""

    def __init__(self, emitter: _KernelEmitter):
        super().__init__()
        self.emitter = emitter

    def __missing__(self, nid: int) -> str:
        return self.emitter.expr(nid)


class _KernelEmitter:
    def __init__(self, step: Step, index: int, ctx: _Ctx, opts: CodegenOptions, ir: KernelIR | None = None,
                 outer_exprs: list[ixm.Ix] | None = None, row_range: tuple[str, str] | None = None,
                 local_rows: dict[int, int] | None = None, pool: bool = False, block: str | None = None):
        self.step, self.s, self.ctx, self.opts = step, index, ctx, opts
        # a whole-array reduction in blocks (.blockreduce): "part" reduces elements [lo_, hi_) of
        # one block into its partials, "finish" combines the partials and computes the rest
        self.block = block
        pool = pool or block == "part"
        self.fname = step.name + ("_part" if block == "part" else "")
        # a chunk of a pooled loop: rows [lo_, hi_) as thread tid_ (the function takes tid_ too)
        self.pool = pool
        # rows [lo_, hi_) of the flattened outer loops only (the function takes lo_, hi_; the
        # call passes these two C expressions): a batch-interleaved row kernel (.batch_groups);
        # buffers in local_rows (id -> row length) hold rows lo_.. only (indices shift by lo_ rows)
        self.row_range = row_range
        self.local_rows = local_rows or {}
        self.ir: KernelIR = ir or step.ir  # type: ignore[assignment]
        ir = self.ir
        self.nodes = ir.nodes
        self.inner = frozenset(ir.dvars[ir.n_outer:])
        self.params: dict[tuple[int, str], str] = {}  # (buffer id, dtype) -> C name
        self.param_written: dict[tuple[int, str], bool] = {}
        self.lines: list[str] = []
        self.ind = 1
        # loop merging
        exprs = self._all_exprs()
        n = ir.n_outer
        og = ixm.mergeable_groups(ir.dvars[:n], ir.domain[:n], outer_exprs or exprs)
        ig = [[i + n for i in g] for g in ixm.mergeable_groups(ir.dvars[n:], ir.domain[n:], exprs)]
        self.outer_groups = [[ir.dvars[i] for i in g] for g in og] if n else []
        self.inner_groups = [[ir.dvars[i] for i in g] for g in ig] if ir.domain[n:] else []
        self.outer_sizes = [math.prod(ir.domain[i] for i in g) for g in og] if n else []
        self.inner_sizes = [math.prod(ir.domain[i] for i in g) for g in ig] if ir.domain[n:] else []
        self.outer_names = [f"o{k}" for k in range(len(self.outer_groups))]
        self.inner_names = [f"i{k}" for k in range(len(self.inner_groups))]
        self.groups = self.outer_groups + self.inner_groups
        self.gnames = self.outer_names + self.inner_names
        self.names = {nm: nm for nm in self.gnames}
        # dims inside opaque index terms never merge: render them by their loop's name
        self.names.update({g[0]: nm for g, nm in zip(self.groups, self.gnames) if len(g) == 1})
        self.parallel_outer, self.par_if = _parallel(opts, ir.flops(), ir.outer_size) if n else (False, "")
        self.parallel_inner = False
        # a pooled kernel without outer loops (a map): its first inner loop runs [lo_, hi_)
        self.pool_inner = pool and not n
        if row_range is not None:
            self.parallel_outer = False
        elif not n and self.inner_sizes and not self.pool_inner:
            self.parallel_inner, self.par_if = _parallel(opts, ir.flops(), self.inner_sizes[0])
        if opts.num_threads == 1:  # one thread: no OpenMP region (its start costs a call per kernel)
            self.parallel_outer = self.parallel_inner = False
            self.par_if = ""

    def _all_exprs(self) -> list[ixm.Ix]:
        out = []
        for n in self.ir.nodes:
            out.extend(n.index_exprs())
        out.extend(r.offset for r in self.ir.roots)
        return out

    # -- helpers ------------------------------------------------------------------------------
    def ix(self, e: ixm.Ix) -> str:
        m = ixm.merge_vars(e, self.groups, self.gnames)
        return ixm.render(m, self.names, _ExprNames(self))

    def index(self, v: Var, e: ixm.Ix) -> str:
        """C index of ``e`` into value ``v``'s buffer (shifted for a buffer holding rows lo_..)."""
        shift = self.local_rows.get(self.ctx.plan.value_buffer[v.id].id)
        return self.ix(e) if shift is None else f"{self.ix(e)} - lo_ * {shift}"

    def param(self, v: Var, written: bool = False) -> str:
        b = self.ctx.plan.value_buffer[v.id]
        key = (b.id, str(np.dtype(v.aval.dtype)))
        name = self.params.get(key)
        if name is None:
            name = self.params[key] = f"p{b.id}_{ctype(v.aval.dtype).replace('_t', '')}"
        self.param_written[key] = self.param_written.get(key, False) or written
        return name

    def scratch_param(self, name: str, dtype: Any) -> str:
        """The kernel parameter of this step's scratch ``name`` (:mod:`.scratch`) as ``dtype``."""
        b = scratch_mod.buffer(self.ctx.plan, self.s, name)
        key = (b.id, str(np.dtype(dtype)))
        self.params[key] = f"w{b.id}"
        self.param_written[key] = True
        return f"w{b.id}"

    def w(self, line: str) -> None:
        self.lines.append("    " * self.ind + line)

    def is_inner(self, n: Node) -> bool:
        return bool(n.vars & self.inner)

    def expr(self, nid: int) -> str:
        n = self.nodes[nid]
        if n.kind is NodeKind.CONST:
            return literal(n.attrs.value, n.dtype)
        if n.kind is NodeKind.REDUCE:
            return f"r{n.attrs.rid}"
        return f"t{nid}"

    def emit_node(self, nid: int) -> None:
        n = self.nodes[nid]
        t = ctype(n.dtype)
        if n.kind in (NodeKind.CONST, NodeKind.REDUCE):
            return
        if n.kind is NodeKind.LOAD:
            v = self._var(n.attrs.var)
            off = self.index(v, n.attrs.offset)
            read = f"{self.param(v)}[{off}]"
            if n.attrs.checked:  # read through an operand that may be empty: in-bounds reads only
                size = sd.cdim(sh.size(v.aval.shape))
                read = f"((uint64_t)({off}) < (uint64_t){size} ? {read} : ({t})0)"
            self.w(f"const {t} t{nid} = {read};")
        elif n.kind is NodeKind.IOTA:
            self.w(f"const {t} t{nid} = ({t})({self.ix(n.attrs.index)});")
        elif n.kind is NodeKind.PRED:
            conds = []
            for e, lo, hi, m in n.attrs.conds:
                s = self.ix(e)
                parts = []
                if lo is not None:
                    parts.append(f"({s}) >= {sd.cdim(lo)}")
                if hi is not None:
                    parts.append(f"({s}) <= {sd.cdim(hi)}")
                if m != 1:
                    parts.append(f"({s}) % {sd.cdim(m)} == 0")
                conds.append(" && ".join(parts) or "1")
            self.w(f"const uint8_t t{nid} = ({' && '.join(conds)});")
        elif n.kind is NodeKind.OP:
            a = n.attrs
            args = [self.expr(x) for x in n.args]
            text = c_ops.render_op(a.name, args, [np.dtype(d) for d in a.in_dtypes], n.dtype, dict(a.params))
            self.w(f"const {t} t{nid} = {text};")
        else:
            raise AssertionError(n.kind)

    def _var(self, vid: int) -> Var:
        for v in self.ir.inputs:
            if v.id == vid:
                return v
        raise KeyError(vid)

    def closure(self, sinks: list[int], inner: bool, stop: set[int]) -> list[int]:
        """Nodes needed by ``sinks`` at the given level (inner loop or row), in topological order."""
        seen: set[int] = set()
        stack = list(sinks)
        while stack:
            nid = stack.pop()
            if nid in seen:
                continue
            n = self.nodes[nid]
            if self.is_inner(n) != inner:
                continue
            seen.add(nid)
            if nid not in stop:  # stop nodes are included but not expanded
                stack.extend(node_deps(n))
        return sorted(seen)

    def row_deps(self, sinks: list[int]) -> list[int]:
        """Row-level nodes that the inner closure of ``sinks`` (or the sinks) need."""
        inner = self.closure(sinks, True, set())
        frontier = [d for nid in inner for d in node_deps(self.nodes[nid])] + list(sinks)
        return self.closure(frontier, False, set())

    # -- loops --------------------------------------------------------------------------------
    def open_loops(self, names: list[str], sizes: list[int], pragma_first: str | None,
                   simd_last: str | None) -> int:
        for k, (nm, sz) in enumerate(zip(names, sizes)):
            if k == 0 and pragma_first:
                self.w(pragma_first)
            if k == len(names) - 1 and simd_last is not None and not (k == 0 and pragma_first):
                self.w(simd_last)
            if self.pool_inner and self.inner_names and nm == self.inner_names[0]:
                self.w(f"for (int64_t {nm} = lo_; {nm} < hi_; ++{nm}) {{")
            else:
                self.w(f"for (int64_t {nm} = 0; {nm} < {sd.cdim(sz)}; ++{nm}) {{")
            self.ind += 1
        return len(names)

    def open_row_range(self) -> int:
        """One loop over the flattened rows [lo_, hi_), the outer loop indices derived from it."""
        self.w("for (int64_t r_ = lo_; r_ < hi_; ++r_) {")
        self.ind += 1
        if self.pool:  # a pooled kernel's chunk: Ctrl-C stops it between rows (native/runtime/interrupt.py)
            self.w(f"if ({interrupt.poll()}) break;")
        inner = 1
        decls = []
        for k in range(len(self.outer_names) - 1, -1, -1):
            size = self.outer_sizes[k]
            v = "r_" if inner == 1 else f"r_ / {sd.cdim(inner)}"
            if k > 0:
                v = f"({v}) % {sd.cdim(size)}"
            decls.append(f"const int64_t {self.outer_names[k]} = {v};")
            inner *= size
        for d in reversed(decls):
            self.w(d)
        return 1

    def close(self, k: int) -> None:
        for _ in range(k):
            self.ind -= 1
            self.w("}")

    def emit(self) -> tuple[str, str]:
        if self.ir.parts:
            return self.emit_split()
        if self.ir.natural is not None:
            self.emit_accumulate()
            return self.finish()
        ir = self.ir
        if self.parallel_outer:
            nt = self.opts.num_threads
            if not nt and ir.scratch:  # per-thread row caches: at most the planned team, fewer if
                w = self.opts.workspace_threads  # OMP_NUM_THREADS / omp_set_num_threads ask for fewer
                nt = f"omp_get_max_threads() < {w} ? omp_get_max_threads() : {w}"
            nt = f" num_threads({nt})" if nt else ""
            col = f" collapse({len(self.outer_names)})" if len(self.outer_names) > 1 else ""
            pragma = f"#pragma omp parallel for{col}{nt}{self.par_if} schedule(static)"
        else:
            pragma = None
        if self.row_range is not None:
            depth = self.open_row_range()
        else:
            depth = self.open_loops(self.outer_names, self.outer_sizes, pragma, None)
        if not self.outer_names:
            self.w("{")
            self.ind += 1
            depth = 1
        emitted_row: set[int] = set()
        if self.parallel_outer and ir.scratch:
            self.w("const int64_t tid_ = omp_get_thread_num();")
        for q in range(ir.n_loops):
            sinks = ir.loop_sinks[q]
            if self.block == "finish":
                self.emit_combine(q)
                continue
            for nid in self.row_deps(sinks):
                if nid not in emitted_row:
                    self.emit_node(nid)
                    emitted_row.add(nid)
            self.emit_loop(q, sinks)
        row_roots = [r for r in ir.roots if not r.full] if self.block != "part" else []
        for nid in self.closure([r.node for r in row_roots], False, set()):
            if nid not in emitted_row:
                self.emit_node(nid)
                emitted_row.add(nid)
        for r in row_roots:
            self.w(f"{self.param(r.var, True)}[{self.index(r.var, r.offset)}] = {self.expr(r.node)};")
        self.close(depth)
        return self.finish()

    def emit_combine(self, q: int) -> None:
        """``finish`` mode: loop ``q``'s reductions from the partials of its blocks, in block order."""
        from ember._src.native.scheduling import blockreduce

        nb = blockreduce.blocks(self.ir)[1]
        for r in (r for r in self.ir.reduces if r.phase == q + 1):
            t, flt = ctype(r.dtype), r.kind in ("max", "min") and c_ops.is_float(r.dtype)
            part = self.scratch_param(blockreduce.partial_key(r.rid), r.dtype)
            if r.kind == "sum" and (c_ops.is_float(r.dtype) or c_ops.is_complex(r.dtype)):
                # pairwise over the block partials (in place, the same tree for every thread count):
                # a running total of block sums loses the small ones once it is 2^24 blocks large
                self.w(f"for (int64_t w_ = 1; w_ < {nb}; w_ *= 2)")
                self.w(f"    for (int64_t b_ = 0; b_ + w_ < {nb}; b_ += 2 * w_) "
                       f"{part}[b_] += {part}[b_ + w_];")
                self.w(f"const {ctype(r.out_dtype)} r{r.rid} = ({ctype(r.out_dtype)}){part}[0];")
                continue
            self.w(f"{t} a{r.rid} = {c_ops.reduce_init(r.kind, r.dtype)};")
            if flt:
                self.w(f"int n{r.rid} = 0;")
            self.w(f"for (int64_t b_ = 0; b_ < {nb}; ++b_) {{")
            self.w("    " + c_ops.reduce_update(r.kind, f"a{r.rid}", f"{part}[b_]", r.dtype,
                                                f"n{r.rid}" if flt else None))
            self.w("}")
            ot = ctype(r.out_dtype)
            val = f"n{r.rid} ? ({ot})NAN : ({ot})a{r.rid}" if flt else f"({ot})a{r.rid}"
            self.w(f"const {ot} r{r.rid} = {val};")

    def emit_split(self) -> tuple[str, str]:
        """Split loops (:mod:`.concat_split`): the shared outer loops once, then each part's
        loop nest in its own block, all writing into this function's lines and parameters."""
        parts = self.ir.parts or []
        exprs = [x for p in parts
                 for x in _KernelEmitter(self.step, self.s, self.ctx, self.opts, p)._all_exprs()]
        ems = [_KernelEmitter(self.step, self.s, self.ctx, self.opts, p, exprs) for p in parts]
        first = ems[0]
        for em in ems:
            em.params, em.param_written, em.lines = self.params, self.param_written, self.lines
        self.outer_names, self.outer_sizes = first.outer_names, first.outer_sizes
        pragma = None
        if first.outer_names and self.opts.openmp:
            go, par_if = _parallel(self.opts, self.ir.flops(), first.outer_sizes[0])
            if go:
                nt = f" num_threads({self.opts.num_threads})" if self.opts.num_threads else ""
                pragma = f"#pragma omp parallel for{nt}{par_if} schedule(static)"
        depth = self.open_loops(first.outer_names, first.outer_sizes, pragma, None)
        for em in ems:
            em.ind = self.ind
            em.w("{")
            em.ind += 1
            if not first.outer_names:  # parts run one after another: each may go parallel itself
                em.parallel_inner, em.par_if = _parallel(self.opts, self.ir.flops(), em.inner_sizes[0]) \
                    if em.inner_sizes else (False, "")
            for q in range(em.ir.n_loops):
                sinks = em.ir.loop_sinks[q]
                for nid in em.row_deps(sinks):
                    em.emit_node(nid)
                em.emit_loop(q, sinks)
            em.ind -= 1
            em.w("}")
        self.close(depth)
        return self.finish()

    def finish(self) -> tuple[str, str]:
        sig = self.signature()
        decls = _axis_decls(self.opts)
        if decls:  # symbolic: the kernel reads the axis values from dims
            sig = "const int64_t *dims" + (", " + sig if sig != "void" else "")
        if self.row_range is not None or self.pool_inner:
            sig = ("" if sig == "void" else sig + ", ") + "int64_t lo_, int64_t hi_"
            if self.pool:
                sig += ", int64_t tid_"
        fn = f"static void {self.fname}({sig}) {{\n" + "\n".join(decls + self.lines) + "\n}\n"
        args = ["dims"] if decls else []
        for (bid, dts), _name in self.params.items():
            b = next(b for b in self.ctx.plan.buffers if b.id == bid)
            args.append(f"({ctype(np.dtype(dts))} *){self.ctx.base(b)}")
        if self.row_range is not None:
            args += list(self.row_range)
        elif self.pool_inner:
            args += ["lo_", "hi_"]
        if self.pool:
            args.append("tid_")
        return fn, f"{self.fname}({', '.join(args)});"

    def emit_accumulate(self) -> None:
        """Reductions over non-trailing axes: per-row accumulators (workspace), one loop nest in
        the operand's own axis order (innermost loop contiguous, vectorized), then the epilogue."""
        ir = self.ir
        n = ir.n_outer
        kshape = ir.domain[:n]
        kidx = ixm.linearize([ixm.Ix.var(d) for d in ir.dvars[:n]], kshape)
        accs = {r.rid: self.scratch_param(scratch_mod.accumulators(r.rid), r.dtype) for r in ir.reduces}
        ksize = math.prod(kshape)
        # 1. initialize
        self.w(f"for (int64_t k_ = 0; k_ < {sd.cdim(ksize)}; ++k_) {{")
        for r in ir.reduces:
            self.w(f"    {accs[r.rid]}[k_] = {c_ops.reduce_init(r.kind, r.dtype)};")
        self.w("}")
        # 2. accumulate, loops in natural order
        std = (self.groups, self.gnames, self.names)
        size_of = dict(zip(ir.dvars, ir.domain))
        nat = ir.natural
        groups = ixm.mergeable_groups(nat, [size_of[d] for d in nat], self._all_exprs() + [kidx])
        self.groups = [[nat[i] for i in g] for g in groups]
        self.gnames = [f"q{k}" for k in range(len(groups))]
        self.names = {nm: nm for nm in self.gnames}
        self.names.update({g[0]: nm for g, nm in zip(self.groups, self.gnames) if len(g) == 1})
        sizes = [math.prod(size_of[d] for d in g) for g in self.groups]
        outer = set(ir.dvars[:n])
        par = None
        go, par_if = _parallel(self.opts, ir.flops(), sizes[0])
        if go and set(self.groups[0]) <= outer:
            nt = f" num_threads({self.opts.num_threads})" if self.opts.num_threads else ""
            par = f"#pragma omp parallel for{nt}{par_if} schedule(static)"
        # trailing loops over reduced dims only revisit one accumulator: they reduce into scalars
        split = len(self.groups)
        while split > 0 and not set(self.groups[split - 1]) & outer:
            split -= 1
        simd = "#pragma omp simd" if self.opts.simd else None
        depth = self.open_loops(self.gnames[:split], sizes[:split], par,
                                simd if split == len(sizes) else None)
        k = self.ix(kidx)
        local = split < len(sizes)
        if local:
            clauses = []
            for r in ir.reduces:
                self.w(f"{ctype(r.dtype)} l{r.rid} = {c_ops.reduce_init(r.kind, r.dtype)};")
                clauses.append(f"reduction({c_ops.OMP_REDUCTION[r.kind]}:l{r.rid})")
                if r.kind in ("max", "min") and c_ops.is_float(r.dtype):
                    self.w(f"int n{r.rid} = 0;")
                    clauses.append(f"reduction(|:n{r.rid})")
            lsimd = f"#pragma omp simd {' '.join(clauses)}" if self.opts.simd else None
            ldepth = self.open_loops(self.gnames[split:], sizes[split:], None, lsimd)
        for nid in self.full_closure([r.input for r in ir.reduces]):
            self.emit_node(nid)
        for r in ir.reduces:
            x = self.expr(r.input)
            if local:
                flag = f"n{r.rid}" if r.kind in ("max", "min") and c_ops.is_float(r.dtype) else None
                self.w(c_ops.reduce_update(r.kind, f"l{r.rid}", x, r.dtype, flag))
            else:
                self._acc_update(r, f"{accs[r.rid]}[{k}]", x)
        if local:
            self.close(ldepth)
            for r in ir.reduces:
                x = f"l{r.rid}"
                if r.kind in ("max", "min") and c_ops.is_float(r.dtype):
                    self.w(f"if (n{r.rid}) l{r.rid} = ({ctype(r.dtype)})NAN;")
                self._acc_update(r, f"{accs[r.rid]}[{k}]", x)
        self.close(depth)
        # 3. epilogue per row
        self.groups, self.gnames, self.names = std
        depth = self.open_loops(self.outer_names, self.outer_sizes, None, None)
        k = self.ix(kidx)
        for r in ir.reduces:
            t = ctype(r.out_dtype)
            self.w(f"const {t} r{r.rid} = ({t}){accs[r.rid]}[{k}];")
        row_roots = [r for r in ir.roots if not r.full]
        for nid in self.closure([r.node for r in row_roots], False, set()):
            self.emit_node(nid)
        for r in row_roots:
            self.w(f"{self.param(r.var, True)}[{self.index(r.var, r.offset)}] = {self.expr(r.node)};")
        self.close(depth)

    def _acc_update(self, r: Any, a: str, x: str) -> None:
        if r.kind in ("max", "min"):
            cmp = ">" if r.kind == "max" else "<"
            nan = f" || {x} != {x}" if c_ops.is_float(r.dtype) else ""
            self.w(f"{a} = ({x} {cmp} {a}{nan}) ? {x} : {a};")
        else:
            self.w(c_ops.reduce_update(r.kind, a, x, r.dtype, None))

    def full_closure(self, sinks: list[int]) -> list[int]:
        seen: set[int] = set()
        stack = list(sinks)
        while stack:
            nid = stack.pop()
            if nid in seen:
                continue
            seen.add(nid)
            stack.extend(node_deps(self.nodes[nid]))
        return sorted(seen)

    def signature(self) -> str:
        by_buf: dict[int, int] = {}
        for bid, _ in self.params:
            by_buf[bid] = by_buf.get(bid, 0) + 1
        parts = []
        for (bid, dts), name in self.params.items():
            const = "" if self.param_written[(bid, dts)] else "const "
            restrict = "restrict " if by_buf[bid] == 1 else ""
            parts.append(f"{const}{ctype(np.dtype(dts))} *{restrict}{name}")
        return ", ".join(parts) or "void"

    def emit_row_exps(self, q: int, sinks: list[int], stop: set[int], jflat: str,
                      sums: dict[int, int]) -> None:
        """The float32 exps that loop ``q`` computes first (:func:`.kernel.is_row_exp`), a row at a
        time, before the loop: per exp (in dependency order) ``em_exp_row_f32`` into the exp's row
        cache, reading an operand's row in place (:meth:`row_exp_operand`) or the argument stored
        into the row cache by a loop of its own. The call also returns the row's sum: the
        accumulator of each reduction in ``sums`` (rid -> its input, a row exp) is set from it. Adds
        the exps (and the row-cached nodes the argument loops computed) to ``stop``, so the loop
        reads them from their rows."""
        ir = self.ir
        inner = sd.cdim(ir.inner_size)
        base = f"tid_ * {inner}" if self.parallel_outer or self.pool else "0"
        for nid in self.closure(sinks, True, stop):
            n = self.nodes[nid]
            if ir.scratch.get(nid) != q or not is_row_exp(n):
                continue
            row = self.scratch_param(scratch_mod.row_cache(nid), n.dtype)
            direct = self.row_exp_operand(n, stop)
            if direct is not None:  # exp(x - c) of an operand's contiguous row: read in place
                src, bias = direct
            else:
                src, bias = self.store_row_argument(q, n.args[0], row, stop, jflat) + f" + {base}", "0.0f"
            call = f"em_exp_row_f32({row} + {base}, {src}, {bias}, {inner})"
            summed = [rid for rid, e in sums.items() if e == nid]
            self.w(f"a{summed[0]} = {call};" if summed else f"(void){call};")
            for rid in summed[1:]:
                self.w(f"a{rid} = a{summed[0]};")
            stop.add(nid)

    def store_row_argument(self, q: int, arg: int, row: str, stop: set[int], jflat: str) -> str:
        """A loop over the row storing node ``arg`` into ``row`` (or only into its own row cache,
        when it has one); the row-cached nodes it computes first are stored into their rows too
        and join ``stop``. Returns the row now holding ``arg``."""
        ir = self.ir
        simd = "#pragma omp simd" if self.opts.simd else None
        depth = self.open_loops(self.inner_names, self.inner_sizes, None, simd)
        if not self.inner_names:
            self.w("{")
            self.ind += 1
            depth = 1
        cached = []
        for a in self.closure([arg], True, stop):
            dt = self.nodes[a].dtype
            cache = self.scratch_param(scratch_mod.row_cache(a), dt) if a in ir.scratch else ""
            if a in stop:
                self.w(f"const {ctype(self.nodes[a].dtype)} t{a} = {cache}[{jflat}];")
                continue
            self.emit_node(a)
            if ir.scratch.get(a) == q:
                self.w(f"{cache}[{jflat}] = t{a};")
                cached.append(a)
        if arg in cached:
            row = self.scratch_param(scratch_mod.row_cache(arg), self.nodes[arg].dtype)
        else:
            self.w(f"{row}[{jflat}] = {self.expr(arg)};")
        self.close(depth)
        stop.update(cached)
        return row

    def row_exp_operand(self, n: Node, stop: set[int]) -> tuple[str, str] | None:
        """(pointer to the row, C bias) when exp ``n`` is ``exp(x - c)`` (or ``exp(x)``) of an
        operand ``x`` read unchecked at consecutive elements along the row (the flattened inner
        index) and a per-row ``c``, and the difference is needed nowhere else: the row exp then
        reads ``x`` in place. None otherwise."""
        ir = self.ir
        arg = self.nodes[n.args[0]]
        load, bias = arg, "0.0f"
        if arg.kind is NodeKind.OP and arg.attrs.name == "sub" and arg.id not in ir.scratch:
            load, c = (self.nodes[a] for a in arg.args)
            if self.is_inner(c) or c.dtype != np.float32:
                return None
            bias = self.expr(c.id)
        if load.kind is not NodeKind.LOAD or load.attrs.checked or load.dtype != np.float32:
            return None
        inner = ir.dvars[ir.n_outer:]
        j = ixm.linearize([ixm.Ix.var(d) for d in inner], ir.domain[ir.n_outer:])
        start = load.attrs.offset - j
        if start.vars() & set(inner) or any(isinstance(t, ixm.Data) for t in start.opaques()):
            return None
        v = self._var(load.attrs.var)
        return f"{self.param(v)} + ({self.index(v, start)})", bias

    def emit_loop(self, q: int, sinks: list[int]) -> None:
        ir = self.ir
        reds = [r for r in ir.reduces if r.phase == q + 1]
        # float32 sums of a row exp computed by this loop: em_exp_row_f32 returns them
        by_exp = {r.rid: r.input for r in reds
                  if r.kind == "sum" and r.dtype == np.float32 and ir.scratch.get(r.input) == q
                  and is_row_exp(self.nodes[r.input])}
        clauses: list[str] = []
        arg = any(r.kind in ("argmax", "argmin") for r in reds)
        for r in reds:
            t = ctype(r.dtype)
            if r.kind in ("argmax", "argmin"):
                init = c_ops.min_value(r.dtype) if r.kind == "argmax" else c_ops.max_value(r.dtype)
                self.w(f"{t} a{r.rid} = {init}; int64_t x{r.rid} = 0;")
                continue
            self.w(f"{t} a{r.rid} = {c_ops.reduce_init(r.kind, r.dtype)};")
            if r.rid in by_exp:
                continue
            clauses.append(f"reduction({c_ops.OMP_REDUCTION[r.kind]}:a{r.rid})")
            if r.kind in ("max", "min") and c_ops.is_float(r.dtype):
                self.w(f"int n{r.rid} = 0;")
                clauses.append(f"reduction(|:n{r.rid})")
        red_clause = (" " + " ".join(clauses)) if clauses else ""
        simd = f"#pragma omp simd{red_clause}" if self.opts.simd and not arg else None
        pragma = None
        if self.parallel_inner and not arg:
            nt = f" num_threads({self.opts.num_threads})" if self.opts.num_threads else ""
            single = len(self.inner_names) == 1
            pragma = f"#pragma omp parallel for{' simd' if single and self.opts.simd else ''}{nt}" \
                     f"{red_clause}{self.par_if} schedule(static)"
        # scratch nodes computed by an earlier loop are loaded here
        stop = {nid for nid, first in ir.scratch.items() if first < q}
        jflat = None
        if ir.scratch:
            inner_dims = ir.domain[ir.n_outer:]
            j = ixm.linearize([ixm.Ix.var(d) for d in ir.dvars[ir.n_outer:]], inner_dims)
            jflat = self.ix(j)
            if self.parallel_outer or self.pool:
                jflat = f"tid_ * {sd.cdim(math.prod(inner_dims))} + {jflat}"
            self.emit_row_exps(q, sinks, stop, jflat, by_exp)
        sinks = list(sinks)
        for nid in by_exp.values():
            sinks.remove(nid)
        reds = [r for r in reds if r.rid not in by_exp]
        depth = 0
        if sinks or any(root.full and root.loop == q + 1 for root in ir.roots):
            depth = self.open_loops(self.inner_names, self.inner_sizes, pragma, simd)
            if not self.inner_names:
                self.w("{")
                self.ind += 1
                depth = 1
        for nid in self.closure(sinks, True, stop):
            if nid in stop:
                n = self.nodes[nid]
                row = self.scratch_param(scratch_mod.row_cache(nid), n.dtype)
                self.w(f"const {ctype(n.dtype)} t{nid} = {row}[{jflat}];")
                continue
            self.emit_node(nid)
            if ir.scratch.get(nid) == q:
                row = self.scratch_param(scratch_mod.row_cache(nid), self.nodes[nid].dtype)
                self.w(f"{row}[{jflat}] = t{nid};")
        for r in reds:
            x = self.expr(r.input)
            if r.kind in ("argmax", "argmin"):
                cmp = ">" if r.kind == "argmax" else "<"
                nan = f" || ({x} != {x} && a{r.rid} == a{r.rid})" if c_ops.is_float(r.dtype) else ""
                pos = self.gnames[-1] if self.inner_names else "0"
                self.w(f"if ({x} {cmp} a{r.rid}{nan}) {{ a{r.rid} = {x}; x{r.rid} = {pos}; }}")
            else:
                flag = f"n{r.rid}" if r.kind in ("max", "min") and c_ops.is_float(r.dtype) else None
                self.w(c_ops.reduce_update(r.kind, f"a{r.rid}", x, r.dtype, flag))
        for root in ir.roots:
            if root.full and root.loop == q + 1:
                self.w(f"{self.param(root.var, True)}[{self.index(root.var, root.offset)}] = "
                       f"{self.expr(root.node)};")
        self.close(depth)
        reds = [r for r in ir.reduces if r.phase == q + 1]
        if self.block == "part":  # this block's partials, in the accumulator type
            from ember._src.native.scheduling import blockreduce

            for r in reds:
                flt = r.kind in ("max", "min") and c_ops.is_float(r.dtype)
                val = f"n{r.rid} ? ({ctype(r.dtype)})NAN : a{r.rid}" if flt else f"a{r.rid}"
                part = self.scratch_param(blockreduce.partial_key(r.rid), r.dtype)
                self.w(f"{part}[lo_ / {blockreduce.BLOCK}] = {val};")
            return
        for r in reds:
            t = ctype(r.out_dtype)
            if r.kind in ("argmax", "argmin"):
                self.w(f"const {t} r{r.rid} = ({t})x{r.rid};")
            elif r.kind in ("max", "min") and c_ops.is_float(r.dtype):
                self.w(f"const {t} r{r.rid} = n{r.rid} ? ({t})NAN : a{r.rid};")
            else:
                self.w(f"const {t} r{r.rid} = a{r.rid};")


# ---------------------------------------------------------------------------------------------
# Calls
# ---------------------------------------------------------------------------------------------

_BLAS_TYPEDEFS = """\
typedef void (*em_Pgemm_t)(char *, char *, int *, int *, int *, ELT *, const ELT *, int *,
                           const ELT *, int *, ELT *, ELT *, int *);
typedef void (*em_Pgemv_t)(char *, int *, int *, ELT *, const ELT *, int *, const ELT *, int *,
                           ELT *, ELT *, int *);
"""


def _blas_typedefs(types: list[tuple[str, str, str]]) -> str:
    """The ``em_?gemm_t``/``em_?gemv_t`` pointer types for ``(C type, suffix, BLAS prefix)`` rows."""
    return "".join(_BLAS_TYPEDEFS.replace("em_P", f"em_{pre}").replace("ELT", t) for t, _, pre in types)


# dtype -> (C element type, name suffix, BLAS prefix) of the em_gemm_* helpers
GEMM_TYPES = {np.dtype(np.float32): ("float", "f32", "s"),
              np.dtype(np.float64): ("double", "f64", "d"),
              np.dtype(np.complex64): ("em_c64", "c64", "c"),
              np.dtype(np.complex128): ("em_c128", "c128", "z")}


def gemm_fn(dt: Any, strided: bool = False) -> str:
    """The name of the ``em_gemm_*`` helper (``em_gemm_sv_*`` with ``strided``) for dtype ``dt``."""
    return f"em_gemm_{'sv_' if strided else ''}{GEMM_TYPES[np.dtype(dt)][1]}"


_GEMM_FN = """\
/* Row-major C[m,n] = alpha op(A) op(B) + beta C for nb batches, as the column-major product
   C^T = op(B)^T op(A)^T (no data movement). A single row or column goes to ?gemv, which BLAS
   libraries run much faster than a degenerate ?gemm. */
static void em_gemm_T(void **fns, int ta, int tb, int64_t nb, int m, int n, int k, ELT alpha,
                      ELT beta, const ELT *a, const ELT *b, ELT *c) {
    if (m == 0 || n == 0) return;
    int one = 1;
    for (int64_t i = 0; i < nb; ++i) {
        const ELT *ai = a + i * (int64_t)m * k, *bi = b + i * (int64_t)k * n;
        ELT *ci = c + i * (int64_t)m * n;
        if (m == 1 && k > 0) {  /* c[n] = op(B)^T a: B as column-major is n x k ('N') or k x n ('T') */
            char tr = tb ? 'T' : 'N';
            int rows = tb ? k : n, cols = tb ? n : k;
            ((em_Sgemv_t)fns[GEMV])(&tr, &rows, &cols, &alpha, bi, &rows, ai, &one, &beta, ci, &one);
        } else if (n == 1 && k > 0) {  /* c[m] = op(A) b: A as column-major is k x m or m x k */
            char tr = ta ? 'N' : 'T';
            int rows = ta ? m : k, cols = ta ? k : m;
            ((em_Sgemv_t)fns[GEMV])(&tr, &rows, &cols, &alpha, ai, &rows, bi, &one, &beta, ci, &one);
        } else {
            char tra = tb ? 'T' : 'N', trb = ta ? 'T' : 'N';
            int lda = tb ? k : n, ldb = ta ? m : k, ldc = n;
            lda = lda < 1 ? 1 : lda; ldb = ldb < 1 ? 1 : ldb;
            ((em_Sgemm_t)fns[GEMM])(&tra, &trb, &n, &m, &k, &alpha, bi, &lda, ai, &ldb, &beta, ci, &ldc);
        }
    }
}
"""


def gemm_views(step: Step) -> tuple | None:
    """(op(a), op(b), result) strided views of a ``gemm`` step with ``views`` (see
    :func:`.fused.layouts`), else None."""
    e = step.eqns[0]
    if e.params.get("views") is None:
        return None
    va, vb, vo, _ = fused.layouts(e.inputs[0].aval.shape, e.inputs[1].aval.shape, e.params)
    return va, vb, vo


_GEMM_SV_FN = """\
/* Row-major C[m,n] (row stride ldc) = alpha A B + beta C with A(i, p) at a[i*rsa + p*csa] and
   B(p, j) at b[p*rsb + j*csb], one of each pair of strides 1 (the views of a gemm step that reads
   or writes a transposed value in place): the column-major product C^T = B^T A^T. */
static void em_gemm_T(void **fns, int m, int n, int k, ELT alpha, ELT beta, const ELT *a,
                      int64_t rsa, int64_t csa, const ELT *b, int64_t rsb, int64_t csb, ELT *c, int64_t ldc) {
    if (m == 0 || n == 0) return;
    char tra = csb == 1 ? 'N' : 'T', trb = csa == 1 ? 'N' : 'T';
    int lda = (int)(csb == 1 ? rsb : csb), ldb = (int)(csa == 1 ? rsa : csa), ldc_ = (int)ldc;
    lda = lda < 1 ? 1 : lda; ldb = ldb < 1 ? 1 : ldb;
    ((em_Sgemm_t)fns[GEMM])(&tra, &trb, &n, &m, &k, &alpha, b, &lda, a, &ldb, &beta, c, &ldc_);
}
"""


def gemm_dims(step: Step) -> tuple[int, int, int, int]:
    e = step.eqns[0]
    views = gemm_views(step)
    if views is not None:
        va, vb, _ = views
        return fused.batch_size(va[0]), va[1][0], vb[2][0], va[2][0]
    a, b = e.inputs[0], e.inputs[1]
    ta, tb = e.params["trans_a"], e.params["trans_b"]
    ash, bsh = a.aval.shape, b.aval.shape
    nb = ash[0] if len(ash) == 3 else 1
    m, k = (ash[-1], ash[-2]) if ta else (ash[-2], ash[-1])
    n = bsh[-2] if tb else bsh[-1]
    return nb, m, n, k


def gemm_fits_blas(step: Step) -> bool:
    """float32/float64/complex64/complex128 with every extent within BLAS's ``int`` (symbolic
    extents are checked per binding by the symbolic executable, which falls back to a static build
    beyond it)."""
    _, m, n, k = gemm_dims(step)
    fits = all(sd.is_sym(d) or d <= INT_MAX for d in (m, n, k))
    return fits and np.dtype(step.outputs[0].aval.dtype) in GEMM_TYPES


def _step_layouts(step: Step) -> tuple:
    """(op(a), op(b), result) strided views of a static ``gemm`` step (see :func:`.fused.layouts`)."""
    e = step.eqns[0]
    return fused.layouts(e.inputs[0].aval.shape, e.inputs[1].aval.shape, e.params)[:3]


def _packable_b(step: Step, ctx: _Ctx, table: dict[int, Any]) -> tuple[Var, int, int, int, int] | None:
    """``(B, k, n, rsb, csb)`` when this unbatched float32 product's ``B`` is a Var in ``table`` (the
    program's constants or inputs) and the prepacked entry may take the product; None otherwise."""
    b = step.eqns[0].inputs[1]
    if ctx.gen is None or not isinstance(b, Var) or b.id not in table or np.dtype(b.aval.dtype) != np.float32:
        return None
    nb, _, n, k = gemm_dims(step)
    if _kernel_rows(step, True) is None or nb != 1 or gemm_kernel.kernel_symbol() is None \
            or gemm_views(step) is not None:
        return None
    (_, (_, rsb), (_, csb)) = _step_layouts(step)[1]
    return b, int(k), int(n), int(rsb), int(csb)


def _prepacked_b(step: Step, ctx: _Ctx) -> str | None:
    """C pointer to ``op(B)`` packed for the kernel (:func:`.gemm_kernel.prepack_b`) when ``B`` of
    this unbatched product is a program constant: packed once here, kept as a derived constant."""
    found = _packable_b(step, ctx, ctx.consts)
    if found is None:
        return None
    b, k, n, rsb, csb = found
    value = np.ascontiguousarray(getattr(ctx.consts[b.id], "value", ctx.consts[b.id]))
    if value.dtype != np.float32 or value.size != k * n:
        return None
    ref = abi.const_ref(len(ctx.gen.extra_consts))
    ctx.gen.extra_consts.append(gemm_kernel.prepack_b(gemm_kernel.op_b(value, k, n, rsb, csb)))
    return f"((const float *){ref})"


def _argument_packed_b(step: Step, ctx: _Ctx) -> str | None:
    """For an unbatched float32 product whose ``B`` is a program argument: a C expression of the
    packed copy the runtime may keep for that argument (``const float *``, null when none), read
    from an 8-byte cell of this program's derived constants. The C dispatcher fills the cell when an
    ember Array (immutable) comes back as that argument (``dispatch_src.py``); the copy's header
    holds the address it was packed from, and the program uses it only while the argument's data
    pointer is that address (:func:`.gemm_kernel.packed_argument`)."""
    found = _packable_b(step, ctx, ctx.inputs)
    if found is None:
        return None
    b, k, n, rsb, csb = found
    slot = len(ctx.gen.extra_consts)
    ctx.gen.extra_consts.append(np.zeros(1, np.uint64))
    ctx.gen.packed_args.append((slot, ctx.inputs[b.id], k, n, rsb, csb))
    return f"(*(const float *const *){abi.const_ref(slot)})"


def _kernel_rows(step: Step, prepacked: bool) -> int | None:
    """The kernel's row limit for this product (:func:`.gemm_kernel.kernel_rows`) when it may take
    it: a static ``m`` within the limit (and 2 or more), or an ``m`` that is a dynamic axis (tested
    at run time, :func:`_rows_guard`) with everything else static; None otherwise."""
    nb, m, n, k = gemm_dims(step)
    if sd.is_sym(nb):
        return None
    if sd.is_sym(n) or sd.is_sym(k):  # attention's per-head products over a dynamic sequence
        return None if prepacked else gemm_kernel.row_limit()  # the whole rule is tested at run time
    rows = gemm_kernel.kernel_rows(n, k, prepacked)
    low = gemm_kernel.PREPACKED_MIN_ROWS if prepacked else 2
    if sd.is_sym(m):
        return rows if rows >= low else None
    return rows if low <= m <= rows else None



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


def _small_sgemm_call(step: Step, ctx: _Ctx, opts: CodegenOptions | None, alpha: float,
                      beta: float, local: Any = frozenset(), packed: str | None = None) -> str | None:
    """The arguments of :mod:`.gemm_kernel`'s kernel for a float32 product its size rule takes
    (None otherwise, or where this machine cannot run it): A and B as (row, column) strides, so
    transposes are free; batch ``bb_`` of a batched product; a dynamic ``m`` as its C expression
    (the caller adds :func:`_rows_guard`). With ``packed`` (a C pointer to a packed ``B``: from
    :func:`_prepacked_b`, or the argument copy of :func:`_argument_packed_b`), the arguments of its
    prepacked-B entry instead."""
    if np.dtype(step.outputs[0].aval.dtype) != np.float32:
        return None
    nb, m, n, k = gemm_dims(step)
    if _kernel_rows(step, packed is not None) is None:
        return None
    if gemm_kernel.kernel_symbol() is None:
        return None
    gemm_kernel.load()  # builds the kernel library in the background (once); BLAS runs until then
    e = step.eqns[0]
    nthreads = 1
    panels = (n + 23) // 24 if sd.is_sym(n) else gemm_kernel.panel_count(n)  # the units its threads share
    if opts is not None and _parallel(opts, m * n * k, panels)[0]:
        nthreads = opts.num_threads or 0
    (ba, (_, rsa), (_, csa)), (bb, (_, rsb), (_, csb)), (bo, (_, ldc), _) = _step_layouts(step)
    a, b, out = e.inputs[0], e.inputs[1], step.outputs[0]
    epi = step.epilogue
    bias = ctx.ptr(epi.bias) if epi is not None and epi.bias is not None else "0"
    relu = int(epi is not None and epi.relu)
    oa, ob, oo = ("0" if v.id in local else _batch_offset(bt) for v, bt in ((a, ba), (b, bb), (out, bo)))
    bargs = packed if packed is not None else f"{ctx.ptr(b)} + {ob}, {sd.cdim(rsb)}, {sd.cdim(csb)}"
    m, n, k, rsa, csa, ldc = (sd.cdim(x) for x in (m, n, k, rsa, csa, ldc))
    return (f"{m}, {n}, {k}, {literal(alpha, np.float32)}, {ctx.ptr(a)} + {oa}, {rsa}, {csa}, "
            f"{bargs}, {literal(beta, np.float32)}, {ctx.ptr(out)} + {oo}, {ldc}, {bias}, {relu}, {nthreads}")


def _batch_offset(batch: tuple, var: str = "bb_") -> str:
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


def _pooled_batches(step: Step, s: int, ctx: _Ctx, opts: CodegenOptions | None, small: str, nb: Any,
                    fallback: str, funcs: list[str] | None) -> str | None:
    """A batched product on the GEMM kernel with its batches shared out on the thread pool, each
    batch on one thread (a product per head is too small to split its columns, and one pool loop
    replaces a fork/join per batch); None where the product is not such (one batch, loop bodies,
    one thread, too little work)."""
    if funcs is None or opts is None or not ctx.pooled or sd.is_sym(nb) or nb < 2:
        return None
    _, m, n, k = gemm_dims(step)
    go, par_if = _parallel(opts, nb * m * n * k, nb)
    if not go:
        return None
    one = small.rsplit(", ", 1)[0] + ", 1"  # each batch on one thread
    task = f"em_task{s}"
    funcs.append(_pool_task(task, f"em_sk_fn_t f_ = em_sk_fn(); "
                                  f"for (int64_t bb_ = lo_; bb_ < hi_; ++bb_) f_({one});", opts))
    # dynamic sizes: the pool when the work is large enough, the kernel when its rule holds
    cond = par_if[len(" if(parallel: "):-1] if par_if else ""
    par = _pool_call(task, nb, _pool_threads(opts, False), 2, cond)
    guard = _rows_guard(step, False)
    test = f"f_ && ({guard})" if guard else "f_"
    return f"{{ em_sk_fn_t f_ = em_sk_fn(); if ({test}) {{ {par} }} else {{ {fallback} }} }}"


def _gemm(step: Step, ctx: _Ctx, opts: CodegenOptions | None = None, funcs: list[str] | None = None,
          s: int = -1) -> list[str]:
    e = step.eqns[0]
    out = step.outputs[0]
    dt = np.dtype(out.aval.dtype)
    t = ctype(dt)
    a, b = e.inputs[0], e.inputs[1]
    prm = e.params
    nb, m, n, k = gemm_dims(step)
    oshape = tuple(out.aval.shape)
    optr = ctx.ptr(out)
    lines: list[str] = ["{"]
    has_c = len(e.inputs) == 3 and step.epilogue is None  # an epilogue holds the c of gemm(a, b, bias)
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
    inline = ctx.inline_gemm(step, has_c, alpha, beta)
    if inline is not None:
        lines.extend("    " + ln for ln in inline)
    elif gemm_fits_blas(step):
        name = gemm_fn(dt)
        small = _small_sgemm_call(step, ctx, opts, alpha, beta)
        nbs = nb
        views = gemm_views(step)
        if views is not None:  # per batch: BLAS on the strided matrices (one unit stride each)
            (ba, (_, rsa), (_, csa)), (bb, (_, rsb), (_, csb)), (bo, (_, ldc), _) = views
            loop = f"for (int64_t bb_ = 0; bb_ < {nb}; ++bb_) " if nb != 1 else ""
            blas = (f"{loop}{name.replace('gemm', 'gemm_sv')}(fns, {m}, {n}, {k}, {literal(alpha, dt)}, "
                    f"{literal(beta, dt)}, {ctx.ptr(a)} + {_batch_offset(ba)}, {rsa}, {csa}, "
                    f"{ctx.ptr(b)} + {_batch_offset(bb)}, {rsb}, {csb}, {optr} + {_batch_offset(bo)}, "
                    f"{ldc});")
            if nb == 1:
                blas = blas.replace("bb_", "0")
        else:
            nb, m, n, k = (sd.cdim(x) for x in (nb, m, n, k))
            blas = (f"{name}(fns, {int(prm['trans_a'])}, {int(prm['trans_b'])}, {nb}, {m}, {n}, {k}, "
                    f"{literal(alpha, dt)}, {literal(beta, dt)}, {ctx.ptr(a)}, {ctx.ptr(b)}, {optr});")
            blas += _epilogue_loop(step, ctx)
        prepack = np.dtype(dt) == np.float32 and (opts is None or opts.prepack)
        packed = _prepacked_b(step, ctx) if prepack else None
        packed_args = _small_sgemm_call(step, ctx, opts, alpha, beta, packed=packed) if packed else None
        pooled = None if small is None else _pooled_batches(step, s, ctx, opts, small, nbs, blas, funcs)
        plain = blas if small is None else pooled or gemm_kernel.c_call(small, blas, nbs,
                                                                        _rows_guard(step, False))
        cell = _argument_packed_b(step, ctx) if prepack and views is None and packed_args is None else None
        if packed_args is not None:  # a constant B: packed once when the program was built
            lines.append("    " + gemm_kernel.c_call_packed(packed_args, blas, _rows_guard(step, True)))
        elif cell is not None:  # B an argument: a packed copy the runtime keeps for it, if any
            pk = "pk_ + " + str(gemm_kernel.PACK_HEADER_FLOATS)
            args = _small_sgemm_call(step, ctx, opts, alpha, beta, packed=pk)
            same = f"pk_ && *(const void *const *)pk_ == (const void *)({ctx.ptr(b)})"
            guard = " && ".join(x for x in (same, _rows_guard(step, True)) if x)
            lines.append(f"    {{ const float *pk_ = {cell};")
            lines.append("      " + gemm_kernel.c_call_packed(args, plain, guard))
            lines.append("    }")
        else:  # the kernel once its library is loaded (see gemm_kernel), BLAS until then
            lines.append("    " + plain)
    else:
        lines.extend("    " + ln for ln in _loop_gemm(step, ctx, has_c))
    if step.epilogue is not None and (inline is not None or not gemm_fits_blas(step)):
        lines.append("    " + _epilogue_loop(step, ctx))
    lines.append("}")
    return lines


def _epilogue_loop(step: Step, ctx: _Ctx) -> str:
    """C loop applying a fused ``gemm`` step's epilogue (:mod:`.gemm_epilogue`) to its output in
    place, for the paths other than the kernel (which applies it in its store); "" without one."""
    epi = step.epilogue
    if epi is None:
        return ""
    m, n = step.outputs[0].aval.shape
    o = f"o_[i_ * {n} + j_]"
    v = o + (" + b_[j_]" if epi.bias is not None else "")
    put = f"{o} = v_ > 0.0f || v_ != v_ ? v_ : 0.0f;" if epi.relu else f"{o} = v_;"
    bias = f" const float *b_ = {ctx.ptr(epi.bias)};" if epi.bias is not None else ""
    return (f" {{ float *o_ = {ctx.ptr(step.outputs[0])};{bias} for (int64_t i_ = 0; i_ < {m}; ++i_)"
            f" _Pragma(\"omp simd\") for (int64_t j_ = 0; j_ < {n}; ++j_)"
            f" {{ const float v_ = {v}; {put} }} }}")


def _gemm_batch(step: Step, ctx: _Ctx, opts: CodegenOptions, local: Any) -> str:
    """C statement computing batch ``bb_`` of a ``gemm`` step (no ``c``; see .batch_groups); the
    values in ``local`` hold that batch only (offset 0)."""
    e = step.eqns[0]
    out = step.outputs[0]
    dt = np.dtype(out.aval.dtype)
    _, m, n, k = gemm_dims(step)
    alpha = e.params["alpha"]
    (ba, (_, rsa), (_, csa)), (bb, (_, rsb), (_, csb)), (bo, (_, ldc), _) = _step_layouts(step)
    a, b = e.inputs[0], e.inputs[1]
    oa, ob, oo = ("0" if v.id in local else _batch_offset(bt) for v, bt in ((a, ba), (b, bb), (out, bo)))
    fn = gemm_fn(dt, strided=True)
    blas = (f"{fn}(fns, {m}, {n}, {k}, {literal(alpha, dt)}, {literal(0.0, dt)}, {ctx.ptr(a)} + {oa}, {rsa}, "
            f"{csa}, {ctx.ptr(b)} + {ob}, {rsb}, {csb}, {ctx.ptr(out)} + {oo}, {ldc});")
    small = _small_sgemm_call(step, ctx, opts, alpha, 0.0, local)
    return blas if small is None else gemm_kernel.c_call(small, blas, guard=_rows_guard(step, False))


def _emit_tiled_group(group: Any, index: dict[int, int], ctx: _Ctx, opts: CodegenOptions, funcs: list[str],
                      local_bufs: dict[int, int], helpers: dict[str, str]) -> list[str]:
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
    (ba1, (_, rsa1), (_, csa1)), (bb1, (_, rsb1), (_, csb1)), _ = _step_layouts(g1)
    _, (bb2, (_, rsb2), (_, csb2)), (bo2, (_, ldo), _) = _step_layouts(g2)
    np1, np2 = group_kernel.panel_width(n), group_kernel.panel_width(group.n2)
    e1, e2 = g1.eqns[0], g2.eqns[0]
    a1, b1, s_ = ctx.ptr(e1.inputs[0]), ctx.ptr(e1.inputs[1]), ctx.ptr(g1.outputs[0])
    p_, b2, o_ = ctx.ptr(e2.inputs[0]), ctx.ptr(e2.inputs[1]), ctx.ptr(g2.outputs[0])
    al1, al2 = literal(e1.params["alpha"], np.float32), literal(e2.params["alpha"], np.float32)
    rows = f"bb_ * {m} + i0_", f"bb_ * {m} + i0_ + mr_"
    fn, call = _KernelEmitter(r, index[id(r)], ctx, opts, row_range=rows, local_rows=local_bufs,
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
            f"    em_gk_pack({group.k1}, {n}, {np1}, {b1} + {_batch_offset(bb1)}, {rsb1}, {csb1}, kt_);",
            f"    em_gk_pack({n}, {group.n2}, {np2}, {b2} + {_batch_offset(bb2)}, {rsb2}, {csb2}, vp_);",
            f"    const float *a_ = {a1} + {_batch_offset(ba1)};",
            f"    float *o_ = {o_} + {_batch_offset(bo2)};",
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
    funcs.append(_pool_task(task, "\n    ".join(lines), opts))
    if not _parallel(opts, 2 * nb * m * n * (group.k1 + group.n2), nb)[0]:  # too little work
        return [head, f"{task}(&em_mctx_, 0, {nb}, 0);"]
    return [head, _pool_call(task, nb, f"{opts.num_threads or 0}, {group.copies}", POOL_CHUNKS)]


def _emit_group(group: Any, index: dict[int, int], ctx: _Ctx, opts: CodegenOptions,
                funcs: list[str], helpers: dict[str, str]) -> list[str]:
    """A batch-interleaved ``gemm -> row kernel -> gemm`` group (.batch_groups): one loop over the
    batch running each member on that batch's slice."""
    g1, r, g2 = group
    nb, m, n = group.nb, group.m, group.n
    local_bufs = {ctx.plan.value_buffer[vid].id: n for vid in group.local}
    if group.tiled:
        return _emit_tiled_group(group, index, ctx, opts, funcs, local_bufs, helpers)
    rows = f"bb_ * {m}", f"(bb_ + 1) * {m}"
    fn, call = _KernelEmitter(r, index[id(r)], ctx, opts, row_range=rows, local_rows=local_bufs).emit()
    funcs.append(fn)
    return ["/* " + " -> ".join(st.name for st in group) + f": one batch at a time ({nb} batches) */",
            f"for (int64_t bb_ = 0; bb_ < {nb}; ++bb_) {{",
            "    " + _gemm_batch(g1, ctx, opts, group.local),
            "    " + call,
            "    " + _gemm_batch(g2, ctx, opts, group.local),
            "}"]


def _loop_gemm(step: Step, ctx: _Ctx, has_c: bool) -> list[str]:
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
