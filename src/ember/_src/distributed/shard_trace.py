"""Running a function of global arrays on each process's shards: the per-process program that the
shardings of its inputs imply.

Inside :func:`run_sharded` each sharded input is a :class:`ShardTracer`: its value is this
process's shard, its abstract value the global array, and ``dim`` the one dimension split over all
processes in rank order (``None``: replicated). :meth:`ShardTrace.process_primitive` applies each
primitive to the shards and inserts the collective the split requires:

* elementwise primitives keep the split (a replicated operand is sliced to this process's block);
* ``broadcast_in_dim``, ``reshape`` (when the split dimension survives), ``transpose`` move it;
* a reduction over the split dimension reduces the shard and all-reduces the partial results
  (``reduce_sum`` -> sum, ``reduce_max``/``reduce_min`` -> max/min): a mean over a batch split
  over processes is the sum of the per-process sums divided by the global size;
* ``dot_general`` keeps a split free or batch dimension, and contracting over the split dimension
  (the gradient of replicated weights from a split batch) is a local product plus one sum
  all-reduce -- data parallelism's gradient ``psum``;
* any other primitive gathers its split operands into whole arrays first (correct, not parallel).

Under ``jit`` the values are the jit trace's, so the collectives become the ``process_*``
primitives of the compiled program; eagerly they run through mpi4py. With one process every split
has one part and no collective runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ember._src import core
from ember._src import tree as tu
from ember._src.core import ShapedArray
from ember._src.prims import dot as dotp
from ember._src.prims import elementwise as ew
from ember._src.prims import misc
from ember._src.prims import movement as mv
from ember._src.prims import process as pp
from ember._src.prims import reductions as red

# -- the processes -----------------------------------------------------------------------------------


def _n() -> int:
    from ember._src import sharding as shd
    return shd.process_count()


def _rank() -> int:
    from ember._src import sharding as shd
    return shd.process_index()


def _group() -> pp.ProcessGroup:
    from ember._src.distributed import spmd
    return spmd._group()


def _allreduce(x: Any, op: str) -> Any:
    return x if _n() == 1 else pp.allreduce(x, _group(), op)


def _gather_dim(x: Any, d: int) -> Any:
    """The whole array from each process's block along ``d`` (rank order)."""
    n = _n()
    if n == 1:
        return x
    g = pp.all_gather(x, _group())  # (n, *local)
    g = mv.moveaxis(g, 0, d) if d else g
    s = core.get_aval(g).shape
    return mv.reshape(g, (*s[:d], s[d] * s[d + 1], *s[d + 2:]))


def _block(x: Any, d: int) -> Any:
    """This process's block along ``d`` of a replicated (whole) ``x``."""
    n = _n()
    if n == 1:
        return x
    size = core.get_aval(x).shape[d]
    k = size // n
    r = _rank()
    return mv.slice_in_dim(x, r * k, (r + 1) * k, 1, d)


def gather_global(local: Any, sharding: Any, global_shape: Sequence[int]) -> Any:
    """The whole array of which ``local`` is this process's shard under the NamedSharding
    ``sharding``: an all-gather of the shards, assembled by their indices."""
    n = _n()
    if n == 1 or sharding.is_fully_replicated:
        return local
    blocks = pp.all_gather(local, _group())  # (n, *local)
    gshape = tuple(global_shape)
    by_index: dict[tuple, int] = {}
    for r in range(n):
        key = tuple(sharding.part_index(d, r) if sharding.parts(d) > 1 else 0 for d in range(len(gshape)))
        by_index.setdefault(key, r)

    def build(prefix: tuple, d: int) -> Any:
        if d == len(gshape):
            return mv.squeeze(mv.slice_in_dim(blocks, by_index[prefix], by_index[prefix] + 1, 1, 0), (0,))
        parts = [build((*prefix, i), d + 1) for i in range(sharding.parts(d))]
        return parts[0] if len(parts) == 1 else mv.concatenate(parts, d)
    return build((), 0)


