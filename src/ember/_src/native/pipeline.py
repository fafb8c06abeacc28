"""The native lowering pipeline, written once: Program -> passes -> validate -> schedule -> loops ->
memory plan -> C.

:func:`lower` is what both executables run: :class:`~.backend.NativeExecutable` (static shapes)
and :class:`~.specialize.SymbolicNative` (named dynamic axes, ``axes`` non-empty). Compiling and
loading the C stay with them (they differ: a program cache and ``bufs`` layout for the static one,
per-binding ``dims`` for the symbolic one). The stages, in order:

1. **passes** (:func:`.passes.run_passes`, the ``passes`` option), then the ``optimized``
   validators;
2. symbolic only: every size of the optimized program is over the program's input axes;
3. **schedule** (:func:`.schedule.build_schedule`: ``max_kernel_inputs``, ``fuse``);
4. **GEMM epilogues** (``gemm_epilogue``, :mod:`.gemm_epilogue`) and convolution epilogues
   (:mod:`.conv_epilogue`);
5. **native loops** (:func:`.loops.lower_loops`): ``scan``/``while``/``cond`` bodies compiled by
   the same stages (:func:`compile_body`); the bodies' programs are checked
   (``program.validate``) unless validation is ``"off"``, on both paths;
6. **memory plan** (:func:`.planner.plan_memory`), then the ``planned`` validators (static only);
   symbolic: the arena offsets become ``dims`` entries placed per binding
   (:class:`.symlayout.ArenaLayout`);
7. **C** (:func:`.codegen.generate`).

Stage 4 runs on both paths: with symbolic sizes a product's rule and a convolution's route are
tested per call, and each route applies the epilogue.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ember._src import shapes as sh
from ember._src.native.emit.c_ops import SUPPORTED_DTYPES
from ember._src.native.emit.codegen import generate
from ember._src.native.emit.context import CodegenOptions, Generated
from ember._src.native.emit.pooled import parallel_clause
from ember._src.native.options import NativeOptions
from ember._src.native.plan.planner import MemoryPlan, plan_memory
from ember._src.native.plan.symlayout import ArenaLayout
from ember._src.native.rewrite import passes as passes_mod
from ember._src.native.scheduling import gemm_strategy, loops
from ember._src.native.scheduling.conv_epilogue import fuse_conv_epilogues
from ember._src.native.scheduling.gemm_epilogue import fuse_gemm_epilogues
from ember._src.native.scheduling.schedule import Schedule, build_schedule
from ember._src.program import Program, validate
from ember._src.validation import run_validators
from ember.errors import ShapeError


@dataclass
class Lowered:
    """What :func:`lower` produces: every stage, for the executable and for inspection (it has the
    ``schedule`` and ``plan`` attributes the ``planned`` validators read)."""

    program: Program  # after the passes (never the caller's Program object)
    schedule: Schedule
    plan: MemoryPlan
    generated: Generated  # the C source, fallback steps, derived constants
    codegen: CodegenOptions
    threads: int  # the thread count per-thread scratch was planned for
    mode: str  # the validation mode it ran under
    layout: ArenaLayout | None = None  # symbolic: the per-binding arena layout (dims entries)

    @property
    def source(self) -> str:
        """The generated C translation unit."""
        return self.generated.source


def lower(program: Program, options: NativeOptions, *, openmp: bool, axes: tuple[str, ...] = (),
          mode: str | None = None) -> Lowered:
    """Lower ``program`` to C with ``options``. ``openmp``: whether the C compiler links OpenMP;
    ``axes``: the dynamic axes of a symbolic program (empty for static shapes); ``mode``: the
    validation mode (None: ``options.validation_mode()``)."""
    mode = options.validation_mode() if mode is None else mode
    symbolic = bool(axes)
    prog = passes_mod.run_passes(program, options.passes)
    if prog is program:  # no pass changed it: a copy, so the caller's Program (a weak cache key) is not held
        prog = Program(prog.constvars, prog.invars, prog.eqns, prog.outvars, prog.consts)
    run_validators("optimized", prog, mode)
    if symbolic:
        _check_axes(prog, axes)
    sched = build_schedule(prog, max_inputs=options.max_kernel_inputs, fuse=options.fuse)
    if options.gemm_epilogue:  # bias/ReLU after a product into the GEMM kernel's store
        fuse_gemm_epilogues(sched, prepack=options.prepack)
        fuse_conv_epilogues(sched)  # ... and into a convolution's tiles
    threads = options.threads(openmp)
    loops.lower_loops(sched, loops.BodyOptions(
        passes=options.passes, max_inputs=options.max_kernel_inputs, fuse=options.fuse, threads=threads,
        inplace=options.inplace, validate=mode != "off", symbolic=symbolic, prepack=options.prepack,
        compile=compile_body))
    cg = CodegenOptions(openmp=openmp, num_threads=options.num_threads, workspace_threads=threads,
                        parallel_threshold=options.parallel_threshold, simd=options.simd, axes=axes,
                        prepack=options.prepack)
    gemm_strategy.assign(sched, gemm_strategy.GemmContext(  # how each product runs
        consts={v.id: c for v, c in zip(prog.constvars, prog.consts)},
        inputs=() if symbolic else {v.id for v in prog.invars}, prepack=options.prepack,
        pooled=openmp and options.num_threads != 1,
        parallel=lambda work, extent: parallel_clause(cg, work, extent)[0]))
    plan = plan_memory(sched, threads=threads, inplace=options.inplace, grads_from=options.grads_from)
    lowered = Lowered(prog, sched, plan, Generated(""), cg, threads, mode)
    if symbolic:  # every arena offset (the parent's, the loop bodies', carry slots) is placed per binding
        lowered.layout = ArenaLayout(sched, plan, len(axes))
    else:
        run_validators("planned", lowered, mode)
    lowered.generated = generate(sched, plan, cg)
    return lowered


def _check_axes(prog: Program, axes: tuple[str, ...]) -> None:
    """Every value's shape of a symbolic program is over ``axes`` (the inputs' axes)."""
    for v in (*prog.invars, *prog.constvars, *(o for e in prog.eqns for o in e.outvars)):
        extra = sh.shape_axes(v.aval.shape) - set(axes)
        if extra:
            raise ShapeError(f"axes {sorted(extra)} are not bound by the inputs")


def compile_body(prog: Program, opts: loops.BodyOptions, name: str) -> loops.Body:
    """Compile a loop body ``prog`` into a :class:`~.loops.Body` whose C function is ``name``, by the
    same stages as a program (passes, schedule, nested loops, GEMM strategies, memory plan; its C is
    emitted with the parent's); raises :class:`~.loops.BodyError` with the reason when it cannot run
    natively. :func:`lower` hands it to the loop stage as ``BodyOptions.compile``."""
    from ember._src.native.backend import unsupported_reason
    reason = _dtype_reason(prog) if opts.symbolic else unsupported_reason(prog)
    if reason is not None:
        raise loops.BodyError(reason)
    p = passes_mod.run_passes(prog, opts.passes, loop_body=True)
    if opts.validate:
        validate(p)
    sched = build_schedule(p, max_inputs=opts.max_inputs, fuse=opts.fuse)
    loops.lower_loops(sched, opts, prefix=name + "_")
    for st in sched.steps:
        if st.kind == "fallback" and not st.eqns[0].prim.effectful:  # a debug callback may call back
            raise loops.BodyError(f"the body runs {st.eqns[0].prim.name} through the Python fallback "
                                  "(no native lowering)")
    for st in sched.steps:
        if st.kind not in ("loop", "cond"):
            st.name = f"{name}_{st.name}"
    gemm_strategy.assign(sched, gemm_strategy.GemmContext(
        consts={v.id: c for v, c in zip(p.constvars, p.consts)}, inputs=(), prepack=opts.prepack,
        pooled=False, parallel=lambda work, extent: False, in_body=True))
    plan = plan_memory(sched, threads=opts.threads, inplace=opts.inplace)
    if opts.validate and not opts.symbolic:  # symbolic plans are placed (and checked) per binding
        plan.check()
    return loops.Body(name, p, sched, plan)


def _dtype_reason(p: Program) -> str | None:
    """Why ``p`` (symbolic shapes allowed) cannot run natively: a dtype without a C type."""
    for v in (*p.invars, *p.constvars, *(o for e in p.eqns for o in e.outvars)):
        if np.dtype(v.aval.dtype) not in SUPPORTED_DTYPES:
            return f"dtype {v.aval.dtype} has no C type in the native backend"
    return None
