"""NumPy's discrete Fourier transforms over the ``fft`` primitive (public as ``ember.fft`` and
``ember.numpy.fft``).

Every transform takes ``n``/``s`` (crop or zero-pad to that length), ``axis``/``axes`` and
``norm`` (``"backward"`` (default), ``"ortho"`` or ``"forward"``) with NumPy's meaning. Results
keep single precision for float32/complex64 input (NumPy would return double precision);
integer input is transformed in complex64/float32.

Under ``jit(..., dynamic_axes=...)`` the sizes may be symbolic: an input axis, ``n``/``s`` given
as an expression of the named axes (``n=2 * x.shape[0]``), the normalization (a runtime value)
and the frequencies of ``fftfreq``/``rfftfreq``, so one compile serves every length. A length that
is zero at run time gives zeros (NumPy raises; a symbolic length cannot be checked while tracing),
and ``n``/``s`` must be provably at least or at most the input's size (pad or crop).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src.core import get_aval as _aval
from ember._src.dynamic import dimension_as_value
from ember._src.numpy.ufuncs import asarray
from ember._src.prims import elementwise as ew
from ember._src.prims import movement as mv
from ember._src.prims.fft import fft as _lax_fft
from ember.errors import ShapeError

ArrayLike = Any
_NORMS = (None, "backward", "ortho", "forward")


def _as_complex(x: Any) -> Any:
    d = _aval(x).dtype
    if dt.is_complex(d):
        return x
    cd = dt.complex128 if d == dt.float64 else dt.complex64
    return ew.convert_element_type(x, cd)


def _as_real(x: Any, name: str) -> Any:
    d = _aval(x).dtype
    if dt.is_complex(d):
        raise TypeError(f"{name} requires real input, got {d}")
    if d in (dt.float32, dt.float64):
        return x
    return ew.convert_element_type(x, dt.float32)


def _crops(cur: sh.Dim, n: sh.Dim) -> bool:
    """Whether resizing an axis of size ``cur`` to ``n`` crops it (else it pads), decided for
    symbolic sizes when their difference has a known sign."""
    try:
        return bool(cur > n)
    except ShapeError:
        pass
    try:
        return not (n >= cur)
    except ShapeError:
        raise ShapeError(f"fft: cannot tell whether length {n} crops or pads the axis of size {cur} for "
                         "every binding of the symbolic sizes; give a length provably at least or at "
                         "most the axis's size") from None


def _half(n: sh.Dim) -> sh.Dim:
    """``n // 2``; for a symbolic ``n = P + c`` whose terms ``P`` have even coefficients, the exact
    ``P / 2 + c // 2`` (so ``(2*h - 1) // 2`` is ``h - 1``, comparable with ``h``)."""
    if sh.is_symbolic(n):
        c = n.constant_term()
        p = n - c
        if sh.is_symbolic(p) and all(k % 2 == 0 for _, k in p.terms):
            return p // 2 + c // 2
    return n // 2


def _resize(x: Any, axis: int, n: sh.Dim) -> Any:
    """Crop or zero-pad ``x`` along ``axis`` to length ``n``."""
    a = _aval(x)
    cur = a.shape[axis]
    if cur == n:
        return x
    if _crops(cur, n):
        return mv.slice_in_dim(x, 0, n, 1, axis)
    cfg = [(0, 0, 0)] * a.ndim
    cfg[axis] = (0, n - cur, 0)
    return mv.pad(x, mv.full((), 0, a.dtype), cfg)


def _norm_factor(norm: str | None, n: sh.Dim, inverse: bool, real: Any = dt.float32) -> Any:
    """The extra scale to apply on top of the primitive (unnormalized forward, 1/n inverse): a
    float, None, or for a symbolic ``n`` a scalar of dtype ``real`` computed at run time."""
    if norm not in _NORMS:
        raise ValueError(f'Invalid norm value {norm!r}; should be "backward", "ortho" or "forward".')
    if norm in (None, "backward"):
        return None
    if sh.is_symbolic(n):  # n >= 1 while it scales anything (a zero length has zero outputs)
        v = ew.convert_element_type(dimension_as_value(n, dt.int32), real)
        v = ew.max(v, mv.full((), 1.0, real))
        if norm == "ortho":
            v = ew.sqrt(v)
        one = mv.full((), 1.0, real)
        return v if inverse else ew.div(one, v)
    if norm == "ortho":
        return math.sqrt(n) if inverse else 1 / math.sqrt(n) if n else None
    return float(n) if inverse else (1 / n if n else None)


