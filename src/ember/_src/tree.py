"""Pytrees: nested containers of arrays that transformations flatten and rebuild.

Built in: tuples, lists, dicts (keys sorted), ``None`` (an empty node), namedtuples. User classes
and dataclasses register with :func:`register_pytree_node` / :func:`register_dataclass`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple

import numpy as np


class _NodeType(NamedTuple):
    to_iterable: Callable[[Any], tuple[list, Hashable]]
    from_iterable: Callable[[Hashable, list], Any]


_registry: dict[type, _NodeType] = {}


def register_pytree_node(cls: type, flatten: Callable[[Any], tuple[Any, Hashable]],
                         unflatten: Callable[[Hashable, Any], Any]) -> None:
    """Register ``cls``: ``flatten(x) -> (children, aux)``, ``unflatten(aux, children) -> x``."""
    if cls in _registry:
        raise ValueError(f"{cls.__name__} is already registered as a pytree node")
    _registry[cls] = _NodeType(lambda x: _as_list(flatten(x)), unflatten)


def _as_list(pair: tuple[Any, Hashable]) -> tuple[list, Hashable]:
    children, aux = pair
    return list(children), aux


def register_dataclass(cls: type, data_fields: list[str] | None = None,
                       meta_fields: list[str] | None = None) -> type:
    """Register a dataclass: ``data_fields`` are children, ``meta_fields`` static; by default the
    fields marked ``metadata={"static": True}`` (``ember.tree.static()``) are static, the others children."""
    names = [f.name for f in dataclasses.fields(cls)]
    if data_fields is None and meta_fields is None:
        meta_fields = [f.name for f in dataclasses.fields(cls) if f.metadata.get("static", False)]
    meta_set = set(meta_fields or ())
    data = list(data_fields) if data_fields is not None else [n for n in names if n not in meta_set]
    meta = list(meta_fields) if meta_fields is not None else [n for n in names if n not in data]

    def flatten(x: Any) -> tuple[list, Hashable]:
        return [getattr(x, n) for n in data], tuple(getattr(x, n) for n in meta)

    def unflatten(aux: Hashable, children: list) -> Any:
        kwargs = dict(zip(data, children))
        kwargs.update(zip(meta, aux))
        return cls(**kwargs)

    register_pytree_node(cls, flatten, unflatten)
    return cls


def register_pytree_node_class(cls: type) -> type:
    """Class decorator: the class defines ``tree_flatten`` and classmethod ``tree_unflatten``."""
    register_pytree_node(cls, lambda x: x.tree_flatten(), cls.tree_unflatten)
    return cls


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def _node_of(x: Any) -> tuple[Any, list, Hashable] | None:
    t = type(x)
    if t in _registry:
        children, aux = _registry[t].to_iterable(x)
        return t, children, aux
    if t is tuple or t is list:
        return t, list(x), None
    if t is dict:
        keys = _sorted_keys(x)
        return t, [x[k] for k in keys], tuple(keys)
    if x is None:
        return None, [], None
    if _is_namedtuple(x):
        return t, list(x), None
    if isinstance(x, dict):  # OrderedDict, defaultdict subclasses: keep insertion order
        keys = list(x)
        return t, [x[k] for k in keys], tuple(keys)
    return None


def _sorted_keys(d: dict) -> list:
    """The keys of ``d`` in sorted order, as JAX orders a dict's children (``{1.5: a, 1: b}`` is
    ``[b, a]``); keys that do not compare with each other (``{1: a, "y": b}``) are JAX's
    ``ValueError``."""
    try:
        return sorted(d)
    except TypeError as e:
        raise ValueError("Comparator raised exception while sorting pytree dictionary keys.") from e


def _by_value(x: Any) -> Hashable:
    """A hashable stand-in for auxiliary data that is not hashable itself (dicts, lists, sets,
    NumPy arrays, nested); equal values give equal stand-ins."""
    try:
        hash(x)
        return x
    except TypeError:
        pass
    if isinstance(x, dict):
        return ("dict", frozenset((k, _by_value(v)) for k, v in x.items()))
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, tuple(_by_value(v) for v in x))
    if isinstance(x, (set, frozenset)):
        return ("set", frozenset(_by_value(v) for v in x))
    if isinstance(x, np.ndarray):
        return ("ndarray", x.shape, x.dtype.str, x.tobytes())
    return ("unhashable", type(x).__qualname__)  # equal hashes; equality decides


def _aux_equal(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return bool(a == b)
    except (TypeError, ValueError):  # e.g. NumPy arrays compare elementwise
        return type(a) is type(b) and _by_value(a) == _by_value(b)


class PyTreeDef:
    """The structure of a pytree (its leaves replaced by holes)."""

    __slots__ = ("node", "aux", "children", "num_leaves", "_hash")

    def __init__(self, node: Any, aux: Hashable, children: tuple):
        self.node = node
        self.aux = aux
        self.children = children
        if node == "leaf":
            self.num_leaves = 1
        else:
            self.num_leaves = sum(c.num_leaves for c in children)
        try:
            self._hash = hash((node, aux, children))
        except TypeError:  # auxiliary data such as a dict or a list: hashed by value, as in JAX
            self._hash = hash((node, _by_value(aux), children))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, PyTreeDef) and self.node == other.node and _aux_equal(self.aux, other.aux)
                and self.children == other.children)

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"PyTreeDef({self._str()})"

    def _str(self) -> str:
        if self.node == "leaf":
            return "*"
        if self.node is None and not self.children:
            return "None"
        inner = ", ".join(c._str() for c in self.children)
        if self.node is tuple:
            return f"({inner}{',' if len(self.children) == 1 else ''})"
        if self.node is list:
            return f"[{inner}]"
        if self.node is dict:
            return "{" + ", ".join(f"{k!r}: {c._str()}" for k, c in zip(self.aux, self.children)) + "}"
        return f"{getattr(self.node, '__name__', self.node)}({inner})"

    def unflatten(self, leaves: Any) -> Any:
        return unflatten(self, leaves)

    @property
    def num_nodes(self) -> int:
        return 1 + sum(c.num_nodes for c in self.children) if self.node != "leaf" else 1


_LEAF = PyTreeDef("leaf", None, ())


def _flatten_into(x: Any, is_leaf: Callable[[Any], bool] | None, leaves: list) -> PyTreeDef:
    if is_leaf is not None and is_leaf(x):
        leaves.append(x)
        return _LEAF
    n = _node_of(x)
    if n is None:
        leaves.append(x)
        return _LEAF
    node, children, aux = n
    return PyTreeDef(node, aux, tuple(_flatten_into(c, is_leaf, leaves) for c in children))


def flatten(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> tuple[list, PyTreeDef]:
    """Leaves in a fixed order and the structure to rebuild ``tree`` from them."""
    # module-level recursion, not a self-referencing closure: such a closure is a reference cycle
    # that would keep the leaves (the caller's arrays) alive until the garbage collector runs
    leaves: list = []
    td = _flatten_into(tree, is_leaf, leaves)
    return leaves, td


def _build(td: PyTreeDef, it: Any) -> Any:
    if td.node == "leaf":
        return next(it)
    children = [_build(c, it) for c in td.children]
    node = td.node
    if node is None:
        return None
    if node is tuple:
        return tuple(children)
    if node is list:
        return children
    if node is dict:
        return dict(zip(td.aux, children))
    if node in _registry:
        return _registry[node].from_iterable(td.aux, children)
    if isinstance(node, type) and issubclass(node, tuple):  # namedtuple
        return node(*children)
    if isinstance(node, type) and issubclass(node, dict):
        return node(zip(td.aux, children))
    raise TypeError(f"cannot rebuild pytree node {node}")  # pragma: no cover


def unflatten(treedef: PyTreeDef, leaves: Any) -> Any:
    """Rebuild a pytree of structure ``treedef`` from ``leaves``."""
    leaves = list(leaves)
    if len(leaves) != treedef.num_leaves:
        raise ValueError(f"tree structure {treedef} needs {treedef.num_leaves} leaves, got {len(leaves)}")
    return _build(treedef, iter(leaves))  # module-level recursion: no reference cycle


def leaves(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> list:
    return flatten(tree, is_leaf)[0]


def structure(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> PyTreeDef:
    return flatten(tree, is_leaf)[1]


def tree_map(f: Callable, tree: Any, *rest: Any, is_leaf: Callable[[Any], bool] | None = None) -> Any:
    """Apply ``f`` leaf-wise over ``tree`` and trees of the same structure in ``rest``."""
    lv, td = flatten(tree, is_leaf)
    others = []
    for r in rest:
        rl, rtd = flatten_up_to(td, r)
        others.append(rl)
    return unflatten(td, [f(*xs) for xs in zip(lv, *others)])


def _flatten_up_to_into(td: PyTreeDef, x: Any, path: str, out: list) -> None:
    if td.node == "leaf":
        out.append(x)
        return
    n = _node_of(x)
    if n is None or n[0] != td.node or (td.node is dict and n[2] != td.aux) \
            or len(n[1]) != len(td.children):
        raise ValueError(f"pytree structure mismatch at {path or 'root'}: expected {td}, got "
                         f"{structure(x)}")
    for i, (c, y) in enumerate(zip(td.children, n[1])):
        _flatten_up_to_into(c, y, f"{path}[{td.aux[i]!r}]" if td.node is dict else f"{path}[{i}]", out)


def flatten_up_to(treedef: PyTreeDef, tree: Any) -> tuple[list, PyTreeDef]:
    """Flatten ``tree`` to the leaves of ``treedef`` (whose leaves may be subtrees of ``tree``)."""
    out: list = []
    _flatten_up_to_into(treedef, tree, "", out)
    return out, treedef


def all_leaves(iterable: Any) -> bool:
    return all(structure(x) == _LEAF for x in iterable)


def tree_reduce(f: Callable, tree: Any, initializer: Any = None) -> Any:
    lv = leaves(tree)
    return functools.reduce(f, lv) if initializer is None else functools.reduce(f, lv, initializer)


def treedef_is_leaf(td: PyTreeDef) -> bool:
    return td.node == "leaf"
