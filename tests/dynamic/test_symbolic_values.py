"""Symbolic sizes used as values: arithmetic with x.shape[i] and full_like under dynamic axes."""

import numpy as np

import ember
import ember.numpy as jnp
from ember import lax


def test_shape_entries_as_operands_and_fill_values():
    f = ember.jit(lambda x: x / x.shape[0] + x * x.shape[1] + jnp.full_like(x, x.shape[0])
                  + lax.full_like(x, x.shape[0]), dynamic_axes=["b, _"])
    for n in (3, 4, 7):
        x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
        np.testing.assert_allclose(f(x), x / n + x * 2 + 2 * n, rtol=1e-6)
    assert f.cache_info()["compiles"] == 1 and f.cache_info()["specializations"] == 3
