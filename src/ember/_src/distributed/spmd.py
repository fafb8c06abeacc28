"""SPMD over a named process axis: ``spmd(fn, axis_name="data")`` runs ``fn`` on every MPI process,
and inside it ``ember.lax``'s collectives (``psum``, ``pmean``, ``pmax``, ``pmin``, ``all_gather``,
``psum_scatter``, ``ppermute``, ``axis_index``) with that ``axis_name`` act across processes -- the
process-level counterpart of JAX's ``shard_map`` with one mesh axis, where each process holds one
shard. The functions of this module are those collectives' process implementations: ``ember.lax``
reaches them through :func:`_lax_hook` (users import them from ``ember.lax``, the one family).

Each collective binds a ``process_*`` primitive (:mod:`ember._src.prims.process`) over the bound
communicator: under ``jit`` the native backend runs it as a step of the program's one native call
that calls MPI from C on the arena buffers (``native/emit/mpi_calls.py``); eagerly, or where MPI cannot be
reached from C, it runs through mpi4py. ``spmd(..., collectives="callback")`` keeps the earlier
path, a ``pure_callback`` into mpi4py, for comparison. Either is wrapped in a ``custom_vjp`` whose
backward rule is the transpose JAX uses: ``psum``'s is ``psum``, ``pmean``'s is ``pmean``,
``all_gather``'s is ``psum_scatter`` and back, ``ppermute``'s is the inverse permutation,
``pmax``/``pmin`` send the summed cotangent to the elements that attained the extremum. Under
``vmap`` the collectives act on every mapped slice. Every process must run the same collectives in
the same order with the same shapes (in debug mode each collective checks that and names the
mismatch).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import ember
import ember.numpy as jnp
from ember._src import collectives as coll
from ember._src import core
from ember._src import debug as dbg
from ember._src.distributed import mpi as dist
from ember._src.prims import process as pp

MODES = ("native", "callback")
# (axis name, collectives mode, trace depth at entry) of the enclosing spmd calls
_active: list[tuple[Any, str, int]] = []
_groups: dict[int, pp.ProcessGroup] = {}  # id(communicator) -> its group (one per communicator)


def spmd(fn: Callable, axis_name: Any = "data", *, collectives: str = "native") -> Callable:
    """``fn`` with ``axis_name`` naming the axis of MPI processes for the collectives of this module.

    Each process calls the wrapped function with its own shard; ``psum(x, axis_name)`` inside it is
    the sum over processes, under ``jit``, ``grad`` and ``vmap`` alike (compose as
    ``jit(spmd(f, "data"))`` or ``spmd(jit(f), "data")``). ``collectives``: ``"native"`` (the
    collectives are primitives the native backend runs as MPI calls from C inside the program's
    native call) or ``"callback"`` (host callbacks into mpi4py, the earlier path)."""
    if collectives not in MODES:
        raise ValueError(f"spmd: collectives must be one of {MODES}, got {collectives!r}")

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        _active.append((axis_name, collectives, core.trace_depth()))
        try:
            return fn(*args, **kwargs)
        finally:
            _active.pop()

    return wrapped


def _mode(name: Any, what: str) -> str:
    """The collectives mode of the innermost enclosing ``spmd`` binding ``name`` (else NameError)."""
    for bound, mode, _ in reversed(_active):
        if bound == name:
            return mode
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


def _group() -> pp.ProcessGroup:
    """The process group of the communicator bound by ``ember.distributed.initialize``."""
    comm = dist._c()
    if id(comm) not in _groups:
        _groups[id(comm)] = pp.ProcessGroup(comm, check=_check_same)
    return _groups[id(comm)]


def _callback(host: Callable, x: Any, shape: tuple, vmap_method: str) -> Any:
    return ember.pure_callback(host, ember.ShapeDtypeStruct(shape, x.dtype), x, vmap_method=vmap_method)


# the raw collectives on one array, by mode: the primitive, or a host callback of the same function

def _allreduce(x: Any, op: str, mode: str) -> Any:
    g = _group()
    if mode == "native":
        return pp.allreduce(x, g, op)
    return _callback(lambda a: g.allreduce(a, op), x, x.shape, "expand_dims")


def _gather(x: Any, mode: str) -> Any:
    g = _group()
    if mode == "native":
        return pp.all_gather(x, g)
    return _callback(g.allgather, x, (g.size, *x.shape), "sequential")


def _scatter(x: Any, mode: str) -> Any:
    g = _group()
    if mode == "native":
        return pp.reduce_scatter(x, g)
    return _callback(g.reduce_scatter, x, x.shape[1:], "sequential")


def _permute(x: Any, perm: tuple, mode: str) -> Any:
    g = _group()
    if mode == "native":
        return pp.permute(x, g, perm)
    return _callback(lambda a: g.permute(a, perm), x, x.shape, "expand_dims")


def _mean(total: Any) -> Any:
    n = _group().size
    return total / n if jnp.issubdtype(total.dtype, jnp.inexact) else total // n


@functools.cache
def _reducer(op: str, mode: str) -> Callable:
    if mode == "native":  # the primitives' own JVP and transpose rules
        return (lambda x: _mean(_allreduce(x, "sum", mode))) if op == "mean" else \
            (lambda x: _allreduce(x, op, mode))

    @ember.custom_vjp  # host callbacks: reverse mode only
    def collective(x: Any) -> Any:
        if op == "mean":
            return _mean(_allreduce(x, "sum", mode))
        return _allreduce(x, op, mode)

    def fwd(x: Any) -> tuple:
        y = collective(x)
        return y, (x, y)

    def bwd(res: tuple, g: Any) -> tuple:
        x, y = res
        if op == "mean":
            return (_reducer("mean", mode)(g),)
        total = _reducer("sum", mode)(g)
        if op == "sum":
            return (total,)
        return (jnp.where(x == y, total, jnp.zeros_like(total)),)

    collective.defvjp(fwd, bwd)
    return collective


def _linear(apply: Callable[[Any], Any], mode: str, transpose: Callable[[], Callable]) -> Callable:
    """A linear collective ``apply``: as it is in native mode (the primitive's own JVP and
    transpose rules); with host callbacks a ``custom_vjp`` whose backward pass is ``transpose()``."""
    if mode == "native":
        return apply

    @ember.custom_vjp
    def collective(x: Any) -> Any:
        return apply(x)

    collective.defvjp(lambda x: (collective(x), None), lambda _, g: (transpose()(g),))
    return collective


@functools.cache
def _gather_raw(mode: str) -> Callable:
    """Stack along a new leading axis; the transpose is the reduce-scatter of the cotangent."""
    return _linear(lambda x: _gather(x, mode), mode, lambda: _scatter_raw(mode))


@functools.cache
def _scatter_raw(mode: str) -> Callable:
    """This process's row of the sum (leading axis: one row per process); the transpose is the
    all-gather of the cotangent."""
    return _linear(lambda x: _scatter(x, mode), mode, lambda: _gather_raw(mode))


@functools.cache
def _permute_raw(perm: tuple, mode: str) -> Callable:
    """Send along ``perm``; the transpose sends the cotangent back along the inverse pairs."""
    inverse = tuple((d, s) for s, d in perm)
    return _linear(lambda x: _permute(x, perm, mode), mode, lambda: _permute_raw(inverse, mode))


def _tree(op: str, what: str) -> Callable:
    def collective(x: Any, axis_name: Any) -> Any:
        fn = _reducer(op, _mode(axis_name, what))
        return ember.tree_util.tree_map(lambda a: fn(jnp.asarray(a)), x)
    collective.__name__ = what
    collective.__doc__ = (f"``{what}`` of every leaf of ``x`` across the processes of the process axis "
                          "``axis_name`` (bound by an enclosing :func:`spmd`).")
    return collective


psum = _tree("sum", "psum")
pmean = _tree("mean", "pmean")
pmax = _tree("max", "pmax")
pmin = _tree("min", "pmin")


def all_gather(x: Any, axis_name: Any, *, axis: int = 0, tiled: bool = False) -> Any:
    """Every process's ``x`` stacked along a new axis ``axis`` in process order (``tiled=True``
    concatenates along the existing ``axis`` instead), as ``jax.lax.all_gather``."""
    mode = _mode(axis_name, "all_gather")
    x = jnp.asarray(x)
    if tiled and x.ndim == 0:
        raise ValueError("all_gather: tiled=True needs an array with at least one axis")
    ax = axis % (x.ndim if tiled else x.ndim + 1)
    out = jnp.moveaxis(_gather_raw(mode)(x), 0, ax)
    if tiled:
        s = out.shape
        out = out.reshape(*s[:ax], s[ax] * s[ax + 1], *s[ax + 2:])
    return out


def psum_scatter(x: Any, axis_name: Any, *, scatter_dimension: int = 0, tiled: bool = False) -> Any:
    """The sum over processes of ``x``, of which this process keeps its own part along
    ``scatter_dimension`` (as ``jax.lax.psum_scatter``): that dimension must have one entry per
    process (it is removed), or with ``tiled=True`` a multiple of the process count (it keeps
    this process's block)."""
    mode = _mode(axis_name, "psum_scatter")
    x = jnp.asarray(x)
    n = _group().size
    if x.ndim == 0:
        raise ValueError("psum_scatter: x must have at least one axis")
    sd = scatter_dimension % x.ndim
    size = x.shape[sd]
    if tiled and size % n:
        raise ValueError(f"psum_scatter: scatter_dimension {sd} of size {size} does not split into {n} parts")
    if not tiled and size != n:
        raise ValueError(f"psum_scatter: scatter_dimension {sd} has size {size}, the process axis has {n} "
                         "processes (use tiled=True to split a larger dimension)")
    rows = jnp.moveaxis(x, sd, 0)
    if tiled:
        rows = rows.reshape(n, size // n, *rows.shape[1:])
    out = _scatter_raw(mode)(rows)
    return jnp.moveaxis(out, 0, sd) if tiled else out


def ppermute(x: Any, axis_name: Any, perm: Sequence[tuple[int, int]]) -> Any:
    """Each process's ``x`` sent to another along the ``(source, destination)`` pairs of ``perm``
    (as ``jax.lax.ppermute``); a process no pair sends to gets zeros."""
    mode = _mode(axis_name, "ppermute")
    n = _group().size
    pairs = tuple((int(s), int(d)) for s, d in perm)
    for what, k in (("source", 0), ("destination", 1)):
        ends = [p[k] for p in pairs]
        if any(not 0 <= e < n for e in ends) or len(set(ends)) != len(ends):
            raise ValueError(f"ppermute: perm must name each {what} at most once, each in [0, {n}); "
                             f"got {list(pairs)}")
    return ember.tree_util.tree_map(lambda a: _permute_raw(pairs, mode)(jnp.asarray(a)), x)


def axis_index(axis_name: Any) -> Any:
    """This process's position along the process axis ``axis_name`` (an int32 scalar)."""
    _mode(axis_name, "axis_index")
    return jnp.asarray(dist.process_index(), dtype=jnp.int32)


def axis_size(axis_name: Any) -> int:
    """The number of processes along the process axis ``axis_name``."""
    _mode(axis_name, "axis_size")
    return dist.process_count()


_BY_NAME = {"psum": psum, "pmean": pmean, "pmax": pmax, "pmin": pmin, "all_gather": all_gather,
            "psum_scatter": psum_scatter, "ppermute": ppermute, "axis_index": axis_index,
            "axis_size": axis_size}


def _lax_hook(what: str, axis_name: Any) -> Callable | None:
    """``ember.lax``'s collectives on a process axis: the process collective ``what`` when the
    innermost binding of ``axis_name`` is an enclosing :func:`spmd`/``shard_map`` (a ``vmap`` of the
    same name entered inside it takes precedence, as the innermost binding does in JAX)."""
    depth = mode = None
    for bound, m, d in reversed(_active):
        if bound == axis_name:
            depth, mode = d, m
            break
    if depth is None:
        return None
    try:
        main = coll.axis_main(axis_name)
    except NameError:
        main = None
    if main is not None and main.level >= depth:
        return None
    return _ONE[what] if mode == "one" else _BY_NAME[what]


def _gather_one(x: Any, axis_name: Any, *, axis: int = 0, tiled: bool = False) -> Any:
    x = jnp.asarray(x)
    return x if tiled else jnp.expand_dims(x, axis)


def _scatter_one(x: Any, axis_name: Any, *, scatter_dimension: int = 0, tiled: bool = False) -> Any:
    x = jnp.asarray(x)
    if tiled:
        return x
    if x.shape[scatter_dimension] != 1:
        raise ValueError(f"psum_scatter: scatter_dimension {scatter_dimension} has size "
                         f"{x.shape[scatter_dimension]}, the axis {axis_name!r} has 1 member")
    return jnp.squeeze(x, scatter_dimension)


def _permute_one(x: Any, axis_name: Any, perm: Sequence[tuple[int, int]]) -> Any:
    keep = any((int(s), int(d)) == (0, 0) for s, d in perm)
    return ember.tree_util.tree_map(lambda a: jnp.asarray(a) if keep else jnp.zeros_like(a), x)


# the collectives over a mesh axis of one process (shard_map over a mesh with such axes, or any
# mesh in a single process): identities, without MPI
_ONE = {"psum": lambda x, n: x, "pmean": lambda x, n: x, "pmax": lambda x, n: x, "pmin": lambda x, n: x,
        "all_gather": _gather_one, "psum_scatter": _scatter_one, "ppermute": _permute_one,
        "axis_index": lambda n: jnp.asarray(0, dtype=jnp.int32), "axis_size": lambda n: 1}


coll.process_axis_hook = _lax_hook
