"""Pytrees: containers, namedtuples, None, registered classes and dataclasses."""

import collections
import dataclasses

import pytest

import ember
from ember import tree

Point = collections.namedtuple("Point", "x y")


def test_flatten_unflatten_roundtrip_nested():
    t = {"b": [1, (2, 3)], "a": None, "c": Point(4, {"z": 5})}
    leaves, td = tree.flatten(t)
    assert leaves == [1, 2, 3, 4, 5]  # dict keys sorted, None has no leaves
    assert tree.unflatten(td, leaves) == t
    assert tree.leaves(t) == leaves
    assert tree.structure(t) == td


def test_map_multiple_trees_and_mismatch():
    a = {"x": 1, "y": [2, 3]}
    b = {"x": 10, "y": [20, 30]}
    assert tree.map(lambda u, v: u + v, a, b) == {"x": 11, "y": [22, 33]}
    with pytest.raises(ValueError):
        tree.map(lambda u, v: u + v, a, {"x": 1, "y": [2]})


def test_register_class_and_dataclass():
    class Box:
        def __init__(self, v, tag):
            self.v, self.tag = v, tag

    tree.register_pytree_node(Box, lambda b: ((b.v,), b.tag), lambda tag, ch: Box(ch[0], tag))
    out = tree.map(lambda v: v * 2, Box(3, "t"))
    assert isinstance(out, Box) and out.v == 6 and out.tag == "t"

    @dataclasses.dataclass
    class Params:
        w: int
        b: int
        name: str = "p"

    tree.register_dataclass(Params, data_fields=["w", "b"], meta_fields=["name"])
    assert tree.leaves(Params(1, 2)) == [1, 2]
    assert tree.map(lambda v: v + 1, Params(1, 2)) == Params(2, 3)


def test_reduce_and_arrays_are_leaves():
    import ember.numpy as jnp
    x = jnp.asarray([1.0, 2.0])
    assert tree.leaves({"a": x})[0] is x
    assert tree.reduce(lambda a, b: a + b, [1, 2, 3]) == 6
    assert ember.tree is tree
