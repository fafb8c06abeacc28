"""Pytree utilities: ``map``, ``flatten``, ``unflatten``, ``leaves``, ``structure``, registration,
and the rest of ``jax.tree`` (``transpose``, ``all``, ``broadcast``, the ``*_with_path`` family,
``reduce_associative``, ``static``)."""

from ember._src.compat.tree_util import static
from ember._src.compat.tree_util import tree_all as all  # noqa: A004 - the public name mirrors jax.tree.all
from ember._src.compat.tree_util import tree_broadcast as broadcast
from ember._src.compat.tree_util import tree_flatten_with_path as flatten_with_path
from ember._src.compat.tree_util import tree_leaves_with_path as leaves_with_path
from ember._src.compat.tree_util import tree_map_with_path as map_with_path
from ember._src.compat.tree_util import tree_reduce_associative as reduce_associative
from ember._src.compat.tree_util import tree_transpose as transpose
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
from ember._src.tree import tree_map as map  # noqa: A004 - the public name mirrors jax.tree.map

reduce = tree_reduce

__all__ = ["PyTreeDef", "all", "all_leaves", "broadcast", "flatten", "flatten_up_to", "flatten_with_path",
           "leaves", "leaves_with_path", "map", "map_with_path", "reduce", "reduce_associative",
           "register_dataclass", "register_pytree_node", "register_pytree_node_class", "static", "structure",
           "transpose", "unflatten"]
