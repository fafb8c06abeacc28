"""Polynomial helpers against NumPy: evaluation, arithmetic, calculus, Vandermonde, fitting."""

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember.errors import ShapeError

rng = np.random.default_rng(2)
DTYPES = [np.float32, np.float64, np.int32]


def _tol(dtype):
    if np.dtype(dtype) in (np.float32, np.int32):
        return dict(rtol=2e-5, atol=2e-5)
    return dict(rtol=1e-11, atol=1e-11)


def _coef(n, dtype):
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-4, 5, n).astype(dtype)
    return rng.normal(size=n).astype(dtype)


def _close(got, ref, dtype):
    got = np.asarray(got)
    assert got.shape == np.shape(ref), (got.shape, np.shape(ref))
    np.testing.assert_allclose(got, ref, **_tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("xshape", [(), (5,), (2, 3), (0,)])
def test_polyval(dtype, xshape):
    p = _coef(4, dtype)
    x = _coef(xshape, dtype) if xshape else _coef((), dtype)
    ref = np.polyval(p, x)
    _close(jnp.polyval(p, x), ref, dtype)
    _close(ember.jit(jnp.polyval)(p, x), ref, dtype)
    assert jnp.polyval(p, x).dtype == dtype
    _close(jnp.polyval(p, 2.0), np.polyval(p, 2.0), np.float32)
    _close(jnp.polyval(jnp.asarray([3.0]), x), np.polyval([3.0], x).astype(np.float64) * np.ones(xshape),
           np.float32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n1,n2", [(3, 5), (4, 2), (1, 1), (3, 3)])
def test_poly_arithmetic(dtype, n1, n2):
    a, b = _coef(n1, dtype), _coef(n2, dtype)
    _close(jnp.polyadd(a, b), np.polyadd(a, b), dtype)
    _close(jnp.polysub(a, b), np.polysub(a, b), dtype)
    _close(jnp.polymul(a, b), np.convolve(a, b), dtype)  # leading zeros kept (NumPy strips them)
    _close(ember.jit(jnp.polymul)(a, b), np.convolve(a, b), dtype)
    a, b = np.concatenate([[3], a[1:]]).astype(dtype), np.concatenate([[-2], b[1:]]).astype(dtype)
    _close(jnp.polymul(a, b), np.polymul(a, b), dtype)
    _close(ember.jit(jnp.polyadd)(a, b), np.polyadd(a, b), dtype)
    assert jnp.polymul(a, b).dtype == dtype


def test_polymul_trim_and_polydiv():
    _close(jnp.polymul(jnp.asarray([0, 0, 1, 2]), jnp.asarray([0, 3]), trim_leading_zeros=True),
           np.polymul([1, 2], [3]), np.float64)
    for u, v in (([1.0, 2, 3, 4], [2.0, 1]), ([1.0, -3, 0, 2, 5], [1.0, 1, 1]), ([2.0, 1], [1.0, 2, 3]),
                 ([4.0, 2], [2.0])):
        q, r = jnp.polydiv(jnp.asarray(u), jnp.asarray(v))
        qn, rn = np.polydiv(u, v)
        _close(q, qn, np.float32)
        _close(np.asarray(r)[-len(rn):], rn, np.float32)
        np.testing.assert_allclose(np.asarray(r)[:-len(rn)], 0, atol=1e-5)
    q, r = jnp.polydiv(np.array([1.0, 3, 2]), np.array([1.0, 1]), trim_leading_zeros=True)
    _close(q, [1.0, 2.0], np.float64)
    _close(r, [0.0], np.float64)
    q, r = ember.jit(jnp.polydiv)(np.array([1.0, 2, 3, 4]), np.array([2.0, 1]))
    _close(q, np.polydiv([1.0, 2, 3, 4], [2.0, 1])[0], np.float64)


@pytest.mark.parametrize("dtype", DTYPES)
def test_polyder_polyint(dtype):
    p = _coef(5, dtype)
    for m in (0, 1, 2, 6):
        _close(jnp.polyder(p, m), np.polyder(p, m), dtype)
    assert jnp.polyder(p).dtype == dtype
    ftol = np.float32 if dtype != np.float64 else np.float64
    for m, k in ((1, None), (2, None), (2, [1.0, -2.0]), (3, 0.5), (0, None)):
        _close(jnp.polyint(p, m, k), np.polyint(p, m, k), ftol)
    _close(ember.jit(lambda c: jnp.polyint(jnp.polyder(c, 1), 1))(p), np.polyint(np.polyder(p, 1), 1), ftol)
    with pytest.raises(ValueError):
        jnp.polyder(p, -1)
    with pytest.raises(ValueError):
        jnp.polyint(p, 2, [1.0, 2.0, 3.0])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,N,increasing", [(4, None, False), (4, 6, False), (3, 2, True), (5, 1, True),
                                            (3, 0, False), (0, 3, False)])
