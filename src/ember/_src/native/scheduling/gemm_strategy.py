"""How each ``gemm`` step runs, chosen when the schedule is built (a field of the step).

A product has several ways to run and the choice depends on facts the scheduler has: its sizes
(static, or named dynamic axes), dtype, whether ``B`` is a program constant or argument, the
options (``prepack``, threads) and whether it sits in a loop body. :func:`assign` records a
:class:`GemmStrategy` on every ``gemm`` step; :mod:`ember._src.native.emit.gemm` only renders it:

- ``route``: ``INLINE`` (C loops inside a loop body: small products, or dynamic sizes decided per
  binding in C), ``BLAS_VIEWS`` (per-batch strided BLAS on views of transposed operands), ``BLAS``
  (one batched BLAS call), ``LOOPS`` (plain C loops: no BLAS form for the dtype or extents);
- ``kernel``: ember's GEMM kernel (:mod:`ember._src.native.runtime.gemm_library`) takes the product
  where its size rule holds (a dynamic size is tested at run time), BLAS until its library loads;
- ``b``: ``CONSTANT`` (``B`` packed once when the program is built), ``ARGUMENT`` (a packed copy the
  runtime keeps for a repeated argument ``B``), or ``NONE``;
- ``pooled_batches``: a batched product's batches shared out on ember's thread pool.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember._src.native.base import symdims as sd
from ember._src.native.base.gemm_sizes import SMALL_GEMM_FLOPS
from ember._src.native.rewrite import fused
from ember._src.native.runtime import gemm_library as gemm_kernel
from ember._src.native.scheduling.schedule import Schedule, Step, StepKind
from ember._src.program import Var

__all__ = ["BSource", "GemmRoute", "GemmStrategy", "assign", "choose", "gemm_dims", "gemm_fits_blas",
           "gemm_views", "inline_fits", "kernel_rows", "packable_b", "step_layouts"]

INT_MAX = 2**31 - 1
BLAS_DTYPES = frozenset(np.dtype(d) for d in (np.float32, np.float64, np.complex64, np.complex128))


class GemmRoute(enum.StrEnum):
    """The code a product's C takes (see the module docstring)."""

    INLINE = "inline"
    BLAS_VIEWS = "blas_views"
    BLAS = "blas"
    LOOPS = "loops"


class BSource(enum.StrEnum):
    """Where the GEMM kernel's packed ``B`` comes from."""

    NONE = "none"
    CONSTANT = "constant"
    ARGUMENT = "argument"


@dataclass(frozen=True)
class GemmStrategy:
    """How one ``gemm`` step runs (see the module docstring)."""

    route: GemmRoute
    kernel: bool = False
    b: BSource = BSource.NONE
    pooled_batches: bool = False

    def describe(self) -> str:
        parts = [str(self.route)]
        if self.kernel:
            parts.append("kernel")
        if self.b is not BSource.NONE:
            parts.append(f"packed B: {self.b}")
        if self.pooled_batches:
            parts.append("pooled batches")
        return ", ".join(parts)


@dataclass(frozen=True)
class GemmContext:
    """What the choice needs besides the step: ``consts`` (constant Var id -> value), ``inputs``
    (argument Var ids whose packed copies the runtime may keep: static top-level programs only),
    ``prepack`` (the option), ``pooled`` (top-level steps run parallel work on ember's pool) and
    ``parallel(work, extent)`` (whether a loop of that work goes parallel), ``in_body`` (a loop body)."""

    consts: Mapping[int, Any]
    inputs: Container[int]
    prepack: bool
    pooled: bool
    parallel: Callable[[Any, Any], bool]
    in_body: bool = False


def gemm_views(step: Step) -> tuple | None:
    """(op(a), op(b), result) strided views of a ``gemm`` step with ``views`` (see
    :func:`ember._src.native.rewrite.fused.layouts`), else None."""
    e = step.eqns[0]
    if e.params.get("views") is None:
        return None
    va, vb, vo, _ = fused.layouts(e.inputs[0].aval.shape, e.inputs[1].aval.shape, e.params)
    return va, vb, vo


def gemm_dims(step: Step) -> tuple[int, int, int, int]:
    e = step.eqns[0]
    views = gemm_views(step)
    if views is not None:
        va, vb, _ = views
        return fused.batch_size(va[0]), va[1][0], vb[2][0], va[2][0]
    a, b = e.inputs[0], e.inputs[1]
    ta, tb = e.params["trans_a"], e.params["trans_b"]
    ash, bsh = a.aval.shape, b.aval.shape
    nb = ash[0] if len(ash) == 3 else 1
    m, k = (ash[-1], ash[-2]) if ta else (ash[-2], ash[-1])
    n = bsh[-2] if tb else bsh[-1]
    return nb, m, n, k


def gemm_fits_blas(step: Step) -> bool:
    """float32/float64/complex64/complex128 with every extent within BLAS's ``int`` (symbolic
    extents are checked per binding by the symbolic executable, which falls back to a static build
    beyond it)."""
    _, m, n, k = gemm_dims(step)
    fits = all(sd.is_sym(d) or d <= INT_MAX for d in (m, n, k))
    return fits and np.dtype(step.outputs[0].aval.dtype) in BLAS_DTYPES


