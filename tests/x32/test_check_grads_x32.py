"""``check_grads`` in the default 32-bit mode: JAX's per-dtype tolerances, so the autodiff
cookbook's own call passes (it failed with a float64 tolerance applied to float32 values)."""

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember.test_util import DEFAULT_GRADIENT_TOLERANCE, check_grads

jax = pytest.importorskip("jax", reason="the reference is JAX")
jax_test_util = pytest.importorskip("jax.test_util", reason="the reference is JAX")

INPUTS = np.array([[0.52, 1.12, 0.77], [0.88, -1.08, 0.15], [0.52, 0.06, -1.30], [0.74, -2.49, 1.39]],
                  np.float32)
TARGETS = np.array([True, True, False, True])


def _loss(m):
    def loss(W, b):  # noqa: N803 - the cookbook's names
        preds = 0.5 * (m.tanh((m.dot(INPUTS, W) + b) / 2) + 1)
        label_probs = preds * TARGETS + (1 - preds) * (1 - TARGETS)
        return -m.sum(m.log(label_probs))
    return loss


def test_cookbook_check_grads_float32():
    W = np.array([0.3, -1.2, 0.8], np.float32)  # noqa: N806
    b = np.float32(-0.4)
    assert ember.grad(_loss(jnp))(W, b).dtype == np.float32
    check_grads(_loss(jnp), (W, b), order=2)
    jax_test_util.check_grads(_loss(jax.numpy), (W, b), order=1)  # the same call passes in JAX
    # (order 2 passes in JAX too, but takes JAX ~20 s to compile; the tolerances are the same)


def test_default_tolerances_match_jax():
    from jax._src.public_test_util import default_gradient_tolerance
    for dtype, tol in DEFAULT_GRADIENT_TOLERANCE.items():
        assert default_gradient_tolerance[dtype] == tol


def test_tolerance_still_catches_wrong_derivatives():
    wrong = ember.custom_jvp(lambda x: jnp.sin(x))
    wrong.defjvp(lambda p, t: (jnp.sin(p[0]), 1.5 * jnp.cos(p[0]) * t[0]))  # 50% off
    with pytest.raises(AssertionError):
        check_grads(wrong, (np.float32(0.7),), order=1, modes=("fwd",))
    with pytest.raises(AssertionError):
        check_grads(lambda x: jnp.sin(x) * x, (np.float32(0.7),), order=1, atol=1e-9, rtol=1e-9)


def test_random_directions_are_jaxs():
    # a fresh RandomState(0) per check, drawn leaf by leaf as JAX's rand_like: the same tangents
    from jax._src.public_test_util import rand_like

    from ember.test_util import _rand_like

    args = (np.ones((2, 3), np.float32), np.float32(1.0), np.ones(2, np.complex64))
    ours = _rand_like(np.random.RandomState(0), args)
    rs = np.random.RandomState(0)
    theirs = [rand_like(rs, a) for a in args]
    for o, t in zip(ours, theirs):
        np.testing.assert_array_equal(np.asarray(o), np.asarray(t))


def test_cookbook_second_order_call_passes_at_float32():
    # the tutorial's check_grads(loss, (W, b), order=2) on its random data (failed before ember
    # drew JAX's directions and scaled tolerances by size as JAX's check_close)
    key = jax.random.PRNGKey(0)
    key, w_key, b_key = jax.random.split(key, 3)
    W = np.asarray(jax.random.normal(w_key, (3,)))  # noqa: N806
    b = np.asarray(jax.random.normal(b_key, ()))
    jax_test_util.check_grads(_loss(jax.numpy), (W, b), order=2)
    check_grads(_loss(jnp), (W, b), order=2)
