"""``shard_map``: a function of per-process blocks mapped over a mesh of MPI processes.

``shard_map(f, mesh=mesh, in_specs=P("batch"), out_specs=P())`` calls ``f`` on each process with
that process's block of every input (as its ``in_specs`` split it over the mesh), with the mesh's
axis names bound for ``ember.lax``'s collectives (``psum(x, "batch")`` sums over the processes
along ``batch``; over an axis of size one it is the identity). The outputs are the global arrays
``out_specs`` describe: the blocks concatenated along the split dimensions, or with ``P()`` the
value every process computed (the caller makes sure it agrees, as in JAX).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from ember._src import core
from ember._src import sharding as shd
from ember._src import tree as tu
from ember._src.array import asarray_eager
from ember._src.distributed import shard_trace as st
from ember._src.distributed import spmd
from ember._src.prims import movement as mv


def _specs(specs: Any, tree_of: Any, what: str) -> list:
    """One PartitionSpec per leaf of ``tree_of`` (``specs`` a prefix of it)."""
    if isinstance(specs, shd.PartitionSpec) or specs is None:
        return [specs or shd.PartitionSpec()] * len(tu.flatten(tree_of)[0])
    out: list = []
    if isinstance(tree_of, (tuple, list)) and isinstance(specs, (tuple, list)) and len(specs) == len(tree_of):
        for s, t in zip(specs, tree_of):
            out += _specs(s, t, what)
        return out
    if isinstance(tree_of, dict) and isinstance(specs, dict):
        for k in sorted(tree_of):
            out += _specs(specs[k], tree_of[k], what)
        return out
    raise ValueError(f"shard_map: {what} {specs!r} does not match the structure of the values")


def _shard_trace_main() -> core.MainTrace | None:
    for m in reversed(core._state.stack):
        if m.trace_type is st.ShardTrace:
            return m
    return None


def _block_of(x: Any, sh: shd.NamedSharding) -> Any:
    """This process's block of ``x`` (a global value: array, sharded array, or traced)."""
    if isinstance(x, st.ShardTracer):
        d = st.rank_ordered_dim(sh, len(x.aval.shape))
        if d == -1:
            raise NotImplementedError(f"shard_map: in_spec {sh.spec} splits an array in a way ember's "
                                      "traced programs do not (one dimension over every process)")
        return st.reshard_traced(x, sh).val
    if isinstance(x, shd.ShardedArray):
        return shd.reshard(x, sh).value if x._sharding != sh else x.value
    if isinstance(x, core.Tracer):
        idx = sh.index(tuple(x.aval.shape), shd.process_index())
        shape = x.aval.shape
        starts = [s.indices(n)[0] for s, n in zip(idx, shape)]
        limits = [s.indices(n)[1] for s, n in zip(idx, shape)]
        return mv.slice(x, starts, limits) if any(s.start is not None for s in idx) else x
    a = asarray_eager(x)
    idx = sh.index(a.value.shape, shd.process_index())
    return np.ascontiguousarray(a.value[idx]) if any(s.start is not None for s in idx) else a


def _global_of(v: Any, sh: shd.NamedSharding, main: core.MainTrace | None) -> Any:
    """The global array whose block on this process is ``v`` under ``sh``."""
    ndim = len(core.get_aval(v).shape)
    if main is not None:
        d = st.rank_ordered_dim(sh, ndim)
        if d == -1:
            raise NotImplementedError(f"shard_map: out_spec {sh.spec} splits an array in a way ember's "
                                      "traced programs do not (one dimension over every process)")
        return st.ShardTracer(st.ShardTrace(main), v, d)
    if isinstance(v, core.Tracer):
        gshape = tuple(s * sh.parts(i) for i, s in enumerate(core.get_aval(v).shape))
        return st.gather_global(v, sh, gshape)
    a = asarray_eager(v)
    gshape = tuple(s * sh.parts(i) for i, s in enumerate(a.value.shape))
    return shd.ShardedArray(a.value, sh, gshape, a.weak_type)


def shard_map(f: Callable | None = None, mesh: shd.Mesh | None = None, in_specs: Any = None,
              out_specs: Any = None, *, axis_names: Any = None, check_vma: bool = True,
              check_rep: bool | None = None) -> Callable:
    """``f`` on each process's blocks of its inputs over ``mesh`` (``jax.shard_map``).

    ``in_specs`` and ``out_specs`` are PartitionSpecs (or pytree prefixes of them) for the arguments and the
    result; inside ``f`` the mesh's axis names bind ``ember.lax``'s collectives. ``mesh`` defaults
    to the current one (``set_mesh``). Usable as a decorator with keywords only."""
    if f is None:
        return functools.partial(shard_map, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                                 axis_names=axis_names, check_vma=check_vma, check_rep=check_rep)
    if out_specs is None:
        raise TypeError("shard_map: out_specs is required")

    @functools.wraps(f)
    def mapped(*args: Any) -> Any:
        m = mesh or shd.get_mesh()
        if m is None:
            raise ValueError("shard_map: pass mesh= or call it inside `with ember.set_mesh(mesh):`")
        ins = in_specs if in_specs is not None else shd.PartitionSpec()
        if isinstance(ins, list):
            ins = tuple(ins)
        leaves, tree = tu.flatten(args)
        if isinstance(ins, shd.PartitionSpec):
            ins = (ins,) * len(args)
        specs = _specs(ins, args, "in_specs")
        blocks = [_block_of(x, shd.NamedSharding(m, s)) for x, s in zip(leaves, specs)]
        n = shd.process_count()
        depth = core.trace_depth()
        bound = [(name, "native" if size == n and size > 1 else "one", depth)
                 for name, size in m.shape.items()]
        wide = [name for name, size in m.shape.items() if size > 1]
        if len(wide) > 1:
            raise NotImplementedError(f"shard_map: ember maps over one mesh axis of the processes; {m} "
                                      f"has {len(wide)} axes of size > 1")
        spmd._active.extend(bound)
        try:
            out = f(*tu.unflatten(tree, blocks))
        finally:
            del spmd._active[len(spmd._active) - len(bound):]
        outs, out_tree = tu.flatten(out)
        osp = _specs(out_specs, out, "out_specs")
        main = _shard_trace_main()
        return tu.unflatten(out_tree, [_global_of(v, shd.NamedSharding(m, s), main)
                                       for v, s in zip(outs, osp)])

    return mapped
