"""Native loops: ``scan``, ``while`` and ``cond`` compiled into the program's entry point.

Without this module a ``scan_p``/``while_p``/``cond_p`` equation is a *fallback step*: the
generated C calls back into Python, which runs the reference loop (``scan_p.impl``, ~10 us per
step). Here each such equation becomes a step of kind ``loop`` (scan, while) or ``cond`` whose
body Programs are compiled by the same pipeline (passes -> schedule -> nested loops -> memory
plan -> C) into ``static inline`` functions of the same translation unit::

    static inline void L0b0(char *arena, void **fns, const int64_t *dims, char *in0, ..., char *out0, ...);

A body reads its inputs and writes its outputs through plain pointers (no ``bufs`` array, so
the compiler can inline it and keep scalar carries in registers); its intermediates live in its
own arena, a sub-region of the parent's: the loop step's ``WORKSPACE`` buffer
(``scratch.LOOP_WORKSPACE``). Body constants (``body.consts``, folded constants) are read through
``fns[abi.N_FIXED_FNS + k]`` (:func:`.abi.const_ref`); the backend appends those pointers.

The loop in the parent (see :func:`emit_step`):

* **scan**: each carry has two slots, ``kA`` (read by the step) and ``kB`` (written by it).
  Small carries (<= :data:`SMALL_CARRY_BYTES` in all) are local C arrays (registers once the
  body is inlined); the loop runs two steps per iteration, ``kA -> kB`` then ``kB -> kA``, so
  nothing is copied between steps. Larger carries are arena slots whose pointers are swapped,
  and a large carry the body updates where it reads it (:func:`_inplace_carries`: an
  elementwise update, a ``gemm`` accumulating into it) has one slot. ``xs[i]`` is a pointer into
  the stacked operand (``base + i * slice_bytes``), ``ys[i]`` is written straight into the
  stacked output, ``reverse`` indexes from the end, the consts are passed as they are. A final
  copy moves the carries to the step's outputs.
* **while**: ``for (;;) { cond(...); if (!pred) break; body(...); rotate carries; }``; the cond
  and the body share one arena region (they never run at the same time).
* **cond**: the index is clamped into ``[0, n - 1]`` and a ``switch`` calls that branch, which
  writes the step's outputs directly.

Body outputs that are not computed by the body (an input passed through, a constant, a literal,
the same value twice) are copied after the call. A body the native path cannot compile (a
fallback step inside, e.g. ``sort`` or a nested loop that itself falls back; dtypes without
a C type) keeps today's fallback step; the decision is reported with
:func:`ember._src.control_flow.common.report_loop_path` (``NATIVE_LOOP`` or ``REFERENCE_LOOP`` and
the reason) at compile time, so ``require_native=True`` raises ``NativeLoopError`` early.

Under named dynamic axes (``BodyOptions.symbolic``, from :mod:`.specialize`) the scan length,
carries and xs/ys slices may have symbolic sizes: they render as C expressions over the axis
values (bodies take ``dims``), symbolic carries use arena slots, and every offset (carry slots,
the bodies' arena, body intermediates) is a ``dims`` entry placed per binding by
:mod:`.symlayout` (``LoopLowering.per_binding``).

Matrix products in bodies with at most :data:`SMALL_GEMM_FLOPS` multiply-adds are inlined C
loops (:func:`small_gemm`; a BLAS call per step costs more than the product). Two passes (in
``passes.DEFAULT_PASSES``) prepare loops: :func:`hoist_loop_transposes` turns ``W @ h`` with a
loop-invariant ``W`` into ``h @ W.T`` (``W.T`` computed once; the row form vectorizes into
register accumulators), :func:`dce_loop_outputs` drops stacked outputs of a ``scan`` and outputs
of a ``cond`` that nothing reads, and the equations computing them.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ember._src.control_flow import common as cf
from ember._src.core import ShapedArray
from ember._src.native import abi, opinfo
from ember._src.native.emit import support
from ember._src.native.emit.c_ops import ctype, literal
from ember._src.native.emit.codegen import emit_steps
from ember._src.native.emit.context import CodegenOptions, EmitContext, Generated
from ember._src.native.emit.gemm import gemm_fn
from ember._src.native.emit.pooled import axis_decls
from ember._src.native.plan import scratch
from ember._src.native.plan import symdims as sd
from ember._src.native.plan.planner import (
    ALIGN,
    EXTERNAL_IN,
    EXTERNAL_OUT,
    PARAMS,
    Buffer,
    MemoryPlan,
    plan_memory,
)
from ember._src.native.rewrite import passes as passes_mod
from ember._src.native.scheduling import gemm_strategy
from ember._src.native.scheduling.gemm_strategy import SMALL_GEMM_FLOPS, gemm_dims
from ember._src.native.scheduling.schedule import Schedule, Step, StepKind, build_schedule
from ember._src.program import Atom, Eqn, Literal, Program, Var, eqn_effectful, validate

LOOP_PRIMS = ("scan", "while", "cond")
for _name in LOOP_PRIMS:
    opinfo.register(_name, opinfo.OpCategory.CONTROL,
                    "bodies compiled into the entry point (loops.py); else a fallback step")
SMALL_CARRY_BYTES = 2048  # carries up to this size (in all) live in local C arrays
MAX_UNROLL = 32  # body copies per iteration of a scan loop (``unroll``)


def _poll_break() -> str:
    """The first statement of every iteration of a scan/while loop: Ctrl-C stops the loop
    (:mod:`.interrupt`)."""
    return f"if ({support.poll()}) break;"


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _nbytes(aval: Any) -> Any:
    """Byte size of a value: an ``int``, or a ``DimExpr`` under named dynamic axes."""
    n = math.prod(aval.shape) * np.dtype(aval.dtype).itemsize
    return n if sd.is_sym(n) else int(n)


def _nonzero(n: Any) -> bool:
    """Whether a byte count may be non-zero (a symbolic one may: it is copied, 0 bytes or not)."""
    return sd.is_sym(n) or n != 0


# ---------------------------------------------------------------------------------------------
# Compiling bodies
# ---------------------------------------------------------------------------------------------


@dataclass
class BodyOptions:
    """The backend options that bodies are compiled with (the parent program's)."""

    passes: Any = None
    max_inputs: int = 16
    fuse: bool = True
    threads: int = 1
    inplace: bool = True
    validate: bool = True
    symbolic: bool = False  # named dynamic axes: sizes may be DimExprs, arena offsets per binding


@dataclass
class Body:
    """A compiled body: its optimized program, schedule (nested loops lowered), memory plan and
    the name of its C function."""

    name: str
    program: Program
    schedule: Schedule
    plan: MemoryPlan
    const_slots: list[int] = field(default_factory=list)  # fns index of each body constant
    inplace: dict[int, int] = field(default_factory=dict)  # output buffer index -> input it updates

    @property
    def arena_bytes(self) -> int:
        return self.plan.arena_bytes


class BodyError(Exception):
    """A body cannot be compiled natively (the message is the reason)."""


def compile_body(prog: Program, opts: BodyOptions, name: str) -> Body:
    """Compile ``prog`` into a :class:`Body` whose C function is ``name``; raises
    :class:`BodyError` with the reason when it cannot run natively."""
    from ember._src.native.backend import unsupported_reason
    reason = _dtype_reason(prog) if opts.symbolic else unsupported_reason(prog)
    if reason is not None:
        raise BodyError(reason)
    p = passes_mod.run_passes(prog, opts.passes)
    if opts.validate:
        validate(p)
    sched = build_schedule(p, max_inputs=opts.max_inputs, fuse=opts.fuse)
    lower_loops(sched, opts, prefix=name + "_")
    for st in sched.steps:
        if st.kind == "fallback" and not st.eqns[0].prim.effectful:  # a debug callback may call back
            raise BodyError(f"the body runs {st.eqns[0].prim.name} through the Python fallback (no native "
                            "lowering)")
    for st in sched.steps:
        if st.kind not in ("loop", "cond"):
            st.name = f"{name}_{st.name}"
    gemm_strategy.assign(sched, gemm_strategy.GemmContext(consts={}, inputs=(), prepack=False, pooled=False,
                                                          parallel=lambda work, extent: False, in_body=True))
    plan = plan_memory(sched, threads=opts.threads, inplace=opts.inplace)
    if opts.validate and not opts.symbolic:  # symbolic plans are placed (and checked) per binding
        plan.check()
    return Body(name, p, sched, plan)


def _dtype_reason(p: Program) -> str | None:
    """Why ``p`` (symbolic shapes allowed) cannot run natively: a dtype without a C type."""
    from ember._src.native.emit.c_ops import SUPPORTED_DTYPES
    for v in (*p.invars, *p.constvars, *(o for e in p.eqns for o in e.outvars)):
        if np.dtype(v.aval.dtype) not in SUPPORTED_DTYPES:
            return f"dtype {v.aval.dtype} has no C type in the native backend"
    return None


@dataclass
class LoopLowering:
    """How one ``scan``/``while``/``cond`` step runs natively: its bodies and workspace layout.

    ``bodies``: scan ``[body]``, while ``[cond, body]``, cond the branches. The workspace (the
    step's ``WORKSPACE`` buffer) holds the large carries' two slots each (``slot_offsets``) and,
    at ``arena_offset``, the bodies' arena (shared: they never run at the same time)."""

    kind: str
    bodies: list[Body]
    small_carries: bool = True
    inplace: set[int] = field(default_factory=set)  # carries updated in place (one slot)
    slot_offsets: list[tuple[Any, Any]] = field(default_factory=list)  # ints, or "dims[k]" texts
    arena_offset: Any = 0
    workspace_bytes: int = 0
    carry_bytes: list[Any] = field(default_factory=list)  # byte size of each carry
    per_binding: bool = False  # symbolic: offsets and workspace size placed per binding (symlayout)

    def describe(self) -> str:
        names = ", ".join(b.name for b in self.bodies)
        where = "local carries" if self.small_carries else "arena carries"
        if self.inplace:
            where += f", {sorted(self.inplace)} in place"
        ws = "per binding" if self.per_binding else f"{self.workspace_bytes} B"
        return f"native {self.kind} ({names}; {where}; workspace {ws})"


def _carry_avals(e: Eqn) -> list[Any]:
    if e.prim.name == "scan":
        nc, nk = e.params["num_consts"], e.params["num_carry"]
        return [a.aval for a in e.inputs[nc:nc + nk]]
    if e.prim.name == "while":
        n = e.params["cond_nconsts"] + e.params["body_nconsts"]
        return [a.aval for a in e.inputs[n:]]
    return []


def _lower(e: Eqn, opts: BodyOptions, name: str) -> LoopLowering:
    kind = e.prim.name
    if kind == "scan":
        if not isinstance(e.params["length"], (int, np.integer)) and not (
                opts.symbolic and sd.is_sym(e.params["length"])):
            raise BodyError(f"the length {e.params['length']} is not a static int")
        progs = [e.params["body"]]
    elif kind == "while":
        progs = [e.params["cond"], e.params["body"]]
    else:
        progs = list(e.params["branches"])
    bodies = [compile_body(p, opts, f"{name}b{j}") for j, p in enumerate(progs)]
    low = LoopLowering("scan" if kind == "scan" else kind, bodies)
    carries = _carry_avals(e)
    low.carry_bytes = [_nbytes(a) for a in carries]
    total = sum(low.carry_bytes)
    low.small_carries = not sd.is_sym(total) and total <= SMALL_CARRY_BYTES
    if opts.symbolic:  # slot offsets, the bodies' arena offset and size: symlayout, per binding
        low.per_binding = True
    else:
        off = 0
        if not low.small_carries:
            for n in low.carry_bytes:
                n = _align(n)
                low.slot_offsets.append((off, off + n))
                off += 2 * n
        low.arena_offset = off
        low.workspace_bytes = off + max([b.arena_bytes for b in bodies], default=0)
    if not low.small_carries and kind in ("scan", "while"):
        body = bodies[-1]
        first = e.params["num_consts"] if kind == "scan" else e.params["body_nconsts"]
        low.inplace = _inplace_carries(body, first, len(carries))
        for j in low.inplace:
            body.inplace[body.plan.outputs[j][1]] = first + j
    return low


def _inplace_carries(body: Body, first: int, nk: int) -> set[int]:
    """Carries ``j`` that ``body`` may update in place (one slot, no copy): the step writing new
    carry ``j`` is the last to read old carry ``j`` and reads it only where it writes (an
    elementwise kernel's element, or a ``gemm``'s accumulator ``C``); nothing copies old carry
    ``j`` after the call."""
    plan, sched, prog = body.plan, body.schedule, body.program
    vb = plan.value_buffer
    done = set()
    for j in range(nk):
        kind, idx, a = plan.outputs[j]
        if kind != "output" or any(k2 == "output" and i2 == idx for p, (k2, i2, _) in enumerate(plan.outputs)
                                   if p != j):
            continue
        if any(k2 == "input" and i2 == first + j for k2, i2, _ in plan.outputs):
            continue
        b_out, b_in = vb[a.id], vb[prog.invars[first + j].id]
        writer = [s for s, st in enumerate(sched.steps)
                  if st.kind != "alias" and any(vb.get(v.id) is b_out for v in st.outputs)]
        if len(writer) != 1:
            continue
        w = writer[0]
        ok = True
        for s, st in enumerate(sched.steps):
            if st.kind == "alias":
                continue
            reads = st.ir.inputs if st.ir is not None else [x for x in st.inputs if isinstance(x, Var)]
            if s < w or not any(vb.get(v.id) is b_in for v in reads):
                continue
            if s > w or not _updates_in_place(st, b_in, b_out, vb):
                ok = False
                break
        if ok:
            done.add(j)
    return done


def _updates_in_place(st: Step, b_in: Buffer, b_out: Buffer, vb: dict) -> bool:
    if st.kind == "gemm":
        e = st.eqns[0]
        c = e.inputs[2] if len(e.inputs) == 3 else None
        return (isinstance(c, Var) and vb.get(c.id) is b_in
                and tuple(c.aval.shape) == tuple(e.outvars[0].aval.shape)
                and e.params["c_dims"] == tuple(range(len(c.aval.shape)))
                and not any(isinstance(x, Var) and vb.get(x.id) is b_in for x in e.inputs[:2]))
    if st.kind == "kernel" and st.ir is not None:
        for root, vid in st.ir.inplace_candidates():
            if vb.get(root.id) is b_out and vb.get(vid) is b_in:
                off = next(r.offset for r in st.ir.roots if r.var is root)
                if all(offs == {off} for u, offs in st.ir.loads.items() if vb.get(u) is b_in):
                    return True
    return False


_PENDING = threading.local()  # per thread: a stack of lists of native decisions not yet reported


def lower_loops(sched: Schedule, opts: BodyOptions, prefix: str = "") -> None:
    """Turn the schedule's ``scan``/``while``/``cond`` fallback steps into native ``loop``/``cond``
    steps where their bodies compile (reporting each decision); the others stay fallbacks.

    A loop nested in a body is reported ``native`` only once its outermost enclosing loop is
    lowered: when an enclosing loop falls back, the nested loops run inside its reference loop
    and are reported (and checked against ``require_native``) as reference loops."""
    stack = getattr(_PENDING, "stack", None)
    if stack is None:
        stack = _PENDING.stack = []
    k = 0
    for st in sched.steps:
        if st.kind != "fallback" or st.eqns[0].prim.name not in LOOP_PRIMS:
            continue
        e = st.eqns[0]
        kind = e.prim.name
        name = f"{prefix}L{k}"
        first = e.params["branches"][0] if kind == "cond" else e.params["body"]
        stack.append([])
        try:
            low = _lower(e, opts, name)
        except BodyError as exc:
            nested = stack.pop()
            cf.report_loop_path(kind, first, e.params, cf.REFERENCE_LOOP, str(exc), backend="native")
            why = f"inside a {kind} that runs as a reference loop: {exc}"
            for n_kind, n_first, n_params in nested:
                cf.report_loop_path(n_kind, n_first, n_params, cf.REFERENCE_LOOP, why, backend="native")
            continue
        except BaseException:
            stack.pop()
            raise
        decided = [*stack.pop(), (kind, first, e.params)]
        if stack:  # inside an enclosing body: its loop decides
            stack[-1].extend(decided)
        else:
            for d_kind, d_first, d_params in decided:
                cf.report_loop_path(d_kind, d_first, d_params, cf.NATIVE_LOOP, backend="native")
        st.kind = StepKind.COND if kind == "cond" else StepKind.LOOP
        st.name = name
        st.sub = low
        k += 1


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
    ctx = _BodyCtx(body)
    lines = emit_steps(body.schedule, body.plan, ctx, opts, gen, funcs)
    params = ["char *arena", "void **fns", "const int64_t *dims"]
    params += [f"char *in{i}" for i in range(len(body.program.invars))]
    params += [f"char *out{k}" for k in range(body.plan.n_outputs)]
    decls = "".join(ln + "\n" for ln in axis_decls(opts))  # symbolic: axis values and offsets in dims
    funcs.append(f"static inline void {body.name}({', '.join(params)}) {{\n    (void)arena; (void)fns; "
                 "(void)dims;\n" + decls + "\n".join(lines) + "\n}\n")


# multiply-adds of inlined products: one fused instruction where the target has FMA (the C11
# mode the backend compiles in does not contract a * b + c on its own)
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
        n = _nbytes(aval)
        if not _nonzero(n):
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
    if e.prim.name == "cond":
        _emit_cond(e, low, atom, outs, bws, lines)
        lines.append("}")
        return lines
    if e.prim.name == "scan":
        nc, nk = e.params["num_consts"], e.params["num_carry"]
        consts, init, rest = e.inputs[:nc], e.inputs[nc:nc + nk], e.inputs[nc + nk:]
    else:
        nc = e.params["cond_nconsts"] + e.params["body_nconsts"]
        consts, init, rest = e.inputs[:nc], e.inputs[nc:], ()
        nk = len(init)
    cptr = [atom(a) for a in consts]
    # carry slots
    ka, kb = [f"kA{j}_" for j in range(nk)], [f"kB{j}_" for j in range(nk)]
    sizes = [_nbytes(a.aval) for a in init]
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
        if _nonzero(sizes[j]):
            lines.append("    " + _copy(ka[j], src, sizes[j]))
    for j in low.inplace:
        kb[j] = ka[j]
    rotate = []
    for j in range(nk):
        if not _nonzero(sizes[j]) or j in low.inplace:
            continue
        if low.small_carries:
            rotate.append(_copy(ka[j], kb[j], sizes[j]))
        else:
            rotate.append(f"{{ char *t_ = {ka[j]}; {ka[j]} = {kb[j]}; {kb[j]} = t_; }}")
    if e.prim.name == "scan":
        (body,) = low.bodies
        length, reverse = e.params["length"], bool(e.params["reverse"])
        length = length if sd.is_sym(length) else int(length)
        xs = [atom(a) for a in rest]
        x_step = [_nbytes(v.aval) for v in body.program.invars[nc + nk:]]
        y_step = [_nbytes(v.aval) for v in body.program.outvars[nk:]]

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
        if _nonzero(sizes[j]):
            lines.append("    " + _copy(outs[j], ka[j], sizes[j]))
    lines.append("}")
    return lines


def unroll_factor(unroll: Any, length: Any, pingpong: bool) -> int:
    """Body copies per iteration of a native scan loop for the ``unroll`` hint (``-1``: fully).

    ``-1`` unrolls a static length up to :data:`MAX_UNROLL` completely (a longer or symbolic one
    gets :data:`MAX_UNROLL` copies); an int ``k`` gives ``k`` copies, at most :data:`MAX_UNROLL`.
    With ping-pong carries (small carries alternating between two local slots) the count is
    even (``k`` odd: ``2k``; so ``unroll=1`` runs two steps per iteration) so that every iteration
    ends where it started."""
    k = int(unroll)
    if k < 0:
        k = int(length) if not sd.is_sym(length) and int(length) <= MAX_UNROLL else MAX_UNROLL
    k = max(1, min(k, MAX_UNROLL))
    if pingpong and k % 2:
        k = min(2 * k, 2 * MAX_UNROLL)
    return k


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


# ---------------------------------------------------------------------------------------------
# Dead loop outputs
# ---------------------------------------------------------------------------------------------


def _trim(e: Eqn, keep: list[bool]) -> Eqn:
    outvars = [v for v, k in zip(e.outvars, keep) if k]
    if e.prim.name == "scan":
        body = e.params["body"]
        nb = cf.derived(body, ("native-dce-outputs", tuple(keep)), lambda: cf.select_outputs(body, keep))
        return Eqn(e.prim, e.inputs, dict(e.params, body=nb), outvars)
    key = ("native-dce-outputs", tuple(keep))
    branches = tuple(cf.derived(b, key, lambda b=b: cf.select_outputs(b, keep)) for b in e.params["branches"])
    return Eqn(e.prim, e.inputs, dict(e.params, branches=branches), outvars)


def _drop_unused_scan_inputs(e: Eqn) -> Eqn:
    """``e`` (a scan) without the consts and xs its body does not read (carries stay)."""
    body, nc, nk = e.params["body"], e.params["num_consts"], e.params["num_carry"]
    read = {a.id for b in body.eqns for a in b.inputs if isinstance(a, Var)}
    read |= {a.id for a in body.outvars if isinstance(a, Var)}
    keep = [nc <= i < nc + nk or v.id in read for i, v in enumerate(body.invars)]
    if all(keep):
        return e
    nb = cf.derived(body, ("native-drop-inputs", tuple(keep)), lambda: Program(
        body.constvars, [v for v, k in zip(body.invars, keep) if k], body.eqns, body.outvars, body.consts))
    ins = [a for a, k in zip(e.inputs, keep) if k]
    return Eqn(e.prim, ins, dict(e.params, body=nb, num_consts=sum(keep[:nc])), e.outvars)


@passes_mod.register
def dce_loop_outputs(p: Program) -> Program:
    """Dead-code elimination that also drops the unused stacked outputs (``ys``) of ``scan`` and
    the unused outputs of ``cond`` (their bodies lose the computations feeding only those), and
    the consts and xs a scan's body does not read."""
    live = {a.id for a in p.outvars if isinstance(a, Var)}
    kept: list[Eqn] = []
    changed = False
    for e in reversed(p.eqns):
        used = [v.id in live for v in e.outvars]
        if not any(used) and not eqn_effectful(e):
            changed = True
            continue
        if e.prim.name in ("scan", "cond") and not all(used):
            keep = used
            if e.prim.name == "scan":
                nk = e.params["num_carry"]
                keep = [True] * nk + used[nk:]
            if not all(keep):
                e = _trim(e, keep)
                changed = True
        if e.prim.name == "scan":
            pruned = _drop_unused_scan_inputs(e)
            changed = changed or pruned is not e
            e = pruned
        kept.append(e)
        live.update(a.id for a in e.inputs if isinstance(a, Var))
    if not changed:
        return p
    kept.reverse()
    cv = [(v, c) for v, c in zip(p.constvars, p.consts or [None] * len(p.constvars)) if v.id in live]
    consts = [c for _, c in cv] if p.consts else []
    return Program([v for v, _ in cv], p.invars, kept, p.outvars, consts)


# ---------------------------------------------------------------------------------------------
# Loop-invariant transposes
# ---------------------------------------------------------------------------------------------

_MATVEC = (((1,), (0,)), ((), ()))
_VECMAT = (((0,), (0,)), ((), ()))


def _hoistable_matvecs(body: Program, consts: range) -> dict[int, int]:
    """Equations ``W @ h`` of ``body`` (``W`` one of its loop-invariant inputs, small, float;
    ``h`` a vector): eqn index -> input index of ``W``."""
    pos = {body.invars[i].id: i for i in consts}
    found = {}
    for k, e in enumerate(body.eqns):
        if e.prim.name != "dot_general" or e.params.get("dimension_numbers") != _MATVEC:
            continue
        w, h = e.inputs
        if not (isinstance(w, Var) and w.id in pos and isinstance(h, Var) and h.aval.ndim == 1
                and w.aval.ndim == 2 and not any(sd.is_sym(d) for d in w.aval.shape)
                and np.dtype(w.aval.dtype) in (np.float32, np.float64)
                and np.dtype(h.aval.dtype) == np.dtype(w.aval.dtype)
                and int(math.prod(w.aval.shape)) <= SMALL_GEMM_FLOPS):
            continue
        found[k] = pos[w.id]
    return found


def _rewrite_matvecs(body: Program, found: dict[int, int]) -> Program:
    """``body`` with each ``W @ h`` in ``found`` computed as ``h @ transpose(W)``."""
    from ember._src import core
    transpose_p = core.PRIMITIVES["transpose"]
    wt: dict[int, Var] = {}
    head: list[Eqn] = []
    for i in sorted(set(found.values())):
        w = body.invars[i]
        wt[i] = Var(ShapedArray(w.aval.shape[::-1], w.aval.dtype))
        head.append(Eqn(transpose_p, (w,), {"permutation": (1, 0)}, (wt[i],)))
    eqns = list(body.eqns)
    for k, i in found.items():
        e = eqns[k]
        eqns[k] = Eqn(e.prim, (e.inputs[1], wt[i]), dict(e.params, dimension_numbers=_VECMAT), e.outvars)
    return Program(body.constvars, body.invars, head + eqns, body.outvars, body.consts)


def _hoist_invariant_transposes(body: Program, consts: range) -> tuple[Program, list[tuple[int, Var]]]:
    """Move the body's ``transpose`` equations of loop-invariant inputs out: each result becomes a
    new input (after the invariant ones). Returns the body and, per new input, the input index
    transposed and the new input variable."""
    pos = {body.invars[i].id: i for i in consts}
    moved: list[tuple[int, Var]] = []
    eqns = []
    for e in body.eqns:
        x = e.inputs[0] if e.inputs else None
        if e.prim.name == "transpose" and isinstance(x, Var) and x.id in pos and x.aval.ndim == 2:
            moved.append((pos[x.id], e.outvars[0]))
        else:
            eqns.append(e)
    if not moved:
        return body, []
    at = consts.stop
    invars = list(body.invars)
    invars[at:at] = [v for _, v in moved]
    return Program(body.constvars, invars, eqns, body.outvars, body.consts), moved


@passes_mod.register
def hoist_loop_transposes(p: Program) -> Program:
    """A small matrix-vector product ``W @ h`` inside a ``scan``/``while`` body, with ``W``
    loop-invariant, becomes ``h @ W.T`` with ``W.T`` computed once before the loop: inlined, the
    row form accumulates ``h_p * W.T[p, :]`` in vector registers (~3x faster than dot products
    over rows of ``W`` for 64 x 64). Nested loops first, so a transpose moves out through every
    loop it is invariant in (the segments of a checkpointed scan do not transpose again)."""
    from ember._src import core
    transpose_p = core.PRIMITIVES["transpose"]
    eqns: list[Eqn] = []
    changed = False
    for e in p.eqns:
        if e.prim.name not in ("scan", "while") or (e.prim.name == "scan" and e.params["length"] == 0):
            eqns.append(e)
            continue
        body = e.params["body"]
        if e.prim.name == "scan":
            nc, first, key = e.params["num_consts"], 0, "num_consts"
        else:
            nc, first, key = e.params["body_nconsts"], e.params["cond_nconsts"], "body_nconsts"
        new_body = hoist_loop_transposes(body)
        found = _hoistable_matvecs(new_body, range(nc))
        if found:
            new_body = _rewrite_matvecs(new_body, found)
        new_body, moved = _hoist_invariant_transposes(new_body, range(nc))
        if new_body is body:
            eqns.append(e)
            continue
        wts = []
        for i, v in moved:
            wt = Var(v.aval)
            eqns.append(Eqn(transpose_p, (e.inputs[first + i],), {"permutation": (1, 0)}, (wt,)))
            wts.append(wt)
        ins = list(e.inputs)
        ins[first + nc:first + nc] = wts
        eqns.append(Eqn(e.prim, ins, dict(e.params, body=new_body, **{key: nc + len(wts)}), e.outvars))
        changed = True
    if not changed:
        return p
    return Program(p.constvars, p.invars, eqns, p.outvars, p.consts)
