"""Memory planning over a schedule: liveness, aliasing, in-place reuse, first-fit arena offsets.

Buffer classes:

* ``EXTERNAL_IN``: program inputs (bound per call, never written);
* ``PARAMS``: captured constants (bound once when the executable is built);
* ``EXTERNAL_OUT``: program outputs (fresh per call, from the output pool);
* ``ACTIVATION``: intermediates, placed in the arena;
* ``WORKSPACE``: per-step scratch (the named requests of :mod:`.scratch`: cached rows, accumulators,
  call and loop workspace, ...), live for one step;
* ``GRADS``: in a gradient program (``grads_from``: the input holding the cotangent seed, as
  ``vsla.jit`` of a ``vsla.grad`` function passes it), the intermediates computed from the seed --
  the backward pass's cotangents and the partial gradients summed into them -- placed in a region
  of the arena of their own, after the ``ACTIVATION``/``WORKSPACE`` region (the specification's
  GRADS arena; gradients that are program outputs stay ``EXTERNAL_OUT``: they are handed to the
  caller).

A reshape (``alias`` step) shares its source's buffer. An elementwise kernel may write an output
into a same-size input buffer that dies at that step when it reads that input only at the element
it writes (:meth:`KernelIR.inplace_candidates`). Arena buffers get 64-byte aligned offsets,
first fit, largest first; buffers whose lifetimes ([first write, last read] in steps) overlap never
share bytes (:meth:`MemoryPlan.check`).

For a schedule with symbolic sizes (named dynamic axes) the liveness, aliasing and in-place
decisions are made once on the symbolic sizes (equal polynomials are equal sizes for every
binding); byte sizes stay ``DimExpr`` and the offsets are left to :func:`first_fit` per binding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ember._src import shapes as sh
from ember._src.native.opinfo import inplace_operand
from ember._src.native.plan import scratch as scratch_mod
from ember._src.native.plan.scratch import ALIGN
from ember._src.native.scheduling.schedule import Schedule
from ember._src.program import Literal, Var
from ember.errors import ValidationError

EXTERNAL_IN, PARAMS, EXTERNAL_OUT, ACTIVATION, WORKSPACE, GRADS = (
    "EXTERNAL_IN", "PARAMS", "EXTERNAL_OUT", "ACTIVATION", "WORKSPACE", "GRADS")
_INTERMEDIATE = (ACTIVATION, GRADS)  # step results in the arena (in-place reuse within one class)


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass(eq=False)
class Buffer:
    id: int
    cls: str
    nbytes: int
    start: int
    end: int
    values: list[int] = field(default_factory=list)  # var ids stored here
    index: int = -1  # position among inputs / params / outputs
    offset: int = -1  # arena offset (ACTIVATION, WORKSPACE)
    note: str = ""

    @property
    def in_arena(self) -> bool:
        return self.cls in (ACTIVATION, WORKSPACE, GRADS)

    def __str__(self) -> str:
        where = f"@{self.offset}" if self.in_arena else f"#{self.index}"
        return f"b{self.id} {self.cls:<12} {str(self.nbytes):>10} B {where:<10} " \
               f"steps [{self.start}, {self.end}]" + \
            (f"  {self.note}" if self.note else "")


@dataclass
class MemoryPlan:
    buffers: list[Buffer]
    value_buffer: dict[int, Buffer]
    scratch: dict[tuple[int, str], Buffer]  # (step index, scratch name) -> workspace buffer
    outputs: list[tuple[str, int, object]]  # per program output: (kind, index, var or literal)
    inplace: list[tuple[int, int, int]]  # (step, output var id, input var id)
    arena_bytes: int
    intermediate_bytes: int
    n_outputs: int

    def __str__(self) -> str:
        lines = [f"memory plan: arena {self.arena_bytes} B (peak), intermediates {self.intermediate_bytes} B"
                 f" (sum), {len(self.inplace)} in-place, {self.n_outputs} output buffers"]
        lines += ["  " + str(b) for b in self.buffers]
        return "\n".join(lines)

    def check(self) -> None:
        """Invariants: aligned offsets, no two simultaneously live arena buffers overlap,
        peak <= sum of intermediates."""
        arena = [b for b in self.buffers if b.in_arena and b.nbytes > 0]
        for b in arena:
            if b.offset < 0 or b.offset % ALIGN:
                raise ValidationError(f"planner: buffer b{b.id} has unaligned offset {b.offset}")
            if b.offset + b.nbytes > self.arena_bytes:
                raise ValidationError(f"planner: buffer b{b.id} exceeds the arena")
        for i, a in enumerate(arena):
            for b in arena[i + 1:]:
                if a.start <= b.end and b.start <= a.end and \
                        a.offset < b.offset + b.nbytes and b.offset < a.offset + a.nbytes:
                    raise ValidationError(f"planner: live buffers b{a.id} and b{b.id} overlap")
        if self.arena_bytes > self.intermediate_bytes:
            raise ValidationError("planner: peak exceeds the sum of intermediates")


def nbytes_of(v: Var) -> Any:
    """Byte size of a value: an ``int``, or a ``DimExpr`` for a symbolic shape."""
    n = math.prod(v.aval.shape) * np.dtype(v.aval.dtype).itemsize
    return n if isinstance(n, sh.DimExpr) else int(n)


def seed_descendants(program: Any, index: int | None) -> set[int]:
    """Ids of the values of ``program`` computed (directly or not) from input ``index`` (empty when
    None or out of range)."""
    if index is None or not 0 <= index < len(program.invars):
        return set()
    found = {program.invars[index].id}
    for e in program.eqns:
        if any(isinstance(a, Var) and a.id in found for a in e.inputs):
            found.update(o.id for o in e.outvars)
    return found


def plan_memory(sched: Schedule, *, threads: int = 1, inplace: bool = True,
                grads_from: int | None = None) -> MemoryPlan:
    """Plan buffers for ``sched``. ``threads`` sizes per-thread workspace of parallel kernels;
    ``grads_from``: the input holding a gradient program's cotangent seed (its descendants are
    ``GRADS``)."""
    p = sched.program
    grads = seed_descendants(p, grads_from)
    buffers: list[Buffer] = []
    vb: dict[int, Buffer] = {}
    n_steps = len(sched.steps)

    def new(cls: str, nbytes: int, start: int, end: int, index: int = -1, note: str = "") -> Buffer:
        b = Buffer(len(buffers), cls, nbytes, start, end, index=index, note=note)
        buffers.append(b)
        return b

    for i, v in enumerate(p.invars):
        b = vb[v.id] = new(EXTERNAL_IN, nbytes_of(v), -1, n_steps, i, f"input {i}")
        b.values.append(v.id)
    for j, v in enumerate(p.constvars):
        b = vb[v.id] = new(PARAMS, nbytes_of(v), -1, n_steps, j, f"constant {j}")
        b.values.append(v.id)
    scratch: dict[tuple[int, str], Buffer] = {}
    for s, step in enumerate(sched.steps):
        for a in step.inputs:
            if isinstance(a, Var) and a.id in vb:
                vb[a.id].end = max(vb[a.id].end, s)
        if step.kind == "alias":
            src = step.inputs[0]
            b = vb[src.id]
            for v in step.outputs:
                vb[v.id] = b
                b.values.append(v.id)
            continue
        for v in step.outputs:
            cls = GRADS if v.id in grads else ACTIVATION
            b = vb[v.id] = new(cls, nbytes_of(v), s, s, note=f"{step.name} -> v{v.id}")
            b.values.append(v.id)
        for req in scratch_mod.requests(step, threads):  # named per-step scratch (scratch.py)
            scratch[(s, req.name)] = new(WORKSPACE, req.nbytes, s, s, note=f"{step.name} {req.name}")
    # program outputs
    outputs: list[tuple[str, int, object]] = []
    n_out = 0
    for a in p.outvars:
        if isinstance(a, Literal):
            outputs.append(("literal", -1, a))
            continue
        b = vb[a.id]
        if b.cls == EXTERNAL_IN:
            outputs.append(("input", b.index, a))
        elif b.cls == PARAMS:
            outputs.append(("param", b.index, a))
        else:
            if b.cls in _INTERMEDIATE:
                b.cls, b.index, b.end = EXTERNAL_OUT, n_out, n_steps
                n_out += 1
            outputs.append(("output", b.index, a))
    # in-place reuse of dying same-size inputs by elementwise kernels
    done_inplace: list[tuple[int, int, int]] = []
    if inplace:
        for s, step in enumerate(sched.steps):
            if step.kind == "gemm":
                _gemm_in_place(s, step, vb, buffers, done_inplace)
            if step.kind == "call" and (k := inplace_operand(step.eqns[0])) is not None:
                _call_in_place(s, step, k, vb, buffers, done_inplace)
            if step.ir is None:
                continue
            taken: set[int] = set()
            for root, in_vid in step.ir.inplace_candidates():
                bo, bi = vb[root.id], vb.get(in_vid)
                if bi is None or bo is bi or bi.id in taken or not _same_intermediate(bo, bi):
                    continue
                if bi.end != s or bo.nbytes != bi.nbytes or bo.start != s:
                    continue
                root_off = next(r.offset for r in step.ir.roots if r.var is root)
                aliases = [u for u in step.ir.loads if vb.get(u) is bi]
                if any(step.ir.loads[u] != {root_off} for u in aliases):
                    continue
                _merge_into(bi, bo, vb, buffers, f"in place {step.name} -> v{root.id}")
                taken.add(bi.id)
                done_inplace.append((s, root.id, in_vid))
    # lifetimes of intermediates extend to their last reader
    for s, step in enumerate(sched.steps):
        reads = step.ir.inputs if step.ir is not None else [a for a in step.inputs if isinstance(a, Var)]
        for v in reads:
            b = vb.get(v.id)
            if b is not None and b.in_arena:
                b.end = max(b.end, s)
    if any(isinstance(b.nbytes, sh.DimExpr) for b in buffers):  # offsets are placed per binding
        arena, inter = 0, sum(b.nbytes for b in buffers if b.in_arena)
    else:  # the GRADS region after the others
        arena = _first_fit([b for b in buffers if b.in_arena and b.cls != GRADS])
        grad_bufs = [b for b in buffers if b.cls == GRADS]
        region = _first_fit(grad_bufs)
        for b in grad_bufs:
            b.offset += arena
        arena += region
        inter = sum(_align(b.nbytes) for b in buffers if b.in_arena)
    for i, b in enumerate(buffers):
        b.id = i
    return MemoryPlan(buffers, vb, scratch, outputs, done_inplace, arena, inter, n_out)


def _gemm_in_place(s: int, step, vb: dict[int, Buffer], buffers: list[Buffer],
                   done: list[tuple[int, int, int]]) -> None:
    """``gemm(a, b, c)`` with a full-shape ``c`` dying here accumulates into c's buffer."""
    e = step.eqns[0]
    if len(e.inputs) != 3 or not isinstance(e.inputs[2], Var):
        return
    c, out = e.inputs[2], step.outputs[0]  # out: the product, or a fused epilogue's view of it
    if tuple(c.aval.shape) != tuple(e.outvars[0].aval.shape) \
            or e.params["c_dims"] != tuple(range(len(c.aval.shape))):
        return
    bo, bi = vb[out.id], vb[c.id]
    if not _same_intermediate(bo, bi) or bi.end != s or bo.nbytes != bi.nbytes or bo is bi:
        return
    if any(isinstance(a, Var) and vb.get(a.id) is bi for a in e.inputs[:2]):
        return  # c's buffer is also a matrix operand
    _merge_into(bi, bo, vb, buffers, f"gemm {step.name} accumulates in place")
    done.append((s, out.id, c.id))