def rank_ordered_dim(sharding: Any, ndim: int) -> int | None:
    """The one dimension ``sharding`` splits over every process in rank order; None when it is
    replicated; -1 when it splits in another way (the trace gathers such inputs)."""
    n = _n()
    if n == 1:  # one process: every split has one part; follow the one named dimension, if any
        named = [d for d in range(ndim) if sharding.spec.axes(d)]
        return named[0] if len(named) == 1 else None
    split = [d for d in range(ndim) if sharding.parts(d) > 1]
    if not split:
        return None
    if len(split) > 1 or sharding.parts(split[0]) != n:
        return -1
    d = split[0]
    return d if all(sharding.part_index(d, r) == r for r in range(n)) else -1


# -- the trace -------------------------------------------------------------------------------------


class ShardTracer(core.Tracer):
    """A global array inside :func:`run_sharded`: ``val`` is this process's shard, ``dim`` the
    dimension split over the processes (None: replicated, ``val`` is the whole array)."""

    __slots__ = ("_trace", "val", "dim")

    def __init__(self, trace: ShardTrace, val: Any, dim: int | None):
        self._trace, self.val, self.dim = trace, val, dim

    @property
    def aval(self) -> ShapedArray:
        a = core.get_aval(self.val)
        if self.dim is None:
            return a
        shape = list(a.shape)
        shape[self.dim] *= _n()
        return ShapedArray(tuple(shape), a.dtype, a.weak_type)

    def full_lower(self) -> Any:
        return core.full_lower(self.val) if self.dim is None else self


def _whole(t: ShardTracer) -> Any:
    return t.val if t.dim is None else _gather_dim(t.val, t.dim)


def _local(t: ShardTracer, d: int) -> Any:
    """``t``'s block along ``d`` (``t`` replicated or already split there)."""
    if t.dim == d:
        return t.val
    return _block(_whole(t), d)


_ELEMENTWISE = {p for p in vars(ew).values() if isinstance(p, core.Primitive)} | {misc.stop_gradient_p}
_REDUCE_OPS = {red.reduce_sum_p: "sum", red.reduce_max_p: "max", red.reduce_min_p: "min"}


class ShardTrace(core.Trace):
    """Applies each primitive to the shards, with the collectives their split requires."""

    def pure(self, val: Any) -> ShardTracer:
        return ShardTracer(self, val, None)

    lift = pure

    def process_primitive(self, prim: core.Primitive, tracers: list, params: dict) -> list:
        dims = [t.dim for t in tracers]
        if all(d is None for d in dims):
            outs = prim.bind(*[t.val for t in tracers], **params)
            outs = outs if prim.multiple_results else [outs]
            return [ShardTracer(self, o, None) for o in outs]
        rule = _RULES.get(prim)
        if rule is None and prim in _ELEMENTWISE:
            rule = _elementwise
        res = rule(prim, tracers, params) if rule is not None else None
        if res is None:  # no rule for this split: whole operands, replicated result
            outs = prim.bind(*[_whole(t) for t in tracers], **params)
            outs = outs if prim.multiple_results else [outs]
            return [ShardTracer(self, o, None) for o in outs]
        out, d = res
        return [ShardTracer(self, out, d)]


def _elementwise(prim: core.Primitive, ts: list, params: dict) -> tuple | None:
    shapes = {t.aval.shape for t in ts}
    if len(shapes) != 1:
        return None
    d = next(t.dim for t in ts if t.dim is not None)
    return prim.bind(*[_local(t, d) for t in ts], **params), d


def _broadcast_in_dim(prim: core.Primitive, ts: list, params: dict) -> tuple | None:
    (t,) = ts
    shape, bdims = params["shape"], params["broadcast_dimensions"]
    if t.aval.shape[t.dim] != shape[bdims[t.dim]]:
        return None
    od = bdims[t.dim]
    local = list(shape)
    local[od] //= _n()
    return prim.bind(t.val, **{**params, "shape": tuple(local)}), od


def _reshape(prim: core.Primitive, ts: list, params: dict) -> tuple | None:
    (t,) = ts
    old, new = t.aval.shape, tuple(params["new_sizes"])
    d = t.dim
    before = int(np.prod(old[:d], dtype=np.int64))
    acc = 1
    for od, size in enumerate(new):
        if acc == before and size == old[d]:
            local = list(new)
            local[od] //= _n()
            return prim.bind(t.val, **{**params, "new_sizes": tuple(local)}), od
        acc *= size
    return None


