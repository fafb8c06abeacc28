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
