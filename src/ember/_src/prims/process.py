"""Collectives across processes as primitives: ``process_allreduce``, ``process_all_gather``,
``process_reduce_scatter`` and ``process_permute`` over a :class:`ProcessGroup` (an MPI
communicator handed over by mpi4py).

``ember.distributed.spmd`` binds them for ``psum``/``pmean``/``pmax``/``pmin``/``all_gather``/
``psum_scatter``/``ppermute`` over a named process axis. Their NumPy implementation calls mpi4py
(the group's host methods); the native backend lowers them to steps of the program's one native
call that call MPI from C on the arena buffers (``native/emit/mpi_calls.py``), and runs them as fallback
steps (calling the implementation) where the MPI library cannot be reached from C. JVP and
transpose rules are JAX's: the sum, gather, reduce-scatter and permute are linear (a tangent goes
through the same collective; the transpose of a sum is a sum, of a gather a reduce-scatter and back,
of a permute the inverse permute); the tangent of a max/min is that of the process(es) holding
the extremum, averaged over ties. mpi4py is imported only when a group is created.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ember._src import ad_util as ad
from ember._src import core
from ember._src.core import Primitive, ShapedArray
from ember._src.prims import elementwise as ew
from ember._src.prims import movement as mv

REDUCE_OPS = ("sum", "max", "min")


class ProcessGroup:
    """An MPI communicator as a primitive parameter (compared by identity, one per communicator):
    its size and rank, and host implementations of the collectives on NumPy arrays. ``check(what,
    x)``, when given, runs before each host collective (``spmd`` passes its debug-mode check that
    every process passed the same shape)."""

    def __init__(self, comm: Any, check: Callable[[str, np.ndarray], None] | None = None):
        from mpi4py import MPI

        self.comm, self.check, self._mpi = comm, check, MPI
        self.size, self.rank = int(comm.Get_size()), int(comm.Get_rank())

    def __repr__(self) -> str:
        return f"<ProcessGroup {self.size} processes>"

    def _checked(self, what: str, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        if not x.flags.c_contiguous:  # (np.ascontiguousarray would turn a 0-d array into 1-d)
            x = np.ascontiguousarray(x)
        if self.check is not None:
            self.check(what, x)
        return x

    def allreduce(self, x: np.ndarray, op: str) -> np.ndarray:
        """``op`` ("sum", "max", "min") of ``x`` over the processes (mpi4py ``Allreduce``)."""
        x = self._checked({"sum": "psum", "max": "pmax", "min": "pmin"}[op], x)
        if op == "sum" and x.dtype.kind in "iu" and x.dtype.itemsize < 4:
            # summed as int32 and wrapped back, as NumPy wraps (Open MPI saturates 8/16-bit sums)
            return self.allreduce(x.astype(np.int32), op).astype(x.dtype)
        out = np.empty_like(x)
        self.comm.Allreduce(x, out, op=getattr(self._mpi, op.upper()))
        return out

    def allgather(self, x: np.ndarray) -> np.ndarray:
        """Every process's ``x`` stacked along a new leading axis (mpi4py ``Allgather``)."""
        x = self._checked("all_gather", x)
        out = np.empty((self.size, *x.shape), x.dtype)
        self.comm.Allgather(x, out)
        return out

    def reduce_scatter(self, x: np.ndarray) -> np.ndarray:
        """Row ``rank`` of the sum over processes of ``x`` (leading axis of size ``size``)."""
        x = self._checked("psum_scatter", x)
        out = np.empty(x.shape[1:], x.dtype)
        self.comm.Reduce_scatter_block(x, out, op=self._mpi.SUM)
        return out

    def permute(self, x: np.ndarray, perm: tuple) -> np.ndarray:
        """``x`` of the process that sends to this one under ``perm`` ((source, destination)
        pairs); zeros when none does (mpi4py ``Sendrecv``)."""
        x = self._checked("ppermute", x)
        dest, source = permute_peers(perm, self.rank)
        out = np.zeros_like(x)
        null = self._mpi.PROC_NULL
        self.comm.Sendrecv(x, null if dest < 0 else dest, 0, out, null if source < 0 else source, 0)
        return out


def permute_peers(perm: tuple, rank: int) -> tuple[int, int]:
    """(the process ``rank`` sends to, the process it receives from) under ``perm``; -1: none."""
    dest = next((d for s, d in perm if s == rank), -1)
    source = next((s for s, d in perm if d == rank), -1)
    return dest, source


process_allreduce_p = Primitive("process_allreduce")
process_all_gather_p = Primitive("process_all_gather")
process_reduce_scatter_p = Primitive("process_reduce_scatter")
process_permute_p = Primitive("process_permute")


def _same(x: ShapedArray, **params: Any) -> ShapedArray:
    return ShapedArray(x.shape, x.dtype, x.weak_type)


def _gathered(x: ShapedArray, *, group: ProcessGroup) -> ShapedArray:
    return ShapedArray((group.size, *x.shape), x.dtype, x.weak_type)


def _scattered(x: ShapedArray, *, group: ProcessGroup) -> ShapedArray:
    if x.ndim == 0 or x.shape[0] != group.size:
        raise ValueError(f"process_reduce_scatter: the leading axis must have one row per process "
                         f"({group.size}), got shape {tuple(x.shape)}")
    return ShapedArray(x.shape[1:], x.dtype, x.weak_type)


