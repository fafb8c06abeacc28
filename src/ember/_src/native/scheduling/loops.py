"""Native loops: ``scan``, ``while`` and ``cond`` compiled into the program's entry point (the
scheduling part: which loops run natively, their bodies and workspace layout).

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

The stage is split by job: this module decides and lays out (:func:`lower_loops`); the bodies
are compiled by the pipeline (:func:`ember._src.native.pipeline.compile_body`, handed in as
``BodyOptions.compile``), emitted by :mod:`ember._src.native.emit.loop_bodies`, and the passes
that prepare loops are :mod:`ember._src.native.rewrite.loop_passes`.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ember._src.control_flow import common as cf
from ember._src.native import opinfo
from ember._src.native.base import prim_refs as pr
from ember._src.native.base import symdims as sd
from ember._src.native.base.layout import ALIGN
from ember._src.native.scheduling.schedule import Schedule, Step, StepKind
from ember._src.program import Eqn, Program, Var

LOOP_PRIMS = pr.LOOPS
for _prim in LOOP_PRIMS:
    opinfo.register(_prim, opinfo.OpCategory.CONTROL,
                    "bodies compiled into the entry point (loops.py); else a fallback step")
SMALL_CARRY_BYTES = 2048  # carries up to this size (in all) live in local C arrays
MAX_UNROLL = 32  # body copies per iteration of a scan loop (``unroll``)


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def aval_nbytes(aval: Any) -> Any:
    """Byte size of a value: an ``int``, or a ``DimExpr`` under named dynamic axes."""
    n = math.prod(aval.shape) * np.dtype(aval.dtype).itemsize
    return n if sd.is_sym(n) else int(n)


def maybe_nonzero(n: Any) -> bool:
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
    prepack: bool = True  # products with a constant B read it packed once (the backend option)
    # compiles one body Program into a Body (passes, schedule, nested loops, plan): the pipeline's
    # ``compile_body``, handed down so this stage never imports the later ones
    compile: Callable[[Program, BodyOptions, str], Body] | None = None


@dataclass
class Body:
    """A compiled body: its optimized program, schedule (nested loops lowered), memory plan and
    the name of its C function."""

    name: str
    program: Program
    schedule: Schedule
    plan: Any  # its plan.planner.MemoryPlan (made by a later stage, so not imported here)
    const_slots: list[int] = field(default_factory=list)  # fns index of each body constant
    inplace: dict[int, int] = field(default_factory=dict)  # output buffer index -> input it updates

    @property
    def arena_bytes(self) -> int:
        return self.plan.arena_bytes


class BodyError(Exception):
    """A body cannot be compiled natively (the message is the reason)."""



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
    if e.prim is pr.SCAN:
        nc, nk = e.params["num_consts"], e.params["num_carry"]
        return [a.aval for a in e.inputs[nc:nc + nk]]
    if e.prim is pr.WHILE:
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
    if opts.compile is None:
        raise BodyError("no body compiler given (BodyOptions.compile)")
    bodies = [opts.compile(p, opts, f"{name}b{j}") for j, p in enumerate(progs)]
    low = LoopLowering("scan" if kind == "scan" else kind, bodies)
    carries = _carry_avals(e)
    low.carry_bytes = [aval_nbytes(a) for a in carries]
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


def _updates_in_place(st: Step, b_in: Any, b_out: Any, vb: dict) -> bool:
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
        if st.kind != "fallback" or st.eqns[0].prim not in LOOP_PRIMS:
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
