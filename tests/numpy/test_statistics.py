"""Order statistics, histograms, covariance, differences, convolution, interpolation vs NumPy."""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ember
import ember.numpy as jnp
from ember.errors import DTypeError, ShapeError, TracerError

rng = np.random.default_rng(1)
TOL = {np.float32: dict(rtol=2e-5, atol=2e-6), np.float64: dict(rtol=1e-12, atol=1e-12),
       np.int32: dict(rtol=2e-6, atol=1e-6)}


def _close(got, ref, dtype=np.float64, **kw):
    got = np.asarray(got)
    assert got.shape == np.shape(ref), (got.shape, np.shape(ref))
    tol = dict(TOL[np.dtype(dtype).type])
    tol.update(kw)
    np.testing.assert_allclose(got, ref, equal_nan=True, **tol)


def _data(shape, dtype):
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-20, 20, shape).astype(dtype)
    return rng.normal(size=shape).astype(dtype)


# -- quantiles ---------------------------------------------------------------------------------------

ALL_METHODS = ["linear", "lower", "higher", "nearest", "midpoint", "inverted_cdf", "averaged_inverted_cdf",
               "closest_observation", "interpolated_inverted_cdf", "hazen", "weibull", "median_unbiased",
               "normal_unbiased"]
QS = [0.0, 0.125, 0.25, 0.5, 0.625, 1.0]


