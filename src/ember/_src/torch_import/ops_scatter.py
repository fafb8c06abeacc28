"""ATen handlers that order, count or write by index: sort/topk, histc, scatter*, index_put and the
cumulative ops beyond ``cumsum``. Writes by index check their indices as torch does (an index out of
range raises ``IndexError``; see :func:`~.ops.checked_index`)."""

from __future__ import annotations

from typing import Any

import numpy as np

import ember.lax as lax
import ember.numpy as jnp
from ember._src.torch_import.ops import _norm, checked_index, handler

# ---- sorting ---------------------------------------------------------------------------------------

def _sort(x: Any, dim: int, descending: bool) -> tuple[Any, Any]:
    """A stable sort along ``dim`` with torch's order (NaN counts as the largest value): the sorted
    values and the int64 positions they came from."""
    if x.ndim == 0:
        return x, jnp.zeros((), np.int64)
    dim = _norm(dim, x.ndim)
    pos = lax.broadcasted_iota(np.int64, x.shape, dim)
    if not descending:  # lax.sort puts NaN last already
        out = lax.sort((x, pos), dimension=dim, num_keys=1)
        return out[0], out[1]
    if jnp.issubdtype(x.dtype, jnp.floating):
        keys = (jnp.where(jnp.isnan(x), 0, 1).astype(np.int8), -x)
    else:
        keys = (jnp.invert(x),)  # reverses the order of every integer and of bool exactly
    out = lax.sort((*keys, x, pos), dimension=dim, num_keys=len(keys))
    return out[-2], out[-1]


@handler("aten.sort.default", doc="sorted values and indices along a dim (stable, NaN largest)")
def _sort_default(ctx, x, dim=-1, descending=False):
    return _sort(x, dim, descending)


@handler("aten.sort.stable", doc="sorted values and indices along a dim (stable, NaN largest)")
def _sort_stable(ctx, x, *, stable=None, dim=-1, descending=False):
    return _sort(x, dim, descending)


@handler("aten.topk.default", doc="the k largest (or smallest) values and their indices")
def _topk(ctx, x, k, dim=-1, largest=True, sorted=True):
    vals, idx = _sort(x, dim, largest)
    if x.ndim == 0:
        return vals, idx
    dim = _norm(dim, x.ndim)
    return lax.slice_in_dim(vals, 0, k, axis=dim), lax.slice_in_dim(idx, 0, k, axis=dim)


# ---- counting ---------------------------------------------------------------------------------------

@handler("aten.histc.default", doc="histogram of equal-width bins over [min, max] (outside ignored)")
def _histc(ctx, x, bins=100, min=0, max=0):
    v = jnp.reshape(x, (-1,))
    lo, hi = jnp.asarray(min, x.dtype), jnp.asarray(max, x.dtype)
    if min == max:  # torch takes the data's range (and widens an empty one by 1)
        lo, hi = jnp.min(v), jnp.max(v)
        same = lo == hi
        lo, hi = jnp.where(same, lo - 1, lo), jnp.where(same, hi + 1, hi)
    pos = jnp.floor((v - lo) * bins / (hi - lo)).astype(np.int32)
    pos = jnp.where(v == hi, bins - 1, pos)
    inside = (v >= lo) & (v <= hi)
    pos = jnp.where(inside, pos, bins)  # dropped: past the last bin
    return jnp.zeros((bins,), x.dtype).at[pos].add(jnp.ones_like(v), mode="drop")


# ---- cumulative --------------------------------------------------------------------------------------

@handler("aten.cumprod.default", doc="cumulative product")
def _cumprod(ctx, x, dim, dtype=None):
    if x.ndim == 0:
        return x
    return jnp.cumprod(x, axis=_norm(dim, x.ndim))


@handler("aten.logcumsumexp.default", doc="log of the cumulative sum of exponentials")
def _logcumsumexp(ctx, x, dim):
    if x.ndim == 0:
        return x
    return lax.cumlogsumexp(x, axis=_norm(dim, x.ndim))


# ---- scatter along a dim ---------------------------------------------------------------------------

def _coords(ctx: Any, x: Any, dim: int, index: Any) -> tuple:
    """The full index tuple of torch's scatter: ``index`` along ``dim``, the element's own position
    along every other dim (``index`` may be smaller than ``x`` there)."""
    idx = checked_index(ctx, index, x.shape[dim], f"{ctx.arg(2)} indexes axis {dim} of {ctx.arg(0)}")
    return tuple(idx if d == dim else lax.broadcasted_iota(idx.dtype, idx.shape, d) for d in range(x.ndim))


def _src_like(src: Any, index: Any, dtype: Any) -> Any:
    if not hasattr(src, "shape"):
        return jnp.full(index.shape, src, dtype)
    src = jnp.asarray(src).astype(dtype)
    if tuple(src.shape) != tuple(index.shape):
        src = src[tuple(slice(0, n) for n in index.shape)]
    return src


