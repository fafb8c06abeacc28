"""ember.scipy.signal against scipy.signal."""

import numpy as np
import pytest
import scipy.signal as ss

import ember
from ember.scipy import signal

RNG = np.random.default_rng(5)
SHAPES = [((9,), (4,)), ((4,), (9,)), ((6, 7), (3, 2)), ((5, 4, 3), (2, 3, 2))]


@pytest.mark.parametrize("s1,s2", SHAPES)
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
def test_convolve_correlate(s1, s2, mode):
    a, b = RNG.normal(size=s1), RNG.normal(size=s2)
    dominated = all(x >= y for x, y in zip(s1, s2)) or all(x <= y for x, y in zip(s1, s2))
    if mode == "valid" and not dominated:
        pytest.skip("valid mode needs one input to dominate")
    for method in ("direct", "fft"):
        np.testing.assert_allclose(signal.convolve(a, b, mode, method), ss.convolve(a, b, mode), atol=1e-10)
        np.testing.assert_allclose(signal.correlate(a, b, mode, method), ss.correlate(a, b, mode), atol=1e-10)
    np.testing.assert_allclose(signal.fftconvolve(a, b, mode), ss.fftconvolve(a, b, mode), atol=1e-10)


def test_2d_float32_complex_jit_grad():
    a, b = RNG.normal(size=(8, 6)).astype(np.float32), RNG.normal(size=(3, 3)).astype(np.float32)
    out = signal.convolve2d(a, b, "same")
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, ss.convolve2d(a, b, "same"), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ember.jit(lambda x, y: signal.correlate2d(x, y, "valid"))(a, b),
                               ss.correlate2d(a, b, "valid"), rtol=1e-5, atol=1e-5)
    z1 = RNG.normal(size=7) + 1j * RNG.normal(size=7)
    z2 = RNG.normal(size=3) + 1j * RNG.normal(size=3)
    np.testing.assert_allclose(signal.correlate(z1, z2), ss.correlate(z1, z2), atol=1e-10)
    g = ember.grad(lambda x: signal.convolve(x, np.array([1.0, -1.0])).sum())(np.ones(4))
    np.testing.assert_allclose(g, np.zeros(4), atol=1e-12)  # the sum of a convolution with a zero-sum kernel
    with pytest.raises(NotImplementedError, match="boundary"):
        signal.convolve2d(a, b, boundary="wrap")
    with pytest.raises(ValueError, match="same number of dimensions"):
        signal.convolve(a, b[0])


@pytest.mark.parametrize("kw", [dict(nperseg=64), dict(nperseg=50, noverlap=30), dict(nperseg=64, nfft=80),
                                dict(nperseg=64, boundary=None, padded=False)])
def test_stft_istft_against_scipy(kw):
    x = RNG.normal(size=(2, 300))
    f, t, z = signal.stft(x, fs=10.0, **kw)
    F, T, Z = ss.stft(x, fs=10.0, **kw)
    np.testing.assert_allclose(f, F, rtol=1e-12)
    np.testing.assert_allclose(t, T, rtol=1e-12)
    np.testing.assert_allclose(z, Z, atol=1e-12)
    if kw.get("boundary", "zeros") is None:
        return
    inv = {k: v for k, v in kw.items() if k in ("nperseg", "noverlap", "nfft")}
    _, xr = signal.istft(z, fs=10.0, **inv)
    _, XR = ss.istft(Z, fs=10.0, **inv)
    np.testing.assert_allclose(xr, XR, atol=1e-12)
    np.testing.assert_allclose(np.asarray(xr)[:, :300], x, atol=1e-12)  # perfect reconstruction


def test_stft_jit_and_window_errors():
    x = RNG.normal(size=128).astype(np.float32)
    f, t, z = ember.jit(lambda v: signal.stft(v, nperseg=32))(x)
    np.testing.assert_allclose(z, ss.stft(x, nperseg=32)[2], atol=1e-5)
    with pytest.raises(NotImplementedError, match="window"):
        signal.stft(x, window="blackman", nperseg=32)
