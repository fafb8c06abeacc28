"""``ember.tree``'s ``jax.tree`` names (``transpose``, ``all``, ``broadcast``, the ``*_with_path``
family, ``reduce_associative``, ``static``) against ``jax.tree``."""

import dataclasses
import operator

import numpy as np
import pytest

import ember
from ember import tree

jax = pytest.importorskip("jax", reason="the reference is JAX")

TREES = [
    {"a": [1, 2], "b": (3, {"c": 4, "d": None}), "e": 5},
    [1, (2, 3), [4, 5, 6]],
    (),
    7,
]


def _keys(pairs):
    return [(jax.tree_util.keystr(p), v) for p, v in pairs]


def _ours(pairs):
    return [(ember.tree_util.keystr(p), v) for p, v in pairs]


@pytest.mark.parametrize("t", TREES)
def test_with_path_family_matches_jax(t):
    assert _ours(tree.leaves_with_path(t)) == _keys(jax.tree.leaves_with_path(t))
    pairs, td = tree.flatten_with_path(t)
    jpairs, jtd = jax.tree.flatten_with_path(t)
    assert _ours(pairs) == _keys(jpairs) and td.num_leaves == jtd.num_leaves
    f = lambda p, x, y: (ember.tree_util.keystr(p), x + y)  # noqa: E731
    g = lambda p, x, y: (jax.tree_util.keystr(p), x + y)  # noqa: E731
    assert tree.map_with_path(f, t, t) == jax.tree.map_with_path(g, t, t)


def test_is_leaf_takes_path():
    t = {"a": [1, 2], "b": [3, [4, 5]]}
    stop = lambda p, x: len(p) == 2 and isinstance(x, list)  # noqa: E731
    got = tree.leaves_with_path(t, is_leaf=stop, is_leaf_takes_path=True)
    want = jax.tree.leaves_with_path(t, is_leaf=stop, is_leaf_takes_path=True)
    assert _ours(got) == _keys(want)
    assert tree.map_with_path(lambda p, x: len(p), t, is_leaf=stop, is_leaf_takes_path=True) == \
        jax.tree.map_with_path(lambda p, x: len(p), t, is_leaf=stop, is_leaf_takes_path=True)


def test_transpose_all_broadcast():
    t = [{"x": 1, "y": 2}, {"x": 3, "y": 4}, {"x": 5, "y": 6}]
    outer, inner = tree.structure([0, 0, 0]), tree.structure({"x": 0, "y": 0})
    assert tree.transpose(outer, inner, t) == jax.tree.transpose(
        jax.tree.structure([0, 0, 0]), jax.tree.structure({"x": 0, "y": 0}), t)
    assert tree.transpose(outer, None, t) == {"x": [1, 3, 5], "y": [2, 4, 6]}
    for t2 in ([1, (2, 0)], [True, {"a": 1}], [], [None]):
        assert tree.all(t2) == jax.tree.all(t2)
    prefix, full = (1, 2, 3), (0, {"a": 0, "b": 0}, (0, 0))
    assert tree.broadcast(prefix, full) == jax.tree.broadcast(prefix, full) == (1, {"a": 2, "b": 2}, (3, 3))
    assert tree.broadcast({"w": 0.5, "b": 1.0}, {"w": [1, 2], "b": 3}) == {"w": [0.5, 0.5], "b": 1.0}
    with pytest.raises(ValueError):
        tree.broadcast((1, 2), (0, 0, 0))


def test_reduce_associative_grouping_and_identity():
    t = [1, (2, 3), [4, 5, 6]]
    assert tree.reduce_associative(operator.add, t) == jax.tree.reduce_associative(operator.add, t) == 21
    group = lambda a, b: f"({a}{b})"  # noqa: E731 - not associative: shows the grouping
    t2 = ["a", "b", "c", "d", "e"]
    assert tree.reduce_associative(group, t2) == jax.tree.reduce_associative(group, t2)
    assert tree.reduce_associative(operator.add, [], identity=0) == 0
    with pytest.raises(TypeError):
        tree.reduce_associative(operator.add, [])
    arrays = [np.arange(3.0), np.ones(3), np.full(3, 2.0)]
    np.testing.assert_allclose(tree.reduce_associative(ember.numpy.add, arrays), np.arange(3.0) + 3)


def test_static_field_is_structure():
    @ember.tree_util.register_dataclass
    @dataclasses.dataclass
    class Op:
        x: object
        op: str = tree.static(default="add")

    @tree.register_dataclass
    @dataclasses.dataclass
    class Op2:
        x: object
        op: str = tree.static(default="mul")

    for cls, name in ((Op, "add"), (Op2, "mul")):
        leaves, td = tree.flatten(cls(x=np.ones(2)))
        assert len(leaves) == 1 and tree.unflatten(td, [np.zeros(2)]).op == name
    assert dataclasses.fields(Op)[1].metadata["static"] is True
    f = jax.tree.static(default=1, metadata={"k": 2})
    g = tree.static(default=1, metadata={"k": 2})
    assert dict(f.metadata) == dict(g.metadata) and f.default == g.default


def test_public_names_cover_jax_tree():
    assert [n for n in dir(jax.tree) if not n.startswith("_") and not hasattr(tree, n)] == []
