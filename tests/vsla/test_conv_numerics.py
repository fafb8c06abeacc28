"""ember.vsla.conv numerics: exact integers, complex operands on the FFT path, NaN locality (direct
path), checked against np.convolve."""
import numpy as np
import pytest

from ember import vsla


@pytest.mark.parametrize("method", ["auto", "fft", "direct"])
def test_integer_conv_is_exact(method):
    a, b = np.arange(1, 40, dtype=np.int32), np.arange(1, 30, dtype=np.int32)
    out = vsla.conv(vsla.array(a), vsla.array(b), method=method)
    assert out.dtype == np.int32 and out.shape == (67,)
    np.testing.assert_array_equal(out.to_numpy(), np.convolve(a.astype(np.int64), b.astype(np.int64)))


def test_integer_conv_exact_under_jit():
    rng = np.random.default_rng(3)
    f = vsla.jit(vsla.conv)
    for m, n in [(39, 29), (70, 5), (3, 100)]:
        a = rng.integers(-1000, 1000, m).astype(np.int32)
        b = rng.integers(-1000, 1000, n).astype(np.int32)
        np.testing.assert_array_equal(f(vsla.array(a), vsla.array(b)).to_numpy(), np.convolve(a, b))


@pytest.mark.parametrize("dtype,tol", [(np.complex64, 2e-5), (np.complex128, 1e-12)])
@pytest.mark.parametrize("method", ["auto", "fft"])
def test_complex_conv_above_threshold(dtype, tol, method):
    rng = np.random.default_rng(5)
    a = (rng.standard_normal(40) + 1j * rng.standard_normal(40)).astype(dtype)
    b = (rng.standard_normal(30) + 1j * rng.standard_normal(30)).astype(dtype)
    assert a.size * b.size > vsla.FFT_THRESHOLD
    out = vsla.conv(vsla.array(a), vsla.array(b), method=method)
    assert out.dtype == dtype
    want = np.convolve(a.astype(np.complex128), b.astype(np.complex128))
    np.testing.assert_allclose(out.to_numpy(), want, rtol=tol, atol=tol * np.abs(want).max())


def test_complex_times_real_conv_fft():
    rng = np.random.default_rng(6)
    a = (rng.standard_normal(33) + 1j * rng.standard_normal(33)).astype(np.complex64)
    b = rng.standard_normal(20).astype(np.float32)
    out = vsla.conv(vsla.array(a), vsla.array(b))
    np.testing.assert_allclose(out.to_numpy(), np.convolve(a, b), rtol=1e-4, atol=1e-4)


def _nan_pattern(x, y):
    return np.isnan(np.convolve(x.astype(np.float64), y.astype(np.float64)))


@pytest.mark.parametrize("jitted", [False, True])
def test_direct_conv_nan_only_where_it_contributes(jitted):
    f = vsla.jit(lambda u, v: vsla.conv(u, v, method="direct")) if jitted else \
        (lambda u, v: vsla.conv(u, v, method="direct"))
    x = np.arange(1.0, 7.0, dtype=np.float32)
    x[2] = np.nan
    y = np.array([1.0, -2.0, 0.5], np.float32)
    for a, b in [(x, y), (y, x), (x, x[:5])]:
        out = f(vsla.array(a), vsla.array(b)).to_numpy()
        want = np.convolve(a.astype(np.float64), b.astype(np.float64))
        assert out.shape == want.shape
        np.testing.assert_array_equal(np.isnan(out), _nan_pattern(a, b))
        ok = ~np.isnan(want)
        np.testing.assert_allclose(out[ok], want[ok], rtol=1e-6)
