"""The ``wide_matmul`` primitive: a float32 matrix product accumulated in double, rounded once.

``wide_matmul(x, y)`` multiplies ``x (..., m, k)`` by ``y (..., k, n)`` (equal batch shapes) as
``np.matmul`` does, but every sum of products is formed in double precision and only the result is
rounded to the operands' dtype: the products of two float32 values are exact in double, so the
error is that of a double sum (about ``k * 2^-53`` relative to the sum of magnitudes) plus one
float32 rounding, whatever the cancellation. It exists for the precision policy of the
variable-shape algebra (VSLA §15: reductions accumulate in double) when ``jax_enable_x64`` is off
and a program has no float64 type to widen to; inside the native program double is available
anyway. float64 operands are multiplied as they are.

Eagerly it is NumPy's ``matmul`` in float64, cast once. The native lowering
(``native/emit/wide_dot.py``) is one call step: per batch matrix, the operands are converted to
double in the step's workspace, ``dgemm`` (SciPy's BLAS, the ``fns`` slot every program has)
forms the product, and the result is rounded once. Both operands are linear, so the derivatives
are the primitive again (``d x = ct y^T``, ``d y = x^T ct``), accumulated wide too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember._src import ad_util as ad
from ember._src import core
from ember._src import shapes as sh
from ember._src.core import Primitive, ShapedArray
from ember._src.prims import movement as mv
from ember.errors import DTypeError, ShapeError

__all__ = ["wide_matmul", "wide_matmul_p"]

wide_matmul_p = Primitive("wide_matmul")

_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _abstract(x: ShapedArray, y: ShapedArray) -> ShapedArray:
    if np.dtype(x.dtype) not in _DTYPES or np.dtype(y.dtype) != np.dtype(x.dtype):
        raise DTypeError(f"wide_matmul: operands must both be float32 or both float64, got {x.dtype} "
                         f"and {y.dtype}")
    if x.ndim < 2 or x.ndim != y.ndim:
        raise ShapeError(f"wide_matmul: operands need one rank >= 2, got {sh.shape_str(x.shape)} and "
                         f"{sh.shape_str(y.shape)}")
    if x.shape[-1] != y.shape[-2] or any(p != q for p, q in zip(x.shape[:-2], y.shape[:-2])):
        raise ShapeError(f"wide_matmul: shapes {sh.shape_str(x.shape)} and {sh.shape_str(y.shape)} do not "
                         f"multiply (equal batch axes, x's last axis the length of y's second last)")
    return ShapedArray((*x.shape[:-1], y.shape[-1]), x.dtype, x.weak_type and y.weak_type)


def _impl(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.matmul(x.astype(np.float64), y.astype(np.float64)).astype(x.dtype)


def _swap(v: Any) -> Any:
    """``v`` with its last two axes exchanged."""
    nd = core.get_aval(v).ndim
    return mv.transpose(v, (*range(nd - 2), nd - 1, nd - 2))


def _transpose(ct: Any, x: Any, y: Any) -> list:
    ux, uy = isinstance(x, ad.UndefPrimal), isinstance(y, ad.UndefPrimal)
    if ux and uy:
        raise TypeError("wide_matmul is not linear in both operands at once")
    if ux:
        return [ad.Zero(x.aval) if ad.is_zero(ct) else wide_matmul_p.bind(ct, _swap(y)), None]
    return [None, ad.Zero(y.aval) if ad.is_zero(ct) else wide_matmul_p.bind(_swap(x), ct)]


def _batch(vals: list, dims: list) -> tuple[list, list]:
    (x, y), (dx, dy) = vals, dims
    size = core.get_aval(x).shape[dx] if dx is not None else core.get_aval(y).shape[dy]
    ops = []
    for v, d in ((x, dx), (y, dy)):
        if d is None:
            aval = core.get_aval(v)
            v = mv.broadcast_in_dim(v, (size, *aval.shape), tuple(range(1, aval.ndim + 1)))
        else:
            v = mv.moveaxis(v, d, 0)
        ops.append(v)
    return [wide_matmul_p.bind(*ops)], [0]


wide_matmul_p.impl = _impl
wide_matmul_p.abstract_eval = _abstract
wide_matmul_p.jvp = ad.bilinear_jvp(wide_matmul_p)
wide_matmul_p.transpose = _transpose
wide_matmul_p.batch = _batch


def wide_matmul(x: Any, y: Any) -> Any:
    """``x @ y`` over the last two axes (equal batch axes; float32 or float64 operands of one dtype),
    every sum of products accumulated in double and rounded once to the operands' dtype."""
    return wide_matmul_p.bind(x, y)