def _batch_same(prim: Primitive) -> Callable:
    def rule(vals: list, dims: list, **params: Any) -> tuple[list, list]:
        return [prim.bind(vals[0], **params)], [dims[0]]
    return rule


def _batch_gather(vals: list, dims: list, *, group: ProcessGroup) -> tuple[list, list]:
    return [process_all_gather_p.bind(vals[0], group=group)], [dims[0] + 1]


def _batch_scatter(vals: list, dims: list, *, group: ProcessGroup) -> tuple[list, list]:
    x, d = vals[0], dims[0]
    if d == 0:  # keep the process rows leading: (batch, n, ...) -> (n, batch, ...)
        x, d = mv.moveaxis(x, 0, 1), 1
    return [process_reduce_scatter_p.bind(x, group=group)], [d - 1]


process_allreduce_p.impl = lambda x, *, group, op: group.allreduce(x, op)
process_allreduce_p.abstract_eval = _same
process_allreduce_p.batch = _batch_same(process_allreduce_p)
process_all_gather_p.impl = lambda x, *, group: group.allgather(x)
process_all_gather_p.abstract_eval = _gathered
process_all_gather_p.batch = _batch_gather
process_reduce_scatter_p.impl = lambda x, *, group: group.reduce_scatter(x)
process_reduce_scatter_p.abstract_eval = _scattered
process_reduce_scatter_p.batch = _batch_scatter
process_permute_p.impl = lambda x, *, group, perm: group.permute(x, perm)
process_permute_p.abstract_eval = _same
process_permute_p.batch = _batch_same(process_permute_p)
for _p in (process_allreduce_p, process_all_gather_p, process_reduce_scatter_p, process_permute_p):
    # communication: every process must run the same collectives in the same order, so compilers
    # neither evaluate them at compile time, nor merge equal ones, nor reorder them (``effectful``)
    _p.effectful = True


def _allreduce_jvp(primals: list, tangents: list, *, group: ProcessGroup, op: str) -> tuple[list, list]:
    (x,), (t,) = primals, tangents
    out = process_allreduce_p.bind(x, group=group, op=op)
    if ad.is_zero(t):  # structural: every process traced the same program, so all skip it
        return [out], [ad.Zero.from_value(out)]
    if op == "sum":
        return [out], [process_allreduce_p.bind(t, group=group, op="sum")]
    hit = ew.convert_element_type(ew.eq(x, out), core.get_aval(t).dtype)
    num = process_allreduce_p.bind(ew.mul(hit, t), group=group, op="sum")
    cnt = process_allreduce_p.bind(hit, group=group, op="sum")
    return [out], [ew.div(num, cnt)]


def _linear_jvp(prim: Primitive) -> Callable:
    def jvp(primals: list, tangents: list, **params: Any) -> tuple[list, list]:
        out, t = prim.bind(primals[0], **params), tangents[0]
        return [out], [ad.Zero.from_value(out) if ad.is_zero(t) else prim.bind(t, **params)]
    return jvp


def _allreduce_transpose(ct: Any, x: Any, *, group: ProcessGroup, op: str) -> list:
    if op != "sum":
        raise NotImplementedError(f"process_allreduce with op={op!r} is not linear: no transpose")
    return [process_allreduce_p.bind(ad.instantiate(ct), group=group, op="sum")]


process_allreduce_p.jvp = _allreduce_jvp
process_allreduce_p.transpose = _allreduce_transpose
process_all_gather_p.jvp = _linear_jvp(process_all_gather_p)
process_all_gather_p.transpose = lambda ct, x, *, group: [
    process_reduce_scatter_p.bind(ad.instantiate(ct), group=group)]
process_reduce_scatter_p.jvp = _linear_jvp(process_reduce_scatter_p)
process_reduce_scatter_p.transpose = lambda ct, x, *, group: [
    process_all_gather_p.bind(ad.instantiate(ct), group=group)]
process_permute_p.jvp = _linear_jvp(process_permute_p)
process_permute_p.transpose = lambda ct, x, *, group, perm: [
    process_permute_p.bind(ad.instantiate(ct), group=group, perm=tuple((d, s) for s, d in perm))]


def allreduce(x: Any, group: ProcessGroup, op: str) -> Any:
    """``op`` ("sum", "max", "min") of ``x`` over the processes of ``group``."""
    if op not in REDUCE_OPS:
        raise ValueError(f"allreduce: op must be one of {REDUCE_OPS}, got {op!r}")
    return process_allreduce_p.bind(x, group=group, op=op)


def all_gather(x: Any, group: ProcessGroup) -> Any:
    """Every process's ``x`` stacked along a new leading axis (process order)."""
    return process_all_gather_p.bind(x, group=group)


def reduce_scatter(x: Any, group: ProcessGroup) -> Any:
    """This process's row of the sum over processes of ``x`` (leading axis: one row per process)."""
    return process_reduce_scatter_p.bind(x, group=group)


def permute(x: Any, group: ProcessGroup, perm: Sequence[tuple[int, int]]) -> Any:
    """``x`` sent along the ``(source, destination)`` pairs of ``perm``; zeros where none arrives."""
    return process_permute_p.bind(x, group=group, perm=tuple((int(s), int(d)) for s, d in perm))
