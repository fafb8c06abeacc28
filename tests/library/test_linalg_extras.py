"""linalg.tensorinv against NumPy (shapes, ind, dtypes, jit, vmap, gradient, errors) and lstsq's exact
agreement with numpy.linalg.lstsq (2-D, as NumPy) in values, shapes and dtypes of all four results."""

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import linalg as la
from ember.errors import ShapeError
from ember.test_util import check_grads

rng = np.random.default_rng(17)


@pytest.mark.parametrize("shape,ind", [((4, 6, 8, 3), 2), ((24, 2, 12), 1), ((2, 3, 6), 2), ((5, 5), 1),
                                       ((2, 2, 2, 2, 2, 2), 3)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
def test_tensorinv_matches_numpy(shape, ind, dtype):
    a = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    a = a.astype(dtype)
    got = jnp.linalg.tensorinv(a, ind)
    want = np.linalg.tensorinv(a, ind)
    assert got.shape == want.shape and got.dtype == dtype
    tol = 1e-3 if dtype == np.float32 else 1e-9
    np.testing.assert_allclose(np.asarray(got), want, rtol=tol, atol=tol)
    # the defining identity
    ident = np.tensordot(np.asarray(got), a, ind)
    n = int(np.prod(shape[ind:]))
    np.testing.assert_allclose(ident.reshape(n, n), np.eye(n), atol=50 * tol)
    assert la.tensorinv is jnp.linalg.tensorinv


def test_tensorinv_jit_vmap_grad_int():
    a = rng.standard_normal((3, 2, 6))
    np.testing.assert_allclose(np.asarray(ember.jit(lambda x: jnp.linalg.tensorinv(x, 2))(a)),
                               np.linalg.tensorinv(a, 2), rtol=1e-9)
    batch = rng.standard_normal((4, 3, 2, 6))
    got = ember.vmap(lambda x: jnp.linalg.tensorinv(x, 2))(batch)
    want = np.stack([np.linalg.tensorinv(b, 2) for b in batch])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-9)
    well_conditioned = rng.standard_normal((6, 2, 3)) + 3 * np.eye(6).reshape(6, 2, 3)
    check_grads(lambda x: jnp.linalg.tensorinv(x, 1), (well_conditioned,), order=1)
    i = np.array([[2, 1], [1, 1]])
    np.testing.assert_allclose(np.asarray(jnp.linalg.tensorinv(i, 1)), np.linalg.tensorinv(i, 1), rtol=1e-6)


def test_tensorinv_errors():
    with pytest.raises(ShapeError, match="square"):
        jnp.linalg.tensorinv(np.ones((2, 3, 4)), 1)
    with pytest.raises(ValueError, match="positive"):
        jnp.linalg.tensorinv(np.ones((2, 2)), 0)


def _lstsq_cases():
    r = np.random.default_rng(3)
    low_rank = r.standard_normal((6, 2)) @ r.standard_normal((2, 4))
    return [
        (r.standard_normal((5, 3)), r.standard_normal(5), None),
        (r.standard_normal((5, 3)), r.standard_normal((5, 2)), None),
        (r.standard_normal((3, 5)), r.standard_normal((3, 2)), None),  # underdetermined: no residuals
        (low_rank, r.standard_normal((6, 2)), None),  # rank deficient: no residuals
        (r.standard_normal((4, 4)), r.standard_normal(4), None),
        (r.standard_normal((5, 3)).astype(np.float32), r.standard_normal(5).astype(np.float32), None),
        (r.standard_normal((5, 3)) + 1j * r.standard_normal((5, 3)), r.standard_normal((5, 2)) + 0j, None),
        (r.standard_normal((5, 3)), r.standard_normal(5), 0.5),
        (np.zeros((0, 3)), np.zeros((0,)), None),
        (np.zeros((3, 0)), np.zeros((3, 2)), None),
    ]


@pytest.mark.parametrize("case", _lstsq_cases(), ids=[f"case{i}" for i in range(10)])
def test_lstsq_matches_numpy_exactly(case):
    a, b, rcond = case
    got = la.lstsq(a, b, rcond=rcond, numpy_resid=True)
    want = np.linalg.lstsq(a, b, rcond=rcond)
    tol = 1e-4 if a.dtype == np.float32 else 1e-10
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


def test_lstsq_is_two_dimensional_like_numpy():
    with pytest.raises(ShapeError):
        la.lstsq(np.ones((2, 3, 3)), np.ones((2, 3)))
    with pytest.raises(np.linalg.LinAlgError):
        np.linalg.lstsq(np.ones((2, 3, 3)), np.ones((2, 3)))
