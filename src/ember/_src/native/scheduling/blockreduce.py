"""Whole-array reductions in fixed blocks: results that do not depend on the thread count.

A kernel without outer loops whose one loop reduces the whole domain (``sum(x)``, ``mean((x -
y) ** 2)``, ``max(x)``) used to run as one OpenMP ``parallel for reduction(...)``: each thread summed
its share, and the shares were combined in an order that depends on how many threads there are, so
the same program gave different float results on one and on two threads. Here the domain is cut
into blocks of :data:`BLOCK` elements, fixed by the size alone:

* a *part* function reduces the elements ``[lo, hi)`` of one block (vectorized, as before) and
  stores its partial result (NaN already folded in for max/min) at ``partial[lo / BLOCK]``; element
  outputs of the same loop are written as they are computed;
* the blocks are shared out on the thread pool (:mod:`.threadpool`) at the top level, or run in
  order on the calling thread (one thread, loop bodies, no OpenMP);
* the kernel function then combines the partials in block order and computes what follows the
  reduction (the division of a mean, ...).

So every thread count gives the same bits, and blockwise summation is also closer to the exact sum
than one running accumulator. The planner gives each reduction a workspace of one partial per
block (:func:`partial_key`).

A domain of symbolic size (a named dynamic axis) is cut the same way: the element and block counts
are size expressions evaluated per binding, and a binding of fewer than two blocks (or none) runs
through the same part and finish functions. Without this, such a sum was one running ``simd``
accumulator per vector lane: 10^7 float32 values of 0.1 summed to 0.6% too much.
"""

from __future__ import annotations

import math

from ember._src import shapes as sh
from ember._src.native.scheduling.kernel import KernelIR

__all__ = ["BLOCK", "blocks", "partial_key"]

BLOCK = 4096  # elements per block (16 KiB of float32 read per partial)
_KINDS = frozenset({"sum", "prod", "max", "min", "and", "or"})


def partial_key(rid: int) -> str:
    """The name of reduction ``rid``'s partials among the step's scratch (:mod:`.scratch`)."""
    return f"partials r{rid}"


def blocks(ir: KernelIR | None) -> tuple[sh.Dim, sh.Dim] | None:
    """``(elements, blocks)`` when ``ir`` is a whole-domain reduction kernel that runs in blocks:
    no outer loops, one loop, only sum/prod/max/min/and/or reductions (no arg-reductions), no row
    caches or split parts, and for a static domain at least two blocks. None otherwise. (Codegen
    also needs the loop to be a single merged loop; where it is not, the kernel runs as before.)
    For a symbolic domain both counts are size expressions (the block count may be 0 or 1 for
    some bindings)."""
    if ir is None or ir.n_outer or ir.n_loops != 1 or not ir.reduces or ir.scratch or ir.parts:
        return None
    if ir.natural is not None or any(r.kind not in _KINDS for r in ir.reduces):
        return None
    if any(sh.is_symbolic(d) for d in ir.domain):
        n_sym = sh.size(ir.domain)
        return n_sym, sh.floordiv(n_sym + (BLOCK - 1), BLOCK)
    n = math.prod(ir.domain)
    nb = -(-n // BLOCK)
    return (n, nb) if nb >= 2 else None
