"""vsla.conv over the last 2 or 3 axes (Conv2D/Conv3D, §4.3) against scipy.signal.convolve, eagerly and
under vsla.jit (one compile for every shape), every method, integers exactly, with batch axes and
gradients (scipy.signal.correlate)."""
import numpy as np
import pytest
from scipy.signal import convolve, correlate

from ember import vsla


def _np(v):
    return np.asarray(v.logical())


def _slack_is_zero(v):
    data = np.asarray(v.data).copy()
    data[tuple(slice(0, d) for d in v.shape)] = 0
    return not data.any()


def test_conv2d_matches_scipy_eager_and_jit():
    rng = np.random.default_rng(1)
    methods = ("auto", "direct", "fft")
    f = vsla.jit(lambda a, b: tuple(vsla.conv(a, b, method=m, dims=2) for m in methods))
    for sa, sb in [((3, 4), (2, 5)), ((1, 1), (6, 2)), ((7, 9), (5, 12))]:
        a, b = rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)
        want = convolve(a.astype(np.float64), b.astype(np.float64))
        eager = [vsla.conv(vsla.array(a), vsla.array(b), method=m, dims=2) for m in methods]
        for out in eager + list(f(vsla.array(a), vsla.array(b))):
            assert out.shape == want.shape and out.dtype == np.float32
            np.testing.assert_allclose(_np(out), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
            assert _slack_is_zero(out)
    assert f.cache_info()["compiles"] == 1


def test_conv3d_with_batch_axis_integers_and_empty():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((2, 3, 2, 4)).astype(np.float32)
    b = rng.standard_normal((1, 2, 3, 2)).astype(np.float32)  # batch axis zero-extended to 2
    want = np.stack([convolve(a[0].astype(np.float64), b[0].astype(np.float64)), np.zeros((4, 4, 5))])
    out = vsla.conv(vsla.array(a), vsla.array(b), dims=3)  # (under vsla.jit: the 2-D test's path)
    assert out.shape == (2, 4, 4, 5)
    np.testing.assert_allclose(_np(out), want, rtol=1e-5, atol=1e-5)
    ai = rng.integers(-50, 50, (4, 5)).astype(np.int32)
    bi = rng.integers(-50, 50, (3, 6)).astype(np.int32)
    out = vsla.conv(vsla.array(ai), vsla.array(bi), dims=2)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(_np(out), convolve(ai.astype(np.int64), bi.astype(np.int64)))
    e = vsla.conv(vsla.array(np.zeros((0, 3), np.float32)), vsla.array(np.ones((2, 2), np.float32)), dims=2)
    assert e.shape == (0, 0)
    with pytest.raises(ValueError, match="dims"):
        vsla.conv(vsla.array([1.0]), vsla.array([1.0]), dims=2)


def test_conv2d_gradient_is_a_correlation():
    """d/da sum(w * conv2(a, b)) = correlate(w, b, 'valid'), and symmetrically for b."""
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((2, 3)).astype(np.float32)
    w = rng.standard_normal((4, 6)).astype(np.float32)

    def loss(p, q):
        return vsla.sum(vsla.sum(vsla.conv(p, q, dims=2) * vsla.array(w)))

    wa = correlate(w.astype(np.float64), b.astype(np.float64), mode="valid")
    wb = correlate(w.astype(np.float64), a.astype(np.float64), mode="valid")
    for gr in (vsla.grad(loss, (0, 1)), vsla.jit(vsla.grad(loss, (0, 1)))):
        ga, gb = gr(vsla.array(a), vsla.array(b))
        np.testing.assert_allclose(_np(ga), wa, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(_np(gb), wb, rtol=1e-4, atol=1e-5)
