"""Render a planned schedule as one C translation unit with one entry point::

    int ember_main(void **bufs, char *arena, const int64_t *dims, void **fns);

``bufs`` holds the inputs, then the captured constants, then the outputs; intermediates live in
``arena`` at the planner's offsets (compile-time constants, as are all shapes: ``dims`` is reserved
for dynamic axes). ``fns`` holds run-time function pointers in the slots :mod:`.abi` names:
``sgemm``, ``dgemm``, the Python callback that runs fallback steps, ``sgemv``, ``dgemv`` (BLAS from
SciPy), the LAPACK routines of :data:`.abi.LINALG_NAMES` (used by call steps), then the derived
constants (constants of loop bodies, which :mod:`.loop_bodies` emits into static functions, and
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

import re
from collections.abc import Callable

from ember._src import flags
from ember._src.native import abi
from ember._src.native.base import symdims as sd
from ember._src.native.csrc import load as load_csrc
from ember._src.native.emit import c_headers, c_ops, gemm_kernel, support
from ember._src.native.emit import calls as calls_mod
from ember._src.native.emit.context import BODY_CALLBACK_BASE, CodegenOptions, EmitContext, Generated
from ember._src.native.emit.gemm import blas_helpers, emit_gemm
from ember._src.native.emit.kernel_steps import block_reduce_kernel, pooled_kernel
from ember._src.native.emit.kernels import KernelEmitter
from ember._src.native.emit.pooled import axis_decls
from ember._src.native.plan.planner import MemoryPlan
from ember._src.native.runtime import interrupt, threadpool
from ember._src.native.scheduling.schedule import Schedule, Step
from ember._src.program import Var


def emit_steps(sched: Schedule, plan: MemoryPlan, ctx: EmitContext, opts: CodegenOptions, gen: Generated,
               funcs: list[str]) -> list[str]:
    """The statements running ``sched``'s steps in order (indented for a function body); static
    helper functions (kernels, loop bodies) are appended to ``funcs``."""
    body: list[str] = []
    for s, step in enumerate(sched.steps):
        body.append(f"    /* {step} */")
        if step.kind == "kernel":
            blocked = block_reduce_kernel(step, s, ctx, opts, funcs)
            if blocked is not None:
                body.extend("    " + ln for ln in blocked)
                continue
            pooled = pooled_kernel(step, s, ctx, opts, funcs)
            if pooled is not None:
                body.append("    " + pooled)
                continue
            fn, call = KernelEmitter(step, s, ctx, opts).emit()
            funcs.append(fn)
            body.append("    " + call)
        elif step.kind == "gemm":
            body.extend("    " + ln for ln in emit_gemm(step, ctx, opts, funcs, s))
        elif step.kind == "call":
            body.extend("    " + ln for ln in calls_mod.emit_step(
                step, s, ctx, opts, gen.helpers, lambda step=step, s=s: _fallback_call(step, s, ctx, gen)))
        elif step.kind == "fallback":
            body.append("    " + _fallback_call(step, s, ctx, gen))
        elif step.kind in ("loop", "cond"):
            from ember._src.native.emit import loop_bodies
            n_cb = len(gen.fallback_steps)
            body.extend("    " + ln for ln in loop_bodies.emit_step(step, s, ctx, opts, gen, funcs))
            if not ctx.in_body and len(gen.fallback_steps) > n_cb:  # a body calls back: did it fail?
                support.need("cb_flag")
                body.append(f"    if (em_cb_failed_) {{ em_cb_failed_ = 0; return {s + 1}; }}")
            if ctx.top and interrupt.POLLING:  # stopped by Ctrl-C (runtime/interrupt.py): skip the rest
                body.append(f"    if ({support.poll()}) return EM_INTERRUPTED;")
    return body


def _fallback_call(step: Step, s: int, ctx: EmitContext, gen: Generated) -> str:
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
    support.need("cb_flag")
    cid = BODY_CALLBACK_BASE + len(gen.fallback_steps)
    gen.fallback_steps[cid] = step
    return f"{{ void *a_[] = {{{arr}}}; if ({cb}({cid}, a_)) em_cb_failed_ = 1; }}"


check_emission = flags.define_bool(
    "native_check_emission", False, "EMBER_CHECK_EMISSION",
    "After generating a translation unit, resolve its identifiers against the headers, prelude "
    "functions and support blocks and raise if the emitters used one without recording it "
    "(emit/support.py); the test suite turns it on.")

# support blocks (emit/support.py): name -> the C it stands for, in the order they are written
BLOCKS: dict[str, Callable[[], str]] = {
    "cb_flag": lambda: "static _Thread_local int em_cb_failed_;\n",  # per thread: calls may overlap
    "interrupt": interrupt.c_helpers,
    "symdims": lambda: sd.C_HELPERS,
    "gemm_kernel": lambda: gemm_kernel.c_helpers(gemm_kernel.kernel_symbol() or ""),
    "vexp": lambda: load_csrc("vexp.h"),  # float32 exps of row kernels, a row at a time
    "threadpool": threadpool.c_helpers,  # chunk functions (run on the pool, or called serially)
}
# blocks implied by another name: ember_main's pool context is a thread-pool type
_IMPLIES = {"main_ctx": ("threadpool",)}


def generate(sched: Schedule, plan: MemoryPlan, opts: CodegenOptions) -> Generated:
    p = sched.program
    ctx = EmitContext(plan, len(p.invars), len(p.constvars))
    funcs: list[str] = []
    gen = Generated("")
    ctx.consts, ctx.gen = {v.id: c for v, c in zip(p.constvars, p.consts)}, gen
    ctx.pooled = opts.openmp and opts.num_threads != 1
    ctx.top = True
    if not opts.axes:
        ctx.inputs = {v.id: i for i, v in enumerate(p.invars)}
    with support.recording(gen.needs) as needs:
        if opts.axes:  # sizes render as C over the axis values (base/symdims.py)
            support.need("symdims")
        body = emit_steps(sched, plan, ctx, opts, gen, funcs)
    for name, implied in _IMPLIES.items():
        if name in needs:
            needs.update(dict.fromkeys(implied))
    polls = "interrupt" in needs
    intr = "em_intr_flag_" if polls else "0"  # the flag this call's chunks poll, on any thread
    pool = [f"    em_main_ctx em_mctx_ = {{bufs, arena, dims, fns, {intr}}};"] if "main_ctx" in needs else []
    params = "(void **bufs, char *arena, const int64_t *dims, void **fns)"
    main, entry = [], "int ember_main"
    if opts.num_threads and _calls_blas("\n".join(funcs + body), needs):
        # BLAS/LAPACK calls on num_threads threads: OpenBLAS's thread-local count, set and restored
        main = [f"static int em_main_nt{params};", f"int ember_main{params} {{",
                "    int (*nt_)(int) = (int (*)(int))" + abi.fn_ref("blas_threads") + ";",
                f"    const int prev_ = nt_ ? nt_({int(opts.num_threads)}) : 0;",
                "    const int r_ = em_main_nt(bufs, arena, dims, fns);",
                "    if (nt_) nt_(prev_);", "    return r_;", "}"]
        entry = "static int em_main_nt"
    if polls:  # entered and left through the interrupt runtime (native/runtime/interrupt.py); the steps
        # follow the entry point, as in a program that does not poll
        main += [f"static int em_main_body{params};", f"{entry}{params} {{",
                 "    return em_intr_call(em_main_body, bufs, arena, dims, fns);", "}"]
    hoisted: list[str] = []
    if opts.axes:  # each size expression named once, after the axis values (symdims.hoist_sizes)
        hoisted, body = sd.hoist_sizes(body)
    main += [f"{'static int em_main_body' if polls else entry}{params} {{",
             "    (void)bufs; (void)arena; (void)dims; (void)fns;", *axis_decls(opts), *hoisted, *pool, *body,
             "    return 0;", "}"]
    code = "".join(gen.helpers.values()) + "\n".join(funcs) + "\n" + "\n".join(main) + "\n"
    extra = abi.CALLBACK_C_TYPEDEF + "".join(text() for name, text in BLOCKS.items() if name in needs)
    extra += blas_helpers(needs)
    with support.recording(needs):  # hand-written C (blocks, call steps' helpers) names its headers
        for text in (extra, *gen.helpers.values()):
            support.uses(text)
    gen.source = c_ops.prelude(needs) + extra + code
    if check_emission:
        _check_recorded(gen.source, code, needs)
    return gen


_ROUTINE_SLOTS = {abi.slot(n) for n in abi.SLOT_NAMES if n not in ("callback", "blas_threads")}


def _calls_blas(code: str, needs: dict[str, None]) -> bool:
    """Whether the emitted steps ``code`` call a BLAS or LAPACK routine of the ``fns`` table."""
    return (any(n.startswith("em_gemm_") for n in needs)
            or any(int(k) in _ROUTINE_SLOTS for k in re.findall(r"\bfns\[(\d+)\]", code)))


def _check_recorded(source: str, code: str, needs: dict[str, None]) -> None:
    """Raise if the translation unit ``source`` uses a header or prelude function, or its emitted
    functions ``code`` a support block, that the emitters did not record
    (``native_check_emission``; a debugging aid, off in production)."""
    used = set(c_headers.headers_in(source)) | set(c_ops.prelude_names_in(source))
    markers = {"cb_flag": ("em_cb_failed_",), "interrupt": (interrupt.POLL,),
               "symdims": ("em_floordiv64(", "em_mod64(", "em_max64(", "em_ceil_sqrt64("),
               "gemm_kernel": ("em_sk_fn()", "em_skp_fn()"),
               "vexp": ("em_exp_row_f32(", "em_softmax_rows_f32(", "em_log_softmax_rows_f32("),
               "threadpool": ("EM_TASK_ATTR",), "main_ctx": ("&em_mctx_",)}
    used |= {name for name, marks in markers.items() if any(m in code for m in marks)}
    used |= set(re.findall(r"\bem_gemm_(?:sv_)?[cf]\d+(?=\()", code))
    # what the assembled unit provides: its #include lines, the prelude functions, the blocks
    recorded = set(needs) | set(c_ops.prelude_closure(needs))
    recorded |= set(re.findall(r"#include <(\w+\.h)>", source))
    missing = sorted(used - recorded)
    if missing:
        raise AssertionError(f"generated C uses {missing} without recording them (emit/support.py)")
