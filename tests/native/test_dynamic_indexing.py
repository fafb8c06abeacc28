"""Advanced indexing along a named dynamic axis: ``x[i]``, ``x.at[i].op(v)``, ``take`` on an axis
whose size is symbolic compile once and match NumPy at several sizes; out-of-bounds indices follow
ember's (JAX's) rules -- reads clamp, updates drop -- since the bounds are known only at run time."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp


def _clamped(n: int, i: np.ndarray) -> np.ndarray:
    i = np.where(i < 0, i + n, i)
    return np.clip(i, 0, n - 1)


def test_gather_along_a_dynamic_axis():
    f = ember.jit(lambda x, i: x[i] * 2, dynamic_axes={"x": ("n", None), "i": ("m",)})
    rng = np.random.default_rng(0)
    for n, m in [(9, 4), (5, 7), (17, 1)]:
        x = rng.standard_normal((n, 3)).astype(np.float32)
        i = rng.integers(-n - 3, n + 3, m).astype(np.int32)  # some out of bounds either side
        np.testing.assert_array_equal(np.asarray(f(x, i)), x[_clamped(n, i)] * 2)
    assert f.cache_info()["compiles"] == 1


def test_gather_with_a_constant_index_and_two_axes():
    f = ember.jit(lambda x: x[np.array([0, -1, 2]), np.array([1, 0, -1])],
                  dynamic_axes={"x": ("n", "k")})
    for n, k in [(4, 3), (6, 5)]:
        x = np.arange(n * k, dtype=np.float32).reshape(n, k)
        np.testing.assert_array_equal(np.asarray(f(x)), x[[0, -1, 2], [1, 0, -1]])
    assert f.cache_info()["compiles"] == 1


@pytest.mark.parametrize("op", ["set", "add", "max", "min", "multiply"])
def test_scatter_along_a_dynamic_axis(op):
    f = ember.jit(lambda x, i, u: getattr(x.at[i], op)(u),
                  dynamic_axes={"x": ("n",), "i": ("m",), "u": ("m",)})
    ufunc = {"add": np.add, "max": np.maximum, "min": np.minimum, "multiply": np.multiply}
    for n, idx in [(10, [1, 3, 3, -1, 20, -30]), (7, [6, 0, 2])]:
        x = np.linspace(-2, 2, n).astype(np.float32)
        i = np.array(idx, np.int32)
        u = np.arange(1, len(idx) + 1, dtype=np.float32) / 3
        ref = x.copy()
        keep = (i >= -n) & (i < n)  # out-of-bounds updates are dropped
        if op == "set":
            ref[i[keep]] = u[keep]  # no repeated index among the kept ones with "set" below
            if len(set(np.where(i[keep] < 0, i[keep] + n, i[keep]))) < keep.sum():
                continue
        else:
            ufunc[op].at(ref, i[keep], u[keep])
        np.testing.assert_allclose(np.asarray(f(x, i, u)), ref, rtol=1e-6)
    assert f.cache_info()["compiles"] == 1


def test_take_and_grad_along_a_dynamic_axis():
    f = ember.jit(lambda x, i: jnp.take(x, i, axis=0).sum(), dynamic_axes={"x": ("n",), "i": ("m",)})
    g = ember.jit(ember.grad(lambda x, i: (x[i] ** 2).sum()), dynamic_axes={"x": ("n",), "i": ("m",)})
    for n, idx in [(8, [0, 7, 7, 2]), (5, [4, 1])]:
        x = np.arange(1, n + 1, dtype=np.float32)
        i = np.array(idx, np.int32)
        assert float(f(x, i)) == pytest.approx(x[i].sum())
        ref = np.zeros(n, np.float32)
        np.add.at(ref, i, 2 * x[i])
        np.testing.assert_allclose(np.asarray(g(x, i)), ref)
