"""``jax.tree_util`` over ember's pytrees (``ember._src.tree``): key paths, ``Partial``, extras.

The structure functions are ember's own (``ember.tree``); this module adds JAX's names, the
``*_with_path`` family (keys: :class:`SequenceKey`, :class:`DictKey`, :class:`GetAttrKey`,
:class:`FlattenedIndexKey`) and :class:`Partial`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Hashable, Sequence
from typing import Any, NamedTuple

from ember._src import tree as _tree
from ember._src.tree import PyTreeDef, all_leaves, flatten, register_pytree_node, unflatten


class SequenceKey(NamedTuple):
    """The key of a tuple/list child: its index."""

    idx: int

    def __str__(self) -> str:
        return f"[{self.idx!r}]"


class DictKey(NamedTuple):
    """The key of a dict child: its dict key."""

    key: Hashable

    def __str__(self) -> str:
        return f"[{self.key!r}]"


class GetAttrKey(NamedTuple):
    """The key of a namedtuple/dataclass child: its attribute name."""

    name: str

    def __str__(self) -> str:
        return f".{self.name}"


class FlattenedIndexKey(NamedTuple):
    """The key of a child of a node registered without keys: its index among the children."""

    key: int

    def __str__(self) -> str:
        return f"[<flat index {self.key}>]"


KeyEntry = Any
KeyPath = tuple

# node type -> function(x) -> (list of (key, child), aux): nodes registered with keys, dataclasses
_key_fns: dict[type, Callable[[Any], tuple[list, Hashable]]] = {}


def tree_flatten(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> tuple[list, PyTreeDef]:
    """Leaves of ``tree`` (in ember's fixed order: dict keys sorted) and its structure."""
    return flatten(tree, is_leaf)


def tree_unflatten(treedef: PyTreeDef, leaves: Any) -> Any:
    """Rebuild a pytree of structure ``treedef`` from ``leaves``."""
    return unflatten(treedef, leaves)


def tree_leaves(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> list:
    """The leaves of ``tree`` as a list."""
    return flatten(tree, is_leaf)[0]


def tree_structure(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> PyTreeDef:
    """The structure (``PyTreeDef``) of ``tree``."""
    return flatten(tree, is_leaf)[1]


def tree_map(f: Callable[..., Any], tree: Any, *rest: Any,
             is_leaf: Callable[[Any], bool] | None = None) -> Any:
    """Apply ``f`` to the leaves of ``tree`` and the matching subtrees of each tree in ``rest``."""
    return _tree.tree_map(f, tree, *rest, is_leaf=is_leaf)


_NO_INIT = object()


def tree_reduce(function: Callable[[Any, Any], Any], tree: Any, initializer: Any = _NO_INIT,
                is_leaf: Callable[[Any], bool] | None = None) -> Any:
    """``functools.reduce(function, leaves(tree)[, initializer])``."""
    lv = flatten(tree, is_leaf)[0]
    if initializer is _NO_INIT:
        return functools.reduce(function, lv)
    return functools.reduce(function, lv, initializer)


def tree_all(tree: Any, *, is_leaf: Callable[[Any], bool] | None = None) -> bool:
    """``all`` over the leaves of ``tree``."""
    return all(flatten(tree, is_leaf)[0])


def treedef_is_leaf(treedef: PyTreeDef) -> bool:
    """Whether ``treedef`` is a single leaf."""
    return treedef.node == "leaf"


def treedef_children(treedef: PyTreeDef) -> list[PyTreeDef]:
    """The structures of the children of the root node of ``treedef``."""
    return list(treedef.children)


def treedef_tuple(treedefs: Sequence[PyTreeDef]) -> PyTreeDef:
    """The structure of a tuple whose children have the structures ``treedefs``."""
    return PyTreeDef(tuple, None, tuple(treedefs))


def tree_transpose(outer_treedef: PyTreeDef, inner_treedef: PyTreeDef | None,
                   pytree_to_transpose: Any) -> Any:
    """Turn a tree of structure ``outer(inner(leaves))`` into ``inner(outer(leaves))``."""
    lv, td = flatten(pytree_to_transpose)
    if inner_treedef is None:
        inner_treedef = flatten(flatten_up_to(outer_treedef, pytree_to_transpose)[0][0])[1]
    n_in, n_out = inner_treedef.num_leaves, outer_treedef.num_leaves
    if len(lv) != n_in * n_out:
        raise ValueError(f"tree_transpose: expected {n_out} x {n_in} leaves for outer {outer_treedef} and "
                         f"inner {inner_treedef}, got a tree of structure {td}")
    groups = [lv[i * n_in:(i + 1) * n_in] for i in range(n_out)]
    cols = [unflatten(outer_treedef, [g[j] for g in groups]) for j in range(n_in)]
    return unflatten(inner_treedef, cols)


def flatten_up_to(treedef: PyTreeDef, tree: Any) -> tuple[list, PyTreeDef]:
    """``tree``'s subtrees at the leaves of ``treedef``."""
    return _tree.flatten_up_to(treedef, tree)


def register_pytree_with_keys(nodetype: type, flatten_with_keys: Callable[[Any], tuple[Any, Hashable]],
                              unflatten_func: Callable[[Hashable, Any], Any],
                              flatten_func: Callable[[Any], tuple[Any, Hashable]] | None = None) -> None:
    """Register ``nodetype`` with ``flatten_with_keys(x) -> ([(key, child), ...], aux)``."""
    if flatten_func is None:
        def flatten_func(x: Any) -> tuple[list, Hashable]:
            pairs, aux = flatten_with_keys(x)
            return [c for _, c in pairs], aux
    register_pytree_node(nodetype, flatten_func, unflatten_func)
    _key_fns[nodetype] = lambda x: (list(flatten_with_keys(x)[0]), None)


def register_pytree_with_keys_class(cls: type) -> type:
    """Class decorator: ``tree_flatten_with_keys`` method and ``tree_unflatten`` classmethod."""
    flat = getattr(cls, "tree_flatten", None)
    register_pytree_with_keys(cls, lambda x: x.tree_flatten_with_keys(), cls.tree_unflatten,
                              (lambda x: x.tree_flatten()) if flat is not None else None)
    return cls


def register_dataclass(nodetype: type, data_fields: Sequence[str] | None = None,
                       meta_fields: Sequence[str] | None = None, drop_fields: Sequence[str] = ()) -> type:
    """Register a dataclass as a pytree node (usable as a decorator, as in JAX).

    Without ``data_fields``/``meta_fields`` the fields marked ``field(metadata=dict(static=True))``
    are metadata and the others data. ``drop_fields`` are left out of both (they must have defaults).
    """
    if not dataclasses.is_dataclass(nodetype):
        raise TypeError(f"register_dataclass: {nodetype!r} is not a dataclass; pass data_fields and "
                        "meta_fields explicitly for other classes")
    fields = [f for f in dataclasses.fields(nodetype) if f.init and f.name not in set(drop_fields)]
    if data_fields is None and meta_fields is None:
        meta_fields = [f.name for f in fields if f.metadata.get("static", False)]
        data_fields = [f.name for f in fields if not f.metadata.get("static", False)]
    elif data_fields is None or meta_fields is None:
        raise ValueError("register_dataclass: give both data_fields and meta_fields, or neither")
    data = list(data_fields)
    _tree.register_dataclass(nodetype, data, list(meta_fields))
    _key_fns[nodetype] = lambda x: ([(GetAttrKey(n), getattr(x, n)) for n in data], None)
    return nodetype


def register_pytree_node_class(cls: type) -> type:
    """Class decorator: ``tree_flatten`` method and ``tree_unflatten`` classmethod."""
    return _tree.register_pytree_node_class(cls)


def register_static(cls: type) -> type:
    """Register ``cls`` as a node with no children (its instances are part of the structure)."""
    register_pytree_node(cls, lambda x: ((), x), lambda aux, _: aux)
    return cls


def _children_with_keys(x: Any, is_leaf: Callable[[Any], bool] | None) -> list[tuple[Any, Any]] | None:
    """``[(key, child), ...]`` of node ``x``, or ``None`` when ``x`` is a leaf."""
    if is_leaf is not None and is_leaf(x):
        return None
    children, td = flatten(x, is_leaf=lambda y: y is not x)
    if td.node == "leaf":
        return None
    node = td.node
    if node in _key_fns:
        return [(k, c) for (k, _), c in zip(_key_fns[node](x)[0], children)]
    if node is tuple or node is list:
        return [(SequenceKey(i), c) for i, c in enumerate(children)]
    if isinstance(node, type) and issubclass(node, tuple) and hasattr(node, "_fields"):
        return [(GetAttrKey(n), c) for n, c in zip(node._fields, children)]
    if isinstance(node, type) and issubclass(node, dict):
        return [(DictKey(k), c) for k, c in zip(td.aux, children)]
    return [(FlattenedIndexKey(i), c) for i, c in enumerate(children)]


def _walk(x: Any, path: tuple, is_leaf: Callable[..., bool] | None, takes_path: bool, out: list) -> None:
    if is_leaf is not None and (is_leaf(path, x) if takes_path else is_leaf(x)):
        out.append((path, x))
        return
    kids = _children_with_keys(x, None)
    if kids is None:
        out.append((path, x))
        return
    for k, c in kids:
        _walk(c, path + (k,), is_leaf, takes_path, out)


def _with_path(tree: Any, is_leaf: Callable[..., bool] | None,
               is_leaf_takes_path: bool) -> tuple[list[tuple[KeyPath, Any]], Callable[[Any], bool] | None]:
    """The ``(path, leaf)`` pairs and an ``is_leaf`` of one argument that stops at the same leaves."""
    out: list = []
    _walk(tree, (), is_leaf, is_leaf_takes_path, out)
    if is_leaf is None or not is_leaf_takes_path:
        return out, is_leaf
    ids = {id(x) for _, x in out}
    return out, lambda y: id(y) in ids


def tree_flatten_with_path(tree: Any, is_leaf: Callable[..., bool] | None = None,
                           is_leaf_takes_path: bool = False) -> tuple[list[tuple[KeyPath, Any]], PyTreeDef]:
    """``([(key_path, leaf), ...], treedef)``: each leaf with the keys that lead to it.

    With ``is_leaf_takes_path`` the predicate is called as ``is_leaf(key_path, node)``."""
    out, plain = _with_path(tree, is_leaf, is_leaf_takes_path)
    return out, flatten(tree, plain)[1]


def tree_leaves_with_path(tree: Any, is_leaf: Callable[..., bool] | None = None,
                          is_leaf_takes_path: bool = False) -> list[tuple[KeyPath, Any]]:
    """``[(key_path, leaf), ...]`` in leaf order."""
    return _with_path(tree, is_leaf, is_leaf_takes_path)[0]


def tree_map_with_path(f: Callable[..., Any], tree: Any, *rest: Any,
                       is_leaf: Callable[..., bool] | None = None, is_leaf_takes_path: bool = False) -> Any:
    """Like :func:`tree_map`, but ``f(key_path, leaf, *others)``."""
    pairs, td = tree_flatten_with_path(tree, is_leaf, is_leaf_takes_path)
    others = [flatten_up_to(td, r)[0] for r in rest]
    return unflatten(td, [f(p, x, *xs) for (p, x), *xs in zip(pairs, *others)])


def tree_broadcast(prefix_tree: Any, full_tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> Any:
    """``full_tree``'s structure with each leaf of ``prefix_tree`` repeated over the subtree of
    ``full_tree`` it stands for: ``tree_broadcast((1, 2), (0, {"a": 0, "b": 0}))`` is
    ``(1, {"a": 2, "b": 2})``."""
    prefix_leaves, prefix_def = flatten(prefix_tree, is_leaf)
    subtrees = flatten_up_to(prefix_def, full_tree)[0]
    out = [leaf for leaf, sub in zip(prefix_leaves, subtrees) for _ in flatten(sub, is_leaf)[0]]
    return unflatten(flatten(full_tree, is_leaf)[1], out)


class _Unspecified:
    def __repr__(self) -> str:
        return "<unspecified>"


_UNSPECIFIED = _Unspecified()


def _halves(seq: list, operation: Callable[[Any, Any], Any]) -> Any:
    if len(seq) == 1:
        return seq[0]
    mid = len(seq) // 2
    return operation(_halves(seq[:mid], operation), _halves(seq[mid:], operation))


def tree_reduce_associative(operation: Callable[[Any, Any], Any], tree: Any, *, identity: Any = _UNSPECIFIED,
                            is_leaf: Callable[[Any], bool] | None = None) -> Any:
    """Reduce the leaves with an associative ``operation`` as a balanced tree of calls (halves
    first, JAX's grouping); ``identity`` is the result for a tree without leaves."""
    lv = flatten(tree, is_leaf)[0]
    if not lv:
        if identity is _UNSPECIFIED:
            raise TypeError("tree_reduce_associative: the tree has no leaves; give identity= for this case")
        return identity
    return _halves(lv, operation)


def static(**kwargs: Any) -> Any:
    """A ``dataclasses.field`` marked static (``metadata={"static": True}``): with
    :func:`register_dataclass` it is part of the structure, not a leaf. As ``jax.tree.static``."""
    metadata = {"static": True, **(kwargs.pop("metadata", None) or {})}
    return dataclasses.field(metadata=metadata, **kwargs)


def keystr(keys: KeyPath, *, simple: bool = False, separator: str = "") -> str:
    """A key path as a string: ``"['a'][0].w"`` (or ``separator.join`` of the bare keys if ``simple``)."""
    if not simple:
        return "".join(str(k) for k in keys)
    return separator.join(str(k[0]) for k in keys)


class Partial(functools.partial):
    """``functools.partial`` that is a pytree: the bound arguments are children, the function is static.

    It can be passed to and returned from jitted functions.
    """


def _partial_flatten(p: Partial) -> tuple[tuple, Hashable]:
    return (p.args, p.keywords), p.func


def _partial_unflatten(func: Callable[..., Any], children: list) -> Partial:
    args, kw = children
    return Partial(func, *args, **kw)


register_pytree_node(Partial, _partial_flatten, _partial_unflatten)

__all__ = ["DictKey", "FlattenedIndexKey", "GetAttrKey", "KeyEntry", "KeyPath", "Partial", "PyTreeDef",
           "SequenceKey", "all_leaves", "keystr", "register_dataclass", "register_pytree_node",
           "register_pytree_node_class", "register_pytree_with_keys", "register_pytree_with_keys_class",
           "register_static", "static", "tree_all", "tree_broadcast", "tree_flatten",
           "tree_flatten_with_path", "tree_leaves", "tree_leaves_with_path", "tree_map",
           "tree_map_with_path", "tree_reduce", "tree_reduce_associative", "tree_structure",
           "tree_transpose", "tree_unflatten", "treedef_children", "treedef_is_leaf", "treedef_tuple"]
