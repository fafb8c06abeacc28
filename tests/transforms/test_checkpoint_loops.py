"""checkpoint around control flow: the body's loops keep their own partial-evaluation rules."""

import numpy as np

import ember
import ember.numpy as jnp
from ember import lax


def _f(x):
    return lax.scan(lambda c, _: (jnp.sin(c) * x, None), x, None, length=3)[0]


def test_grad_of_checkpointed_scan_matches_plain_and_finite_differences():
    for x0 in (0.3, 1.0, 2.5):
        g = float(ember.grad(ember.checkpoint(_f))(x0))
        g_plain = float(ember.grad(_f)(x0))
        x = np.float64(x0)
        eps = 1e-6
        fd = (float(_f(x + eps)) - float(_f(x - eps))) / (2 * eps)
        assert abs(g - g_plain) < 1e-5
        assert abs(g - fd) < 1e-3 * max(1.0, abs(fd))


def test_grad_of_checkpointed_cond_under_jit():
    def h(x):
        return lax.cond(x > 0, lambda v: jnp.sin(v) * v, lambda v: v * v, x)

    gj = ember.jit(ember.grad(ember.checkpoint(h)))
    for x in (0.7, -1.2):
        ref = np.cos(x) * x + np.sin(x) if x > 0 else 2 * x
        np.testing.assert_allclose(float(gj(np.float32(x))), ref, rtol=1e-5)
