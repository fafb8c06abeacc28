"""The ``fft`` primitive: unnormalized forward/inverse, complex and real FFTs over trailing axes.

``fft_type`` is one of ``FFT`` (complex -> complex), ``IFFT`` (complex -> complex, scaled by
``1/n``), ``RFFT`` (real -> complex, last axis ``n // 2 + 1``) and ``IRFFT`` (complex -> real,
last axis ``fft_lengths[-1]``), over the last ``len(fft_lengths)`` axes, as XLA's FFT op. The map
is linear, so its JVP applies it to the tangent; the transposes follow ``jax.lax.fft``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ember._src import ad_util as ad
from ember._src import core
from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src.array import asarray_eager
from ember._src.core import Primitive, ShapedArray
from ember._src.dynamic import dimension_as_value
from ember._src.prims import elementwise as ew
from ember._src.prims import movement as mv
from ember.errors import DTypeError, ShapeError

FFT_TYPES = ("FFT", "IFFT", "RFFT", "IRFFT")

fft_p = Primitive("fft", linear=True)


def _fft_impl(x: np.ndarray, *, fft_type: str, fft_lengths: tuple) -> np.ndarray:
    axes = tuple(range(x.ndim - len(fft_lengths), x.ndim))
    if x.size == 0 or 0 in fft_lengths:
        return np.zeros(_out_shape(x.shape, fft_type, fft_lengths), _out_dtype(x.dtype, fft_type))
    if fft_type == "FFT":
        return np.fft.fftn(x, axes=axes)
    if fft_type == "IFFT":
        return np.fft.ifftn(x, axes=axes)
    if fft_type == "RFFT":
        return np.fft.rfftn(x, axes=axes)
    return np.fft.irfftn(x, s=fft_lengths, axes=axes)


def _out_shape(shape: tuple, fft_type: str, fft_lengths: tuple) -> tuple:
    if fft_type == "RFFT":
        return (*shape[:-1], fft_lengths[-1] // 2 + 1)
    if fft_type == "IRFFT":
        return (*shape[:-1], fft_lengths[-1])
    return tuple(shape)


def _out_dtype(d: np.dtype, fft_type: str) -> np.dtype:
    if fft_type == "RFFT":
        return dt.complex_dtype(d)
    if fft_type == "IRFFT":
        return dt.real_dtype(d)
    return d


def _dims_match(got: Sequence, want: Sequence) -> bool:
    """Whether the operand's trailing sizes fit the lengths. A pair of sizes of which one is symbolic
    and which differ as polynomials (``h`` and ``(2*h - 1) // 2 + 1``) passes here: the equation
    has symbolic params, so every binding re-checks it with concrete sizes (``dynamic``)."""
    return all(a == b or sh.is_symbolic(a) or sh.is_symbolic(b) for a, b in zip(got, want))


def _fft_abstract(x: ShapedArray, *, fft_type: str, fft_lengths: tuple) -> ShapedArray:
    if fft_type not in FFT_TYPES:
        raise ValueError(f"fft: unknown fft_type {fft_type!r}; expected one of {FFT_TYPES}")
    k = len(fft_lengths)
    if not 1 <= k <= x.ndim:
        raise ShapeError(f"fft: {k} fft_lengths for an operand of rank {x.ndim}")
    if fft_type == "RFFT":
        if not dt.is_float(x.dtype) or dt.is_low_precision(x.dtype):
            raise DTypeError(f"fft RFFT requires a float32/float64 operand, got {x.dtype}")
        if not _dims_match(x.shape[-k:], fft_lengths):
            raise ShapeError(f"fft RFFT: operand trailing shape {sh.shape_str(x.shape[-k:])} must equal "
                             f"fft_lengths {fft_lengths}")
    else:
        if not dt.is_complex(x.dtype):
            raise DTypeError(f"fft {fft_type} requires a complex operand, got {x.dtype}")
        want = tuple(fft_lengths) if fft_type != "IRFFT" else (*fft_lengths[:-1], fft_lengths[-1] // 2 + 1)
        if not _dims_match(x.shape[-k:], want):
            raise ShapeError(f"fft {fft_type}: operand trailing shape {sh.shape_str(x.shape[-k:])} must be "
                             f"{want} for fft_lengths {fft_lengths}")
    return ShapedArray(_out_shape(x.shape, fft_type, fft_lengths), _out_dtype(x.dtype, fft_type))


def _fft_jvp(primals: list, tangents: list, **params: Any) -> tuple[list, list]:
    out = fft_p.bind(primals[0], **params)
    if ad.is_zero(tangents[0]):
        return [out], [ad.Zero.from_value(out)]
    return [out], [fft_p.bind(tangents[0], **params)]


def _rfft_transpose(t: Any, fft_lengths: tuple) -> Any:
    # rfft(x) = fft(complex(x))[..., :n//2+1]: pad the cotangent back, fft, keep the real part
    a = core.get_aval(t)
    n = fft_lengths[-1]
    cfg = [(0, 0, 0)] * a.ndim
    cfg[-1] = (0, n - a.shape[-1], 0)
    full = mv.pad(t, mv.full((), 0, a.dtype), cfg)
    return ew.real(fft_p.bind(full, fft_type="FFT", fft_lengths=fft_lengths))


def _irfft_transpose(t: Any, fft_lengths: tuple) -> Any:
    # the rfft of the cotangent, doubling the de-duplicated Hermitian bins, scaled by 1/N
    x = fft_p.bind(t, fft_type="RFFT", fft_lengths=fft_lengths)
    a = core.get_aval(x)
    n = a.shape[-1]
    if any(sh.is_symbolic(d) for d in fft_lengths):
        m = mv.broadcast_in_dim(_hermitian_weights(n, fft_lengths, a.dtype), a.shape, (a.ndim - 1,))
        return ew.conj(ew.mul(m, x))
    is_odd = fft_lengths[-1] % 2
    mask = np.concatenate([np.ones(1), np.full(n - 2 + is_odd, 2.0), np.ones(1 - is_odd)])[:n]
    mask = mask / math.prod(fft_lengths)
    m = mv.broadcast_in_dim(asarray_eager(mask.astype(a.dtype)), a.shape, (a.ndim - 1,))
    return ew.conj(ew.mul(m, x))


def _hermitian_weights(n: sh.Dim, fft_lengths: tuple, dtype: Any) -> Any:
    """The IRFFT transpose's bin weights when a length is symbolic: 1 for the DC bin and (even
    length) the Nyquist bin, 2 for the others, over the product of the lengths; computed from
    ``iota`` and the lengths as runtime values."""
    i32 = np.dtype(np.int32)
    real = dt.real_dtype(dtype)
    scalar = lambda v, d=i32: mv.full((), v, d)  # noqa: E731
    last = ew.convert_element_type(dimension_as_value(fft_lengths[-1], i32), i32)
    even = ew.eq(ew.rem(last, scalar(2)), scalar(0))
    nyquist = ew.select_n(even, scalar(-1), ew.div(last, scalar(2)))  # no Nyquist bin for odd lengths
    k = mv.iota(i32, n)
    ones = ew.bitwise_or(ew.eq(k, mv.full((n,), 0, i32)), ew.eq(k, mv.broadcast_in_dim(nyquist, (n,), ())))
    w = ew.select_n(ones, mv.full((n,), 2.0, real), mv.full((n,), 1.0, real))
    total = ew.convert_element_type(dimension_as_value(sh.size(fft_lengths), i32), real)
    return ew.convert_element_type(ew.div(w, mv.broadcast_in_dim(total, (n,), ())), dtype)


def _fft_transpose(ct: Any, x: Any, *, fft_type: str, fft_lengths: tuple) -> list:
    if ad.is_zero(ct):
        return [ad.Zero(x.aval)]
    if fft_type == "RFFT":
        res = _rfft_transpose(ct, fft_lengths)
    elif fft_type == "IRFFT":
        res = _irfft_transpose(ct, fft_lengths)
    else:
        res = fft_p.bind(ct, fft_type=fft_type, fft_lengths=fft_lengths)
    return [ew.convert_element_type(res, x.aval.dtype)]


def _fft_batch(vals: list, dims: list, **params: Any) -> tuple[list, list]:
    x = mv.moveaxis(vals[0], dims[0], 0)
    return [fft_p.bind(x, **params)], [0]


fft_p.impl = _fft_impl
fft_p.abstract_eval = _fft_abstract
fft_p.jvp = _fft_jvp
fft_p.transpose = _fft_transpose
fft_p.batch = _fft_batch


def fft(x: Any, fft_type: str, fft_lengths: Sequence[int]) -> Any:
    """Unnormalized FFT of ``fft_type`` over the trailing ``len(fft_lengths)`` axes (as ``lax.fft``)."""
    ft = getattr(fft_type, "name", fft_type)
    ft = str(ft).upper()
    return fft_p.bind(x, fft_type=ft, fft_lengths=tuple(sh.canonical_dim(n) for n in fft_lengths))


# ---- fft_conv: linear convolution of real rows by FFT (one fused native step) ----

fft_conv_p = Primitive("fft_conv")
NO_MASK = np.iinfo(np.int32).max  # the ``valid`` operand that keeps every result


def _next_pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def _conv_out_shape(xs: tuple, ys: tuple) -> tuple:
    if sh.is_symbolic(xs[-1]) or sh.is_symbolic(ys[-1]):
        last = xs[-1] + ys[-1] - 1
    else:
        last = xs[-1] + ys[-1] - 1 if xs[-1] and ys[-1] else 0
    return (*(sh.dmax(a, b) for a, b in zip(xs[:-1], ys[:-1])), last)


def _fft_conv_impl(x: np.ndarray, y: np.ndarray, valid: np.ndarray) -> np.ndarray:
    shape = _conv_out_shape(x.shape, y.shape)
    out = np.zeros(shape, x.dtype)
    if 0 in shape:
        return out
    lead = shape[:-1]
    xe = np.zeros((*lead, x.shape[-1]), x.dtype)
    xe[tuple(slice(0, d) for d in x.shape)] = x
    ye = np.zeros((*lead, y.shape[-1]), y.dtype)
    ye[tuple(slice(0, d) for d in y.shape)] = y
    size = _next_pow2(shape[-1])
    full = np.fft.irfft(np.fft.rfft(xe, n=size) * np.fft.rfft(ye, n=size), n=size)
    keep = max(0, min(int(valid), shape[-1]))
    out[..., :keep] = full[..., :keep]
    return out


def _fft_conv_abstract(x: ShapedArray, y: ShapedArray, valid: ShapedArray) -> ShapedArray:
    if x.ndim != y.ndim or x.ndim == 0:
        raise ShapeError(f"fft_conv: operands need one rank of at least 1, got {sh.shape_str(x.shape)} "
                         f"and {sh.shape_str(y.shape)}")
    if np.dtype(x.dtype) != np.dtype(y.dtype) or np.dtype(x.dtype) not in (np.float32, np.float64):
        raise DTypeError(f"fft_conv requires two float32 or two float64 operands, got {x.dtype} "
                         f"and {y.dtype}")
    if valid.ndim != 0 or np.dtype(valid.dtype) != np.int32:
        raise DTypeError(f"fft_conv: valid must be an int32 scalar, got {valid.dtype}{list(valid.shape)}")
    return ShapedArray(_conv_out_shape(tuple(x.shape), tuple(y.shape)), x.dtype)


def _fft_conv_jvp(primals: list, tangents: list) -> tuple[list, list]:
    (x, y, valid), (tx, ty, _) = primals, tangents
    out = fft_conv_p.bind(x, y, valid)
    t1 = ad.Zero.from_value(out) if ad.is_zero(tx) else fft_conv_p.bind(tx, y, valid)
    t2 = ad.Zero.from_value(out) if ad.is_zero(ty) else fft_conv_p.bind(x, ty, valid)
    return [out], [ad.add_tangents(t1, t2)]


def _correlate(ct: Any, other: Any, valid: Any, aval: ShapedArray) -> Any:
    """The cotangent of one operand (aval) of ``fft_conv(., other, valid)``: with ``c`` the cotangent
    cut at ``valid``, ``d[i] = sum_k c[i + k] other[k]``, a convolution with the reversed other
    operand from ``cb - 1`` on, sliced back to the operand's leading shape (the transpose of zero
    extension)."""
    a, o = core.get_aval(ct), core.get_aval(other)
    nd, cb = o.ndim, o.shape[-1]
    keep = ew.lt(mv.iota(np.dtype(np.int32), a.shape[-1]), mv.broadcast_in_dim(valid, (a.shape[-1],), ()))
    keep = mv.broadcast_in_dim(keep, a.shape, (nd - 1,))
    ct = ew.select_n(keep, mv.full(a.shape, 0, a.dtype), ct)
    full = fft_conv_p.bind(ct, mv.rev(other, (nd - 1,)), mv.full((), NO_MASK, np.int32))
    return mv.slice(full, [0] * (nd - 1) + [cb - 1], [*aval.shape[:-1], cb - 1 + aval.shape[-1]])


def _fft_conv_transpose(ct: Any, x: Any, y: Any, valid: Any) -> list:
    if isinstance(x, ad.UndefPrimal) and isinstance(y, ad.UndefPrimal):
        raise TypeError("fft_conv is not linear in both operands at once")
    if isinstance(x, ad.UndefPrimal):
        return [ad.Zero(x.aval) if ad.is_zero(ct) else _correlate(ct, y, valid, x.aval), None, None]
    return [None, ad.Zero(y.aval) if ad.is_zero(ct) else _correlate(ct, x, valid, y.aval), None]


def _fft_conv_batch(vals: list, dims: list) -> tuple[list, list]:
    (x, y, valid), (dx, dy, dv) = vals, dims
    size = core.get_aval(x).shape[dx] if dx is not None else core.get_aval(y).shape[dy]

    def lead(v: Any, d: int | None) -> Any:
        if d is not None:
            return mv.moveaxis(v, d, 0)
        a = core.get_aval(v)
        return mv.broadcast_in_dim(v, (size, *a.shape), tuple(range(1, a.ndim + 1)))

    if dv is None:
        return [fft_conv_p.bind(lead(x, dx), lead(y, dy), valid)], [0]
    out = fft_conv_p.bind(lead(x, dx), lead(y, dy), mv.full((), NO_MASK, np.int32))
    a = core.get_aval(out)  # a batched valid length: the mask as a select
    keep = ew.lt(mv.broadcast_in_dim(mv.iota(np.dtype(np.int32), a.shape[-1]), a.shape, (a.ndim - 1,)),
                 mv.broadcast_in_dim(mv.moveaxis(valid, dv, 0), a.shape, (0,)))
    return [ew.select_n(keep, mv.full(a.shape, 0, a.dtype), out)], [0]


fft_conv_p.impl = _fft_conv_impl
fft_conv_p.abstract_eval = _fft_conv_abstract
fft_conv_p.jvp = _fft_conv_jvp
fft_conv_p.transpose = _fft_conv_transpose
fft_conv_p.batch = _fft_conv_batch


def fft_conv(x: Any, y: Any, valid: Any = None) -> Any:
    """Linear convolution of ``x`` and ``y`` on the last axis by FFT: ``out[..., k] = sum_j x[..., j]
    y[..., k - j]`` for ``k < valid`` (an int32 scalar, a runtime value; default: every ``k``), zero
    for ``valid <= k < ca + cb - 1``; the leading axes are zero-extended to their elementwise
    maximum (a row past an operand's leading shape reads as zeros). Both operands float32 or both
    float64, of one rank; computed in their precision (transform length ``next_pow2(ca + cb - 1)``)."""
    i32 = np.dtype(np.int32)
    v = mv.full((), NO_MASK, i32) if valid is None else ew.convert_element_type(valid, i32)
    return fft_conv_p.bind(x, y, v)
