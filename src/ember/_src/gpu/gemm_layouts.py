"""How a library GEMM reads a ``dot_general``'s operands from their buffers: the stride model of
the CUDA backend's GEMM steps (:func:`gemm_layout`, used by :mod:`.kernels`' scheduler).

An operand is a :class:`View` of a buffer (each dimension's element stride and its place in
memory); the product's contracted, free and batch dimensions become cuBLAS's op flags, leading
dimensions, batch strides and -- for batch dimensions no one stride reads -- a loop of calls over
the outer ones (:mod:`.cuda_blas`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember._src import shapes as sh
from ember._src.program import Eqn


def strides(shape: Sequence[Any]) -> list[Any]:
    """The row-major element strides of ``shape`` (sizes or size expressions)."""
    out: list[Any] = []
    s: Any = 1
    for d in reversed(shape):
        out.append(s)
        s *= d
    return out[::-1]


GEMM_DTYPES = ("float32", "float64", "float16", "bfloat16")


@dataclass
class View:
    """How a product reads one operand from a buffer: the element ``strides`` of each operand
    dimension in the buffer and each dimension's ``order`` in memory (outermost first). A buffer
    holding the operand itself is row-major (:func:`dense_view`); one holding the operand of a
    ``transpose`` has the permuted strides (:func:`transposed_view`)."""

    shape: tuple
    strides: list
    order: list


def dense_view(shape: Sequence[Any]) -> View:
    """The row-major buffer of an operand of shape ``shape``."""
    return View(tuple(shape), strides(shape), list(range(len(shape))))


def transposed_view(src_shape: Sequence[Any], permutation: Sequence[int]) -> View:
    """``transpose(x, permutation)`` read from ``x``'s row-major buffer (``x`` of ``src_shape``):
    operand dimension ``i`` is ``x``'s dimension ``permutation[i]``."""
    st = strides(src_shape)
    return View(tuple(src_shape[p] for p in permutation), [st[p] for p in permutation], list(permutation))


def _is_one(d: Any) -> bool:
    return isinstance(d, (int, np.integer)) and d == 1


def _group_stride(v: View, dims: Sequence[int]) -> tuple[bool, Any]:
    """Whether the dimensions ``dims`` of the view, taken in this order as one row-major index (the
    outer first), are one strided dimension, and its stride (None where their size is 1: any)."""
    dims = [d for d in dims if not _is_one(v.shape[d])]
    for d, nxt in zip(dims, dims[1:]):
        if v.strides[d] != v.strides[nxt] * v.shape[nxt]:
            return False, None
    return True, (v.strides[dims[-1]] if dims else None)


def _matrix(s_row: Any, s_col: Any, rows: Any, cols: Any) -> tuple[bool, Any] | None:
    """``(transposed, leading dimension)`` of a row-major ``rows x cols`` matrix whose rows and
    columns have the element strides ``s_row``, ``s_col`` (None: a size-1 side), or None where
    neither side has unit stride (a BLAS cannot read it without a copy). Not transposed: the
    columns are contiguous, a row every ``s_row`` elements; transposed: the rows are."""
    def unit(s: Any) -> bool:
        return s is None or _is_one(s)

    if unit(s_col):
        ld, least = (s_row if s_row is not None else cols), cols
        out = (False, ld)
    elif unit(s_row):
        ld, least = (s_col if s_col is not None else rows), rows
        out = (True, ld)
    else:
        return None
    if isinstance(ld, (int, np.integer)) and isinstance(least, (int, np.integer)) and ld < least:
        return None  # (never for a dense buffer or a permutation of one)
    return out


MAX_GEMM_CALLS = 256
"""The most strided-batched calls one GEMM step issues over its outer batch (a static count):
beyond it the step is the tiled kernel."""


def _split_free(v: View, dims: Sequence[int]) -> tuple[list[int], list[int], Any]:
    """The free dimensions ``dims`` of an operand as ``(outer, inner, stride)``: ``inner`` the
    longest suffix that is one strided dimension (:func:`_group_stride`; size-1 dimensions
    dropped), its stride, and the dimensions before it (read as batch dimensions)."""
    dims = [d for d in dims if not _is_one(v.shape[d])]
    for i in range(len(dims) + 1):
        ok, s = _group_stride(v, dims[i:])
        if ok:
            return dims[:i], dims[i:], s
    return dims, [], None  # (not reached: an empty suffix is one dimension)


def _merge_batches(dims: list[tuple]) -> list[tuple]:
    """Adjacent batch dimensions ``(size, a stride, b stride, c stride)`` merged where each
    operand and the result read them as one strided dimension (the outer first)."""
    out: list[tuple] = []
    for d in dims:
        if out and all(_same(o, s * d[0]) for o, s in zip(out[-1][1:], d[1:])):
            out[-1] = (out[-1][0] * d[0], *d[1:])
        else:
            out.append(d)
    return out


def _same(x: Any, y: Any) -> bool:
    if isinstance(x, (int, np.integer)) and isinstance(y, (int, np.integer)):
        return int(x) == int(y)
    return bool(x == y)


