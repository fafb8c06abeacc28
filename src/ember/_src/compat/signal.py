"""``jax.scipy.signal``: N-d ``convolve``/``correlate`` (direct or FFT), ``fftconvolve``, and the 2-D forms.

The direct method is one ``lax.conv_general_dilated`` (real inputs); the FFT method multiplies
``rfftn``/``fftn`` spectra. Output modes ``full``, ``same`` (centered as SciPy) and ``valid``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import ember.numpy as jnp
from ember import lax


def _check(name: str, in1: Any, in2: Any, mode: str) -> tuple[Any, Any]:
    in1, in2 = jnp.asarray(in1), jnp.asarray(in2)
    if in1.ndim != in2.ndim:
        raise ValueError(f"{name}: in1 and in2 must have the same number of dimensions, got {in1.ndim} and "
                         f"{in2.ndim}")
    if mode not in ("full", "same", "valid"):
        raise ValueError(f"{name}: mode must be 'full', 'same' or 'valid', got {mode!r}")
    dt = jnp.result_type(in1, in2)
    if not jnp.issubdtype(dt, jnp.inexact):
        dt = jnp.float32
    return in1.astype(dt), in2.astype(dt)


def _crop(full: Any, s1: tuple, s2: tuple, mode: str) -> Any:
    """The ``same``/``valid`` part of a full convolution of shapes ``s1`` and ``s2``."""
    if mode == "full":
        return full
    if mode == "same":
        starts = [(f - n) // 2 for f, n in zip(full.shape, s1)]
        return full[tuple(slice(st, st + n) for st, n in zip(starts, s1))]
    big, small = (s1, s2) if all(a >= b for a, b in zip(s1, s2)) else (s2, s1)
    if not all(a >= b for a, b in zip(big, small)):
        raise ValueError("valid mode needs one input at least as large as the other in every dimension")
    return full[tuple(slice(k - 1, k - 1 + b - k + 1) for b, k in zip(big, small))]


def _direct_full(in1: Any, in2: Any) -> Any:
    nd = in1.ndim
    if nd == 0:
        return in1 * in2
    if jnp.issubdtype(in1.dtype, jnp.complexfloating):
        return _fft_full(in1, in2)
    spatial = "DEFGHJKLMPQRSTUVWXYZ"[:nd]  # spatial axis names: letters other than N, C, I, O
    dims = ("NC" + spatial, "OI" + spatial, "NC" + spatial)
    kernel = jnp.flip(in2)[None, None]
    out = lax.conv_general_dilated(in1[None, None], kernel, (1,) * nd, [(k - 1, k - 1) for k in in2.shape],
                                   dimension_numbers=dims)
    return out[0, 0]


def _fft_full(in1: Any, in2: Any) -> Any:
    shape = tuple(a + b - 1 for a, b in zip(in1.shape, in2.shape))
    if in1.ndim == 0:
        return in1 * in2
    if jnp.issubdtype(in1.dtype, jnp.complexfloating):
        return jnp.fft.ifftn(jnp.fft.fftn(in1, shape) * jnp.fft.fftn(in2, shape), shape)
    out = jnp.fft.irfftn(jnp.fft.rfftn(in1, shape) * jnp.fft.rfftn(in2, shape), shape)
    return out.astype(in1.dtype)


def convolve(in1: Any, in2: Any, mode: str = "full", method: str = "auto", precision: Any = None) -> Any:
    """N-d convolution of ``in1`` and ``in2`` (``method``: ``auto``/``direct``/``fft``)."""
    in1, in2 = _check("convolve", in1, in2, mode)
    if method not in ("auto", "direct", "fft"):
        raise ValueError(f"convolve: method must be 'auto', 'direct' or 'fft', got {method!r}")
    full = _fft_full(in1, in2) if method == "fft" else _direct_full(in1, in2)
    return _crop(full, tuple(in1.shape), tuple(in2.shape), mode)


def correlate(in1: Any, in2: Any, mode: str = "full", method: str = "auto", precision: Any = None) -> Any:
    """N-d cross-correlation: ``convolve(in1, flip(conj(in2)))``."""
    in1, in2 = _check("correlate", in1, in2, mode)
    return convolve(in1, jnp.flip(jnp.conj(in2)), mode, method)


def fftconvolve(in1: Any, in2: Any, mode: str = "full", axes: Any = None) -> Any:
    """N-d convolution by FFT."""
    if axes is not None:
        raise NotImplementedError("fftconvolve: axes= is not supported; convolve over all axes")
    return convolve(in1, in2, mode, method="fft")


def _two_d(name: str, in1: Any, in2: Any, boundary: str, fillvalue: float) -> None:
    if np.ndim(in1) != 2 or np.ndim(in2) != 2:
        raise ValueError(f"{name}: inputs must be 2-D, got {np.ndim(in1)}-D and {np.ndim(in2)}-D")
    if boundary != "fill" or fillvalue != 0:
        raise NotImplementedError(f"{name}: only boundary='fill' with fillvalue=0 is supported (as JAX)")


def convolve2d(in1: Any, in2: Any, mode: str = "full", boundary: str = "fill", fillvalue: float = 0,
               precision: Any = None) -> Any:
    """2-D convolution (``boundary='fill'``, ``fillvalue=0``)."""
    _two_d("convolve2d", in1, in2, boundary, fillvalue)
    return convolve(in1, in2, mode, "direct")


def correlate2d(in1: Any, in2: Any, mode: str = "full", boundary: str = "fill", fillvalue: float = 0,
                precision: Any = None) -> Any:
    """2-D cross-correlation (``boundary='fill'``, ``fillvalue=0``)."""
    _two_d("correlate2d", in1, in2, boundary, fillvalue)
    return correlate(in1, in2, mode, "direct")


__all__ = ["convolve", "convolve2d", "correlate", "correlate2d", "fftconvolve"]
