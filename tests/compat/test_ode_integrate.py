"""odeint against closed forms, SciPy's solve_ivp and JAX; trapezoid against NumPy."""

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember.experimental.ode import odeint
from ember.scipy.integrate import trapezoid


def _decay(y, t, k):
    return -k * y


def test_odeint_closed_form_and_pytree_state():
    t = np.linspace(0.0, 2.0, 6)
    ys = odeint(_decay, jnp.asarray([1.0, 2.0]), t, 0.7)
    np.testing.assert_allclose(ys, np.exp(-0.7 * t)[:, None] * [1.0, 2.0], rtol=1e-5)

    def osc(state, t):  # harmonic oscillator as a dict state
        return {"x": state["v"], "v": -state["x"]}

    out = odeint(osc, {"x": jnp.asarray(1.0), "v": jnp.asarray(0.0)}, t)
    np.testing.assert_allclose(out["x"], np.cos(t), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["v"], -np.sin(t), rtol=1e-5, atol=1e-6)


def test_odeint_against_scipy_nonlinear_float64():
    from scipy.integrate import solve_ivp

    def lv(y, t, a, b):  # Lotka-Volterra
        return jnp.stack([a * y[0] - b * y[0] * y[1], b * y[0] * y[1] - y[1]])

    t = np.linspace(0.0, 5.0, 11)
    ys = odeint(lv, jnp.asarray(np.array([1.0, 0.5])), jnp.asarray(t), 1.1, 0.6, rtol=1e-10, atol=1e-10)
    rhs = lambda tt, y: [1.1 * y[0] - 0.6 * y[0] * y[1], 0.6 * y[0] * y[1] - y[1]]  # noqa: E731
    ref = solve_ivp(rhs, (0, 5), [1.0, 0.5], t_eval=t, rtol=1e-12, atol=1e-12).y.T
    np.testing.assert_allclose(ys, ref, rtol=1e-7)


def test_odeint_adjoint_gradients():
    t = jnp.linspace(0.0, 2.0, 5)
    g_k = ember.grad(lambda k: odeint(_decay, jnp.asarray(1.0), t, k)[-1])(0.7)
    np.testing.assert_allclose(g_k, -2.0 * np.exp(-1.4), rtol=1e-5)  # d/dk exp(-k T) = -T exp(-k T)
    g_y0 = ember.grad(lambda y0: odeint(_decay, y0, t, 0.7)[-1])(1.0)
    np.testing.assert_allclose(g_y0, np.exp(-1.4), rtol=1e-5)
    g_t = ember.grad(lambda tt: jnp.sum(odeint(_decay, jnp.asarray(1.0), tt, 0.7)))(t)
    tn = np.asarray(t, np.float64)
    want = -0.7 * np.exp(-0.7 * tn)  # d y(t_i) / d t_i, and d/d t_0 of the sum
    want[0] = 0.7 * np.sum(np.exp(-0.7 * tn[1:]))
    np.testing.assert_allclose(g_t, want, rtol=1e-4)
    np.testing.assert_allclose(ember.jit(lambda k: odeint(_decay, jnp.asarray(1.0), t, k))(0.7),
                               np.exp(-0.7 * tn), rtol=1e-5)


def test_odeint_grad_matches_jax():
    jax = pytest.importorskip("jax", reason="JAX comparison")
    from jax.experimental.ode import odeint as jodeint

    def pend(y, t, b, c):
        return jnp.stack([y[1], -b * y[1] - c * jnp.sin(y[0])])

    def jpend(y, t, b, c):
        return jax.numpy.stack([y[1], -b * y[1] - c * jax.numpy.sin(y[0])])

    y0, t = np.array([2.5, 0.0], np.float32), np.linspace(0, 3.0, 7).astype(np.float32)
    ours = ember.grad(lambda b, c: jnp.sum(odeint(pend, y0, t, b, c) ** 2), argnums=(0, 1))(0.25, 5.0)
    theirs = jax.grad(lambda b, c: jax.numpy.sum(jodeint(jpend, y0, t, b, c) ** 2), argnums=(0, 1))(0.25, 5.0)
    np.testing.assert_allclose(np.array(ours), np.array(theirs), rtol=2e-3)


def test_trapezoid():
    y = np.random.default_rng(0).normal(size=(3, 8))
    x = np.sort(np.random.default_rng(1).uniform(size=8))
    np.testing.assert_allclose(trapezoid(y, x), np.trapezoid(y, x), rtol=1e-12)
    np.testing.assert_allclose(trapezoid(y, dx=0.5, axis=0), np.trapezoid(y, dx=0.5, axis=0), rtol=1e-12)
    np.testing.assert_allclose(ember.grad(lambda v: trapezoid(v))(jnp.ones(4)), [0.5, 1, 1, 0.5])