def _scatter(ctx: Any, x: Any, dim: int, index: Any, src: Any, reduce: str | None,
             include_self: bool = True) -> Any:
    if x.ndim == 0:
        x, index = jnp.reshape(x, (1,)), jnp.reshape(index, (1,) * (1 if np.ndim(index) == 0 else 0)
                                                     + tuple(np.shape(index)))
        src = src if not hasattr(src, "shape") else jnp.reshape(src, (1,) * (1 - src.ndim) + tuple(src.shape))
        return jnp.reshape(_scatter(ctx, x, 0, index, src, reduce, include_self), ())
    dim = _norm(dim, x.ndim)
    if 0 in tuple(index.shape):
        return x
    c = _coords(ctx, x, dim, index)
    src = _src_like(src, index, x.dtype)
    if reduce is None:
        return x.at[c].set(src)
    if not include_self or reduce == "mean":
        hit = jnp.zeros(x.shape, np.bool_).at[c].set(True)
    if not include_self:
        ident = {"sum": 0, "mean": 0, "prod": 1,
                 "amax": -np.inf if jnp.issubdtype(x.dtype, jnp.floating) else np.iinfo(x.dtype).min,
                 "amin": np.inf if jnp.issubdtype(x.dtype, jnp.floating) else np.iinfo(x.dtype).max}[reduce]
        base = jnp.where(hit, jnp.asarray(ident, x.dtype), x)
    else:
        base = x
    if reduce in ("sum", "add", "mean"):
        out = base.at[c].add(src)
    elif reduce in ("prod", "multiply"):
        out = base.at[c].multiply(src)
    elif reduce == "amax":
        out = base.at[c].max(src)
    elif reduce == "amin":
        out = base.at[c].min(src)
    else:
        raise NotImplementedError(f"scatter_reduce with reduce={reduce!r}")
    if reduce == "mean":
        count = jnp.zeros(x.shape, x.dtype).at[c].add(jnp.ones_like(src))
        if include_self:
            count = count + 1
        count = jnp.where(hit, count, jnp.ones_like(count))
        div = jnp.floor_divide if not jnp.issubdtype(x.dtype, jnp.inexact) else jnp.true_divide
        out = jnp.where(hit, div(out, count), x)
    return out


@handler("aten.scatter.src", "aten.scatter.value", doc="write src (or a value) at index along a dim")
def _scatter_src(ctx, x, dim, index, src, reduce=None):
    return _scatter(ctx, x, dim, index, src, {"add": "sum", "multiply": "prod"}.get(reduce, reduce))


@handler("aten.scatter_add.default", doc="add src at index along a dim")
def _scatter_add(ctx, x, dim, index, src):
    return _scatter(ctx, x, dim, index, src, "sum")


@handler("aten.scatter_reduce.two", doc="reduce src into x at index along a dim (sum/prod/mean/amax/amin)")
def _scatter_reduce(ctx, x, dim, index, src, reduce, include_self=True):
    return _scatter(ctx, x, dim, index, src, reduce, include_self)


# ---- index_put (x[indices] = values, or +=) --------------------------------------------------------

@handler("aten.index_put.default", doc="x[indices] = values (accumulate: +=); an index out of range raises")
def _index_put(ctx, x, indices, values, accumulate=False):
    names = ctx.refs[1] if len(ctx.refs) > 1 and isinstance(ctx.refs[1], (list, tuple)) else []
    names = list(names) + [None] * (len(indices) - len(names))
    key = []
    for a, i in enumerate(indices):
        if i is None:
            key.append(slice(None))
            continue
        i = jnp.asarray(i)
        if i.dtype == np.bool_:
            raise NotImplementedError("index_put with a boolean mask (data-dependent shape)")
        key.append(checked_index(ctx, i, x.shape[a], f"{names[a] or 'the index'} indexes axis {a} of "
                                 f"{ctx.arg(0)}", negative=True))
    values = jnp.asarray(values).astype(x.dtype)
    at = x.at[tuple(key)]
    return at.add(values) if accumulate else at.set(values)


# ---- flipping, creation ---------------------------------------------------------------------------

@handler("aten.flip.default", doc="reverse the order along dims")
def _flip(ctx, x, dims):
    if not dims or x.ndim == 0:
        return x
    return jnp.flip(x, axis=tuple(_norm(d, x.ndim) for d in dims))


@handler("aten.empty_permuted.default", "aten.empty.memory_format",
         doc="an uninitialized array (zeros here; torch leaves the values unspecified)")
def _empty(ctx, *args, **kw):
    return jnp.zeros(ctx.shape, ctx.dtype)


@handler("aten.searchsorted.Tensor", doc="insertion points in a sorted 1-d sequence")
def _searchsorted(ctx, seq, x, *, out_int32=False, right=False, side=None, sorter=None):
    if seq.ndim != 1 or sorter is not None:
        raise NotImplementedError("searchsorted with a batched sequence or a sorter")
    side = side or ("right" if right else "left")
    return jnp.searchsorted(seq, x, side=side).astype(np.int32 if out_int32 else np.int64)


@handler("aten.bucketize.Tensor", doc="bucket index of each value among sorted boundaries")
def _bucketize(ctx, x, boundaries, *, out_int32=False, right=False):
    side = "right" if right else "left"
    return jnp.searchsorted(boundaries, x, side=side).astype(np.int32 if out_int32 else np.int64)