def plain_gemm(layout: dict) -> bool:
    """Whether the GEMM ``layout`` is one call writing a dense ``c[B, M, N]`` with both operands
    batch-strided (no batch of one side only): the products a cuBLASLt epilogue folds into."""
    m, n = layout["call_m"], layout["call_n"]
    return (not layout["loops"] and str(layout["c_ld"]) == str(n) and str(layout["c_stride"]) == str(m * n)
            and not (_is_zero(layout["a_stride"]) or _is_zero(layout["b_stride"])))


def _is_zero(d: Any) -> bool:
    return isinstance(d, (int, np.integer)) and d == 0


def gemm_layout(e: Eqn, views: tuple[View, View] | None = None) -> dict | None:
    """How a library GEMM reads the operands of the ``dot_general`` ``e`` from their buffers
    (``views``; default: each operand's own row-major buffer), or None where it cannot without a
    copy. The contracted pairs (in any order common to both sides: a sum) must be one strided
    dimension per operand (:func:`_group_stride`; size-1 dimensions ignored); the lhs's free
    dimensions give the call's M (the longest suffix that is one strided dimension), the rhs's
    its N (likewise, :func:`_split_free`); each operand's matrix must have a unit-stride side
    (:func:`_matrix`). The batch dimensions and the free dimensions before M and N (a batch of the
    one side only: stride 0 in the other) are merged where uniformly strided
    (:func:`_merge_batches`); the largest group is the call's batch, the others ``loops``: one
    call per index, at most :data:`MAX_GEMM_CALLS`. The result is the row-major ``c[B, M, N]``.

    Returns ``a_trans`` (the lhs is read K x M: its M side has unit stride), ``b_trans`` (the rhs
    is read N x K), the leading dimensions ``a_ld``/``b_ld``/``c_ld`` and batch strides
    ``a_stride``/``b_stride``/``c_stride``, the call's sizes ``call_m``/``call_n``/``call_batch``,
    ``loops`` (``(count, a stride, b stride, c stride)`` each, the outer first) -- size
    expressions in elements -- and the operand and result dtypes (one dtype the library takes,
    :data:`GEMM_DTYPES`; a result of that dtype or float32). ``precision``: the equation's own
    (``precision=``), or None."""
    (lc, rc), (lb, rb) = e.params["dimension_numbers"]
    a, b = e.inputs
    da, db, dout = a.aval.dtype, b.aval.dtype, e.outvars[0].aval.dtype
    if da != db or da.name not in GEMM_DTYPES or (dout != da and dout != np.float32):
        return None
    va, vb = views if views is not None else (dense_view(a.aval.shape), dense_view(b.aval.shape))
    lf = [d for d in range(len(va.shape)) if d not in lc and d not in lb]
    rf = [d for d in range(len(vb.shape)) if d not in rc and d not in rb]
    pairs = sorted(zip(lc, rc), key=lambda pr: va.order[pr[0]])  # the lhs's memory order
    (oka, ska), (okb, skb) = (_group_stride(v, [pr[side] for pr in pairs]) for side, v in ((0, va), (1, vb)))
    if not (oka and okb):
        return None
    lout, lin, sm = _split_free(va, lf)
    rout, rin, sn = _split_free(vb, rf)
    cshape = [va.shape[d] for d in lb] + [va.shape[d] for d in lf] + [vb.shape[d] for d in rf]
    cst = dict(zip([("b", d) for d in lb] + [("l", d) for d in lf] + [("r", d) for d in rf], strides(cshape)))
    M, N, K = (sh.size([v.shape[d] for d in dims]) for v, dims in ((va, lin), (vb, rin), (va, lc)))
    lhs, rhs = _matrix(sm, ska, M, K), _matrix(skb, sn, K, N)
    if lhs is None or rhs is None:
        return None
    batch = [(va.shape[d], va.strides[d], vb.strides[r], cst[("b", d)])
             for d, r in zip(lb, rb) if not _is_one(va.shape[d])]
    batch += [(va.shape[d], va.strides[d], 0, cst[("l", d)]) for d in lout]
    batch += [(vb.shape[d], 0, vb.strides[d], cst[("r", d)]) for d in rout]
    groups = _merge_batches(batch)
    if any(isinstance(g[0], sh.DimExpr) for g in groups):
        inner = len(groups) - 1
    else:
        inner = max(range(len(groups)), key=lambda i: (groups[i][0], i), default=-1)
    call = groups[inner] if groups else (1, M * K, K * N, M * N)
    loops = [g for i, g in enumerate(groups) if i != inner]
    counts = [g[0] for g in loops]
    if not any(isinstance(c, sh.DimExpr) for c in counts) and int(np.prod(counts)) > MAX_GEMM_CALLS:
        return None
    c_ld = cst[("l", lin[-1])] if lin else sh.size([vb.shape[d] for d in rf])
    return {"a_trans": lhs[0], "b_trans": rhs[0], "a_ld": lhs[1], "b_ld": rhs[1], "c_ld": c_ld,
            "a_stride": call[1], "b_stride": call[2], "c_stride": call[3],
            "call_m": M, "call_n": N, "call_batch": call[0], "loops": loops,
            "dtype": da, "out_dtype": dout, "precision": e.params.get("precision")}
