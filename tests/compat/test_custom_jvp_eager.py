"""``custom_jvp`` under ``grad``/``jvp`` outside ``jit``: the rule receives concrete primals (a
Python ``if`` on them works) and the primal function is not run as well -- as in JAX."""

import numpy as np
import pytest

import ember
import ember.numpy as jnp

jax = pytest.importorskip("jax", reason="the reference is JAX")


def _make(m, calls):
    @m.custom_jvp
    def f(x):
        calls.append("primal")
        return m.numpy.sin(x) * 2.0

    @f.defjvp
    def f_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        calls.append("rule")
        if x > 0:  # concrete: a Python branch
            return m.numpy.sin(x) * 2.0, 2.0 * m.numpy.cos(x) * t
        return m.numpy.sin(x) * 2.0, -3.0 * t
    return f


@pytest.mark.parametrize("x", [0.7, -0.4])
def test_rule_sees_concrete_primals_and_primal_is_not_run(x):
    ours, theirs = [], []
    f, jf = _make(ember, ours), _make(jax, theirs)
    np.testing.assert_allclose(ember.grad(f)(x), jax.grad(jf)(x), rtol=1e-6)
    assert ours == theirs == ["rule"]
    ours.clear(), theirs.clear()
    got, want = ember.jvp(f, (x,), (1.5,)), jax.jvp(jf, (x,), (1.5,))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert ours == theirs == ["rule"]
    ours.clear(), theirs.clear()
    g = lambda m, h: lambda v: h(v) * v + m.numpy.sum(v)  # noqa: E731 - used inside a larger function
    np.testing.assert_allclose(ember.grad(g(ember, f))(x), jax.grad(g(jax, jf))(x), rtol=1e-6)
    assert ours == theirs == ["rule"]


def test_arrays_pytrees_and_nondiff_arguments():
    calls = []

    @ember.custom_jvp
    def clip_grad(x, scale):
        calls.append("primal")
        return {"y": x * scale}

    @clip_grad.defjvp
    def clip_jvp(primals, tangents):
        (x, scale), (tx, _) = primals, tangents
        calls.append(type(x).__name__)
        limit = float(np.max(np.abs(np.asarray(x))))  # concrete NumPy conversion works
        return {"y": x * scale}, {"y": tx * (scale / limit)}

    x = np.array([0.5, -2.0, 1.0], np.float32)
    g = ember.grad(lambda v: jnp.sum(clip_grad(v, 3.0)["y"]))(x)
    np.testing.assert_allclose(g, [1.5, 1.5, 1.5])  # scale / max|x| = 3 / 2
    assert "primal" not in calls
    # under jit the rule is traced, as in JAX: a Python branch on the primal there is an error
    with pytest.raises(ember.errors.TracerBoolConversionError):
        ember.jit(ember.grad(_make(ember, [])))(0.7)
    with pytest.raises(jax.errors.TracerBoolConversionError):  # under vmap JAX's rule is traced too
        jax.vmap(jax.grad(_make(jax, [])))(np.array([0.7, 1.1]))
    with pytest.raises(ember.errors.TracerBoolConversionError):
        ember.vmap(ember.grad(_make(ember, [])))(np.array([0.7, 1.1]))
