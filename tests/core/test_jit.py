"""jit on the reference backend: caching per signature, static args, tracer errors, pytrees."""

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember.errors import TracerError


def test_jit_matches_eager_and_caches_per_signature():
    calls = []

    @ember.jit
    def f(x, y):
        calls.append(1)
        return jnp.exp(x) * y - 1.0

    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    for _ in range(3):
        np.testing.assert_allclose(f(x, 2.0), np.exp(x) * 2 - 1, rtol=1e-6)
    assert len(calls) == 1 and f.cache_info()["traces"] == 1
    f(x, 3.0)  # a different Python scalar value: same signature (weak f32[])
    assert len(calls) == 1
    f(x.astype(np.float64), 3.0)  # new dtype: retrace
    f(np.ones((4, 3), np.float32), 3.0)  # new shape: retrace
    assert len(calls) == 3
    assert f.cache_info()["hits"] >= 3


def test_decorator_with_static_args():
    @ember.jit(static_argnums=1)
    def power(x, n):
        out = x
        for _ in range(n - 1):
            out = out * x
        return out

    x = np.array([1.5, 2.0], np.float32)
    np.testing.assert_allclose(power(x, 3), x ** 3, rtol=1e-6)
    np.testing.assert_allclose(power(x, 2), x ** 2, rtol=1e-6)
    assert power.cache_info()["traces"] == 2

    g = ember.jit(lambda x, mode: x + 1 if mode == "inc" else x - 1, static_argnames="mode")
    np.testing.assert_allclose(g(x, mode="inc"), x + 1)
    np.testing.assert_allclose(g(x, mode="dec"), x - 1)


def test_tracer_bool_raises_clear_error():
    @ember.jit
    def f(x):
        if x > 0:
            return x
        return -x

    with pytest.raises(TracerError, match=r"bool\[3\].*static_argnums"):
        f(np.ones(3, np.float32))
    with pytest.raises(TracerError, match="lax.cond"):
        ember.jit(lambda x: int(x))(np.float32(1))


def test_pytree_inputs_and_outputs():
    @ember.jit
    def f(params, x):
        return {"out": params["w"] * x + params["b"], "aux": (x, None)}

    p = {"w": np.float32(2), "b": np.ones(3, np.float32)}
    x = np.arange(3, dtype=np.float32)
    out = f(p, x)
    np.testing.assert_allclose(out["out"], 2 * x + 1)
    np.testing.assert_allclose(out["aux"][0], x)
    assert out["aux"][1] is None


def test_nested_jit_inlines_and_unknown_backend():
    inner = ember.jit(lambda x: x * 2)
    outer = ember.jit(lambda x: inner(x) + 1)
    np.testing.assert_allclose(outer(np.ones(2, np.float32)), [3, 3])
    with pytest.raises(ValueError, match="unknown backend"):
        ember.jit(lambda x: x, backend="nope")


def test_non_array_argument_needs_static():
    with pytest.raises(TypeError, match="static"):
        ember.jit(lambda x, s: x)(np.ones(2), "hello")
