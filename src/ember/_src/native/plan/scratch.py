"""Named scratch: what per-step workspace each kind of step asks the memory planner for.

A step that needs arena memory for the duration of one step (a ``WORKSPACE`` buffer of
:mod:`.planner`) states it as a :class:`ScratchRequest`: a name unique within the step, a byte
size (an ``int``, or a ``DimExpr`` under named dynamic axes) and an alignment. The planner asks
:func:`requests` for every step and keys the buffer it places by ``(step index, name)`` in
``MemoryPlan.scratch``; the code generator finds it under the same name (:func:`buffer`).

The names, by who asks:

* a ``kernel``: :func:`accumulators` (per-row accumulators of reduction ``rid``, a kernel with a
  natural row layout), :func:`.blockreduce.levels_key` (the pairwise stack of a column sum that
  runs in row blocks), :func:`.blockreduce.partial_key` (one partial per block of a whole-array
  reduction), :func:`row_cache` (a row of node ``nid`` computed by one loop and read by later
  ones, one per thread when the rows run in parallel);
* a ``call`` step: :data:`CALL_WORKSPACE` (``workspace(eqn)`` of its lowering, :mod:`.calls`);
* a ``loop`` / ``cond`` step: :data:`LOOP_WORKSPACE` (its carry slots and its bodies' arena,
  :mod:`.loops`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember._src import shapes as sh
from ember._src.native.base.layout import ALIGN
from ember._src.native.opinfo import workspace_bytes
from ember._src.native.scheduling import blockreduce

LOOP_WORKSPACE = "loop workspace"

CALL_WORKSPACE = "call workspace"  # the name of a call step's scratch request

__all__ = ["ALIGN", "CALL_WORKSPACE", "LOOP_WORKSPACE", "ScratchRequest", "accumulators",
           "buffer", "requests", "row_cache"]


@dataclass(frozen=True)
class ScratchRequest:
    """Per-step arena scratch: ``nbytes`` (int or ``DimExpr``) under ``name``, aligned to
    ``align`` bytes (a divisor of :data:`ALIGN`)."""

    name: str
    nbytes: Any
    align: int = ALIGN

    def __post_init__(self) -> None:
        if self.align <= 0 or ALIGN % self.align:
            raise ValueError(f"scratch {self.name!r}: alignment {self.align} does not divide {ALIGN}")


def accumulators(rid: int) -> str:
    """Name of the per-row accumulators of reduction ``rid``."""
    return f"accumulators r{rid}"


def row_cache(nid: int) -> str:
    """Name of the cached row of kernel node ``nid``."""
    return f"row cache n{nid}"


def _kernel(step: Any, threads: int) -> list[ScratchRequest]:
    ir = step.ir
    if ir is None:
        return []
    out = []
    if ir.natural is not None:
        out += [ScratchRequest(accumulators(r.rid), ir.outer_size * np.dtype(r.dtype).itemsize)
                for r in ir.reduces]
        levels = blockreduce.column_levels(ir)  # column sums in row blocks: the pairwise stack
        out += [ScratchRequest(blockreduce.levels_key(r.rid),
                               levels * ir.outer_size * np.dtype(r.dtype).itemsize)
                for r in blockreduce.column_sums(ir)]
    if (nblk := blockreduce.blocks(ir)) is not None:  # whole-array reductions in blocks
        nb = nblk[1] if not sh.is_symbolic(nblk[1]) else sh.dmax(nblk[1], 1)  # a symbolic count may be 0
        out += [ScratchRequest(blockreduce.partial_key(r.rid), nb * np.dtype(r.dtype).itemsize)
                for r in ir.reduces]
    mult = threads if ir.n_outer > 0 else 1
    out += [ScratchRequest(row_cache(nid), ir.inner_size * ir.nodes[nid].dtype.itemsize * mult)
            for nid in ir.scratch]
    return out


def _call(step: Any, threads: int) -> list[ScratchRequest]:
    ws = workspace_bytes(step.eqns[0])
    return [ScratchRequest(CALL_WORKSPACE, ws)] if not isinstance(ws, int) or ws else []


def _loop(step: Any, threads: int) -> list[ScratchRequest]:
    return [ScratchRequest(LOOP_WORKSPACE, step.sub.workspace_bytes)] if step.sub is not None else []


# step kind -> its requests; kinds without scratch (gemm, alias, fallback) are absent
_BY_KIND: dict[str, Callable[[Any, int], list[ScratchRequest]]] = {
    "kernel": _kernel, "call": _call, "loop": _loop, "cond": _loop}


def requests(step: Any, threads: int) -> list[ScratchRequest]:
    """The scratch ``step`` needs while it runs; ``threads`` sizes per-thread copies."""
    kind = _BY_KIND.get(step.kind)
    return kind(step, threads) if kind is not None else []


def buffer(plan: Any, step: int, name: str) -> Any:
    """The planned buffer of step ``step``'s scratch ``name`` (a ``planner.Buffer``), or None."""
    return plan.scratch.get((step, name))