def _transpose(prim: core.Primitive, ts: list, params: dict) -> tuple | None:
    (t,) = ts
    return prim.bind(t.val, **params), tuple(params["permutation"]).index(t.dim)


def _reduce(prim: core.Primitive, ts: list, params: dict) -> tuple | None:
    (t,) = ts
    axes = tuple(params["axes"])
    part = prim.bind(t.val, **params)
    if t.dim in axes:
        return _allreduce(part, _REDUCE_OPS[prim]), None
    return part, t.dim - sum(a < t.dim for a in axes)


def _arg_reduce(prim: core.Primitive, ts: list, params: dict) -> tuple | None:
    (t,) = ts
    axis = params["axis"]
    if axis == t.dim:
        return None
    return prim.bind(t.val, **params), t.dim - (axis < t.dim)


def _free(nd: int, contract: Sequence[int], batch: Sequence[int]) -> list[int]:
    return [i for i in range(nd) if i not in contract and i not in batch]


def _dot_general(prim: core.Primitive, ts: list, params: dict) -> tuple | None:
    x, y = ts
    (lc, rc), (lb, rb) = params["dimension_numbers"]
    lc, rc, lb, rb = map(tuple, (lc, rc, lb, rb))
    nx, ny = len(x.aval.shape), len(y.aval.shape)
    lfree, rfree = _free(nx, lc, lb), _free(ny, rc, rb)
    dx, dy = x.dim, y.dim

    def bind(a: Any, b: Any) -> Any:
        return prim.bind(a, b, **params)

    # contracting over the split dimension: a local product and one sum all-reduce
    for a, b in zip(lc, rc):
        if dx == a and dy in (b, None):
            return _allreduce(bind(x.val, _local(y, b)), "sum"), None
        if dy == b and dx in (a, None):
            return _allreduce(bind(_local(x, a), y.val), "sum"), None
    for i, (a, b) in enumerate(zip(lb, rb)):
        if dx == a and dy in (b, None):
            return bind(x.val, _local(y, b)), i
        if dy == b and dx in (a, None):
            return bind(_local(x, a), y.val), i
    if dx is not None and dx in lfree:
        return bind(x.val, _whole(y)), len(lb) + lfree.index(dx)
    if dy is not None and dy in rfree:
        return bind(_whole(x), y.val), len(lb) + len(lfree) + rfree.index(dy)
    return None


_RULES: dict[core.Primitive, Callable] = {
    mv.broadcast_in_dim_p: _broadcast_in_dim,
    mv.reshape_p: _reshape,
    mv.transpose_p: _transpose,
    dotp.dot_general_p: _dot_general,
    red.argmax_p: _arg_reduce,
    red.argmin_p: _arg_reduce,
    **{p: _reduce for p in _REDUCE_OPS},
}


# -- entering and leaving --------------------------------------------------------------------------


def run_sharded(fun: Callable, local_leaves: Sequence[Any], in_dims: Sequence[int | None],
                in_tree: Any) -> tuple[list, list[int | None], Any]:
    """Call ``fun(*args)`` on the global arrays whose shards are ``local_leaves`` (split along
    ``in_dims``; pytree ``in_tree`` of the positional arguments). Returns the output shards, the
    dimension each is split along and the output tree."""
    with core.new_main(ShardTrace) as main:
        trace = ShardTrace(main)
        leaves = [ShardTracer(trace, v, d) if d is not None else v for v, d in zip(local_leaves, in_dims)]
        args = tu.unflatten(in_tree, leaves)
        out = fun(*args)
        outs, out_tree = tu.flatten(out)
        vals, dims = [], []
        for o in outs:
            o = trace.full_raise(o)  # a value from outside the trace is replicated
            vals.append(o.val)
            dims.append(o.dim)
    return vals, dims, out_tree


def _enter(leaves: Sequence[Any]) -> tuple[list, list[int | None], Any]:
    """The shards, split dimensions and first sharding of call arguments ``leaves``."""
    from ember._src import sharding as shd

    mesh_sh, local, dims = None, [], []
    for a in leaves:
        if isinstance(a, shd.ShardedArray):
            d = rank_ordered_dim(a._sharding, a.ndim)
            v = a.value
            if d == -1:
                v, d = np.asarray(gather_global(a.value, a._sharding, a.shape)), None
            if mesh_sh is None or (d is not None and mesh_sh.is_fully_replicated):
                mesh_sh = a._sharding
            local.append(v)
            dims.append(d)
        else:
            local.append(a)
            dims.append(None)
    return local, dims, mesh_sh