def step_layouts(step: Step) -> tuple:
    """(op(a), op(b), result) strided views of a static ``gemm`` step (see :func:`.fused.layouts`)."""
    e = step.eqns[0]
    return fused.layouts(e.inputs[0].aval.shape, e.inputs[1].aval.shape, e.params)[:3]


def kernel_rows(step: Step, prepacked: bool) -> int | None:
    """The kernel's row limit for this product (:func:`.gemm_library.kernel_rows`) when it may take
    it: a static ``m`` within the limit (and 2 or more), or an ``m`` that is a dynamic axis (tested
    at run time, :func:`_rows_guard`) with everything else static; None otherwise."""
    nb, m, n, k = gemm_dims(step)
    if sd.is_sym(nb):
        return None
    if sd.is_sym(n) or sd.is_sym(k):  # attention's per-head products over a dynamic sequence
        return None if prepacked else gemm_kernel.row_limit()  # the whole rule is tested at run time
    rows = gemm_kernel.kernel_rows(n, k, prepacked)
    low = gemm_kernel.PREPACKED_MIN_ROWS if prepacked else 2
    if sd.is_sym(m):
        return rows if rows >= low else None
    return rows if low <= m <= rows else None


def packable_b(step: Step, table: Container[int]) -> tuple[Var, int, int, int, int] | None:
    """``(B, k, n, rsb, csb)`` when this unbatched float32 product's ``B`` is a Var in ``table`` (the
    program's constants or inputs) and the prepacked entry may take the product; None otherwise."""
    b = step.eqns[0].inputs[1]
    if not isinstance(b, Var) or b.id not in table or np.dtype(b.aval.dtype) != np.float32:
        return None
    nb, _, n, k = gemm_dims(step)
    if kernel_rows(step, True) is None or nb != 1 or gemm_kernel.kernel_symbol() is None \
            or gemm_views(step) is not None:
        return None
    (_, (_, rsb), (_, csb)) = step_layouts(step)[1]
    return b, int(k), int(n), int(rsb), int(csb)



def inline_fits(step: Step) -> bool:
    """Whether a loop body may run this product as C loops (:func:`.loop_bodies.small_gemm`): float32 or
    float64 without strided views, at most :data:`SMALL_GEMM_FLOPS` multiply-adds when static (a
    symbolic product decides per binding in C), and a row of ``C`` that fits a local array."""
    e = step.eqns[0]
    if np.dtype(step.outputs[0].aval.dtype) not in (np.float32, np.float64):
        return False
    if e.params.get("views") is not None:
        return False
    nb, m, n, k = gemm_dims(step)
    flops = nb * m * n * k
    if not sd.is_sym(flops) and flops > SMALL_GEMM_FLOPS:
        return False
    ta, tb = bool(e.params["trans_a"]), bool(e.params["trans_b"])
    return (n == 1 and not ta) or tb or not sd.is_sym(n)


def kernel_takes(step: Step, packed: bool) -> bool:
    """Whether ember's GEMM kernel may take this float32 product on this machine (its size rule;
    a dynamic size is tested again at run time)."""
    return (np.dtype(step.outputs[0].aval.dtype) == np.float32 and kernel_rows(step, packed) is not None
            and gemm_kernel.kernel_symbol() is not None)


def _constant_packable(step: Step, consts: Mapping[int, Any]) -> bool:
    found = packable_b(step, consts)
    if found is None:
        return False
    b, k, n, _, _ = found
    value = np.asarray(getattr(consts[b.id], "value", consts[b.id]))
    return value.dtype == np.float32 and value.size == k * n


def choose(step: Step, ctx: GemmContext) -> GemmStrategy:
    """The :class:`GemmStrategy` of one ``gemm`` step."""
    if ctx.in_body and inline_fits(step):
        return GemmStrategy(GemmRoute.INLINE)
    if not gemm_fits_blas(step):
        return GemmStrategy(GemmRoute.LOOPS)
    views = gemm_views(step) is not None
    route = GemmRoute.BLAS_VIEWS if views else GemmRoute.BLAS
    kernel = kernel_takes(step, False)
    b = BSource.NONE
    if ctx.prepack and np.dtype(step.outputs[0].aval.dtype) == np.float32:
        if _constant_packable(step, ctx.consts):  # a loop body's too: packed once, not per step
            b = BSource.CONSTANT
        elif not views and not ctx.in_body and packable_b(step, ctx.inputs) is not None:
            b = BSource.ARGUMENT
    pooled = False
    if kernel and ctx.pooled and not ctx.in_body:
        nb, m, n, k = gemm_dims(step)
        pooled = not sd.is_sym(nb) and nb >= 2 and ctx.parallel(nb * m * n * k, nb)
    return GemmStrategy(route, kernel, b, pooled)


def assign(sched: Schedule, ctx: GemmContext) -> None:
    """Record :func:`choose`'s strategy on every ``gemm`` step of ``sched`` (loop bodies choose
    theirs when they are compiled)."""
    for st in sched.steps:
        if st.kind is StepKind.GEMM:
            st.strategy = choose(st, ctx)
