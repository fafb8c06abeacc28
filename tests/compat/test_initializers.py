"""ember.nn.initializers: exact formulas over ember.random, statistics, and JAX (same random scheme)."""

import math

import numpy as np
import pytest
from scipy import stats

import ember
import ember.numpy as jnp
from ember.nn import initializers as init

KEY = ember.random.PRNGKey(3)


def test_constant_family_and_simple_draws():
    np.testing.assert_array_equal(init.zeros(KEY, (2, 3)), np.zeros((2, 3), np.float32))
    assert init.ones(KEY, (2,), jnp.float64).dtype == np.float64
    np.testing.assert_array_equal(init.constant(-1.5)(KEY, (4,)), np.full(4, -1.5, np.float32))
    # exact formulas over ember.random
    z = np.asarray(ember.random.normal(KEY, (5, 4)))
    np.testing.assert_allclose(init.normal(0.3)(KEY, (5, 4)), 0.3 * z, rtol=1e-6)
    np.testing.assert_allclose(init.uniform(2.0)(KEY, (7,)), 2 * np.asarray(ember.random.uniform(KEY, (7,))),
                               rtol=1e-6)
    t = np.asarray(init.truncated_normal(0.5, lower=-1.0, upper=1.0)(KEY, (1000,)))
    assert np.all(np.abs(t) <= 0.5 + 1e-6)


@pytest.mark.parametrize("name,scale,mode,dist", [
    ("glorot_uniform", 1.0, "fan_avg", "uniform"), ("glorot_normal", 1.0, "fan_avg", "truncated_normal"),
    ("lecun_uniform", 1.0, "fan_in", "uniform"), ("lecun_normal", 1.0, "fan_in", "truncated_normal"),
    ("he_uniform", 2.0, "fan_in", "uniform"), ("he_normal", 2.0, "fan_in", "truncated_normal"),
    ("xavier_uniform", 1.0, "fan_avg", "uniform"), ("kaiming_normal", 2.0, "fan_in", "truncated_normal")])
def test_named_variance_scaling_statistics(name, scale, mode, dist):
    shape = (3, 3, 40, 60)  # a conv kernel HWIO: receptive field 9
    fan_in, fan_out = 9 * 40, 9 * 60
    n = {"fan_in": fan_in, "fan_avg": (fan_in + fan_out) / 2}[mode]
    w = np.asarray(getattr(init, name)()(KEY, shape), np.float64)
    assert w.shape == shape and w.dtype == np.float64
    want_std = math.sqrt(scale / n)
    assert abs(w.std() / want_std - 1) < 0.03
    assert abs(w.mean()) < 4 * want_std / math.sqrt(w.size)
    if dist == "uniform":
        assert np.abs(w).max() <= math.sqrt(3) * want_std * (1 + 1e-6)
        assert stats.kstest(w.ravel() / (math.sqrt(3) * want_std), stats.uniform(-1, 2).cdf).pvalue > 1e-3
    else:  # truncated at two (pre-scaling) standard deviations
        assert np.abs(w).max() <= 2 * want_std / 0.87962566103423978 * (1 + 1e-6)


def test_variance_scaling_modes_exact():
    shape = (6, 10)
    z = np.asarray(ember.random.normal(KEY, shape))
    for mode, n in [("fan_in", 6), ("fan_out", 10), ("fan_avg", 8), ("fan_geo_avg", math.sqrt(60))]:
        w = init.variance_scaling(2.0, mode, "normal")(KEY, shape)
        np.testing.assert_allclose(w, z * math.sqrt(2.0 / n), rtol=1e-5)
    # batch axes do not count; in/out axes may be sequences
    vs = init.variance_scaling(1.0, "fan_in", "normal", in_axis=(1, 2), out_axis=3, batch_axis=0)
    z = np.asarray(ember.random.normal(KEY, (5, 2, 3, 4)))
    np.testing.assert_allclose(vs(KEY, (5, 2, 3, 4)), z / math.sqrt(6), rtol=1e-5)
    with pytest.raises(ValueError, match="mode"):
        init.variance_scaling(1.0, "fan_sideways", "normal")
    with pytest.raises(ValueError, match="distribution"):
        init.variance_scaling(1.0, "fan_in", "cauchy")
    c = np.asarray(init.variance_scaling(1.0, "fan_in", "uniform", dtype=jnp.complex64)(KEY, (200, 300)))
    assert c.dtype == np.complex64 and np.abs(c).max() <= math.sqrt(1 / 200) * (1 + 1e-5)


@pytest.mark.parametrize("shape,axis", [((5, 3), -1), ((3, 5), -1), ((2, 3, 8), -1), ((4, 6), 0)])
def test_orthogonal(shape, axis):
    w = np.asarray(init.orthogonal(scale=1.5, column_axis=axis)(KEY, shape), np.float64)
    assert w.shape == shape
    cols = np.moveaxis(w, axis, -1).reshape(-1, shape[axis])
    gram = cols.T @ cols if cols.shape[0] >= cols.shape[1] else cols @ cols.T
    np.testing.assert_allclose(gram, 2.25 * np.eye(gram.shape[0]), atol=1e-5)


def test_delta_orthogonal():
    w = np.array(init.delta_orthogonal()(KEY, (3, 3, 4, 6)))
    center = w[1, 1]
    np.testing.assert_allclose(center @ center.T, np.eye(4), atol=1e-5)
    w[1, 1] = 0
    assert not w.any()
    with pytest.raises(ValueError, match="3D, 4D or 5D"):
        init.delta_orthogonal()(KEY, (4, 4))
    with pytest.raises(ValueError, match="fan_in"):
        init.delta_orthogonal()(KEY, (3, 6, 4))


def test_jit_and_vmap_of_initializers():
    f = ember.jit(lambda k: init.he_normal()(k, (4, 5)))
    np.testing.assert_allclose(f(KEY), init.he_normal()(KEY, (4, 5)), rtol=1e-6)
    keys = ember.random.split(KEY, 3)
    ws = ember.vmap(lambda k: init.glorot_uniform()(k, (4, 5)))(keys)
    np.testing.assert_allclose(ws[1], init.glorot_uniform()(keys[1], (4, 5)), rtol=1e-6)


def _jax_same_scheme(jax):
    """JAX's threefry setting that gives ember.random's numbers, or None."""
    ours = np.asarray(ember.random.normal(KEY, (4,)))
    for flag in (False, True):
        with jax.threefry_partitionable(flag):
            if np.allclose(np.asarray(jax.random.normal(jax.random.PRNGKey(3), (4,))), ours, rtol=1e-6):
                return flag
    return None


@pytest.mark.parametrize("name,shape", [("glorot_uniform", (4, 6)), ("he_normal", (3, 3, 2, 5)),
                                        ("lecun_normal", (7, 3)), ("orthogonal", (4, 6)),
                                        ("orthogonal", (6, 4)), ("delta_orthogonal", (3, 2, 4))])
def test_matches_jax(name, shape):
    jax = pytest.importorskip("jax", reason="JAX comparison")
    flag = _jax_same_scheme(jax)
    if flag is None:
        pytest.skip("ember.random and JAX draw different numbers (different threefry scheme)")
    with jax.threefry_partitionable(flag):
        want = np.asarray(getattr(jax.nn.initializers, name)()(jax.random.PRNGKey(3), shape))
    np.testing.assert_allclose(getattr(init, name)()(KEY, shape), want, rtol=1e-4, atol=1e-5)
