"""The ``check`` primitive: a run-time condition that raises ``CheckError`` with its message. It has
no results, so the test of each path is that a false condition raises (the check was not dropped)
and a true one returns the right values: eagerly, compiled (its result unused), over a named
dynamic axis, under ``grad`` and ``vmap``, and in a compiled loop body."""

import numpy as np
import pytest

import ember
import ember.lax as lax
import ember.numpy as jnp
from ember._src.prims.check import check
from ember.errors import CheckError, EmberError


def _positive_twice(x):
    check(x > 0, "x must be positive")
    return x * 2.0


@pytest.mark.parametrize("wrap", [
    lambda f: f,
    ember.jit,
    lambda f: ember.jit(f, dynamic_axes={"x": ("n",)}),
], ids=["eager", "jit", "dynamic"])
def test_check_raises_only_when_false(wrap):
    f = wrap(_positive_twice)
    np.testing.assert_array_equal(np.asarray(f(jnp.arange(1.0, 4.0))), [2.0, 4.0, 6.0])
    with pytest.raises(CheckError, match="x must be positive"):
        f(jnp.asarray([1.0, -1.0, 3.0]))
    with pytest.raises(CheckError):  # NaN > 0 is false
        f(jnp.asarray([np.nan]))
    np.testing.assert_array_equal(np.asarray(f(jnp.zeros((0,)))), np.zeros((0,)))  # nothing to check


def test_check_error_classes():
    assert issubclass(CheckError, RuntimeError) and issubclass(CheckError, EmberError)
    with pytest.raises(TypeError, match="boolean"):
        ember.jit(lambda x: check(x, "not boolean"))(jnp.ones(2))


def test_check_under_grad_and_vmap():
    g = ember.grad(lambda x: _positive_twice(x).sum())
    np.testing.assert_array_equal(np.asarray(g(jnp.ones(3))), [2.0, 2.0, 2.0])
    with pytest.raises(CheckError):
        g(-jnp.ones(3))
    v = ember.jit(ember.vmap(_positive_twice))
    np.testing.assert_array_equal(np.asarray(v(jnp.ones((2, 3)))), 2 * np.ones((2, 3)))
    with pytest.raises(CheckError):
        v(jnp.asarray([[1.0, 1.0], [1.0, -1.0]]))


def test_check_in_a_compiled_loop_body():
    def f(x):
        def body(i, acc):
            check(acc < 100.0, "the sum passed 100")
            return acc + x
        return lax.fori_loop(0, 5, body, jnp.zeros_like(x))

    jf = ember.jit(f)
    np.testing.assert_allclose(np.asarray(jf(jnp.asarray([1.0, 2.0]))), [5.0, 10.0])
    with pytest.raises(CheckError, match="passed 100"):
        jf(jnp.asarray([1.0, 40.0]))
