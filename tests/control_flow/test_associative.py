"""associative_scan against NumPy cumulative functions and sequential references."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember.test_util import check_grads

RNG = np.random.default_rng(5)


@pytest.mark.parametrize("n", [1, 2, 5, 8, 13])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum_cumprod(n, reverse):
    x = RNG.standard_normal((n, 3))
    ref_sum = np.cumsum(x[::-1], 0)[::-1] if reverse else np.cumsum(x, 0)
    np.testing.assert_allclose(lax.associative_scan(jnp.add, x, reverse=reverse), ref_sum, rtol=1e-12)
    ref_prod = np.cumprod(x[::-1], 0)[::-1] if reverse else np.cumprod(x, 0)
    np.testing.assert_allclose(lax.associative_scan(jnp.multiply, x, reverse=reverse), ref_prod, rtol=1e-12)


def test_axis_and_pytree_linear_recurrence():
    """A first-order linear recurrence h_t = a_t h_{t-1} + b_t as an associative scan of pairs."""
    a, b = RNG.uniform(0.5, 1.0, (2, 9)), RNG.standard_normal((2, 9))

    def combine(l, r):
        return (l[0] * r[0], r[0] * l[1] + r[1])

    _, h = lax.associative_scan(combine, (a, b), axis=1)
    ref = np.zeros_like(b)
    for t in range(9):
        ref[:, t] = a[:, t] * (ref[:, t - 1] if t else 0.0) + b[:, t]
    np.testing.assert_allclose(h, ref, rtol=1e-12)
    np.testing.assert_allclose(lax.associative_scan(jnp.maximum, b, axis=-1), np.maximum.accumulate(b, 1))
    np.testing.assert_array_equal(lax.associative_scan(jnp.logical_or, b > 1.0, axis=1),
                                  np.logical_or.accumulate(b > 1.0, 1))


def test_grad_jit_vmap():
    x = RNG.standard_normal(7)
    check_grads(lambda x: lax.associative_scan(jnp.multiply, x), (x,), order=2)
    np.testing.assert_allclose(ember.jit(lambda x: lax.associative_scan(jnp.add, x))(x), np.cumsum(x),
                               rtol=1e-12)
    xb = RNG.standard_normal((3, 7))
    np.testing.assert_allclose(ember.vmap(lambda x: lax.associative_scan(jnp.add, x))(xb), np.cumsum(xb, 1),
                               rtol=1e-12)
