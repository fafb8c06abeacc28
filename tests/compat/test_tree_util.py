"""ember.tree_util / ember.flatten_util against hand-derived results and (when installed) JAX."""

import collections
import dataclasses

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import tree_util as tu
from ember.flatten_util import ravel_pytree

Point = collections.namedtuple("Point", "x y")


def _tree():
    return {"b": [1.0, (2.0, 3.0)], "a": Point(4.0, None), "c": {"q": 5.0}}


def test_flatten_unflatten_roundtrip_and_order():
    leaves, td = tu.tree_flatten(_tree())
    assert leaves == [4.0, 1.0, 2.0, 3.0, 5.0]  # dict keys sorted, None is an empty node
    assert tu.tree_unflatten(td, leaves) == _tree()
    assert tu.tree_structure(_tree()) == td
    assert tu.tree_leaves(_tree()) == leaves
    assert tu.tree_map(lambda a, b: a * b, _tree(), _tree()) == tu.tree_unflatten(
        td, [v * v for v in leaves])
    assert tu.tree_reduce(lambda a, b: a + b, _tree()) == 15.0
    assert tu.tree_reduce(lambda a, b: a + b, _tree(), 100.0) == 115.0
    assert tu.tree_all([True, (1, 2)]) and not tu.tree_all([True, (0,)])
    assert tu.treedef_is_leaf(tu.tree_structure(1.0)) and not tu.treedef_is_leaf(td)
    assert len(tu.treedef_children(td)) == 3
    # ember.tree keeps working and agrees
    assert ember.tree.leaves(_tree()) == leaves


def test_paths_and_keystr():
    pairs = tu.tree_leaves_with_path(_tree())
    strs = [tu.keystr(p) for p, _ in pairs]
    assert strs == ["['a'].x", "['b'][0]", "['b'][1][0]", "['b'][1][1]", "['c']['q']"]
    assert tu.keystr(pairs[2][0], simple=True, separator="/") == "b/1/0"
    doubled = tu.tree_map_with_path(lambda p, v: (tu.keystr(p), 2 * v), {"u": [1, 2]})
    assert doubled == {"u": [("['u'][0]", 2), ("['u'][1]", 4)]}
    flat, td = tu.tree_flatten_with_path(_tree())
    assert [v for _, v in flat] == tu.tree_leaves(_tree()) and td == tu.tree_structure(_tree())


def test_paths_match_jax():
    jtu = pytest.importorskip("jax.tree_util", reason="JAX comparison")
    t = {"w": [np.ones(2), {"k": np.zeros(1)}], "p": Point(1, 2), "n": None}
    ours = [(tu.keystr(p), np.asarray(v).tolist()) for p, v in tu.tree_leaves_with_path(t)]
    theirs = [(jtu.keystr(p), np.asarray(v).tolist()) for p, v in jtu.tree_leaves_with_path(t)]
    assert ours == theirs


def test_register_dataclass_and_classes():
    @tu.register_dataclass
    @dataclasses.dataclass
    class Layer:
        w: object
        b: object
        name: str = dataclasses.field(default="l", metadata=dict(static=True))

    layer = Layer(jnp.ones(2), jnp.zeros(2), "dense")
    leaves, td = tu.tree_flatten(layer)
    assert len(leaves) == 2
    back = tu.tree_unflatten(td, [v + 1 for v in leaves])
    assert back.name == "dense"
    np.testing.assert_allclose(back.b, np.ones(2))
    assert [tu.keystr(p) for p, _ in tu.tree_leaves_with_path(layer)] == [".w", ".b"]
    # through jit and grad
    g = ember.grad(lambda m: jnp.sum(m.w * m.w + m.b))(layer)
    np.testing.assert_allclose(g.w, 2 * np.ones(2))
    np.testing.assert_allclose(g.b, np.ones(2))

    @tu.register_pytree_with_keys_class
    class Pair:
        def __init__(self, a, b):
            self.a, self.b = a, b

        def tree_flatten_with_keys(self):
            return ((tu.GetAttrKey("a"), self.a), (tu.GetAttrKey("b"), self.b)), None

        @classmethod
        def tree_unflatten(cls, aux, children):
            return cls(*children)

    assert [tu.keystr(p) for p, _ in tu.tree_leaves_with_path(Pair(1, 2))] == [".a", ".b"]
    assert tu.tree_map(lambda v: v * 10, Pair(1, 2)).b == 20


def test_partial_is_a_pytree_through_jit():
    p = tu.Partial(lambda x, y: x * y, jnp.asarray(3.0))
    assert len(tu.tree_leaves(p)) == 1

    @ember.jit
    def apply(f, x):
        return f(x)

    np.testing.assert_allclose(apply(p, jnp.asarray(2.0)), 6.0)


def test_tree_transpose():
    outer = tu.tree_structure([0, 0])
    inner = tu.tree_structure((0, 0, 0))
    t = [(1, 2, 3), (4, 5, 6)]
    assert tu.tree_transpose(outer, inner, t) == ([1, 4], [2, 5], [3, 6])


def test_ravel_pytree_roundtrip_dtypes_and_grad():
    t = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": [np.arange(2, dtype=np.int32)]}
    flat, unravel = ravel_pytree(t)
    assert flat.dtype == np.float32 and flat.shape == (8,)
    np.testing.assert_array_equal(flat, np.concatenate([[0, 1], np.arange(6)]))
    back = unravel(flat)
    assert back["b"][0].dtype == np.int32
    np.testing.assert_array_equal(back["w"], t["w"])
    np.testing.assert_array_equal(ember.jit(lambda v: ravel_pytree(v)[0])(t), flat)
    g = ember.grad(lambda p: jnp.sum(ravel_pytree(p)[0] ** 2))({"a": jnp.ones(2), "c": jnp.full((2,), 3.0)})
    np.testing.assert_allclose(g["c"], [6.0, 6.0])
    e, un = ravel_pytree({})
    assert e.shape == (0,) and e.dtype == np.float32 and un(e) == {}
    with pytest.raises(ValueError, match="shape"):
        unravel(jnp.zeros(3))


def test_dict_keys_sorted_as_jax_and_incomparable_keys_refused():
    jax = pytest.importorskip("jax", reason="JAX is the reference")
    d = {2: 30.0, 1.5: 20.0, 1: 10.0, -0.5: 0.0}
    assert ember.tree_util.tree_leaves(d) == jax.tree_util.tree_leaves(d) == [0.0, 10.0, 20.0, 30.0]
    f = ember.jit(lambda t: t[1.5] * 2 + t[1])
    for _ in range(3):  # the first call and the warm (fast-path) calls read the same leaves
        np.testing.assert_allclose(np.asarray(f({k: np.float32(v) for k, v in d.items()})), 50.0)
    for lib in (jax.tree_util, ember.tree_util):
        with pytest.raises(ValueError, match="sorting pytree dictionary keys"):
            lib.tree_leaves({1: 7, "y": 42})