@pytest.mark.parametrize("method", ALL_METHODS)
@pytest.mark.parametrize("n", [1, 4, 7])
def test_quantile_methods(method, n):
    x = _data((3, n), np.float64)
    for q in QS:
        _close(jnp.quantile(x, q, axis=1, method=method), np.quantile(x, q, axis=1, method=method))
    q = np.array(QS)
    _close(jnp.quantile(x, q, axis=-1, method=method), np.quantile(x, q, axis=-1, method=method))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("shape,axis", [((11,), None), ((4, 5), 0), ((4, 5), -1), ((2, 3, 4), (0, 2)),
                                        ((2, 3, 4), None), ((3, 1), 1)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_quantile_axes_dtypes(dtype, shape, axis, keepdims):
    x = _data(shape, dtype)
    q = np.array([[0.1, 0.5], [0.75, 0.9]])
    ref = np.quantile(x, q, axis=axis, keepdims=keepdims)
    _close(jnp.quantile(x, q, axis=axis, keepdims=keepdims), ref, dtype)
    _close(jnp.percentile(x, q * 100, axis=axis, keepdims=keepdims), ref, dtype)
    _close(jnp.median(x, axis=axis, keepdims=keepdims), np.median(x, axis=axis, keepdims=keepdims), dtype)
    out = jnp.quantile(x, 0.3, axis=axis)
    assert out.dtype == (np.float32 if dtype != np.float64 else np.float64)
    f = ember.jit(lambda v: jnp.quantile(v, 0.3, axis=axis, keepdims=keepdims))
    _close(f(x), np.quantile(x, 0.3, axis=axis, keepdims=keepdims), dtype)


def test_quantile_nans_and_empty():
    x = _data((4, 6), np.float64)
    x[1, 2] = np.nan
    x[3, :] = np.nan
    _close(jnp.quantile(x, 0.4, axis=1), np.quantile(x, 0.4, axis=1))
    _close(jnp.median(x, axis=1), np.median(x, axis=1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for m in ("linear", "lower", "nearest", "midpoint", "hazen"):
            _close(jnp.nanquantile(x, np.array([0.2, 0.8]), axis=1, method=m),
                   np.nanquantile(x, [0.2, 0.8], axis=1, method=m))
        _close(jnp.nanmedian(x, axis=-1, keepdims=True), np.nanmedian(x, axis=-1, keepdims=True))
        _close(jnp.nanpercentile(x, 30, axis=0), np.nanpercentile(x, 30, axis=0))
        _close(jnp.nanmedian(x), np.nanmedian(x))
        _close(ember.jit(lambda v: jnp.nanmedian(v, axis=1))(x), np.nanmedian(x, axis=1))
    assert np.isnan(np.asarray(jnp.median(np.zeros((0,)))))
    assert jnp.quantile(np.zeros((3, 0)), 0.5, axis=1).shape == (3,)
    _close(jnp.median(np.float32(3.0)), 3.0, np.float32)


def test_quantile_errors():
    with pytest.raises(ValueError, match="range"):
        jnp.quantile(np.ones(3), 1.5)
    with pytest.raises(ValueError, match="range"):
        jnp.percentile(np.ones(3), -1)
    with pytest.raises(ValueError, match="method"):
        jnp.quantile(np.ones(3), 0.5, method="bogus")
    with pytest.raises(DTypeError):
        jnp.quantile(np.ones(3, np.complex64), 0.5)
    with pytest.raises(ShapeError):
        jnp.median(np.ones((2, 2)), axis=2)


def test_quantile_grad():
    x = np.array([3.0, 1.0, 2.0, 5.0])
    np.testing.assert_allclose(ember.grad(jnp.median)(x), [0.5, 0, 0.5, 0])


# -- histograms and counting ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_histogram(dtype):
    x = _data((50,), dtype)
    for kw in (dict(), dict(bins=7), dict(bins=5, range=(-1, 2)), dict(bins=[-3, -1, 0, 0.5, 4]),
               dict(bins=6, density=True)):
        h, e = jnp.histogram(x, **kw)
        hn, en = np.histogram(x, **kw)
        _close(e, en, dtype, rtol=1e-6, atol=1e-6)
        _close(h, hn, np.float32 if kw.get("density") else np.float64)
    w = rng.random(50)
    h, e = jnp.histogram(x, bins=4, weights=w)
    hn, en = np.histogram(x, bins=4, weights=w)
    _close(h, hn)
    h, e = ember.jit(lambda v: jnp.histogram(v, bins=6))(x)
    hn, en = np.histogram(x, bins=6)
    _close(h, hn)
    _close(e, en, dtype, rtol=1e-6, atol=1e-6)


def test_histogram_edge_cases():
    x = np.array([0.0, 0.5, 1.0, 1.0, 2.0])
    h, _ = jnp.histogram(x, bins=[0, 1, 2])  # last bin includes its right edge
    np.testing.assert_array_equal(h, [2, 3])
    h, e = jnp.histogram(np.full(4, 3.0), bins=2)  # degenerate range is widened by 0.5
    hn, en = np.histogram(np.full(4, 3.0), bins=2)
    _close(h, hn)
    _close(e, en)
    h, e = jnp.histogram(np.zeros(0), bins=3)
    hn, en = np.histogram(np.zeros(0), bins=3)
    _close(h, hn)
    _close(e, en)
    for b in ("auto", "sturges", "fd"):
        _close(jnp.histogram_bin_edges(x, b), np.histogram_bin_edges(x, b))
    with pytest.raises(TracerError):
        ember.jit(lambda v: jnp.histogram(v, bins="auto"))(x)
    with pytest.raises(ValueError):
        jnp.histogram(x, bins=[0, 2, 1])
    with pytest.raises(ValueError):
        jnp.histogram(x, range=(2, 1))


def test_bincount():
    x = np.array([1, 1, 3, 0, 7], np.int32)
    np.testing.assert_array_equal(jnp.bincount(x), np.bincount(x))
    np.testing.assert_array_equal(jnp.bincount(x, minlength=10), np.bincount(x, minlength=10))
    w = rng.random(5)
    _close(jnp.bincount(x, weights=w), np.bincount(x, weights=w))
    np.testing.assert_array_equal(jnp.bincount(np.zeros(0, np.int32)), np.bincount(np.zeros(0, np.int32)))
    out = ember.jit(lambda v: jnp.bincount(v, length=5))(x)
    np.testing.assert_array_equal(out, np.bincount(x)[:5])  # values >= length are dropped
    with pytest.raises(TracerError, match="length="):
        ember.jit(jnp.bincount)(x)
    with pytest.raises(ValueError):
        jnp.bincount(np.array([-1, 2]))
    with pytest.raises(DTypeError):
        jnp.bincount(np.array([1.0, 2.0]))


@pytest.mark.parametrize("right", [False, True])
def test_digitize(right):
    x = np.array([-1.0, 0.0, 0.5, 1.0, 2.5, 3.0, 4.0, np.nan])
    for bins in ([0.0, 1.0, 2.5, 3.0], [3.0, 2.5, 1.0, 0.0], [1.0], [1.0, 1.0, 2.0]):
        np.testing.assert_array_equal(jnp.digitize(x, jnp.asarray(bins), right=right),
                                      np.digitize(x, bins, right=right))
        f = ember.jit(lambda v, b: jnp.digitize(v, b, right=right))
        np.testing.assert_array_equal(f(x, np.array(bins)), np.digitize(x, bins, right=right))
    with pytest.raises(ValueError):
        jnp.digitize(x, jnp.asarray([0.0, 2.0, 1.0]))


# -- covariance ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cov_corrcoef(dtype):
    m = _data((3, 8), dtype)
    y = _data((2, 8), dtype)
    _close(jnp.cov(m), np.cov(m), dtype, rtol=1e-4)
    _close(jnp.cov(m, y), np.cov(m, y), dtype, rtol=1e-4)
    _close(jnp.cov(m.T, rowvar=False, bias=True), np.cov(m.T, rowvar=False, bias=True), dtype, rtol=1e-4)
    _close(jnp.cov(m, ddof=2), np.cov(m, ddof=2), dtype, rtol=1e-4)
    fw, aw = rng.integers(1, 4, 8), rng.random(8)
    _close(jnp.cov(m, fweights=fw, aweights=aw), np.cov(m, fweights=fw, aweights=aw), dtype, rtol=1e-4)
    _close(jnp.cov(m, fweights=fw), np.cov(m, fweights=fw), dtype, rtol=1e-4)
    _close(jnp.cov(m, aweights=aw, ddof=0), np.cov(m, aweights=aw, ddof=0), dtype, rtol=1e-4)
    _close(jnp.cov(m[0]), np.cov(m[0]), dtype, rtol=1e-4)
    _close(jnp.corrcoef(m), np.corrcoef(m), dtype, rtol=1e-4, atol=1e-5)
    _close(jnp.corrcoef(m[0], y[1]), np.corrcoef(m[0], y[1]), dtype, rtol=1e-4, atol=1e-5)
    _close(ember.jit(jnp.cov)(m), np.cov(m), dtype, rtol=1e-4)
    _close(ember.jit(jnp.corrcoef)(m), np.corrcoef(m), dtype, rtol=1e-4, atol=1e-5)


def test_cov_complex_and_int():
    z = (rng.normal(size=(2, 5)) + 1j * rng.normal(size=(2, 5))).astype(np.complex128)
    _close(jnp.cov(z), np.cov(z))
    _close(jnp.corrcoef(z), np.corrcoef(z))
    i = rng.integers(0, 10, (2, 6)).astype(np.int32)
    _close(jnp.cov(i), np.cov(i), np.float32, rtol=1e-5)
    with pytest.raises(ShapeError):
        jnp.cov(np.ones((2, 2, 2)))


# -- differences and integration -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.bool_])
@pytest.mark.parametrize("shape,axis", [((7,), -1), ((3, 5), 0), ((3, 5), 1), ((2, 3, 4), -2), ((0, 3), 1)])
def test_diff(dtype, shape, axis):
    x = _data(shape, dtype) if dtype != np.bool_ else rng.random(shape) > 0.5
    for n in (0, 1, 2):
        ref = np.diff(x, n=n, axis=axis)
        got = jnp.diff(x, n=n, axis=axis)
        assert got.dtype == ref.dtype
        np.testing.assert_array_equal(got, ref)
    if dtype != np.bool_ and x.size:
        pre, app = x.take([-1], axis=axis), x.take([0], axis=axis)
        np.testing.assert_array_equal(jnp.diff(x, axis=axis, prepend=pre, append=app),
                                      np.diff(x, axis=axis, prepend=pre, append=app))
        # a Python scalar is weakly typed: it takes x's dtype (NumPy would widen to float64)
        np.testing.assert_array_equal(jnp.diff(x, axis=axis, prepend=0),
                                      np.diff(x, axis=axis, prepend=np.zeros((), dtype)))
    np.testing.assert_array_equal(ember.jit(lambda v: jnp.diff(v, 2, axis=axis))(x), np.diff(x, 2, axis=axis))


def test_diff_errors_and_ediff1d():
    with pytest.raises(ValueError):
        jnp.diff(np.float32(1))
    with pytest.raises(ValueError):
        jnp.diff(np.ones(3), n=-1)
    x = np.array([[1, 2], [4, 8]], np.int32)
    np.testing.assert_array_equal(jnp.ediff1d(x), np.ediff1d(x))
    np.testing.assert_array_equal(jnp.ediff1d(x, to_end=[7, 8], to_begin=-1),
                                  np.ediff1d(x, to_end=[7, 8], to_begin=-1))
    np.testing.assert_array_equal(jnp.ediff1d(np.zeros(0)), np.ediff1d(np.zeros(0)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_trapezoid(dtype):
    y = _data((4, 6), dtype)
    _close(jnp.trapezoid(y), np.trapezoid(y).astype(np.float64), np.float32 if dtype != np.float64 else dtype)
    _close(jnp.trapezoid(y, dx=0.5, axis=0), np.trapezoid(y, dx=0.5, axis=0),
           np.float32 if dtype != np.float64 else dtype)
    xs = np.cumsum(rng.random(6))
    _close(jnp.trapezoid(y, x=xs), np.trapezoid(y, x=xs), np.float32 if dtype != np.float64 else dtype)
    x2 = np.cumsum(rng.random((4, 6)), axis=0)
    _close(jnp.trapezoid(y, x=x2, axis=0), np.trapezoid(y, x=x2, axis=0),
           np.float32 if dtype != np.float64 else dtype)
    _close(ember.jit(lambda v, c: jnp.trapezoid(v, c))(y, xs), np.trapezoid(y, xs),
           np.float32 if dtype != np.float64 else dtype)
    _close(jnp.trapezoid(np.ones(1)), 0.0)


@pytest.mark.parametrize("edge_order", [1, 2])
def test_gradient(edge_order):
    f = _data((5, 6), np.float64)
    for args in ((), (0.5,), (2.0, np.cumsum(rng.random(6)))):
        got, ref = jnp.gradient(f, *args, edge_order=edge_order), np.gradient(f, *args, edge_order=edge_order)
        for g, r in zip(got, ref):
            _close(g, r)
    _close(jnp.gradient(f, axis=-1, edge_order=edge_order), np.gradient(f, axis=-1, edge_order=edge_order))
    v = _data((7,), np.float32)
    _close(ember.jit(lambda u: jnp.gradient(u, 0.3))(v), np.gradient(v, 0.3), np.float32, rtol=1e-4)
    with pytest.raises(ValueError):
        jnp.gradient(np.ones(2), edge_order=2)


# -- convolution ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("na,nv", [(5, 3), (3, 5), (4, 4), (1, 6), (6, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.complex64])
def test_convolve_correlate(mode, na, nv, dtype):
    a, v = _data((na,), np.float64), _data((nv,), np.float64)
    if dtype == np.complex64:
        a, v = a + 1j * _data((na,), np.float64), v - 1j * _data((nv,), np.float64)
    a, v = a.astype(dtype), v.astype(dtype)
    tol = np.float32 if dtype in (np.complex64, np.float32) else np.float64
    _close(jnp.convolve(a, v, mode), np.convolve(a, v, mode), tol, rtol=1e-5, atol=1e-5)
    _close(jnp.correlate(a, v, mode), np.correlate(a, v, mode), tol, rtol=1e-5, atol=1e-5)
    assert jnp.convolve(a, v, mode).dtype == dtype
    _close(ember.jit(lambda p, q: jnp.correlate(p, q, mode))(a, v), np.correlate(a, v, mode), tol,
           rtol=1e-5, atol=1e-5)


def test_convolve_errors_and_grad():
    with pytest.raises(ValueError):
        jnp.convolve(np.zeros(0), np.ones(3))
    with pytest.raises(ShapeError):
        jnp.convolve(np.ones((2, 2)), np.ones(3))
    with pytest.raises(ValueError):
        jnp.convolve(np.ones(2), np.ones(3), mode="bad")
    g = ember.grad(lambda a: jnp.convolve(a, jnp.asarray([1.0, 2.0])).sum())(np.ones(4))
    np.testing.assert_allclose(g, [3.0] * 4)


# -- interpolation ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_interp(dtype):
    xp = np.cumsum(rng.random(8)).astype(dtype)
    fp = _data((8,), dtype)
    x = np.concatenate([rng.uniform(xp[0] - 1, xp[-1] + 1, 20), xp[[0, 3, 7]], [np.nan]]).astype(dtype)
    _close(jnp.interp(x, xp, fp), np.interp(x, xp, fp), dtype, rtol=1e-5)
    _close(jnp.interp(x, xp, fp, left=-9, right=9), np.interp(x, xp, fp, left=-9, right=9), dtype, rtol=1e-5)
    _close(ember.jit(jnp.interp)(x, xp, fp), np.interp(x, xp, fp), dtype, rtol=1e-5)
    _close(jnp.interp(2.5, xp, fp), np.interp(2.5, xp, fp), dtype, rtol=1e-5)


def test_interp_special():
    # repeated xp: the value right of the step; one sample point; period; complex fp
    _close(jnp.interp(*map(jnp.asarray, ([0.5, 1, 1.5], [0.0, 1, 1, 2], [0.0, 1, 5, 2]))),
           np.interp([0.5, 1, 1.5], [0.0, 1, 1, 2], [0.0, 1, 5, 2]), np.float32)
    _close(jnp.interp(*map(jnp.asarray, ([-1.0, 0, 1], [0.5], [3.0]))), np.interp([-1.0, 0, 1], [0.5], [3.0]),
           np.float32)
    x = np.array([-180.0, -170, -185, 185, -10, -5, 0, 365])
    xp, fp = np.array([190.0, -190, 350, -350]), np.array([5.0, 10, 3, 4])
    _close(jnp.interp(x, xp, fp, period=360), np.interp(x, xp, fp, period=360))
    fpc = np.array([1.0 + 2j, 3 - 1j, 0 + 0j])
    _close(jnp.interp(jnp.asarray([0.5, 1.5]), jnp.asarray([0.0, 1, 2]), fpc),
           np.interp([0.5, 1.5], [0.0, 1, 2], fpc), np.float32)
    with pytest.raises(ShapeError):
        jnp.interp(1.0, jnp.asarray([0.0, 1]), jnp.asarray([1.0]))
    with pytest.raises(ValueError):
        jnp.interp(1.0, jnp.asarray([0.0, 1]), jnp.asarray([1.0, 2]), period=0)


# -- properties ----------------------------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=2, max_side=7),
                  elements=st.floats(-1e3, 1e3)),
       st.lists(st.floats(0, 1), min_size=1, max_size=3),
       st.sampled_from(["linear", "lower", "higher", "nearest", "midpoint", "hazen"]))
def test_prop_quantile(x, q, method):
    q = np.array(q)
    for axis in (None, -1):
        got = np.asarray(jnp.quantile(x, q, axis=axis, method=method))
        ref = np.quantile(x, q, axis=axis, method=method)
        if method in ("lower", "higher", "nearest"):  # index rounding may differ at ties: check membership
            assert np.isin(got, x).all()
            lo = np.quantile(x, q, axis=axis, method="lower")
            hi = np.quantile(x, q, axis=axis, method="higher")
            assert (got >= lo).all() and (got <= hi).all()
        else:
            np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-9)
    got = np.asarray(jnp.quantile(x, q, axis=-1))
    assert (np.diff(np.sort(q)) >= 0).all()
    order = np.argsort(q)
    assert (np.diff(got[order], axis=0) >= -1e-9).all()  # monotone in q


def test_vmap_and_dynamic_axes():
    x = rng.normal(size=(4, 7))
    _close(ember.vmap(jnp.median)(x), np.median(x, axis=1))
    _close(ember.vmap(lambda r: jnp.interp(0.1, np.linspace(-1, 1, 7), r))(x),
           [np.interp(0.1, np.linspace(-1, 1, 7), r) for r in x])
    f = ember.jit(lambda v: (jnp.quantile(v, 0.3, axis=0), jnp.diff(v, axis=0), jnp.histogram(v, 3)[0]),
                  dynamic_axes=["batch, _"])
    for n in (3, 6):
        v = rng.normal(size=(n, 5))
        q, d, h = f(v)
        _close(q, np.quantile(v, 0.3, axis=0))
        _close(d, np.diff(v, axis=0))
        _close(h, np.histogram(v, 3)[0])
