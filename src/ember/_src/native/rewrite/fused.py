"""Backend-internal primitives that the native passes rewrite programs into.

``gemm`` is the fused matrix product ``alpha * op(a) @ op(b) + beta * broadcast(c)``: ``a`` is
``[M, K]`` (``[K, M]`` with ``trans_a``), ``b`` is ``[K, N]`` (``[N, K]`` with ``trans_b``), both
optionally with one shared leading batch dim; ``c`` (optional) is broadcast into the output with
``c_dims`` as in ``broadcast_in_dim``. It maps one-to-one onto a (batched) BLAS ``?gemm`` call.

With ``views`` (set by the ``gemm_views`` pass), the operands and the result are strided views of
whole buffers instead: ``a`` and ``b`` are any values whose (row-major) elements hold ``op(a)`` and
``op(b)``, and the result is a value of ``views[2][0]``'s shape that the product fills; a reshape /
transpose of a matrix product's operand or result then costs no copy. See :func:`layouts`.

It appears only in programs produced by :mod:`ember._src.native.rewrite.passes` (after all
transformations ran), so it has a NumPy implementation and abstract evaluation (the reference
executor and the validator run optimized programs) but no JVP, transpose or batching rule.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ember._src import core
from ember._src.core import Primitive, ShapedArray
from ember._src.native import opinfo
from ember.errors import ShapeError

gemm_p = Primitive("native_gemm")


def _op_shapes(ash: tuple, bsh: tuple, trans_a: bool, trans_b: bool) -> tuple[tuple, int, int, int]:
    ash, bsh = tuple(ash), tuple(bsh)
    if len(ash) != len(bsh) or len(ash) not in (2, 3):
        raise ShapeError(f"native_gemm: operands must both be rank 2 or 3, got {ash} and {bsh}")
    batch = ash[:-2]
    if bsh[:-2] != batch:
        raise ShapeError(f"native_gemm: batch dims differ: {ash} vs {bsh}")
    m, k = (ash[-1], ash[-2]) if trans_a else (ash[-2], ash[-1])
    k2, n = (bsh[-1], bsh[-2]) if trans_b else (bsh[-2], bsh[-1])
    if k != k2:
        raise ShapeError(f"native_gemm: contraction sizes differ: {k} vs {k2}")
    return batch, m, n, k


# A strided matrix (batch of): ``(batch, (rows, row stride), (cols, col stride))`` with ``batch`` a
# tuple of ``(size, stride)`` (row-major digits of the batch index); strides count elements of the
# value's contiguous buffer. A result's view is ``(shape of the value, batch, row stride)``
# (column stride 1).
MatView = tuple


def _contiguous(shape: tuple, trans: bool) -> MatView:
    """The view of op(x) for a contiguous ``[B,] R, C`` operand (transposed with ``trans``)."""
    r, c = shape[-2], shape[-1]
    batch = ((shape[0], r * c),) if len(shape) == 3 else ()
    return (batch, (c, 1), (r, c)) if trans else (batch, (r, c), (c, 1))


def batch_size(batch: tuple) -> int:
    n = 1
    for size, _ in batch:
        n *= size
    return n


def _extent(view: MatView) -> int:
    """One past the largest element offset the view reads (0 when empty)."""
    batch, (r, rs), (c, cs) = view
    if batch_size(batch) * r * c == 0:
        return 0
    return 1 + sum((s - 1) * st for s, st in batch) + (r - 1) * rs + (c - 1) * cs


def layouts(a_shape: tuple, b_shape: tuple, params: dict) -> tuple[MatView, MatView, MatView, tuple]:
    """(op(a), op(b), result) as strided views (the result's as ``(batch, (m, n_stride),
    (n, 1))``) and the shape of the result value, for operands of these shapes."""
    views = params.get("views")
    if views is None:
        va = _contiguous(tuple(a_shape), bool(params["trans_a"]))
        vb = _contiguous(tuple(b_shape), bool(params["trans_b"]))
        batch, m, n, _ = _op_shapes(a_shape, b_shape, bool(params["trans_a"]), bool(params["trans_b"]))
        out_shape = (*batch, m, n)
        vo = (((batch[0], m * n),) if batch else (), (m, n), (n, 1))
        return va, vb, vo, out_shape
    va, vb, (out_shape, obatch, ors) = views
    return va, vb, (tuple(obatch), (va[1][0], ors), (vb[2][0], 1)), tuple(out_shape)


def result_contiguous(vo: MatView, out_shape: tuple) -> bool:
    """Whether a result view is the plain row-major ``[nb,] m, n`` layout of ``out_shape``."""
    batch, (m, ms), (n, _) = vo
    if tuple(out_shape)[-2:] != (m, n) or ms != n or batch_size(batch) * m * n != math.prod(out_shape):
        return False
    return len(out_shape) == 2 or (len(batch) == 1 and batch[0][1] == m * n and len(out_shape) == 3) \
        or (not batch and len(out_shape) == 3 and out_shape[0] == 1)


def _check_views(a: ShapedArray, b: ShapedArray, params: dict) -> tuple:
    va, vb, vo, out_shape = layouts(a.shape, b.shape, params)
    if params["trans_a"] or params["trans_b"]:
        raise ShapeError("native_gemm: with views the transposes are in the strides (trans flags False)")
    nb = batch_size(va[0])
    if batch_size(vb[0]) != nb or batch_size(vo[0]) != nb:
        raise ShapeError(f"native_gemm: batch sizes of the views differ: {va[0]}, {vb[0]}, {vo[0]}")
    if va[2][0] != vb[1][0]:
        raise ShapeError(f"native_gemm: contraction sizes differ: {va[2][0]} vs {vb[1][0]}")
    for what, v, shape in (("a", va, a.shape), ("b", vb, b.shape), ("result", vo, out_shape)):
        if _extent(v) > math.prod(shape):
            raise ShapeError(f"native_gemm: the view of {what} {v} exceeds its value of shape {shape}")
    if nb * vo[1][0] * vo[2][0] != math.prod(out_shape):
        raise ShapeError(f"native_gemm: the result view {vo} does not cover the shape {out_shape}")
    return va, vb, vo, out_shape


def _gemm_abstract(a: ShapedArray, b: ShapedArray, *c: ShapedArray, trans_a: bool, trans_b: bool,
                   alpha: float, beta: float, c_dims: tuple | None,
                   views: tuple | None = None) -> ShapedArray:
    core.check_same_dtypes("native_gemm", [a, b, *c])
    if views is not None:
        _, _, vo, out = _check_views(a, b, {"trans_a": trans_a, "trans_b": trans_b, "views": views})
        if c and not result_contiguous(vo, out):
            raise ShapeError("native_gemm: a c operand needs a contiguous result view")
    else:
        batch, m, n, _ = _op_shapes(a.shape, b.shape, trans_a, trans_b)
        out = (*batch, m, n)
    if c:
        if c_dims is None or len(c_dims) != c[0].ndim:
            raise ShapeError("native_gemm: c_dims must map every dim of c")
        for i, d in enumerate(c_dims):
            if c[0].shape[i] not in (1, out[d]):
                raise ShapeError(f"native_gemm: c of shape {c[0].shape} does not broadcast into {out}")
    return ShapedArray(out, a.dtype, False)


def _strided(x: np.ndarray, view: MatView) -> np.ndarray:
    """The ``[nb, rows, cols]`` matrices a view selects from ``x`` (a read-only strided view)."""
    batch, (r, rs), (c, cs) = view
    flat = np.ascontiguousarray(x).reshape(-1)
    item = flat.dtype.itemsize
    shape = (*(s for s, _ in batch), r, c)
    strides = (*(st * item for _, st in batch), rs * item, cs * item)
    if _extent(view) == 0:
        return np.zeros((batch_size(batch), r, c), flat.dtype)
    return np.lib.stride_tricks.as_strided(flat, shape, strides, writeable=False).reshape(-1, r, c)


def _add_c(out: np.ndarray, c: np.ndarray, beta: float, c_dims: tuple) -> np.ndarray:
    expanded = [1] * out.ndim
    for i, d in enumerate(c_dims):
        expanded[d] = c.shape[i]
    cb = c.reshape(expanded)
    return out + (cb if beta == 1 else cb * np.asarray(beta, dtype=out.dtype))


def _gemm_views_impl(a: np.ndarray, b: np.ndarray, c: tuple, alpha: float, beta: float, c_dims: tuple | None,
                     views: tuple) -> np.ndarray:
    va, vb, vo, out_shape = layouts(a.shape, b.shape, {"trans_a": False, "trans_b": False, "views": views})
    with np.errstate(all="ignore"):
        prod = np.matmul(_strided(a, va), _strided(b, vb))
        if alpha != 1:
            prod = prod * np.asarray(alpha, dtype=prod.dtype)
        if c:  # the result view is contiguous: c broadcasts into the result's shape
            return _add_c(prod.reshape(out_shape), c[0], beta, c_dims).astype(a.dtype, copy=False)
    out = np.empty(math.prod(out_shape), a.dtype)
    if out.size:
        item = out.dtype.itemsize
        batch, (m, ms), (n, _) = vo
        dst = np.lib.stride_tricks.as_strided(out, (*(s for s, _ in batch), m, n),
                                              (*(st * item for _, st in batch), ms * item, item))
        dst[...] = prod.reshape(dst.shape)
    return out.reshape(out_shape)


def _gemm_impl(a: np.ndarray, b: np.ndarray, *c: np.ndarray, trans_a: bool, trans_b: bool,
               alpha: float, beta: float, c_dims: tuple | None, views: tuple | None = None) -> np.ndarray:
    if views is not None:
        return _gemm_views_impl(a, b, c, alpha, beta, c_dims, views)
    x = np.swapaxes(a, -1, -2) if trans_a else a
    y = np.swapaxes(b, -1, -2) if trans_b else b
    with np.errstate(all="ignore"):
        out = np.matmul(x, y)
        if alpha != 1:
            out = out * np.asarray(alpha, dtype=out.dtype)
        if c:
            out = _add_c(out, c[0], beta, c_dims)
    return out.astype(a.dtype, copy=False)


gemm_p.impl = _gemm_impl
gemm_p.abstract_eval = _gemm_abstract
for _kind in ("jvp", "transpose", "batch"):
    gemm_p.na(_kind, "native_gemm is created by the native backend's passes after all transformations ran")
opinfo.register(gemm_p, opinfo.OpCategory.CONTRACTION,
                "fused GEMM with epilogue (the GEMM kernel or BLAS ?gemm; fused.py)")


def gemm(a: Any, b: Any, c: Any = None, *, trans_a: bool = False, trans_b: bool = False,
         alpha: float = 1.0, beta: float = 0.0, c_dims: tuple | None = None,
         views: tuple | None = None) -> Any:
    """Bind ``native_gemm`` (used by tests; passes build equations directly)."""
    args = (a, b) if c is None else (a, b, c)
    extra = {} if views is None else {"views": views}
    return gemm_p.bind(*args, trans_a=bool(trans_a), trans_b=bool(trans_b), alpha=float(alpha),
                       beta=float(beta), c_dims=None if c is None else tuple(c_dims), **extra)
