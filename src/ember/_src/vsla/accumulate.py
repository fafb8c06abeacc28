"""Wide accumulation of products (the specification's precision policy, §15: reductions accumulate in
double) for the direct convolution and matmul.

Matmul accumulates in double with or without x64: under x64 its operands are widened as below;
without it the product is the ``wide_matmul`` primitive, whose native step converts the float32
operands to double inside the program (the C code has a double type even when the program has
none), calls ``dgemm`` and rounds once (eagerly: NumPy in float64, cast once).

Under ``jax_enable_x64`` float16/bfloat16/float32 (complex64) operands are widened to float64
(complex128), multiplied and summed there, and the result is rounded once. Without x64 ember has no
double type, and the direct convolution's sum of products is *compensated* instead, in float32
arithmetic and without any ordering requirement (so the native kernels may sum in blocks and
vector lanes as they like):

* each product ``p = x * y`` is split exactly into ``p + e`` (Dekker's product by Veltkamp
  splitting: ``e`` is the product's rounding error);
* the products along the axis are cut at a common grid (Rump's extraction): with ``sigma`` a
  power of two at least ``2 n max|p|``, ``hi = (sigma + p) - sigma`` is ``p`` rounded to a multiple of
  ``sigma 2^-24``, and every partial sum of the ``hi`` is such a multiple below ``sigma``, so their sum
  is exact in any order; the residuals ``p - hi`` (exact, at most ``sigma 2^-24``) and the errors ``e``
  are summed in float32.

The result is within a few units of the last place of the float32 rounding of the exact sum for
any summation order (cancellation included: ``[1e8, 1, ..., 1, -1e8]`` sums to the number of ones,
where a float32 running sum gives 0). A non-finite product falls back to the plain sum for that
output, so a NaN or infinity propagates only where it contributes.
"""
from __future__ import annotations

from typing import Any

import numpy as np

import ember.numpy as enp
from ember._src import dtypes as dt
from ember._src.dynamic import dimension_as_value
from ember._src.prims.wide_dot import wide_matmul

__all__ = ["wide_dtype", "is_half", "compensated_sum", "dot_sum", "matmul", "widen", "narrow"]

_WIDE = {np.dtype(np.float16): np.dtype(np.float64), np.dtype(np.float32): np.dtype(np.float64),
         np.dtype(np.complex64): np.dtype(np.complex128)}
_SPLIT = np.float32(4097.0)  # 2^12 + 1: Veltkamp's splitter for float32's 24-bit significand


def wide_dtype(dtype: Any) -> np.dtype | None:
    """The double type a ``dtype`` accumulates in under ``jax_enable_x64`` (None: no widening, or
    x64 off)."""
    d = np.dtype(dtype)
    if not dt.x64_enabled():
        return None
    return _WIDE.get(d, np.dtype(np.float64) if d.name == "bfloat16" else None)


def is_half(dtype: Any) -> bool:
    """float16 or bfloat16: storage types that compute in float32 (§15)."""
    d = np.dtype(dtype)
    return d == np.float16 or d.name == "bfloat16"


def widen(x: Any) -> Any:
    """``x`` in its accumulation type: double under x64 (:func:`wide_dtype`), float32 for
    float16/bfloat16 without it, unchanged otherwise."""
    w = wide_dtype(x.dtype)
    if w is None and is_half(x.dtype):
        w = np.dtype(np.float32)
    return x if w is None else x.astype(w)


def narrow(x: Any, dtype: Any) -> Any:
    """``x`` rounded once to ``dtype`` (a no-op when it already has it)."""
    return x if np.dtype(x.dtype) == np.dtype(dtype) else x.astype(dtype)


def _split(a: Any) -> tuple[Any, Any]:
    """Veltkamp: ``a == hi + lo`` exactly, each half with at most 12 significant bits."""
    t = _SPLIT * a
    hi = t - (t - a)
    return hi, a - hi


def _two_product(x: Any, y: Any) -> tuple[Any, Any]:
    """Dekker: ``x * y == p + e`` exactly (``p`` the float32 product; finite, no underflow)."""
    p = x * y
    xh, xl = _split(x)
    yh, yl = _split(y)
    e = xl * yl - (((p - xh * yh) - xl * yh) - xh * yl)
    return p, enp.where(enp.isfinite(e), e, np.float32(0.0))  # the splitter overflows past 8e34


def compensated_sum(p: Any, axis: int, extra: Any = None) -> Any:
    """The sum of float32 ``p`` over ``axis`` (plus the small terms ``extra``, same shape), exact up to
    the rounding of the residual sum (module docstring); the plain sum where a term is not finite."""
    ax = axis % p.ndim
    n = p.shape[ax]
    count = dimension_as_value(n, np.int32) if not isinstance(n, int) else n
    top = enp.max(enp.abs(p), axis=ax, keepdims=True)
    bound = top * (2 * enp.maximum(enp.asarray(count, np.int32), 2).astype(np.float32))
    sigma = enp.exp2(enp.ceil(enp.log2(enp.where(bound > 0, bound, np.float32(1.0)))) + 1).astype(np.float32)
    ok = enp.isfinite(sigma) & enp.isfinite(top)
    sigma = enp.where(ok, sigma, np.float32(1.0))
    hi = (sigma + p) - sigma
    rest = p - hi if extra is None else (p - hi) + extra
    fine = enp.sum(hi, axis=ax) + enp.sum(rest, axis=ax)
    plain = enp.sum(p, axis=ax)
    return enp.where(enp.squeeze(ok, ax), fine, plain)


def dot_sum(x: Any, y: Any, axis: int = -1) -> Any:
    """``sum(x * y, axis)`` accumulated wide: in double under x64 (rounded once to the operands'
    result type), compensated for float16/bfloat16/float32 without it, plain for float64 and
    integers (and complex without x64)."""
    dtype = np.dtype(enp.result_type(x.dtype, y.dtype))
    w = wide_dtype(dtype)
    if w is not None:
        return narrow(enp.sum(x.astype(w) * y.astype(w), axis=axis), dtype)
    if dtype == np.float32 or is_half(dtype):
        # float16/bfloat16 products are exact in float32 (at most 22 significant bits)
        xf, yf = x.astype(np.float32), y.astype(np.float32)
        if dtype == np.float32:
            p, e = _two_product(xf, yf)
            return compensated_sum(p, axis, e)
        return narrow(compensated_sum(xf * yf, axis), dtype)
    return enp.sum(x * y, axis=axis)


def matmul(x: Any, y: Any) -> Any:
    """``x @ y`` (last two axes, equal batch axes) accumulated in double and rounded once to the
    operands' result type: widened to float64 under x64, the ``wide_matmul`` primitive without it
    (float16/bfloat16 multiplied as float32, whose products and double sums are exact enough);
    float64, integer and complex operands multiply as they are."""
    dtype = np.dtype(enp.result_type(x.dtype, y.dtype))
    w = wide_dtype(dtype)
    if w is not None:
        return narrow(enp.matmul(x.astype(w), y.astype(w)), dtype)
    if dtype == np.float32 or is_half(dtype):
        return narrow(wide_matmul(x.astype(np.float32), y.astype(np.float32)), dtype)
    return enp.matmul(x, y)
