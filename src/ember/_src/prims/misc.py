"""Primitives that fit no family: ``stop_gradient`` and ``sort`` (multi-operand, stable)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ember._src import ad_util as ad
from ember._src import core, tree
from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src.core import Primitive, ShapedArray
from ember._src.prims import movement as mv
from ember._src.prims.elementwise import bring_to_front
from ember._src.prims.indexing import take_along_axis
from ember.errors import ShapeError

# ---------------------------------------------------------------------------------------------
# stop_gradient
# ---------------------------------------------------------------------------------------------

stop_gradient_p = Primitive("stop_gradient")
stop_gradient_p.impl = lambda x: x
stop_gradient_p.abstract_eval = lambda x: x


def _stop_gradient_jvp(primals: list, tangents: list) -> tuple[list, list]:
    out = stop_gradient_p.bind(primals[0])
    return [out], [ad.Zero.from_value(out)]


stop_gradient_p.jvp = _stop_gradient_jvp
stop_gradient_p.batch = lambda vals, dims: ([stop_gradient_p.bind(vals[0])], [dims[0]])
stop_gradient_p.na("transpose", "stop_gradient has a zero derivative, so it never appears in a "
                   "linear program")


def stop_gradient(x: Any) -> Any:
    """Identity in the forward pass; blocks derivatives (works on pytrees)."""
    return tree.tree_map(lambda v: stop_gradient_p.bind(v) if dt.is_inexact(core.get_aval(v).dtype)
                         else v, x)


# ---------------------------------------------------------------------------------------------
# sort: sorts all operands along `dimension` by the first `num_keys` operands (lexicographic)
# ---------------------------------------------------------------------------------------------

sort_p = Primitive("sort", multiple_results=True)


def _sort_key(x: np.ndarray) -> np.ndarray:
    if dt.is_low_precision(x.dtype):
        return x.astype(np.float32)
    return x


def _sort_impl(*ops: np.ndarray, dimension: int, is_stable: bool, num_keys: int) -> list[np.ndarray]:
    keys = [_sort_key(k) for k in ops[:num_keys]]
    if num_keys == 1:
        perm = np.argsort(keys[0], axis=dimension, kind="stable")
    else:
        moved = [np.moveaxis(k, dimension, -1) for k in keys]
        flat = [k.reshape(-1, k.shape[-1]) for k in moved]
        rows = [np.lexsort(tuple(f[r] for f in reversed(flat))) for r in range(flat[0].shape[0])]
        perm = np.moveaxis(np.array(rows).reshape(moved[0].shape), -1, dimension) if rows else \
            np.zeros(ops[0].shape, dtype=np.int64)
    return [np.take_along_axis(o, perm, axis=dimension) for o in ops]


def _sort_abstract(*ops: ShapedArray, dimension: int, is_stable: bool, num_keys: int) -> list[ShapedArray]:
    if not ops:
        raise ShapeError("sort needs at least one operand")
    core.check_same_shapes("sort", list(ops))
    if not 0 <= dimension < max(ops[0].ndim, 1) or ops[0].ndim == 0:
        raise ShapeError(f"sort: dimension {dimension} out of range for rank {ops[0].ndim}")
    if not 1 <= num_keys <= len(ops):
        raise ValueError(f"sort: num_keys={num_keys} must be between 1 and {len(ops)}")
    for o in ops[:num_keys]:
        if dt.is_complex(o.dtype):
            raise TypeError("sort: complex keys are not supported")
    return list(ops)


def _sort_jvp(primals: list, tangents: list, *, dimension: int, is_stable: bool,
              num_keys: int) -> tuple[list, list]:
    shape = core.get_aval(primals[0]).shape
    idx = mv.broadcasted_iota(dt.int32, shape, dimension)
    outs = sort_p.bind(*primals, idx, dimension=dimension, is_stable=is_stable, num_keys=num_keys)
    perm = outs[-1]
    touts = [t if ad.is_zero(t) else take_along_axis(t, perm, dimension) for t in tangents]
    touts = [ad.Zero.from_value(o) if ad.is_zero(t) else t for o, t in zip(outs[:-1], touts)]
    return list(outs[:-1]), touts


def _sort_batch(vals: list, dims: list, *, dimension: int, is_stable: bool,
                num_keys: int) -> tuple[list, list]:
    vals = bring_to_front(vals, dims)
    outs = sort_p.bind(*vals, dimension=dimension + 1, is_stable=is_stable, num_keys=num_keys)
    return list(outs), [0] * len(outs)


sort_p.impl = _sort_impl
sort_p.abstract_eval = _sort_abstract
sort_p.jvp = _sort_jvp
sort_p.batch = _sort_batch
sort_p.na("transpose", "sort is not linear (it is a data-dependent permutation)")


def sort(operand: Any | Sequence[Any], dimension: int = -1, is_stable: bool = True,
         num_keys: int = 1) -> Any:
    """Sort along ``dimension``; with several operands, sort all by the first ``num_keys``."""
    single = not isinstance(operand, (list, tuple))
    ops = [operand] if single else list(operand)
    nd = core.get_aval(ops[0]).ndim
    outs = sort_p.bind(*ops, dimension=sh.normalize_axis(dimension, nd), is_stable=bool(is_stable),
                       num_keys=int(num_keys))
    return outs[0] if single else tuple(outs)
