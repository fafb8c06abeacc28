"""``ensure_shape``: an identity that restates symbolic sizes, checked at trace time where the
sizes differ for every binding and each time a call binds its axes otherwise."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember._src.gpu import webgpu
from ember._src.prims.movement import ensure_shape
from ember.errors import ShapeError


def even_rows(x):
    """``x`` (n rows) restated as ``2 * (n // 2)`` rows: equal exactly when n is even."""
    n = x.shape[0]
    return ensure_shape(x, (n // 2 * 2, x.shape[1]), "rows come in pairs")


def pairs(x):
    y = even_rows(x)
    return jnp.reshape(y, (y.shape[0] // 2, 2, y.shape[1])).sum(1)  # provable only after restating


_NO_WEBGPU = webgpu.unavailable_reason()


@pytest.mark.parametrize("backend", [
    "native", "numpy",
    pytest.param("webgpu", marks=pytest.mark.skipif(_NO_WEBGPU is not None,
                                                    reason=f"no WebGPU adapter: {_NO_WEBGPU}"))])
def test_restated_sizes_run_and_a_binding_that_breaks_them_raises(backend):
    f = ember.jit(pairs, dynamic_axes={"x": ("n", None)}, backend=backend)
    for n in (2, 6, 10):
        x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
        np.testing.assert_array_equal(np.asarray(f(x)), x[0::2] + x[1::2])
    with pytest.raises(ShapeError, match=r"binding \{n: 5\}.*rows come in pairs.*axis 0 is 5, not 4"):
        f(np.zeros((5, 3), np.float32))


def test_sizes_that_always_differ_raise_at_trace_time():
    with pytest.raises(ShapeError, match="axis 0 is n, not 1 \\+ n"):
        ember.jit(lambda x: ensure_shape(x, (x.shape[0] + 1,)), dynamic_axes={"x": ("n",)})(np.zeros(3))
    with pytest.raises(ShapeError, match="rank 1"):
        ember.jit(lambda x: ensure_shape(x, (x.shape[0], 1)), dynamic_axes={"x": ("n",)})(np.zeros(3))
    x = jnp.zeros(3)
    assert ensure_shape(x, (3,)) is x
    with pytest.raises(ShapeError, match="axis 0 is 3, not 4"):
        ensure_shape(x, (4,))


def test_grad_vmap_and_jvp_pass_through():
    def loss(x):
        return (pairs(x) ** 2).sum()
    x = np.random.default_rng(0).standard_normal((6, 3)).astype(np.float32)
    g = np.asarray(ember.jit(ember.grad(loss), dynamic_axes={"x": ("n", None)})(x))
    s = x[0::2] + x[1::2]
    want = np.repeat(2 * s, 2, axis=0)  # d/dx_i of sum (x_2k + x_2k+1)^2
    np.testing.assert_allclose(g, want, rtol=1e-6)
    xs = np.stack([x, 2 * x])
    v = np.asarray(ember.jit(ember.vmap(pairs), dynamic_axes={"x": (None, "n", None)})(xs))
    np.testing.assert_allclose(v, np.stack([s, 2 * s]), rtol=1e-6)
    _, t = ember.jvp(pairs, (x,), (np.ones_like(x),))
    np.testing.assert_allclose(np.asarray(t), np.full((3, 3), 2.0), rtol=0)
    with pytest.raises(ShapeError, match="rows come in pairs"):
        ember.jit(ember.grad(loss), dynamic_axes={"x": ("n", None)})(x[:5])
