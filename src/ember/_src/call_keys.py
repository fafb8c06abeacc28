"""The keys of ``jit``'s fast path: a call whose positional arguments are live ember Arrays or NumPy
arrays (flat, or in plain lists, tuples and dicts) is looked up by the shapes, dtypes and weak types
of its arrays alone, without flattening the pytree or computing abstract values.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember._src import tree as tu
from ember._src.array import Array

__all__ = ["fast_key", "fast_tree_key"]


def fast_key(args: tuple) -> tuple | None:
    """The fast-path cache key of positional arguments that are all live ember Arrays or NumPy
    arrays (shape, dtype, weak type per argument), or None."""
    key = []
    for a in args:
        t = type(a)
        if t is Array:
            v = a._value
            if v is None:
                return None
            key.append((v.shape, v.dtype, a._weak))
        elif t is np.ndarray:
            key.append((a.shape, a.dtype))
        else:
            return None
    return tuple(key)


def _tree_walk(x: Any, leaves: list, struct: list, leaf_key: list) -> bool:
    """Append ``x``'s leaves (pytree flatten order), structure markers and leaf keys; False for
    anything but (nested) plain lists, tuples and dicts of live ember Arrays / NumPy arrays."""
    t = type(x)
    if t is Array:
        v = x._value
        if v is None:
            return False
        leaves.append(x)
        leaf_key.append((v.shape, v.dtype, x._weak))
        struct.append(None)
        return True
    if t is np.ndarray:
        leaves.append(x)
        leaf_key.append((x.shape, x.dtype))
        struct.append(None)
        return True
    if t in tu._registry:
        return False
    if t is list or t is tuple:
        struct.append((t, len(x)))
        return all(_tree_walk(c, leaves, struct, leaf_key) for c in x)
    if t is dict:
        try:
            keys = tuple(sorted(x))
        except TypeError:
            return False
        struct.append((dict, keys))
        return all(_tree_walk(x[k], leaves, struct, leaf_key) for k in keys)
    return False


def fast_tree_key(args: tuple) -> tuple[tuple, tuple, list] | None:
    """For positional arguments that are (nested) lists, tuples and dicts of arrays: (the
    structure, the leaves' fast-path key, the leaves in the order the traced Program takes them),
    or None."""
    leaves: list = []
    struct: list = []
    leaf_key: list = []
    for a in args:
        if not _tree_walk(a, leaves, struct, leaf_key):
            return None
    return tuple(struct), tuple(leaf_key), leaves
