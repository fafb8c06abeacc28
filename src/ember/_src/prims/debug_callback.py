"""``debug_callback``: a host Python function called for its effect (printing, logging), no results.

The primitive is *effectful* (``Primitive.effectful``): the passes never drop it although it has no
outputs, never merge two of them (CSE) or evaluate one at compile time (constant folding), and
the native schedule runs effectful steps in program order. Its implementation calls the function
with the arguments as eager ember Arrays (copies; JAX passes ``jax.Array`` s); the native backend
runs it as a fallback step (called back from the compiled program, inside compiled loops too).
Rules follow JAX's ``debug_callback``:

* ``jvp``: the callback sees the primals only; no tangent outputs (so under ``grad`` it runs once,
  in the forward pass, and the backward pass has no trace of it).
* ``transpose``: nothing flows back (cotangents ``None``).
* ``batch``: unrolled over the mapped axis, one call per batch element in order (as JAX); an
  argument that is not batched is passed whole to every call. Under a symbolic batch size (named
  dynamic axes) one call loops over the elements on the host, in the same order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember._src.array import Array, aligned_copy
from ember._src.core import Primitive, ShapedArray, Tracer, dynamic_trace_active, get_aval
from ember._src.prims import movement as mv
from ember._src.prims.callback import _Callback

debug_callback_p = Primitive("debug_callback", multiple_results=True, effectful=True)


def _impl(*args: np.ndarray, callback: Callable[..., Any], ordered: bool, weak: tuple) -> list:
    # copies: a callback may keep its arguments (e.g. append them to a history list), and a
    # compiled program reuses the buffers it hands out here
    callback(*[Array(aligned_copy(np.asarray(a), share=False), w) for a, w in zip(args, weak)])
    return []


def _abstract(*avals: ShapedArray, callback: Callable, ordered: bool, weak: tuple) -> list:
    return []


def _jvp(primals: list, tangents: list, *, callback: Callable, ordered: bool,
         weak: tuple) -> tuple[list, list]:
    debug_callback_p.bind(*primals, callback=callback, ordered=ordered, weak=weak)
    return [], []


def _transpose(cts: list, *args: Any, callback: Callable, ordered: bool, weak: tuple) -> list:
    return [None] * len(args)


def _element(x: Any, dim: int, i: int) -> Any:
    return mv.squeeze(mv.slice_in_dim(x, i, i + 1, axis=dim), (dim,))


def _host_loop(callback: Callable, dims: list) -> Callable:
    def run(*args: np.ndarray) -> None:
        n = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
        for i in range(n):
            callback(*[a if d is None else a[(slice(None),) * d + (i,)] for a, d in zip(args, dims)])
    run.__name__ = getattr(callback, "__name__", "callback")
    return run


def _batch(vals: list, dims: list, *, callback: Callable, ordered: bool, weak: tuple) -> tuple[list, list]:
    n = next(v.shape[d] for v, d in zip(vals, dims) if d is not None)
    if isinstance(n, (int, np.integer)):
        for i in range(int(n)):
            debug_callback_p.bind(*[v if d is None else _element(v, d, i) for v, d in zip(vals, dims)],
                                  callback=callback, ordered=ordered, weak=weak)
    else:
        debug_callback_p.bind(*vals, callback=_Callback(_host_loop(callback, dims)), ordered=ordered,
                              weak=weak)
    return [], []


debug_callback_p.impl = _impl
debug_callback_p.abstract_eval = _abstract
debug_callback_p.jvp = _jvp
debug_callback_p.transpose = _transpose
debug_callback_p.batch = _batch
debug_callback_p.na("lowering", "runs as a native fallback step: the host Python function is called back "
                                "from the compiled program, in program order")


def debug_callback_bind(fn: Callable[..., Any], *args: Any, ordered: bool = False) -> None:
    """Bind ``debug_callback`` on flat arguments; ``fn`` takes the flat Arrays. As JAX, an eager
    call keeps the weak types of its arguments (Python scalars); a staged one (``jit``, loops)
    passes plain typed arrays."""
    staged = dynamic_trace_active() or any(isinstance(a, Tracer) for a in args)
    weak = tuple(False if staged else get_aval(a).weak_type for a in args)
    debug_callback_p.bind(*args, callback=_Callback(fn), ordered=bool(ordered), weak=weak)
