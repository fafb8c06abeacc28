"""Collectives over a named mapped axis: ``psum``, ``pmean``, ``pmax``, ``pmin``, ``all_gather``,
``psum_scatter``, ``ppermute``, ``all_to_all``, ``axis_index`` -- as JAX's, inside
``vmap(..., axis_name=...)`` (and ``ember.pmap``, which is ``vmap`` on the one host device).

Each is a primitive with an ``axis_name`` parameter. Binding one finds the innermost ``vmap``
level of that name on the interpreter stack (an unbound name is a ``NameError``, as in JAX) and
hands the operands to that level's trace, where :func:`apply_collective` turns it into ordinary
operations over the mapped axis (a ``reduce_sum`` over the batch dimension for ``psum``, ...).
Levels with other names pass it through, so nested ``vmap``s with different names work. A name
that no ``vmap`` level inside it binds, but that names the process axis of an enclosing
``shard_map``/``spmd``, goes to the process collectives (:data:`process_axis_hook`, installed by
``ember._src.distributed.spmd``): one family of names for both, as in JAX. The JVP
rules are the collectives of the tangents (``pmax``/``pmin`` select); the transposes are JAX's
(``psum``'s is ``psum``, ``all_gather``'s is ``psum_scatter``, ``ppermute``'s is the inverse
permutation).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ember._src import ad_util as ad
from ember._src import core
from ember._src import dtypes as dt
from ember._src.core import Primitive, ShapedArray
from ember._src.prims import elementwise as ew
from ember._src.prims import movement as mv
from ember._src.prims import reductions as red


class CollectivePrimitive(Primitive):
    """A primitive evaluated by the ``vmap`` level that owns its ``axis_name``."""

    collective = True

    def bind(self, *args: Any, **params: Any) -> Any:
        from ember._src.batching import BatchTrace

        name = params["axis_name"]
        main = axis_main(name)
        top = core.find_top_trace(args)
        trace = BatchTrace(main) if main.level > top.main.level else top
        tracers = [trace.full_raise(a) for a in args]
        outs = trace.process_primitive(self, tracers, params)
        if self.multiple_results:
            return [core.full_lower(o) for o in outs]
        return core.full_lower(outs[0])


def axis_main(name: Any) -> core.MainTrace:
    """The innermost ``vmap`` level named ``name`` (``NameError`` when there is none)."""
    from ember._src.batching import BatchTrace

    for m in reversed(core._state.stack):
        if m.trace_type is BatchTrace and m.global_data is not None and m.global_data.name == name:
            return m
    raise NameError(f"unbound axis name: {name!r} (collectives need an enclosing "
                    f"vmap(..., axis_name={name!r}) or pmap)")


def _size(axis_data: Any) -> int:
    n = axis_data.size
    if not isinstance(n, int):
        raise NotImplementedError("collectives over a symbolic-size mapped axis")
    return n


def _moved(v: Any, d: int | None, n: int) -> Any:
    """``v`` with the mapped axis first (broadcast when it does not vary along it)."""
    if d is None:
        a = core.get_aval(v)
        return mv.broadcast_in_dim(v, (n, *a.shape), tuple(range(1, a.ndim + 1)))
    return mv.moveaxis(v, d, 0) if d != 0 else v


def apply_collective(prim: Primitive, vals: list, dims: list, axis_data: Any,
                     params: dict) -> tuple[list, list]:
    """Evaluate collective ``prim`` over the mapped axis: values and batch dims at that level."""
    n = _size(axis_data)
    rule = _RULES[prim.name]
    return rule(vals, dims, n, **{k: v for k, v in params.items() if k != "axis_name"})


def _reduce(kind: str) -> Any:
    def rule(vals: list, dims: list, n: int) -> tuple[list, list]:
        (v,), (d,) = vals, dims
        a = core.get_aval(v)
        if d is None:
            if kind == "sum":
                return [ew.mul(v, mv.full_like(v, n))], [None]
            if kind == "mean":
                return [v], [None]
            return [v], [None]
        if kind == "sum":
            out = red.reduce_sum(v, (d,))
        elif kind == "mean":
            out = red.reduce_sum(v, (d,))
            out = ew.div(out, mv.full_like(out, n)) if dt.is_inexact(a.dtype) else \
                ew.div(out, mv.full_like(out, n))
        elif kind == "max":
            out = red.reduce_max(v, (d,))
        else:
            out = red.reduce_min(v, (d,))
        return [out], [None]
    return rule


def _all_gather(vals: list, dims: list, n: int, *, axis: int = 0, tiled: bool = False,
                axis_size: int = 0) -> tuple[list, list]:
    (v,), (d,) = vals, dims
    x = _moved(v, d, n)  # (n, *shape)
    shape = core.get_aval(x).shape
    ax = axis % len(shape)
    out = mv.moveaxis(x, 0, ax) if ax else x
    if tiled:
        s = core.get_aval(out).shape
        out = mv.reshape(out, (*s[:ax], s[ax] * s[ax + 1], *s[ax + 2:]))
    return [out], [None]


def _psum_scatter(vals: list, dims: list, n: int, *, scatter_dimension: int = 0,
                  tiled: bool = False) -> tuple[list, list]:
    total = _reduce("sum")(vals, dims, n)[0][0]
    shape = core.get_aval(total).shape
    sd = scatter_dimension % len(shape)
    if tiled:
        if shape[sd] % n:
            raise ValueError(f"psum_scatter: dimension {sd} of size {shape[sd]} does not split into "
                             f"{n} parts")
        parts = mv.reshape(total, (*shape[:sd], n, shape[sd] // n, *shape[sd + 1:]))
        return [parts], [sd]
    if shape[sd] != n:
        raise ValueError(f"psum_scatter: scatter dimension {sd} has size {shape[sd]}, the axis has {n} "
                         "members (use tiled=True to split a larger dimension)")
    return [total], [sd]


def _ppermute(vals: list, dims: list, n: int, *, perm: tuple) -> tuple[list, list]:
    (v,), (d,) = vals, dims
    x = _moved(v, d, n)
    src = np.zeros(n, np.int32)
    got = np.zeros(n, bool)
    for i, j in perm:
        src[j], got[j] = i, True
    out = _take0(x, src)
    if not got.all():
        shape = core.get_aval(out).shape
        mask = mv.broadcast_in_dim(np.asarray(got), shape, (0,))
        out = ew.select(mask, out, mv.full_like(out, 0))
    return [out], [0]


def _take0(x: Any, idx: np.ndarray) -> Any:
    from ember._src.prims.indexing import take
    return take(x, np.asarray(idx), 0)


def _all_to_all(vals: list, dims: list, n: int, *, split_axis: int, concat_axis: int,
                tiled: bool = False) -> tuple[list, list]:
    (v,), (d,) = vals, dims
    x = _moved(v, d, n)  # (i, *shape): member i's array
    shape = core.get_aval(x).shape[1:]
    sa, ca = split_axis % len(shape), concat_axis % len(shape)
    if shape[sa] % n:
        raise ValueError(f"all_to_all: split axis {sa} of size {shape[sa]} does not split into {n} parts")
    k = shape[sa] // n
    # (i, ..., j, k, ...): chunk j of member i's split axis
    y = mv.reshape(x, (n, *shape[:sa], n, k, *shape[sa + 1:]))
    # member j receives chunk j from every i: bring j to the front, keep i where the chunks concatenate
    y = mv.moveaxis(y, sa + 1, 0)  # (j, i, ..., k, ...)
    s = core.get_aval(y).shape
    rest = list(s[2:])  # the member's shape with the split axis at sa of size k
    # place i just before the concat axis and merge the two
    y = mv.moveaxis(y, 1, ca + 1)  # (j, ..., i, <concat axis>, ...)
    s = core.get_aval(y).shape
    merged = (*s[:ca + 1], s[ca + 1] * s[ca + 2], *s[ca + 3:])
    del rest
    return [mv.reshape(y, merged)], [0]


def _axis_index(vals: list, dims: list, n: int) -> tuple[list, list]:
    return [mv.iota(dt.int32, n)], [0]


_RULES = {"psum": _reduce("sum"), "pmean": _reduce("mean"), "pmax": _reduce("max"), "pmin": _reduce("min"),
          "all_gather": _all_gather, "psum_scatter": _psum_scatter, "ppermute": _ppermute,
          "all_to_all": _all_to_all, "axis_index": _axis_index}


def _declare(name: str, linear: bool) -> CollectivePrimitive:
    p = CollectivePrimitive(name, linear=linear)
    p.impl = None
    p.na("impl", "a collective runs inside the vmap level that owns its axis name")
    p.na("batch", "the vmap level that owns the axis name evaluates it (apply_collective); other "
                  "levels pass it through")
    p.na("lowering", "never reaches a backend: vmap turns it into reductions/gathers over the mapped axis")
    return p


psum_p = _declare("psum", True)
pmean_p = _declare("pmean", True)
pmax_p = _declare("pmax", False)
pmin_p = _declare("pmin", False)
all_gather_p = _declare("all_gather", True)
psum_scatter_p = _declare("psum_scatter", True)
ppermute_p = _declare("ppermute", True)
all_to_all_p = _declare("all_to_all", True)
axis_index_p = _declare("axis_index", False)


def _same(x: ShapedArray, **_: Any) -> ShapedArray:
    return x


for _p in (psum_p, pmean_p, pmax_p, pmin_p, ppermute_p):
    _p.abstract_eval = _same


def _gather_abstract(x: ShapedArray, *, axis_name: Any, axis: int = 0, tiled: bool = False,
                     axis_size: int = 0) -> ShapedArray:
    shape = list(x.shape)
    ax = axis % (len(shape) + 1)
    if tiled:
        shape[ax] *= axis_size
    else:
        shape.insert(ax, axis_size)
    return ShapedArray(tuple(shape), x.dtype, x.weak_type)


all_gather_p.abstract_eval = _gather_abstract
psum_scatter_p.abstract_eval = lambda x, **p: x  # shapes at the owning level come from its rule
all_to_all_p.abstract_eval = lambda x, **p: x
axis_index_p.abstract_eval = lambda *, axis_name: ShapedArray((), dt.int32)


def _linear_jvp(p: Primitive) -> Any:
    def jvp(primals: list, tangents: list, **params: Any) -> tuple[list, list]:
        out = p.bind(*primals, **params)
        t = tangents[0]
        return [out], [ad.Zero.from_value(out) if ad.is_zero(t) else p.bind(ad.instantiate(t), **params)]
    return jvp


for _p in (psum_p, pmean_p, all_gather_p, psum_scatter_p, ppermute_p, all_to_all_p):
    _p.jvp = _linear_jvp(_p)


def _minmax_jvp(p: Primitive) -> Any:
    def jvp(primals: list, tangents: list, **params: Any) -> tuple[list, list]:
        (x,), (t,) = primals, tangents
        out = p.bind(x, **params)
        if ad.is_zero(t):
            return [out], [ad.Zero.from_value(out)]
        # the tangent of the member(s) holding the extremum, averaged over ties
        hit = ew.convert_element_type(ew.eq(x, out), core.get_aval(t).dtype)
        num = psum_p.bind(ew.mul(hit, ad.instantiate(t)), axis_name=params["axis_name"])
        cnt = psum_p.bind(hit, axis_name=params["axis_name"])
        return [out], [ew.div(num, cnt)]
    return jvp


pmax_p.jvp = _minmax_jvp(pmax_p)
pmin_p.jvp = _minmax_jvp(pmin_p)
axis_index_p.jvp = lambda primals, tangents, **p: (
    [axis_index_p.bind(**p)], [ad.Zero(ShapedArray((), dt.int32))])
pmax_p.na("transpose", "not linear")
pmin_p.na("transpose", "not linear")
axis_index_p.na("transpose", "no operands")

psum_p.transpose = lambda ct, x, **p: [psum_p.bind(ad.instantiate(ct), **p)]
pmean_p.transpose = lambda ct, x, **p: [pmean_p.bind(ad.instantiate(ct), **p)]
ppermute_p.transpose = lambda ct, x, *, axis_name, perm: [
    ppermute_p.bind(ad.instantiate(ct), axis_name=axis_name, perm=tuple((j, i) for i, j in perm))]
all_gather_p.transpose = lambda ct, x, *, axis_name, axis=0, tiled=False, axis_size=0: [
    psum_scatter_p.bind(ad.instantiate(ct), axis_name=axis_name, scatter_dimension=axis, tiled=tiled)]
psum_scatter_p.transpose = lambda ct, x, *, axis_name, scatter_dimension=0, tiled=False: [
    all_gather_p.bind(ad.instantiate(ct), axis_name=axis_name, axis=scatter_dimension, tiled=tiled,
                      axis_size=_size(axis_main(axis_name).global_data))]
all_to_all_p.transpose = lambda ct, x, *, axis_name, split_axis, concat_axis, tiled=False: [
    all_to_all_p.bind(ad.instantiate(ct), axis_name=axis_name, split_axis=concat_axis,
                      concat_axis=split_axis, tiled=tiled)]


# -- the lax-level functions -----------------------------------------------------------------------

# Set by ember._src.distributed.spmd (a higher layer): ``hook(what, axis_name)`` returns the process
# collective ``what`` when ``axis_name`` is the process axis of an enclosing shard_map/spmd and no
# vmap level entered inside that binds the same name; otherwise None.
process_axis_hook: Callable[[str, Any], Callable | None] | None = None


def _process(what: str, axis_name: Any) -> Callable | None:
    """The process-axis implementation of collective ``what`` for ``axis_name``, or None."""
    hook = process_axis_hook
    return None if hook is None else hook(what, axis_name)


def _tree_map(fn: Any, x: Any) -> Any:
    from ember._src import tree as tu
    return tu.tree_map(fn, x)


def psum(x: Any, axis_name: Any) -> Any:
    """Sum of ``x`` over the members of the mapped axis ``axis_name`` (every member gets it)."""
    proc = _process("psum", axis_name)
    if proc is not None:
        return proc(x, axis_name)
    return _tree_map(lambda v: psum_p.bind(v, axis_name=axis_name), x)


def pmean(x: Any, axis_name: Any) -> Any:
    """Mean of ``x`` over the members of ``axis_name``."""
    proc = _process("pmean", axis_name)
    if proc is not None:
        return proc(x, axis_name)
    return _tree_map(lambda v: pmean_p.bind(v, axis_name=axis_name), x)


def pmax(x: Any, axis_name: Any) -> Any:
    """Maximum of ``x`` over the members of ``axis_name``."""
    proc = _process("pmax", axis_name)
    if proc is not None:
        return proc(x, axis_name)
    return _tree_map(lambda v: pmax_p.bind(v, axis_name=axis_name), x)


def pmin(x: Any, axis_name: Any) -> Any:
    """Minimum of ``x`` over the members of ``axis_name``."""
    proc = _process("pmin", axis_name)
    if proc is not None:
        return proc(x, axis_name)
    return _tree_map(lambda v: pmin_p.bind(v, axis_name=axis_name), x)


def all_gather(x: Any, axis_name: Any, *, axis: int = 0, tiled: bool = False) -> Any:
    """Every member's ``x`` stacked along ``axis`` (concatenated with ``tiled``)."""
    proc = _process("all_gather", axis_name)
    if proc is not None:
        return _tree_map(lambda v: proc(v, axis_name, axis=axis, tiled=tiled), x)
    n = _size(axis_main(axis_name).global_data)
    return _tree_map(lambda v: all_gather_p.bind(v, axis_name=axis_name, axis=axis, tiled=tiled,
                                                 axis_size=n), x)


