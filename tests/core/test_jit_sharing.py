"""``jit(f)`` made afresh reuses the traces of an earlier ``jit(f)`` (JAX caches on the function),
and pytrees whose auxiliary data is a dict, a list or an array work under ``jit``."""

import gc
import weakref

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import tree_util


def _double_sin(x):
    return jnp.sin(x) * 2.0


def test_fresh_jit_of_the_same_function_does_not_retrace():
    x = np.linspace(0.0, 1.0, 5)
    first = ember.jit(_double_sin)
    first.clear_cache()  # other tests may have jitted it: start from nothing
    np.testing.assert_allclose(first(x), 2 * np.sin(x), rtol=1e-12)
    assert first.traces == 1
    for _ in range(3):  # the JAX pattern jax.jit(f)(x) in a loop
        again = ember.jit(_double_sin)
        np.testing.assert_allclose(again(x), 2 * np.sin(x), rtol=1e-12)
        assert again.traces == 0
    assert first.traces == 1
    other = ember.jit(_double_sin, backend="numpy")  # other jit arguments: its own cache
    np.testing.assert_allclose(other(x), 2 * np.sin(x), rtol=1e-12)
    assert other.traces == 1
    static = ember.jit(lambda x, n: x * n, static_argnums=1)
    assert float(static(2.0, 3)) == 6.0


def test_shared_cache_goes_with_the_function():
    def make():
        return lambda x: x + 1.0
    f = make()
    assert float(ember.jit(f)(1.0)) == 2.0
    ref = weakref.ref(f)
    del f
    gc.collect()
    assert ref() is None
    g, h = make(), make()  # equal code, different function objects: separate caches
    ember.jit(g)(1.0)
    assert ember.jit(h).cache_info()["size"] == 0


class _Node:
    def __init__(self, x, meta):
        self.x, self.meta = x, meta


tree_util.register_pytree_node(_Node, lambda n: ((n.x,), n.meta), lambda meta, ch: _Node(ch[0], meta))


@pytest.mark.parametrize("meta,scale", [({"scale": 2.0}, 2.0), ([1.0, 2.0, 3.0], 3.0),
                                        ({"inner": [1, {"k": 2}]}, 2.0), (np.arange(4), 4.0)])
def test_unhashable_aux_data_under_jit(meta, scale):
    def scale_of(m):
        if isinstance(m, dict):
            return m["scale"] if "scale" in m else float(len(m["inner"]))
        return float(len(m))

    f = ember.jit(lambda n: _Node(n.x * scale_of(n.meta), n.meta))
    x = np.ones(3)
    out = f(_Node(x, meta))
    np.testing.assert_allclose(out.x, x * scale)
    assert out.meta is meta  # the auxiliary data of the first trace
    f(_Node(x, meta))
    assert f.traces == 1  # equal auxiliary data: the same signature
    copy = {k: v for k, v in meta.items()} if isinstance(meta, dict) else meta.copy()
    f(_Node(x, copy))
    assert f.traces == 1


def test_different_aux_values_retrace():
    f = ember.jit(lambda n: n.x * n.meta["scale"])
    assert float(f(_Node(1.0, {"scale": 2.0}))) == 2.0
    assert float(f(_Node(1.0, {"scale": 3.0}))) == 3.0
    assert f.traces == 2
    a = tree_util.tree_structure(_Node(1.0, {"a": [1, 2]}))
    b = tree_util.tree_structure(_Node(1.0, {"a": [1, 2]}))
    assert a == b and hash(a) == hash(b)
    assert a != tree_util.tree_structure(_Node(1.0, {"a": [1, 3]}))