def _real(x: Any) -> Any:
    return dt.real_dtype(_aval(x).dtype)


def _scale(x: Any, f: Any) -> Any:
    a = _aval(x)
    if f is None or (isinstance(f, float) and f == 1):
        return x
    if not isinstance(f, float):  # a runtime scalar (symbolic length)
        f = ew.convert_element_type(f, a.dtype)
        return ew.mul(x, mv.broadcast_in_dim(f, a.shape, ()))
    return ew.mul(x, mv.full(a.shape, np.array(f, dt.real_dtype(a.dtype)).astype(a.dtype), a.dtype))


def _normalize_axes(nd: int, s: Sequence[int] | None, axes: Sequence[int] | None) -> tuple[list, list | None]:
    if axes is None:
        axes = list(range(nd - (len(s) if s is not None else nd), nd))
    else:
        axes = [sh.normalize_axis(a, nd) for a in axes]
    if s is not None:
        s = [v if sh.is_symbolic(v) else int(v) for v in s]
        if len(s) != len(axes):
            raise ValueError(f"shape s {tuple(s)} and axes {tuple(axes)} have different lengths")
    if len(set(axes)) != len(axes):
        raise ValueError(f"repeated axes {tuple(axes)} are not supported")
    return axes, s


def _transform(x: Any, fft_type: str, axes: list[int], lengths: list[int]) -> Any:
    """Move ``axes`` to the end, run the primitive over them, move them back."""
    nd = _aval(x).ndim
    rest = [i for i in range(nd) if i not in axes]
    perm = rest + list(axes)
    y = mv.transpose(x, perm)
    y = _lax_fft(y, fft_type, lengths)
    inv = np.argsort(perm)
    return mv.transpose(y, [int(i) for i in inv])


def _crop_or_pad(name: str, x: Any, s: Any, axes: Any) -> tuple[Any, Any, Any]:
    """Check the rank, normalize ``axes``/``s`` and resize ``x`` to ``s`` along ``axes``."""
    nd = _aval(x).ndim
    if nd == 0:
        raise ShapeError(f"{name}: input must be at least 1-dimensional")
    axes, s = _normalize_axes(nd, s, axes)
    if s is None:
        s = [_aval(x).shape[ax] for ax in axes]
    for ax, n in zip(axes, s):
        if not sh.is_symbolic(n) and n < 1:
            raise ValueError(f"{name}: invalid number of data points ({n}) specified")
        x = _resize(x, ax, n)
    return x, axes, s


def _c2c(name: str, a: ArrayLike, s: Any, axes: Any, norm: str | None, inverse: bool) -> Any:
    x, axes, s = _crop_or_pad(name, _as_complex(asarray(a)), s, axes)
    y = _transform(x, "IFFT" if inverse else "FFT", axes, s)
    return _scale(y, _norm_factor(norm, sh.size(s), inverse, _real(y)))


def _r2c(name: str, a: ArrayLike, s: Any, axes: Any, norm: str | None) -> Any:
    x, axes, s = _crop_or_pad(name, _as_real(asarray(a), name), s, axes)
    y = _transform(x, "RFFT", axes, s)
    return _scale(y, _norm_factor(norm, sh.size(s), False, _real(y)))


def _c2r(name: str, a: ArrayLike, s: Any, axes: Any, norm: str | None) -> Any:
    x = _as_complex(asarray(a))
    nd = _aval(x).ndim
    if nd == 0:
        raise ShapeError(f"{name}: input must be at least 1-dimensional")
    axes, s = _normalize_axes(nd, s, axes)
    if s is None:
        s = [_aval(x).shape[ax] for ax in axes[:-1]] + [2 * (_aval(x).shape[axes[-1]] - 1)]
    for ax, n in zip(axes[:-1], s[:-1]):
        x = _resize(x, ax, n)
    if not sh.is_symbolic(s[-1]) and s[-1] < 1:
        raise ValueError(f"{name}: invalid number of data points ({s[-1]}) specified")
    x = _resize(x, axes[-1], _half(s[-1]) + 1)
    y = _transform(x, "IRFFT", axes, s)
    return _scale(y, _norm_factor(norm, sh.size(s), True, _real(y)))


