"""``pure_callback``: a host Python function called from a traced program (NumPy in, NumPy out).

The primitive's implementation calls the function; the native backend runs it as a fallback step
(called back from the compiled program). Under ``vmap`` the ``vmap_method`` says how: call once per
batch element (``sequential``), or once with the batch axis in front of every argument
(``expand_dims``: unbatched arguments get a size-1 axis; ``broadcast_all``: they are broadcast).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ember._src.core import Primitive, ShapedArray
from ember.errors import ShapeError

pure_callback_p = Primitive("pure_callback", multiple_results=True)

VMAP_METHODS = ("sequential", "expand_dims", "broadcast_all")


def _impl(*args: np.ndarray, callback: Callable[..., Sequence[Any]], result_avals: tuple,
          vmap_method: str | None) -> list[np.ndarray]:
    outs = list(callback(*[np.asarray(a) for a in args]))
    if len(outs) != len(result_avals):
        raise ShapeError(f"pure_callback: the callback returned {len(outs)} arrays, "
                         f"result_shape_dtypes declares {len(result_avals)}")
    result = []
    for i, (o, aval) in enumerate(zip(outs, result_avals)):
        o = np.asarray(o)
        if o.shape != tuple(aval.shape):
            raise ShapeError(f"pure_callback: result {i} has shape {o.shape}, result_shape_dtypes declares "
                             f"{tuple(aval.shape)}")
        result.append(np.ascontiguousarray(o, dtype=aval.dtype))
    return result


def _abstract(*avals: ShapedArray, callback: Callable, result_avals: tuple, vmap_method: str | None) -> list:
    return list(result_avals)


def _sequential(callback: Callable, dims: Sequence[int | None], n: int) -> Callable:
    def run(*args: np.ndarray) -> list[np.ndarray]:
        rows = [callback(*[a if d is None else np.take(a, i, axis=d) for a, d in zip(args, dims)])
                for i in range(n)]
        return [np.stack([np.asarray(r[j]) for r in rows]) for j in range(len(rows[0]))] if rows else []
    return run


def _leading(callback: Callable, dims: Sequence[int | None], n: int, broadcast: bool) -> Callable:
    def run(*args: np.ndarray) -> list[np.ndarray]:
        moved = []
        for a, d in zip(args, dims):
            if d is not None:
                moved.append(np.moveaxis(a, d, 0))
            elif broadcast:
                moved.append(np.broadcast_to(a, (n,) + a.shape))
            else:
                moved.append(a[None])
        return list(callback(*moved))
    return run


def _batch(vals: list, dims: list, *, callback: Callable, result_avals: tuple,
           vmap_method: str | None) -> tuple[list, list]:
    if vmap_method not in VMAP_METHODS:
        raise NotImplementedError("vmap of pure_callback needs vmap_method= one of "
                                  f"{', '.join(VMAP_METHODS)} (got {vmap_method!r})")
    n = next(v.shape[d] for v, d in zip(vals, dims) if d is not None)
    if vmap_method == "sequential":
        cb = _sequential(callback, dims, n)
    else:
        cb = _leading(callback, dims, n, vmap_method == "broadcast_all")
    avals = tuple(ShapedArray((n,) + tuple(a.shape), a.dtype) for a in result_avals)
    outs = pure_callback_p.bind(*vals, callback=_Callback(cb), result_avals=avals, vmap_method=vmap_method)
    return list(outs), [0] * len(outs)


class _Callback:
    """A host function as a primitive parameter: compared by identity, printed by name."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable):
        self.fn = fn

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)

    def __repr__(self) -> str:
        return f"<callback {getattr(self.fn, '__name__', 'fn')}>"


pure_callback_p.impl = _impl
pure_callback_p.abstract_eval = _abstract
pure_callback_p.batch = _batch
pure_callback_p.na("jvp", "a host function has no derivative (as JAX): wrap the call in "
                         "custom_jvp/custom_vjp")
pure_callback_p.na("transpose", "not a linear primitive")
pure_callback_p.na("lowering", "runs as a native fallback step: the host Python function is called back from "
                               "the compiled program")


def pure_callback_bind(fn: Callable[..., Sequence[Any]], result_avals: Sequence[ShapedArray], *args: Any,
                       vmap_method: str | None = None) -> list:
    """Bind ``pure_callback`` on flat arguments; ``fn`` takes and returns flat lists of arrays."""
    return pure_callback_p.bind(*args, callback=_Callback(fn), result_avals=tuple(result_avals),
                                vmap_method=vmap_method)
