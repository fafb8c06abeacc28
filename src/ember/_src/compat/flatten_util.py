"""``ravel_pytree``: a pytree of arrays as one flat vector, and the function that undoes it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import ember.numpy as jnp
from ember._src.tree import flatten, unflatten


def ravel_pytree(pytree: Any) -> tuple[Any, Callable[[Any], Any]]:
    """Ravel the leaves of ``pytree`` into one 1-D array; return it and ``unravel(flat) -> pytree``.

    The flat array has the promoted dtype of the leaves (float32 for an empty tree, as JAX);
    ``unravel`` casts each piece back to its leaf's dtype. Works under ``jit``/``grad``/``vmap``.
    """
    leaves, treedef = flatten(pytree)
    arrays = [jnp.asarray(x) for x in leaves]
    shapes = [tuple(a.shape) for a in arrays]
    dtypes = [a.dtype for a in arrays]
    sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]
    out_dtype = jnp.result_type(*dtypes) if dtypes else np.dtype(np.float32)
    if arrays:
        flat = jnp.concatenate([jnp.ravel(a).astype(out_dtype) for a in arrays])
    else:
        flat = jnp.zeros((0,), out_dtype)
    total = sum(sizes)

    def unravel(flat_vec: Any) -> Any:
        flat_vec = jnp.asarray(flat_vec)
        if tuple(flat_vec.shape) != (total,):
            raise ValueError(f"unravel: expected a flat array of shape ({total},), got shape "
                             f"{tuple(flat_vec.shape)}")
        pieces, start = [], 0
        for shape, dt, n in zip(shapes, dtypes, sizes):
            pieces.append(jnp.reshape(flat_vec[start:start + n], shape).astype(dt))
            start += n
        return unflatten(treedef, pieces)

    return flat, unravel


__all__ = ["ravel_pytree"]