def _one_axis(n: int | None, axis: int) -> tuple[list | None, list]:
    return (None if n is None else [n]), [axis]


def fft(a: ArrayLike, n: int | None = None, axis: int = -1, norm: str | None = None) -> Any:
    """1-d discrete Fourier transform."""
    s, axes = _one_axis(n, axis)
    return _c2c("fft", a, s, axes, norm, False)


def ifft(a: ArrayLike, n: int | None = None, axis: int = -1, norm: str | None = None) -> Any:
    """1-d inverse discrete Fourier transform."""
    s, axes = _one_axis(n, axis)
    return _c2c("ifft", a, s, axes, norm, True)


def rfft(a: ArrayLike, n: int | None = None, axis: int = -1, norm: str | None = None) -> Any:
    """1-d transform of real input (the ``n // 2 + 1`` non-negative frequencies)."""
    s, axes = _one_axis(n, axis)
    return _r2c("rfft", a, s, axes, norm)


def irfft(a: ArrayLike, n: int | None = None, axis: int = -1, norm: str | None = None) -> Any:
    """Inverse of ``rfft``; output length ``n`` (default ``2 * (m - 1)``)."""
    s, axes = _one_axis(n, axis)
    return _c2r("irfft", a, s, axes, norm)


_SWAP = {None: "forward", "backward": "forward", "ortho": "ortho", "forward": "backward"}


def hfft(a: ArrayLike, n: int | None = None, axis: int = -1, norm: str | None = None) -> Any:
    """Transform of a Hermitian-symmetric signal given by its first half (real output)."""
    if norm not in _NORMS:
        raise ValueError(f'Invalid norm value {norm!r}; should be "backward", "ortho" or "forward".')
    x = asarray(a)
    x = _as_complex(x)
    return irfft(ew.conj(x), n, axis, _SWAP[norm])


def ihfft(a: ArrayLike, n: int | None = None, axis: int = -1, norm: str | None = None) -> Any:
    """Inverse of ``hfft``: the first half of the Hermitian spectrum of a real signal."""
    if norm not in _NORMS:
        raise ValueError(f'Invalid norm value {norm!r}; should be "backward", "ortho" or "forward".')
    return ew.conj(rfft(a, n, axis, _SWAP[norm]))


def fftn(a: ArrayLike, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
         norm: str | None = None) -> Any:
    """N-d discrete Fourier transform over ``axes`` (all by default)."""
    return _c2c("fftn", a, s, axes, norm, False)


def ifftn(a: ArrayLike, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
          norm: str | None = None) -> Any:
    """N-d inverse discrete Fourier transform."""
    return _c2c("ifftn", a, s, axes, norm, True)


def rfftn(a: ArrayLike, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
          norm: str | None = None) -> Any:
    """N-d transform of real input (the last axis halved)."""
    return _r2c("rfftn", a, s, axes, norm)


def irfftn(a: ArrayLike, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
           norm: str | None = None) -> Any:
    """Inverse of ``rfftn``."""
    return _c2r("irfftn", a, s, axes, norm)


def fft2(a: ArrayLike, s: Sequence[int] | None = None, axes: Sequence[int] = (-2, -1),
         norm: str | None = None) -> Any:
    """2-d discrete Fourier transform."""
    return fftn(a, s, axes, norm)


def ifft2(a: ArrayLike, s: Sequence[int] | None = None, axes: Sequence[int] = (-2, -1),
          norm: str | None = None) -> Any:
    """2-d inverse discrete Fourier transform."""
    return ifftn(a, s, axes, norm)


def rfft2(a: ArrayLike, s: Sequence[int] | None = None, axes: Sequence[int] = (-2, -1),
          norm: str | None = None) -> Any:
    """2-d transform of real input."""
    return rfftn(a, s, axes, norm)


