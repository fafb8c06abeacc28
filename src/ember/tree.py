"""Pytree utilities: ``map``, ``flatten``, ``unflatten``, ``leaves``, ``structure``, registration."""

from ember._src.tree import (
    PyTreeDef,
    all_leaves,
    flatten,
    flatten_up_to,
    leaves,
    register_dataclass,
    register_pytree_node,
    register_pytree_node_class,
    structure,
    tree_reduce,
    unflatten,
)
from ember._src.tree import tree_map as map  # noqa: A001 - the public name mirrors jax.tree.map

reduce = tree_reduce

__all__ = ["PyTreeDef", "all_leaves", "flatten", "flatten_up_to", "leaves", "map", "reduce",
           "register_dataclass", "register_pytree_node", "register_pytree_node_class", "structure",
           "unflatten"]
