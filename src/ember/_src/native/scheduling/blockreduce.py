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

Column reductions (a kernel with a natural row layout whose loops over reduced rows come before
a loop over kept ones: ``sum(x, axis=0)``, ``sum(x, axis=1)`` of a 3-D ``x``) used one running
accumulator per output element, so a float32 column sum of 10^4 rows was only good to about
1e-6. Their rows now run in blocks of :data:`COLUMN_BLOCK`: the per-row accumulators sum one
block, and the block sums are combined pairwise with a stack of partial sums (a binary counter
over the blocks: after block ``b`` the levels are merged while ``b + 1`` has trailing zero bits),
:func:`column_levels` levels deep. The error then grows with the block length plus the logarithm
of the number of blocks instead of with the number of rows; the extra work is about three
additions per output element per block.
"""

from __future__ import annotations

import math

import numpy as np

from ember._src import shapes as sh
from ember._src.native.scheduling.kernel import KernelIR

__all__ = ["BLOCK", "COLUMN_BLOCK", "ROW_BLOCK", "ROW_GROUP", "blocks", "blocked_rows", "column_levels",
           "column_sums", "levels_key", "partial_key"]

BLOCK = 4096  # elements per block (16 KiB of float32 read per partial)
COLUMN_BLOCK = 128  # rows per block of a column reduction
ROW_BLOCK = 4096  # elements per block of a long row reduction (emit/kernels.py, KernelEmitter._row_blocked)
ROW_GROUP = 64  # blocks whose sums such a row adds up before adding them to its total
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


def levels_key(rid: int) -> str:
    """The name of column sum ``rid``'s pairwise stack among the step's scratch (:mod:`.scratch`)."""
    return f"pairwise levels r{rid}"


def column_sums(ir: KernelIR | None) -> list:
    """The float and complex sums of ``ir`` that run in row blocks (see the module docstring):
    those of a static kernel with a natural row layout in which the first reduced loops, after
    kept ones only and before another kept one, cover at least two blocks of
    :data:`COLUMN_BLOCK` rows. Empty otherwise."""
    if ir is None or ir.natural is None or ir.parts or any(sh.is_symbolic(d) for d in ir.domain):
        return []
    if blocked_rows(ir) < 2 * COLUMN_BLOCK:
        return []
    return [r for r in ir.reduces if r.kind == "sum" and np.dtype(r.dtype).kind in "fc"]


def column_levels(ir: KernelIR | None) -> int:
    """Levels of the pairwise stack that the blocked rows of ``ir`` can need (the most: the
    emitter may block fewer rows where it cannot merge all of :func:`blocked_rows`' loops), 0 when
    ``ir`` has no blocked column sums."""
    if not column_sums(ir):
        return 0
    return (-(-blocked_rows(ir) // COLUMN_BLOCK)).bit_length()


def blocked_rows(ir: KernelIR) -> int:
    """The rows of the first run of reduced loops in ``ir``'s natural order that follows kept
    loops only and is followed by a kept loop (0 when there is none)."""
    size_of = dict(zip(ir.dvars, ir.domain))
    outer = set(ir.dvars[:ir.n_outer])
    nat = list(ir.natural or [])
    i = 0
    while i < len(nat) and nat[i] in outer:
        i += 1
    n = 1
    while i < len(nat) and nat[i] not in outer:
        n *= size_of[nat[i]]
        i += 1
    return n if i < len(nat) else 0
