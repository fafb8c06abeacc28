"""SPMD over a named process axis: ``spmd(fn, axis_name="data")`` runs ``fn`` on every MPI process,
and inside it the process collectives of this module (``psum``, ``pmean``, ``pmax``, ``pmin``,
``all_gather``, ``axis_index``) with that ``axis_name`` reduce across processes -- the process-level
counterpart of JAX's ``shard_map`` with one mesh axis, where each process holds one shard.

Each collective is a ``pure_callback`` (so it runs inside ``jit``-compiled programs: the compiled
program calls back into Python, which calls MPI) wrapped in a ``custom_vjp`` whose backward rule is
the transpose JAX uses: ``psum``'s is ``psum``, ``pmean``'s is ``pmean``, ``all_gather``'s is
``psum_scatter`` (the summed cotangent's own slice), ``pmax``/``pmin`` send the summed cotangent to
the elements that attained the extremum. Under ``vmap`` the reductions act on every mapped slice.
Every process must run the same collectives in the same order with the same shapes (in debug mode
``ember.distributed.all_reduce`` checks that and names the mismatch).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

import ember
import ember.numpy as jnp
from ember._src import debug as dbg
from ember._src.distributed import mpi as dist

_active: list[Any] = []  # axis names of the enclosing spmd calls (trace-time context)


def spmd(fn: Callable, axis_name: Any = "data") -> Callable:
    """``fn`` with ``axis_name`` naming the axis of MPI processes for the collectives of this module.

    Each process calls the wrapped function with its own shard; ``psum(x, axis_name)`` inside it is
    the sum over processes, under ``jit``, ``grad`` and ``vmap`` alike (compose as
    ``jit(spmd(f, "data"))`` or ``spmd(jit(f), "data")``)."""

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        _active.append(axis_name)
        try:
            return fn(*args, **kwargs)
        finally:
            _active.pop()

    return wrapped


def _check(name: Any, what: str) -> None:
    if name not in _active:
        raise NameError(f"{what}: unbound process axis name {name!r} (call it inside "
                        f"ember.distributed.spmd(fn, axis_name={name!r}))")


_SIG = 10  # ndim, up to 8 sizes, dtype number


def _check_same(what: str, x: np.ndarray) -> None:
    """In debug mode: every process passed the same shape and dtype (else ``DistributedError``
    naming the collective on every process, so none waits in a mismatched MPI call)."""
    if dbg.debug_level() <= 0:
        return
    sig = np.full(_SIG, -1, np.int64)
    sig[0], sig[-1] = x.ndim, x.dtype.num
    sig[1:1 + min(x.ndim, 8)] = x.shape[:8]
    hi = np.asarray(dist.all_reduce(sig, "max", check=False))
    lo = np.asarray(dist.all_reduce(sig, "min", check=False))
    if not np.array_equal(hi, lo):
        raise dist.DistributedError(f"{what}: the processes passed different shapes or dtypes (this one "
                                    f"{x.shape} {x.dtype}); every process must call it alike")


def _reduce_host(op: str) -> Callable:
    what = {"sum": "psum", "mean": "pmean", "max": "pmax", "min": "pmin"}[op]

    def host(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        _check_same(what, x)
        return np.asarray(dist.all_reduce(x, op, check=False)).astype(x.dtype, copy=False)
    return host


def _callback(host: Callable, x: Any, shape: tuple, vmap_method: str) -> Any:
    return ember.pure_callback(host, ember.ShapeDtypeStruct(shape, x.dtype), x, vmap_method=vmap_method)


def _reducer(op: str) -> Callable:
    host = _reduce_host(op)

    @ember.custom_vjp
    def collective(x: Any) -> Any:
        return _callback(host, x, x.shape, "expand_dims")

    def fwd(x: Any) -> tuple:
        y = collective(x)
        return y, (x, y)

    def bwd(res: tuple, g: Any) -> tuple:
        x, y = res
        if op == "mean":
            return (_pmean_raw(g),)
        total = _psum_raw(g)
        if op == "sum":
            return (total,)
        return (jnp.where(x == y, total, jnp.zeros_like(total)),)

    collective.defvjp(fwd, bwd)
    return collective


_psum_raw = _reducer("sum")
_pmean_raw = _reducer("mean")
_pmax_raw = _reducer("max")
_pmin_raw = _reducer("min")


def _tree(fn: Callable, what: str) -> Callable:
    def collective(x: Any, axis_name: Any) -> Any:
        _check(axis_name, what)
        return ember.tree_util.tree_map(lambda a: fn(jnp.asarray(a)), x)
    collective.__name__ = what
    collective.__doc__ = (f"``{what}`` of every leaf of ``x`` across the processes of the process axis "
                          "``axis_name`` (bound by an enclosing :func:`spmd`).")
    return collective


psum = _tree(_psum_raw, "psum")
pmean = _tree(_pmean_raw, "pmean")
pmax = _tree(_pmax_raw, "pmax")
pmin = _tree(_pmin_raw, "pmin")


def _gather_host(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    _check_same("all_gather", x)
    return np.asarray(dist.all_gather(x))


@ember.custom_vjp
def _all_gather_raw(x: Any) -> Any:
    return _callback(_gather_host, x, (dist.process_count(), *x.shape), "sequential")


def _all_gather_fwd(x: Any) -> tuple:
    return _all_gather_raw(x), None


def _all_gather_bwd(_: Any, g: Any) -> tuple:
    return (_psum_raw(g)[dist.process_index()],)  # psum_scatter: the summed cotangent's own slice


_all_gather_raw.defvjp(_all_gather_fwd, _all_gather_bwd)


def all_gather(x: Any, axis_name: Any, *, axis: int = 0, tiled: bool = False) -> Any:
    """Every process's ``x`` stacked along a new axis ``axis`` in process order (``tiled=True``
    concatenates along the existing ``axis`` instead), as ``jax.lax.all_gather``."""
    _check(axis_name, "all_gather")
    x = jnp.asarray(x)
    if tiled and x.ndim == 0:
        raise ValueError("all_gather: tiled=True needs an array with at least one axis")
    ax = axis % (x.ndim if tiled else x.ndim + 1)
    out = jnp.moveaxis(_all_gather_raw(x), 0, ax)
    if tiled:
        s = out.shape
        out = out.reshape(*s[:ax], s[ax] * s[ax + 1], *s[ax + 2:])
    return out


def axis_index(axis_name: Any) -> Any:
    """This process's position along the process axis ``axis_name`` (an int32 scalar)."""
    _check(axis_name, "axis_index")
    return jnp.asarray(dist.process_index(), dtype=jnp.int32)


def axis_size(axis_name: Any) -> int:
    """The number of processes along the process axis ``axis_name``."""
    _check(axis_name, "axis_size")
    return dist.process_count()
