"""Collectives over a named vmap axis (``lax.psum`` ...) against their NumPy definitions, under
jit, grad (against finite differences) and nested vmaps, integer dtypes bit-exact; ``pmap``; and
the same programs compared with JAX when it is installed."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import lax

X = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
XI = np.random.default_rng(1).integers(-50, 50, (3, 5)).astype(np.int32)
N = X.shape[0]


def _v(f, x, **kw):
    return np.asarray(ember.vmap(f, axis_name="i", **kw)(x))


def test_reductions_against_numpy():
    for x in (X, XI):
        n = x.shape[0]
        np.testing.assert_array_equal(_v(lambda v: lax.psum(v, "i"), x), np.broadcast_to(x.sum(0), x.shape))
        np.testing.assert_array_equal(_v(lambda v: lax.pmax(v, "i"), x), np.broadcast_to(x.max(0), x.shape))
        np.testing.assert_array_equal(_v(lambda v: lax.pmin(v, "i"), x), np.broadcast_to(x.min(0), x.shape))
        assert _v(lambda v: lax.psum(v, "i"), x).dtype == x.dtype
        np.testing.assert_array_equal(_v(lambda v: lax.axis_index("i"), x), np.arange(n))
    np.testing.assert_allclose(_v(lambda v: lax.pmean(v, "i"), X), np.broadcast_to(X.mean(0), X.shape),
                               rtol=1e-6)
    # an operand that does not vary along the axis: psum multiplies by the axis size
    np.testing.assert_allclose(_v(lambda v: lax.psum(2.0, "i") + 0 * v, X), np.full(X.shape, 2.0 * N))


def test_gather_scatter_permute_all_to_all_against_numpy():
    got = _v(lambda v: lax.all_gather(v, "i"), X)
    np.testing.assert_array_equal(got, np.broadcast_to(X, (N, *X.shape)))
    got = _v(lambda v: lax.all_gather(v, "i", axis=1), X)
    np.testing.assert_array_equal(got[0], X.T)
    got = _v(lambda v: lax.all_gather(v, "i", tiled=True), X)
    np.testing.assert_array_equal(got[2], X.reshape(-1))
    x8 = np.arange(4 * 8, dtype=np.float32).reshape(4, 8)
    got = _v(lambda v: lax.psum_scatter(v, "i", tiled=True), x8)
    np.testing.assert_array_equal(got, x8.sum(0).reshape(4, 2))
    perm = [(0, 1), (1, 2), (2, 0)]  # member 3 receives nothing: zeros
    got = _v(lambda v: lax.ppermute(v, "i", perm), X)
    want = np.zeros_like(X)
    for i, j in perm:
        want[j] = X[i]
    np.testing.assert_array_equal(got, want)
    got = _v(lambda v: lax.all_to_all(v, "i", 0, 0, tiled=True), x8)
    chunks = x8.reshape(4, 4, 2)  # [member i, chunk j, 2]
    np.testing.assert_array_equal(got, np.stack([chunks[:, j].reshape(-1) for j in range(4)]))


def test_under_jit_and_nested_vmaps():
    f = ember.jit(ember.vmap(lambda v: v / lax.psum(v * v, "i") ** 0.5, axis_name="i"))
    np.testing.assert_allclose(f(X), X / np.sqrt((X * X).sum(0)), rtol=1e-5)
    x3 = np.random.default_rng(2).standard_normal((2, 3, 5)).astype(np.float32)
    g = ember.vmap(ember.vmap(lambda v: lax.psum(v, "a") - lax.pmax(v, "b"), axis_name="b"), axis_name="a")
    want = x3.sum(0, keepdims=True) - x3.max(1, keepdims=True)
    np.testing.assert_allclose(g(x3), want, rtol=1e-5)


def test_grad_of_psum_programs_against_finite_differences():
    def loss(x):
        y = ember.vmap(lambda v: ember.numpy.tanh(v) * lax.psum(v, "i") + lax.pmax(v, "i"), axis_name="i")(x)
        return (y * y).sum()

    g = np.asarray(ember.grad(loss)(X.astype(np.float64)))
    x64, eps = X.astype(np.float64), 1e-6
    fd = np.zeros_like(x64)
    for idx in np.ndindex(*x64.shape):
        d = np.zeros_like(x64)
        d[idx] = eps
        fd[idx] = (float(loss(x64 + d)) - float(loss(x64 - d))) / (2 * eps)
    np.testing.assert_allclose(g, fd, rtol=1e-4, atol=1e-6)
    # grad inside the mapped function: the transpose of psum is psum
    inner = ember.vmap(ember.grad(lambda v: (lax.psum(v, "i") ** 2).sum()), axis_name="i")(X)
    np.testing.assert_allclose(inner, np.broadcast_to(2 * N * X.sum(0), X.shape), rtol=1e-5)


def test_pmap_and_unbound_names():
    out = ember.pmap(lambda v: v - lax.pmean(v, "d"), axis_name="d")(X)
    np.testing.assert_allclose(out, X - X.mean(0), rtol=1e-5, atol=1e-6)
    out = ember.pmap(lambda v, k: v * k + lax.axis_index("d"), axis_name="d",
                     static_broadcasted_argnums=1)(X, 2.0)
    np.testing.assert_allclose(out, X * 2 + np.arange(N)[:, None], rtol=1e-6)
    with pytest.raises(NameError, match="unbound axis name: 'nope'"):
        ember.vmap(lambda v: lax.psum(v, "nope"), axis_name="i")(X)


def test_same_numbers_as_jax():
    jax = pytest.importorskip("jax", reason="comparison with JAX's collectives needs jax")
    jl = jax.lax
    progs = [
        (lambda L: lambda v: L.psum(v * 2, "i") - L.pmean(v, "i")),
        (lambda L: lambda v: L.all_gather(v, "i", axis=1) * L.axis_index("i")),
        (lambda L: lambda v: L.ppermute(v, "i", [(0, 3), (3, 0), (1, 2), (2, 1)])),
        (lambda L: lambda v: L.pmax(v, "i") + L.pmin(v, "i")),
    ]
    for make in progs:
        want = np.asarray(jax.vmap(make(jl), axis_name="i")(X))
        got = np.asarray(ember.vmap(make(lax), axis_name="i")(X))
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
