"""Batch interleaving: ``gemm -> row kernel -> gemm`` over the same batch runs one batch at a time.

Attention computes, per head, ``S = Q K^T`` (a batched gemm), a row-wise kernel (softmax) over
``S`` giving ``P``, and ``P V`` (another batched gemm). Run step by step, ``S`` and ``P`` (one
``T x T`` matrix per head and batch: 2 MiB each for 32 heads of 128 x 128) make round trips through
the last-level cache. Run head by head, the head's slice of ``S`` is still in L1/L2 when the row
kernel reads it, and so is ``P`` when the second product reads it.

:func:`group_batched` finds such triples in a schedule and marks them (``Step.group``, the member
list shared by the members): a batched gemm ``G1`` (no ``c``, result a plain ``[nb, m, n]``
array) whose result only a kernel ``R`` reads (through reshapes); ``R`` a row kernel over
``nb * m`` rows of ``n`` elements that reads that result only at the element of the row it
computes and writes one full-domain result the same way; that result read only by a batched gemm
``G2`` as its (plain ``[nb, m, n]``) left operand. Steps scheduled between them that are not
members move before ``G1`` (they cannot depend on the members' results: only members read them).

Codegen then emits one loop over the batch. For float32 where :mod:`.group_kernel` runs (AVX2,
FMA), per batch: pack ``op(B1)`` and ``op(B2)``, then per block of ``MR`` rows: those rows of
``S``, ``R`` on them, those rows of ``O``; ``S`` and ``P`` get storage for one row block. Otherwise
(and for float64): ``G1``'s product for batch ``bb`` (small-GEMM kernel or BLAS), ``R`` on rows
``[bb * m, (bb + 1) * m)``, ``G2``'s product for batch ``bb``, with ``S`` and ``P`` one batch
large. Either way that storage is reused by every batch, so it stays in cache (writing each batch
to fresh full-size buffers would move as much memory as the step-by-step run). The planner keeps
every buffer a member touches live over the whole group (a later member runs before an earlier one
finishes) and gives members no in-place reuse. Values are those of the step-by-step run up to the summation
order inside the products (the row kernel is the same code). On several threads (float32 groups on the
tiled kernel only), each thread gets its own copy of S, P and the packed panels, and the batches are
shared out on the thread pool (:mod:`.threadpool`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember._src.native.base import gemm_sizes
from ember._src.native.rewrite import fused
from ember._src.native.scheduling import index as ixm
from ember._src.native.scheduling.schedule import Schedule, Step
from ember._src.program import Var

__all__ = ["Group", "group_batched"]


class Group(list):
    """The members ``[G1, R, G2]`` of a batch-interleaved group (``Step.group``), with the batch
    count ``nb``, rows per batch ``m``, row length ``n`` and the ids of the values that live only
    inside the group (``S``, ``P`` and their reshapes): those get one batch's slice of storage,
    reused by every batch."""

    def __init__(self, steps: list[Step], nb: int, m: int, n: int, local: set[int], copies: int = 1):
        super().__init__(steps)
        self.nb, self.m, self.n, self.local = nb, m, n, local
        # per-thread copies of the group-local storage (S, P, the packed panels): a program on
        # several threads runs the batches on the thread pool, each thread in its own copy
        self.copies = copies
        g1, _, g2 = steps
        va1, _, _, _ = _gemm_layout(g1)
        _, vb2, _, _ = _gemm_layout(g2)
        self.k1, self.n2 = va1[2][0], vb2[2][0]
        # float32 on AVX2/FMA: row blocks of gemm_sizes.GROUP_MR rows with packed B panels (S and P
        # hold one block); otherwise each product runs per batch (S and P hold one batch)
        self.tiled = np.dtype(g1.outputs[0].aval.dtype) == np.float32 and gemm_sizes.group_kernel_available()
        self.block = min(gemm_sizes.GROUP_MR, m) if self.tiled else m

    def local_stride(self, v: Var) -> int:
        """Bytes of one copy of a group-local value's storage (``block`` of its rows), 64-byte
        aligned; the value's buffer holds :attr:`copies` of them."""
        return _align64(self.block * self.n * np.dtype(v.aval.dtype).itemsize)

    def local_nbytes(self, v: Var) -> int:
        return self.local_stride(v) * self.copies

    def panel_strides(self) -> tuple[int, int]:
        """Bytes of one copy of the packed ``op(B1)`` and ``op(B2)`` panels of a tiled group."""
        return (_align64(self.k1 * gemm_sizes.group_panel_width(self.n) * 4),
                _align64(self.n * gemm_sizes.group_panel_width(self.n2) * 4))

    def panel_nbytes(self) -> tuple[int, int]:
        a, b = self.panel_strides()
        return a * self.copies, b * self.copies


def _align64(n: int) -> int:
    return (n + 63) // 64 * 64


def _is_static(*shapes: Any) -> bool:
    return all(isinstance(d, int) for s in shapes for d in s)


def _gemm_layout(step: Step) -> tuple | None:
    """(op(a), op(b), result) views and result shape of a float gemm step without ``c``."""
    e = step.eqns[0]
    if step.kind != "gemm" or step.epilogue is not None or len(e.inputs) != 2 \
            or not isinstance(e.inputs[0], Var) or not isinstance(e.inputs[1], Var):
        return None
    if np.dtype(step.outputs[0].aval.dtype) not in (np.float32, np.float64):
        return None
    shapes = [e.inputs[0].aval.shape, e.inputs[1].aval.shape, step.outputs[0].aval.shape]
    if not _is_static(*shapes):
        return None
    return fused.layouts(shapes[0], shapes[1], e.params)


def _identity(ir: Any) -> ixm.Ix:
    return ixm.linearize([ixm.Ix.var(d) for d in ir.dvars], ir.domain)


