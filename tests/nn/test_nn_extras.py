"""ember.nn additions (mish, squareplus, sparse_plus, normalize) and ember.lax extras."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ember
import ember.nn as nn
import ember.numpy as jnp
from ember import lax
from ember.errors import ShapeError
from ember.test_util import check_grads

SHAPES = [(), (0,), (7,), (2, 3)]


def _x(shape, dtype=np.float32, seed=0):
    return (np.random.default_rng(seed).standard_normal(shape) * 2).astype(dtype)


def _softplus(x):
    return np.logaddexp(x, 0)


REF = {
    "mish": lambda x: x * np.tanh(_softplus(x)),
    "squareplus": lambda x: (x + np.sqrt(x * x + 4)) / 2,
    "sparse_plus": lambda x: np.where(x <= -1, 0, np.where(x >= 1, x, (x + 1) ** 2 / 4)),
}


@pytest.mark.parametrize("name", sorted(REF))
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_activation_values(name, shape, dtype):
    x = _x(shape, dtype)
    want = REF[name](x.astype(np.float64))
    got = getattr(nn, name)(x)
    assert got.dtype == dtype and got.shape == x.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ember.jit(getattr(nn, name))(x), got, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", sorted(REF))
def test_activation_grads(name):
    x = np.array([-2.3, -0.4, 0.3, 1.7, 3.1])  # away from sparse_plus's knots
    check_grads(getattr(nn, name), (x,), order=2)


def test_activation_specials():
    np.testing.assert_allclose(nn.squareplus(np.array([0.0, 1.0]), b=0), [0.0, 1.0])
    np.testing.assert_array_equal(nn.sparse_plus(np.array([-1.0, 1.0, -5.0])), [0.0, 1.0, 0.0])
    assert nn.mish(3).dtype == np.float32
    assert nn.hard_swish is nn.hard_silu


def test_normalize_is_deprecated_standardize():
    x = _x((3, 4))
    with pytest.warns(DeprecationWarning):
        got = nn.normalize(x, axis=-1)
    np.testing.assert_allclose(got, nn.standardize(x, axis=-1), rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# lax extras
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
def test_clamp_square(shape):
    x = _x(shape)
    np.testing.assert_array_equal(lax.clamp(-0.5, x, 0.7), np.clip(x, -0.5, 0.7))
    np.testing.assert_array_equal(ember.jit(lambda v: lax.clamp(np.float32(-0.5), v, np.float32(0.7)))(x),
                                  np.clip(x, -0.5, 0.7))
    lo, hi = _x(shape, seed=1) - 1, _x(shape, seed=2) + 1
    np.testing.assert_array_equal(lax.clamp(lo, x, hi), np.minimum(np.maximum(x, lo), hi))
    np.testing.assert_array_equal(lax.square(x), x * x)
    np.testing.assert_array_equal(lax.square(np.arange(4, dtype=np.int32)), np.arange(4) ** 2)
    with pytest.raises(ShapeError):
        lax.clamp(np.zeros(3, np.float32), np.zeros(4, np.float32), 1.0)


def test_clamp_square_grads():
    x = np.array([-2.0, -0.3, 0.2, 0.9, 2.0])
    check_grads(lambda v: lax.clamp(-1.0, v, 1.0), (x,), order=1)
    check_grads(lax.square, (x,), order=2)


def test_dynamic_in_dim():
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    np.testing.assert_array_equal(lax.dynamic_slice_in_dim(x, 2, 3, axis=1), x[:, 2:5])
    np.testing.assert_array_equal(lax.dynamic_slice_in_dim(x, 5, 3, axis=1), x[:, 3:6])  # clamped
    np.testing.assert_array_equal(lax.dynamic_index_in_dim(x, 1, 0), x[1:2])
    np.testing.assert_array_equal(lax.dynamic_index_in_dim(x, 1, -1, keepdims=False), x[:, 1])
    f = ember.jit(lambda v, i: lax.dynamic_slice_in_dim(v, i, 2, 0))
    np.testing.assert_array_equal(f(x, np.int32(1)), x[1:3])
    want = x.copy()
    want[:, 4:6] = -1
    upd = -np.ones((4, 2), np.float32)
    np.testing.assert_array_equal(lax.dynamic_update_slice_in_dim(x, upd, 4, 1), want)
    g = ember.jit(lambda v, i: lax.dynamic_update_slice_in_dim(v, jnp.zeros((1, 6)), i, 0))
    w2 = x.copy()
    w2[3] = 0
    np.testing.assert_array_equal(g(x, np.int32(3)), w2)
    check_grads(lambda v: lax.dynamic_slice_in_dim(v, 1, 2, 1), (x.astype(np.float64),), order=1)


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("k", [0, 1, 3, 6])
def test_top_k(dtype, k):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 4, size=(3, 6)).astype(dtype)  # many ties
    vals, idx = lax.top_k(x, k)
    order = np.argsort(-x.astype(np.float64), axis=-1, kind="stable")[:, :k]
    np.testing.assert_array_equal(idx, order)
    np.testing.assert_array_equal(vals, np.take_along_axis(x, order, -1))
    assert idx.dtype == np.int32 and vals.dtype == dtype
    jv, ji = ember.jit(lambda v: lax.top_k(v, k))(x)
    np.testing.assert_array_equal(jv, vals)
    np.testing.assert_array_equal(ji, idx)


def test_top_k_nan_and_grad():
    v, i = lax.top_k(np.array([1.0, np.nan, 3.0], np.float32), 2)
    assert np.isnan(v[0]) and int(i[0]) == 1 and float(v[1]) == 3.0
    check_grads(lambda v: lax.top_k(v, 2)[0], (np.array([0.3, 2.0, -1.0, 1.5]),), order=1)
    with pytest.raises(ValueError):
        lax.top_k(np.ones(3, np.float32), 4)


def test_sort_key_val():
    k = np.array([[3, 1, 2], [0, 5, 4]], np.int32)
    v = np.array([[10.0, 20.0, 30.0], [1.0, 2.0, 3.0]], np.float32)
    sk, sv = lax.sort_key_val(k, v)
    o = np.argsort(k, -1, kind="stable")
    np.testing.assert_array_equal(sk, np.take_along_axis(k, o, -1))
    np.testing.assert_array_equal(sv, np.take_along_axis(v, o, -1))
    sk0, sv0 = ember.jit(lambda a, b: lax.sort_key_val(a, b, dimension=0))(k, v)
    o0 = np.argsort(k, 0, kind="stable")
    np.testing.assert_array_equal(sv0, np.take_along_axis(v, o0, 0))


def test_scatter_add():
    x = np.zeros((3, 4), np.float32)
    idx = np.array([1, 1, 3, 7], np.int32)
    upd = np.arange(12, dtype=np.float32).reshape(3, 4)
    want = x.copy()
    for j, i in enumerate(idx):
        if i < 4:
            want[:, i] += upd[:, j]
    np.testing.assert_array_equal(lax.scatter_add(x, idx, upd, axis=1), want)
    np.testing.assert_array_equal(ember.jit(lambda a, u: lax.scatter_add(a, idx, u, axis=1))(x, upd), want)
    check_grads(lambda a, u: lax.scatter_add(a, idx, u, axis=1), (x.astype(np.float64),
                                                                   upd.astype(np.float64)), order=1)


@pytest.mark.parametrize("shape,axis", [((7,), 0), ((3, 5), 1), ((4, 3), 0), ((0,), 0), ((1,), 0)])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumlogsumexp(shape, axis, reverse):
    x = _x(shape, np.float64) * 100  # wide range: a naive shift would underflow
    want = np.logaddexp.accumulate(np.flip(x, axis) if reverse else x, axis=axis)
    want = np.flip(want, axis) if reverse else want
    got = lax.cumlogsumexp(x, axis=axis, reverse=reverse)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_allclose(ember.jit(lambda v: lax.cumlogsumexp(v, axis, reverse))(x), want, rtol=1e-12)


def test_cumlogsumexp_grad():
    check_grads(lambda v: lax.cumlogsumexp(v, 0), (np.array([0.3, -1.0, 2.0, 0.5, 0.1]),), order=1)


def test_reduce_precision():
    y = (np.random.default_rng(1).standard_normal(2000) * 100).astype(np.float32)
    np.testing.assert_array_equal(lax.reduce_precision(y, 5, 10), y.astype(np.float16).astype(np.float32))
    np.testing.assert_array_equal(lax.reduce_precision(y, 8, 7),
                                  y.astype(ml_dtypes.bfloat16).astype(np.float32))
    np.testing.assert_array_equal(ember.jit(lambda v: lax.reduce_precision(v, 8, 7))(y),
                                  y.astype(ml_dtypes.bfloat16).astype(np.float32))
    d = y.astype(np.float64)
    np.testing.assert_array_equal(lax.reduce_precision(d, 8, 23), d.astype(np.float32).astype(np.float64))
    s = lax.reduce_precision(np.array([1e6, -1e6, np.nan, np.inf, 1e-8, -1e-8], np.float32), 5, 10)
    np.testing.assert_array_equal(np.signbit(s), [False, True, False, False, False, True])
    np.testing.assert_array_equal(s[[0, 1, 3, 4]], [np.inf, -np.inf, np.inf, 0.0])
    assert np.isnan(s[2])
    np.testing.assert_array_equal(lax.reduce_precision(y, 8, 23), y)
    assert float(ember.grad(lambda v: lax.reduce_precision(v * 3.0, 5, 10))(1.0)) == 3.0


def test_bitcast_exported():
    x = np.array([1.0, -2.0], np.float32)
    np.testing.assert_array_equal(lax.bitcast_convert_type(x, np.uint32), x.view(np.uint32))