def _call_in_place(s: int, step, k: int, vb: dict[int, Buffer], buffers: list[Buffer],
                   done: list[tuple[int, int, int]]) -> None:
    """A call that updates operand ``k`` (dynamic_update_slice, scatter) writes into its buffer when
    that operand dies here and no other operand shares it (the C skips the initial copy)."""
    e = step.eqns[0]
    x, out = e.inputs[k], step.outputs[0]
    if not isinstance(x, Var):
        return
    bo, bi = vb[out.id], vb[x.id]
    if not _same_intermediate(bo, bi) or bi.end != s or bo.nbytes != bi.nbytes or bo is bi:
        return
    if any(isinstance(a, Var) and vb.get(a.id) is bi for j, a in enumerate(e.inputs) if j != k):
        return
    _merge_into(bi, bo, vb, buffers, f"{step.name} updates in place")
    done.append((s, out.id, x.id))


def _same_intermediate(bo: Buffer, bi: Buffer) -> bool:
    """Both step results in the arena, of one class (a GRADS buffer reuses only a GRADS one)."""
    return bo.cls == bi.cls and bo.cls in _INTERMEDIATE


def _merge_into(bi: Buffer, bo: Buffer, vb: dict[int, Buffer], buffers: list[Buffer], note: str) -> None:
    """An in-place decision: the values of the output buffer ``bo`` move into the input buffer
    ``bi`` (which now lives until ``bo``'s end), and ``bo`` is dropped."""
    for vid in bo.values:
        vb[vid] = bi
    bi.values.extend(bo.values)
    bi.end = max(bi.end, bo.end)
    bi.note += f"; {note}"
    buffers.remove(bo)