class _Graph:
    def __init__(self, sched: Schedule):
        self.steps = sched.steps
        self.out_ids = {a.id for a in sched.program.outvars if isinstance(a, Var)}
        self.readers: dict[int, list[int]] = {}
        for s, st in enumerate(self.steps):
            ins = st.ir.inputs if st.ir is not None else st.inputs
            for a in ins:
                if isinstance(a, Var):
                    self.readers.setdefault(a.id, []).append(s)

    def uses(self, v: Var) -> tuple[set[int], list[int]] | None:
        """(ids of ``v`` and its reshape aliases, indices of the non-alias steps reading any of
        them), or None when one of them is a program output."""
        ids, alias_steps, readers, stack = {v.id}, [], [], [v.id]
        while stack:
            vid = stack.pop()
            if vid in self.out_ids:
                return None
            for s in self.readers.get(vid, ()):
                st = self.steps[s]
                if st.kind == "alias":
                    alias_steps.append(s)
                    for o in st.outputs:
                        ids.add(o.id)
                        stack.append(o.id)
                else:
                    readers.append(s)
        return ids, sorted(set(readers))


def _row_kernel(r: Step, s_ids: set[int], rows: int, n: int) -> bool:
    ir = r.ir
    if r.kind != "kernel" or ir is None or ir.parts or ir.natural is not None or ir.n_outer < 1:
        return False
    if not _is_static(ir.domain) or ir.outer_size != rows or ir.inner_size != n:
        return False
    if len(ir.roots) != 1 or not ir.roots[0].full or len(r.outputs) != 1:
        return False
    ident = _identity(ir)
    if ir.roots[0].offset != ident:
        return False
    reads_s = False
    for vid, offs in ir.loads.items():
        if vid in s_ids:
            reads_s = True
            if offs != {ident}:
                return False
    return reads_s


def _plain(view: tuple, nb: int, m: int, n: int) -> bool:
    batch, (r, rs), (c, cs) = view
    return (r, rs, c, cs) == (m, n, n, 1) and fused.batch_size(batch) == nb and \
        all(st == m * n * (fused.batch_size(batch[i + 1:])) for i, (_, st) in enumerate(batch))


def group_batched(sched: Schedule, threads: int = 1) -> int:
    """Mark (and order) the batch-interleavable ``gemm -> row kernel -> gemm`` triples of ``sched``;
    returns how many were found. With ``threads > 1`` only groups on :mod:`.group_kernel` (float32,
    AVX2/FMA) are formed, with a copy of their local storage per thread (codegen shares their
    batches out on the thread pool)."""
    if threads != 1 and not gemm_sizes.group_kernel_available():
        return 0
    found = 0
    s = 0
    while s < len(sched.steps):
        found_ = _match(sched, s)
        if found_ is None:
            s += 1
            continue
        members, (nb, m, n, local) = found_[:3], found_[3]
        g1, r, g2 = members
        if threads != 1 and np.dtype(sched.steps[g1].outputs[0].aval.dtype) != np.float32:
            s += 1  # only tiled (float32) groups run on several threads
            continue
        steps = sched.steps
        inside = set(members) | {k for k in range(g1, g2 + 1) if steps[k].kind == "alias"
                                 and _alias_of_member(steps, k, members)}
        moved = [steps[k] for k in range(g1 + 1, g2) if k not in inside]
        kept = [steps[k] for k in range(g1, g2 + 1) if k in inside]
        sched.steps[g1:g2 + 1] = moved + kept
        group = Group([st for st in kept if st.kind != "alias"], nb, m, n, local, copies=max(1, threads))
        for st in group:
            st.group = group
        found += 1
        s = g1 + len(moved) + len(kept)
    return found


def _alias_of_member(steps: list[Step], k: int, members: tuple[int, int, int]) -> bool:
    """Whether alias step ``k`` renames the result of a member (S or P)."""
    src = steps[k].inputs[0]
    produced = {v.id for m in members for v in steps[m].outputs}
    seen = set(produced)
    for j in range(members[0], k):
        if steps[j].kind == "alias" and steps[j].inputs[0].id in seen:
            seen.update(v.id for v in steps[j].outputs)
    return src.id in seen


def _match(sched: Schedule, g1: int) -> tuple | None:
    steps = sched.steps
    st1 = steps[g1]
    if getattr(st1, "group", None) is not None:
        return None
    lay = _gemm_layout(st1)
    if lay is None:
        return None
    va, _, vo, out_shape = lay
    nb, m, n = fused.batch_size(va[0]), vo[1][0], vo[2][0]
    if nb < 2 or not fused.result_contiguous(vo, out_shape) or len(out_shape) != 3:
        return None
    graph = _Graph(sched)
    su = graph.uses(st1.outputs[0])
    if su is None or len(su[1]) != 1:
        return None
    r = su[1][0]
    if not _row_kernel(steps[r], su[0], nb * m, n):
        return None
    pu = graph.uses(steps[r].outputs[0])
    if pu is None or len(pu[1]) != 1:
        return None
    g2 = pu[1][0]
    lay2 = _gemm_layout(steps[g2])
    if lay2 is None:
        return None
    e2 = steps[g2].eqns[0]
    if e2.inputs[0].id not in pu[0] or e2.inputs[1].id in pu[0]:
        return None
    va2, vb2, vo2, _ = lay2
    if not _plain(va2, nb, m, n) or fused.batch_size(vb2[0]) != nb or fused.batch_size(vo2[0]) != nb:
        return None
    if np.dtype(e2.inputs[0].aval.dtype) != np.dtype(st1.outputs[0].aval.dtype):
        return None
    return g1, r, g2, (nb, m, n, su[0] | pu[0])
