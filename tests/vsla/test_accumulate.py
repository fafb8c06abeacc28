"""Wide accumulation of products (ember._src.vsla.accumulate): the direct conv in double under x64 and
compensated without it, matmul in double under x64, and the float32 FFT path within the
specification's O(eps log L) bound; references are float64 NumPy and hand-derived sums."""
import numpy as np
import pytest

from ember import vsla
from ember._src import flags

EPS32 = float(np.finfo(np.float32).eps)


def _direct(a, b):
    return vsla.conv(a, b, method="direct")


@pytest.mark.parametrize("x64", [False, True])
def test_direct_conv_survives_cancellation(x64):
    """``[1e8, 1 x 64, -1e8]`` against ones: output 65 is the exact sum 64; a float32 running sum
    (``np.convolve`` in float32) loses the ones to 1e8's rounding."""
    x = np.array([1e8] + [1.0] * 64 + [-1e8], np.float32)
    y = np.ones(66, np.float32)
    assert np.convolve(x, y)[65] != 64.0  # float32 accumulation visibly fails here
    with flags.override("jax_enable_x64", x64):
        eager = _direct(vsla.array(x), vsla.array(y))
        jitted = vsla.jit(_direct)(vsla.array(x), vsla.array(y))
        assert eager.dtype == jitted.dtype == np.float32
        want = np.convolve(x.astype(np.float64), y.astype(np.float64))
        for out in (eager, jitted):
            np.testing.assert_array_equal(np.asarray(out.logical()), want.astype(np.float32))


@pytest.mark.parametrize("x64", [False, True])
def test_direct_conv_is_the_rounded_exact_result(x64):
    """Random float32 operands: every output is the float32 rounding of the float64 reference (the
    exact products of float32 values are float64 numbers; their sum differs from it by far less
    than a float32 ulp), eagerly and under vsla.jit, float16 operands too."""
    rng = np.random.default_rng(4)
    f = vsla.jit(_direct)
    with flags.override("jax_enable_x64", x64):
        for m, n in [(3, 5), (17, 9), (200, 130)]:
            a, b = rng.standard_normal(m).astype(np.float32), rng.standard_normal(n).astype(np.float32)
            want = np.convolve(a.astype(np.float64), b.astype(np.float64))
            for out in (_direct(vsla.array(a), vsla.array(b)), f(vsla.array(a), vsla.array(b))):
                got = np.asarray(out.logical()).astype(np.float64)
                np.testing.assert_allclose(got, want, rtol=EPS32, atol=1e-6 * EPS32 * np.abs(want).max())
            h = _direct(vsla.array(a.astype(np.float16)), vsla.array(b.astype(np.float16)))
            wh = np.convolve(a.astype(np.float16).astype(np.float64), b.astype(np.float16).astype(np.float64))
            assert h.dtype == np.float16
            np.testing.assert_array_equal(np.asarray(h.logical()), wh.astype(np.float16))


def test_direct_conv_non_finite_stays_local():
    a = np.array([1.0, np.inf, 2.0, 3e38, 5.0], np.float32)
    out = _direct(vsla.array(a), vsla.array(np.array([1.0, 1.0], np.float32))).to_numpy()
    np.testing.assert_array_equal(out, np.convolve(a.astype(np.float64), [1.0, 1.0]).astype(np.float32))


def test_matmul_accumulates_in_double_under_x64():
    a = np.array([[1e8, 1.0, 1.0, 1.0, -1e8], [2.0, 0.5, 0.25, 0.0, 1.0]], np.float32)
    b = np.array([[1.0, 2.0], [1.0, 0.0], [1.0, 4.0], [1.0, 8.0], [1.0, 2.0]], np.float32)
    want = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)  # [[3, 8], [3.75, 7]]
    with flags.override("jax_enable_x64", True):
        va, vb = vsla.array(a), vsla.array(b)
        for out in (vsla.matmul(va, vb), vsla.jit(vsla.matmul)(va, vb)):
            assert out.dtype == np.float32
            np.testing.assert_array_equal(np.asarray(out.logical()), want)


@pytest.mark.parametrize("m,n", [(20, 20), (100, 77), (500, 600), (1, 3000), (2000, 2100)])
def test_fft_path_within_the_float32_error_bound(m, n):
    """§15: the FFT's error is O(eps log L); checked as ``max |err| <= eps log2(L) |a|_2 |b|_2``
    against the float64 convolution, eagerly and under vsla.jit (measured: under 0.12 of it)."""
    rng = np.random.default_rng(m + n)
    a, b = rng.standard_normal(m).astype(np.float32), rng.uniform(0, 1, n).astype(np.float32)
    want = np.convolve(a.astype(np.float64), b.astype(np.float64))
    size = 1 << (m + n - 2).bit_length()
    norms = np.linalg.norm(a.astype(np.float64)) * np.linalg.norm(b.astype(np.float64))
    bound = EPS32 * np.log2(size) * norms
    f = vsla.jit(lambda x, y: vsla.conv(x, y, method="fft"))
    for out in (vsla.conv(vsla.array(a), vsla.array(b), method="fft"), f(vsla.array(a), vsla.array(b))):
        assert out.dtype == np.float32
        assert np.abs(np.asarray(out.logical()) - want).max() <= bound
