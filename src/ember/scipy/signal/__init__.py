"""``ember.scipy.signal``: convolutions and correlations, as ``jax.scipy.signal``."""

from ember._src.compat.signal import convolve, convolve2d, correlate, correlate2d, fftconvolve, istft, stft

__all__ = ["convolve", "convolve2d", "correlate", "correlate2d", "fftconvolve", "istft", "stft"]