def test_vander(dtype, n, N, increasing):
    x = _coef(n, dtype)
    ref = np.vander(x, N, increasing)
    _close(jnp.vander(x, N, increasing), ref, dtype)
    assert jnp.vander(x, N, increasing).dtype == dtype
    _close(ember.jit(lambda v: jnp.vander(v, N, increasing))(x), ref, dtype)
    with pytest.raises(ShapeError):
        jnp.vander(np.ones((2, 2)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("deg", [0, 1, 3])
def test_polyfit(dtype, deg):
    x = np.linspace(-1, 2, 15).astype(dtype)
    y = (np.polyval(rng.normal(size=deg + 1), x) + 0.05 * rng.normal(size=15)).astype(dtype)
    tol = dict(rtol=1e-3, atol=1e-3) if dtype == np.float32 else dict(rtol=1e-8, atol=1e-9)
    ref = np.polyfit(x, y, deg)
    np.testing.assert_allclose(jnp.polyfit(x, y, deg), ref, **tol)
    np.testing.assert_allclose(ember.jit(lambda a, b: jnp.polyfit(a, b, deg))(x, y), ref, **tol)
    w = rng.random(15).astype(dtype) + 0.5
    np.testing.assert_allclose(jnp.polyfit(x, y, deg, w=w), np.polyfit(x, y, deg, w=w), **tol)
    Y = np.stack([y, 2 * y - 1], 1)
    np.testing.assert_allclose(jnp.polyfit(x, Y, deg), np.polyfit(x, Y, deg), **tol)
    c, V = jnp.polyfit(x, y, deg, cov=True)
    cn, Vn = np.polyfit(x, y, deg, cov=True)
    np.testing.assert_allclose(c, cn, **tol)
    np.testing.assert_allclose(V, Vn, rtol=tol["rtol"] * 10, atol=tol["atol"])
    c, V = jnp.polyfit(x, Y, deg, cov="unscaled", w=w)
    cn, Vn = np.polyfit(x, Y, deg, cov="unscaled", w=w)
    np.testing.assert_allclose(V, Vn, rtol=tol["rtol"] * 10, atol=tol["atol"])
    assert V.shape == (deg + 1, deg + 1, 1)  # as NumPy for a 2-D y with cov="unscaled"


def test_polyfit_exact_grad_and_errors():
    x = np.arange(6.0)
    y = 2 * x ** 2 - 3 * x + 1
    np.testing.assert_allclose(jnp.polyfit(x, y, 2), [2.0, -3.0, 1.0], atol=1e-10)
    # the fit is linear in y: d(sum of coefficients)/dy = sum of the rows of the pseudo-inverse
    g = ember.grad(lambda v: jnp.polyfit(x, v, 1).sum())(y)
    pinv = np.linalg.pinv(np.vander(x, 2))
    np.testing.assert_allclose(g, pinv.sum(0), atol=1e-10)
    with pytest.raises(ValueError):
        jnp.polyfit(x, y, -1)
    with pytest.raises(TypeError):
        jnp.polyfit(np.ones((2, 2)), y, 1)
    with pytest.raises(TypeError):
        jnp.polyfit(x, y[:3], 1)


def test_polyfit_full():
    x = np.linspace(0, 1, 10)
    y = x ** 2
    got = jnp.polyfit(x, y, 2, full=True)
    ref = np.polyfit(x, y, 2, full=True)
    np.testing.assert_allclose(got[0], ref[0], atol=1e-8)
    np.testing.assert_allclose(got[3], ref[3], rtol=1e-8)


def test_poly_and_roots():
    np.testing.assert_allclose(jnp.poly(jnp.asarray([1.0, 2.0, 3.0])), np.poly([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(jnp.poly(np.array([0.5])), np.poly([0.5]))
    np.testing.assert_allclose(ember.jit(jnp.poly)(np.array([1.0, -1.0])), np.poly([1.0, -1.0]))
    for p in ([1.0, -3.0, 2.0], [0.0, 1.0, -6.0, 11.0, -6.0], [1.0, 0.0, 0.0], [2.0, 0.0, 1.0]):
        got = np.asarray(jnp.roots(jnp.asarray(p)))
        np.testing.assert_allclose(np.sort_complex(got), np.sort_complex(np.roots(p)), atol=1e-6)