def eager_apply(prim: core.Primitive, args: Sequence[Any], params: dict) -> list:
    """Apply ``prim`` now to arguments among which are sharded arrays (the EvalTrace hook)."""
    local, dims, mesh_sh = _enter(args)

    def f(*xs: Any) -> Any:
        out = prim.bind(*xs, **params)
        return out if prim.multiple_results else [out]
    outs, odims, _ = run_sharded(f, local, dims, tu.flatten(tuple(local))[1])
    return [wrap(o, d, mesh_sh) for o, d in zip(outs, odims)]


def jit_call(jf: Any, args: tuple, kwargs: dict) -> Any:
    """A ``jit`` function called with sharded arrays: its per-process program, compiled once per
    structure, split dimensions and static arguments; the outputs as sharded arrays."""
    from ember._src.jit import JitFunction

    statics = set(jf.static_argnums)
    static_kw = {k: v for k, v in kwargs.items() if k in jf.static_argnames}
    dyn = (tuple(a for i, a in enumerate(args) if i not in statics),
           {k: v for k, v in kwargs.items() if k not in static_kw})
    leaves, tree = tu.flatten(dyn)
    local, dims, mesh_sh = _enter(leaves)
    key = (tree, tuple(dims), tuple((i, args[i]) for i in sorted(statics) if i < len(args)),
           tuple(sorted(static_kw.items())))
    cache = jf.__dict__.setdefault("_sharded_programs", {})
    ent = cache.get(key)
    if ent is None:
        holder: dict[str, Any] = {}
        n_args = len(args)
        in_tree = tu.flatten((dyn,))[1]

        def call(pos_kw: tuple) -> Any:
            pos, kw = pos_kw
            it = iter(pos)
            full = [args[i] if i in statics else next(it) for i in range(n_args)]
            return jf.fun(*full, **kw, **static_kw)

        def per_process(*xs: Any) -> list:
            vals, odims, otree = run_sharded(call, xs, dims, in_tree)
            holder["dims"], holder["tree"] = odims, otree
            return vals
        ent = cache[key] = (JitFunction(per_process, backend=jf.backend), holder)
    inner, holder = ent
    outs = inner(*local)
    return tu.unflatten(holder["tree"], [wrap(o, d, mesh_sh) for o, d in zip(outs, holder["dims"])])


def split_spec(mesh_sh: Any, d: int | None, ndim: int) -> Any:
    """The PartitionSpec of an array of rank ``ndim`` split along ``d`` like ``mesh_sh``'s split."""
    from ember._src import sharding as shd
    if d is None:
        return shd.PartitionSpec()
    axes = next((mesh_sh.spec[i] for i in range(len(mesh_sh.spec)) if mesh_sh.parts(i) > 1),
                mesh_sh.mesh.axis_names)
    return shd.PartitionSpec(*([None] * d), axes)


def wrap(out: Any, d: int | None, mesh_sh: Any) -> Any:
    """An output shard as a ShardedArray of the mesh of ``mesh_sh``."""
    from ember._src import sharding as shd
    from ember._src.array import asarray_eager
    a = asarray_eager(out)
    shape = list(a.value.shape)
    if d is not None:
        shape[d] *= _n()
    sh = shd.NamedSharding(mesh_sh.mesh, split_spec(mesh_sh, d, len(shape)))
    return shd.ShardedArray(a.value, sh, tuple(shape), a.weak_type)


def reshard_traced(x: Any, sharding: Any) -> Any:
    """``reshard`` of a traced value: inside a ShardTrace, re-split it (gather, then take the block);
    elsewhere the value is already whole, and stays so."""
    if isinstance(x, ShardTracer):
        d = rank_ordered_dim(sharding, len(x.aval.shape))
        if d == x.dim:
            return x
        whole = _whole(x)
        if d is None or d == -1:
            return ShardTracer(x._trace, whole, None)
        return ShardTracer(x._trace, _block(whole, d), d)
    return x