def psum_scatter(x: Any, axis_name: Any, *, scatter_dimension: int = 0, tiled: bool = False) -> Any:
    """``psum`` whose result is split along ``scatter_dimension``: member ``i`` keeps part ``i``."""
    proc = _process("psum_scatter", axis_name)
    if proc is not None:
        return _tree_map(lambda v: proc(v, axis_name, scatter_dimension=scatter_dimension, tiled=tiled), x)
    return _tree_map(lambda v: psum_scatter_p.bind(v, axis_name=axis_name,
                                                   scatter_dimension=scatter_dimension, tiled=tiled), x)


def ppermute(x: Any, axis_name: Any, perm: Sequence[tuple[int, int]]) -> Any:
    """Send member ``i``'s ``x`` to member ``j`` for each ``(i, j)`` in ``perm``; members that
    receive nothing get zeros."""
    perm = tuple((int(i), int(j)) for i, j in perm)
    proc = _process("ppermute", axis_name)
    if proc is not None:
        return proc(x, axis_name, perm)
    if len({j for _, j in perm}) != len(perm) or len({i for i, _ in perm}) != len(perm):
        raise ValueError(f"ppermute: perm {perm} sends to or from a member twice")
    return _tree_map(lambda v: ppermute_p.bind(v, axis_name=axis_name, perm=perm), x)


def axis_size(axis_name: Any) -> int:
    """The number of members of the mapped axis ``axis_name`` (a vmap/pmap axis or a process axis)."""
    proc = _process("axis_size", axis_name)
    if proc is not None:
        return proc(axis_name)
    return _size(axis_main(axis_name).global_data)


def all_to_all(x: Any, axis_name: Any, split_axis: int, concat_axis: int, *, tiled: bool = False) -> Any:
    """Split ``split_axis`` into one chunk per member, send chunk ``j`` to member ``j``, and
    concatenate the received chunks along ``concat_axis`` (JAX's ``all_to_all`` with ``tiled=True``
    layout)."""
    return _tree_map(lambda v: all_to_all_p.bind(v, axis_name=axis_name, split_axis=split_axis,
                                                 concat_axis=concat_axis, tiled=tiled), x)


def axis_index(axis_name: Any) -> Any:
    """This member's index along the mapped axis ``axis_name`` (int32)."""
    proc = _process("axis_index", axis_name)
    if proc is not None:
        return proc(axis_name)
    return axis_index_p.bind(axis_name=axis_name)
