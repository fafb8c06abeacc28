"""``ember.pure_callback``: call a host (NumPy) function from inside ``jit``/``vmap``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember._src.core import ShapedArray
from ember._src.prims.callback import pure_callback_bind
from ember._src.tree import flatten, unflatten


def pure_callback(callback: Callable[..., Any], result_shape_dtypes: Any, *args: Any, sharding: Any = None,
                  vmap_method: str | None = None, **kwargs: Any) -> Any:
    """Call ``callback(*args, **kwargs)`` on NumPy arrays, from traced code, as ``jax.pure_callback``.

    ``result_shape_dtypes`` is a pytree of objects with ``shape`` and ``dtype`` (e.g.
    ``ShapeDtypeStruct``) describing what ``callback`` returns. The function must be pure: a
    compiled program may call it once per run, or not at all if its result is unused. Under ``vmap``
    ``vmap_method`` is required: ``"sequential"``, ``"expand_dims"`` or ``"broadcast_all"``.
    Not differentiable (as JAX).
    """
    flat_args, in_tree = flatten((args, kwargs))
    res_leaves, res_tree = flatten(result_shape_dtypes)
    avals = [ShapedArray(tuple(r.shape), np.dtype(r.dtype)) for r in res_leaves]

    def flat_callback(*flat: np.ndarray) -> list:
        a, kw = unflatten(in_tree, list(flat))
        out_leaves, out_tree = flatten(callback(*a, **kw))
        if out_tree != res_tree:
            raise ValueError(f"pure_callback: the callback returned a structure {out_tree}, "
                             f"result_shape_dtypes declares {res_tree}")
        return out_leaves

    outs = pure_callback_bind(flat_callback, avals, *flat_args, vmap_method=vmap_method)
    return unflatten(res_tree, outs)


__all__ = ["pure_callback"]
