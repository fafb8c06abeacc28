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




def _hann(n: int, dtype: Any) -> Any:
    """The periodic Hann window (``scipy.signal.get_window("hann", n)``)."""
    return (0.5 - 0.5 * jnp.cos(2 * np.pi * jnp.arange(n, dtype=dtype) / n)).astype(dtype)


def _window(window: Any, n: int, dtype: Any) -> Any:
    if isinstance(window, str):
        if window not in ("hann", "hanning"):
            raise NotImplementedError(f"stft/istft: window {window!r} is not supported: pass 'hann' or "
                                      "an array")
        return _hann(n, dtype)
    w = jnp.asarray(window, dtype)
    if w.shape != (n,):
        raise ValueError(f"stft/istft: window must have shape ({n},), got {tuple(w.shape)}")
    return w


def stft(x: Any, fs: float = 1.0, window: Any = "hann", nperseg: int = 256, noverlap: int | None = None,
         nfft: int | None = None, detrend: bool = False, return_onesided: bool = True,
         boundary: str | None = "zeros", padded: bool = True, axis: int = -1) -> tuple[Any, Any, Any]:
    """Short-time Fourier transform: ``(f, t, Zxx)`` with SciPy's ``spectrum`` scaling (real ``x``)."""
    if detrend or not return_onesided:
        raise NotImplementedError("stft: detrend and two-sided spectra are not supported")
    if boundary not in ("zeros", None):
        raise NotImplementedError(f"stft: boundary must be 'zeros' or None, got {boundary!r}")
    x = jnp.moveaxis(jnp.asarray(x), axis, -1)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.float32)
    n = x.shape[-1]
    nperseg = min(int(nperseg), n) if boundary is None else int(nperseg)
    noverlap = nperseg // 2 if noverlap is None else int(noverlap)
    nfft = nperseg if nfft is None else int(nfft)
    step = nperseg - noverlap
    pad = [(0, 0)] * (x.ndim - 1)
    if boundary == "zeros":
        x = jnp.pad(x, pad + [(nperseg // 2, nperseg // 2)])
    if padded:
        extra = (-(x.shape[-1] - nperseg) % step) % nperseg
        x = jnp.pad(x, pad + [(0, extra)])
    nseg = (x.shape[-1] - nperseg) // step + 1
    idx = jnp.arange(nseg)[:, None] * step + jnp.arange(nperseg)[None, :]
    win = _window(window, nperseg, x.dtype)
    frames = x[..., idx] * win
    z = jnp.fft.rfft(frames, n=nfft, axis=-1) / jnp.sum(win)
    freqs = jnp.arange(nfft // 2 + 1, dtype=x.dtype) * (fs / nfft)
    times = jnp.arange(nseg, dtype=x.dtype) * (step / fs)
    if boundary is None:
        times = times + (nperseg / 2) / fs
    return freqs, times, jnp.swapaxes(z, -1, -2)


def istft(Zxx: Any, fs: float = 1.0, window: Any = "hann", nperseg: int | None = None,  # noqa: N803
          noverlap: int | None = None, nfft: int | None = None, input_onesided: bool = True,
          boundary: bool = True, time_axis: int = -1, freq_axis: int = -2) -> tuple[Any, Any]:
    """Inverse short-time Fourier transform by weighted overlap-add: ``(t, x)``."""
    if not input_onesided:
        raise NotImplementedError("istft: two-sided input is not supported")
    z = jnp.moveaxis(jnp.asarray(Zxx), (freq_axis, time_axis), (-1, -2))  # (..., segments, freqs)
    nfft = 2 * (z.shape[-1] - 1) if nfft is None else int(nfft)
    nperseg = nfft if nperseg is None else int(nperseg)
    noverlap = nperseg // 2 if noverlap is None else int(noverlap)
    step = nperseg - noverlap
    nseg = z.shape[-2]
    real = jnp.zeros((), z.dtype).real.dtype
    win = _window(window, nperseg, real)
    frames = jnp.fft.irfft(z, n=nfft, axis=-1)[..., :nperseg] * jnp.sum(win) * win
    length = nperseg + (nseg - 1) * step
    idx = (jnp.arange(nseg)[:, None] * step + jnp.arange(nperseg)[None, :]).reshape(-1)
    batch = frames.shape[:-2]
    x = jnp.zeros(batch + (length,), real).at[..., idx].add(jnp.reshape(frames, batch + (-1,)))
    norm = jnp.zeros((length,), real).at[idx].add(jnp.tile(win * win, nseg))
    x = x / jnp.where(norm > 1e-10, norm, 1.0)
    if boundary:
        x = x[..., nperseg // 2: length - nperseg // 2]
    return jnp.arange(x.shape[-1], dtype=real) / fs, x


__all__ = ["convolve", "convolve2d", "correlate", "correlate2d", "fftconvolve", "istft", "stft"]