def first_fit(sizes: list[int], starts: list[int], ends: list[int]) -> tuple[list[int], int]:
    """Aligned first-fit offsets (largest first) for buffers with these byte sizes and inclusive
    step lifetimes; returns (offsets, peak). The same placement as the static planner's."""
    order = sorted(range(len(sizes)), key=lambda i: (-sizes[i], starts[i], i))
    offsets = [0] * len(sizes)
    placed: list[int] = []
    peak = 0
    for i in order:
        n = sizes[i]
        if n == 0:
            continue
        s, e = starts[i], ends[i]
        live = sorted((offsets[j], sizes[j]) for j in placed if starts[j] <= e and s <= ends[j])
        off = 0
        for o, m in live:
            if off + n <= o:
                break
            off = max(off, (o + m + ALIGN - 1) // ALIGN * ALIGN)
        offsets[i] = off
        placed.append(i)
        peak = max(peak, (off + n + ALIGN - 1) // ALIGN * ALIGN)
    return offsets, peak


def _first_fit(bufs: list[Buffer]) -> int:
    placed: list[Buffer] = []
    peak = 0
    for b in sorted(bufs, key=lambda b: (-b.nbytes, b.start, b.id)):
        if b.nbytes == 0:
            b.offset = 0
            continue
        live = sorted((o for o in placed if o.start <= b.end and b.start <= o.end), key=lambda o: o.offset)
        off = 0
        for o in live:
            if off + b.nbytes <= o.offset:
                break
            off = max(off, _align(o.offset + o.nbytes))
        b.offset = off
        placed.append(b)
        peak = max(peak, _align(off + b.nbytes))
    return peak