def irfft2(a: ArrayLike, s: Sequence[int] | None = None, axes: Sequence[int] = (-2, -1),
           norm: str | None = None) -> Any:
    """Inverse of ``rfft2``."""
    return irfftn(a, s, axes, norm)


def _freq_len(name: str, n: Any) -> sh.Dim:
    if sh.is_symbolic(n):
        return n
    n = int(n)
    if n < 1:
        raise ValueError(f"{name}: n must be positive, got {n}")
    return n


def _as_value(d: sh.Dim, shape: tuple, dtype: Any) -> Any:
    """A size (int or symbolic) as an array of ``shape`` and ``dtype`` (a runtime value when symbolic)."""
    if not sh.is_symbolic(d):
        return mv.full(shape, d, dtype)
    v = ew.convert_element_type(dimension_as_value(d, dt.int32), dtype)
    return mv.broadcast_in_dim(v, shape, ())


def fftfreq(n: int, d: float = 1.0, *, dtype: Any = None, device: Any = None) -> Any:
    """Sample frequencies ``[0, 1, ..., n/2-1, -n/2, ..., -1] / (d * n)`` (``n`` may be symbolic)."""
    n = _freq_len("fftfreq", n)
    od = dt.default_float if dtype is None else dt.user_dtype(dtype, "fftfreq")
    k = mv.iota(dt.int32, n)
    half = (n - 1) // 2 + 1
    k = ew.select(ew.lt(k, _as_value(half, (n,), dt.int32)), k, ew.sub(k, _as_value(n, (n,), dt.int32)))
    scale = ew.mul(_as_value(n, (n,), od), mv.full((n,), float(d), od))
    return ew.div(ew.convert_element_type(k, od), scale)


def rfftfreq(n: int, d: float = 1.0, *, dtype: Any = None, device: Any = None) -> Any:
    """Sample frequencies of ``rfft``: ``[0, 1, ..., n//2] / (d * n)`` (``n`` may be symbolic)."""
    n = _freq_len("rfftfreq", n)
    od = dt.default_float if dtype is None else dt.user_dtype(dtype, "rfftfreq")
    m = n // 2 + 1
    scale = ew.mul(_as_value(n, (m,), od), mv.full((m,), float(d), od))
    return ew.div(ew.convert_element_type(mv.iota(dt.int32, m), od), scale)


def _roll(x: Any, shift: Any, axis: int) -> Any:
    n = _aval(x).shape[axis]
    if not sh.is_symbolic(n):
        if n == 0:
            return x
        shift %= n
        if shift == 0:
            return x
    head = mv.slice_in_dim(x, n - shift, n, 1, axis)
    return mv.concatenate([head, mv.slice_in_dim(x, 0, n - shift, 1, axis)], axis)


def _shift(x: ArrayLike, axes: int | Sequence[int] | None, inverse: bool) -> Any:
    x = asarray(x)
    nd = _aval(x).ndim
    if axes is None:
        axes = list(range(nd))
    elif isinstance(axes, (int, np.integer)):
        axes = [int(axes)]
    for ax in axes:
        ax = sh.normalize_axis(ax, nd)
        n = _aval(x).shape[ax]
        if sh.is_symbolic(n):  # a roll by n // 2 (forward) or n - n // 2 (inverse), both in [0, n)
            x = _roll(x, n - n // 2 if inverse else n // 2, ax)
        else:
            x = _roll(x, -(n // 2) if inverse else n // 2, ax)
    return x


def fftshift(x: ArrayLike, axes: int | Sequence[int] | None = None) -> Any:
    """Shift the zero frequency to the center."""
    return _shift(x, axes, False)


def ifftshift(x: ArrayLike, axes: int | Sequence[int] | None = None) -> Any:
    """Inverse of ``fftshift``."""
    return _shift(x, axes, True)


__all__ = ["fft", "fft2", "fftfreq", "fftn", "fftshift", "hfft", "ifft", "ifft2", "ifftn", "ifftshift",
           "ihfft", "irfft", "irfft2", "irfftn", "rfft", "rfft2", "rfftfreq", "rfftn"]
