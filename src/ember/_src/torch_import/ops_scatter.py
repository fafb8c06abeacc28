"""ATen handlers that order, count or write by index: sort/topk, histc, scatter*, index_put and the
cumulative ops beyond ``cumsum``. Writes by index check their indices as torch does (an index out of
range raises ``IndexError``; see :func:`~.ops.checked_index`)."""

from __future__ import annotations

from typing import Any

import numpy as np

import ember.lax as lax
import ember.numpy as jnp
from ember._src.prims import indexing as ix
from ember._src.torch_import.ops import _norm, checked_index, handler, size_value

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
    pos = jnp.where(inside, pos, bins)  # out of the range: past the last bin, dropped
    return ix.scatter(jnp.zeros((bins,), x.dtype), pos, jnp.ones_like(v), axis=0, mode="add")


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

def _flat_positions(x_shape: tuple, index: Any, dim: int) -> Any:
    """Row-major positions in an array of ``x_shape`` of torch's scatter targets: ``index`` along
    ``dim``, each element's own position along the other dims (``index`` may be smaller there)."""
    pos = None
    stride: Any = 1
    for d in reversed(range(len(x_shape))):
        c = index if d == dim else lax.broadcasted_iota(index.dtype, tuple(index.shape), d)
        term = c if isinstance(stride, int) and stride == 1 else c * size_value(stride, index.dtype)
        pos = term if pos is None else pos + term
        stride = stride * x_shape[d]
    return pos


def _scatter_flat(x: Any, pos: Any, src: Any, mode: str) -> Any:
    """``x`` with ``src`` written (``mode``: set/add/mul/min/max) at flat positions ``pos``."""
    shape = tuple(x.shape)
    flat = ix.scatter(jnp.reshape(x, (-1,)), jnp.reshape(pos, (-1,)), jnp.reshape(src, (-1,)), axis=0,
                      mode=mode)
    return jnp.reshape(flat, shape)


def _src_like(src: Any, index: Any, dtype: Any) -> Any:
    if not hasattr(src, "shape"):
        return jnp.full(tuple(index.shape), src, dtype)
    src = jnp.asarray(src).astype(dtype)
    if tuple(src.shape) != tuple(index.shape):
        src = src[tuple(slice(0, n) for n in index.shape)]
    return src


_MODES = {"sum": "add", "add": "add", "mean": "add", "prod": "mul", "multiply": "mul", "amax": "max",
          "amin": "min"}


def _scatter(ctx: Any, x: Any, dim: int, index: Any, src: Any, reduce: str | None,
             include_self: bool = True) -> Any:
    if x.ndim == 0:
        x1 = jnp.reshape(x, (1,))
        i1 = jnp.reshape(index, (1,))
        s1 = src if not hasattr(src, "shape") else jnp.reshape(src, (-1,))[:1]
        return jnp.reshape(_scatter(ctx, x1, 0, i1, s1, reduce, include_self), ())
    dim = _norm(dim, x.ndim)
    if any(isinstance(n, int) and n == 0 for n in index.shape):
        return x
    if reduce is not None and reduce not in _MODES:
        raise NotImplementedError(f"scatter_reduce with reduce={reduce!r}")
    idx = checked_index(ctx, index, x.shape[dim], f"{ctx.arg(2)} indexes axis {dim} of {ctx.arg(0)}")
    pos = _flat_positions(tuple(x.shape), idx, dim)
    src = _src_like(src, idx, x.dtype)
    if reduce is None:
        return _scatter_flat(x, pos, src, "set")
    hit = None
    if not include_self or reduce == "mean":
        hit = _scatter_flat(jnp.zeros(tuple(x.shape), np.bool_), pos, jnp.ones(tuple(idx.shape), np.bool_),
                            "set")
    base = x
    if not include_self:
        floating = jnp.issubdtype(x.dtype, jnp.floating)
        ident = {"sum": 0, "mean": 0, "prod": 1,
                 "amax": -np.inf if floating else np.iinfo(x.dtype).min,
                 "amin": np.inf if floating else np.iinfo(x.dtype).max}[reduce]
        base = jnp.where(hit, jnp.asarray(ident, x.dtype), x)
    out = _scatter_flat(base, pos, src, _MODES[reduce])
    if reduce == "mean":
        count = _scatter_flat(jnp.zeros(tuple(x.shape), x.dtype), pos, jnp.ones_like(src), "add")
        if include_self:
            count = count + 1
        count = jnp.where(hit, count, jnp.ones_like(count))
        div = jnp.true_divide if jnp.issubdtype(x.dtype, jnp.inexact) else jnp.floor_divide
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

@handler("aten.index_put.default", doc="x[indices] = values (accumulate: +=); an index out of range raises; "
         "a boolean mask with values the same for every selected position is a where")
def _index_put(ctx, x, indices, values, accumulate=False):
    names = ctx.refs[1] if len(ctx.refs) > 1 and isinstance(ctx.refs[1], (list, tuple)) else []
    names = list(names) + [None] * (len(indices) - len(names))
    adv = [a for a, i in enumerate(indices) if i is not None]
    if not adv:
        return jnp.broadcast_to(jnp.asarray(values).astype(x.dtype), tuple(x.shape))
    if len(adv) == 1 and jnp.asarray(indices[adv[0]]).dtype == np.bool_:
        return _masked_put(ctx, x, adv[0], jnp.asarray(indices[adv[0]]), values, accumulate)
    idx = []
    for a in adv:
        i = jnp.asarray(indices[a])
        if i.dtype == np.bool_:
            raise NotImplementedError("index_put with a boolean mask beside other indices "
                                      "(data-dependent shape)")
        idx.append(checked_index(ctx, i, x.shape[a], f"{names[a] or 'the index'} indexes axis {a} of "
                                 f"{ctx.arg(0)}", negative=True))
    idx = jnp.broadcast_arrays(*idx)
    bshape = tuple(idx[0].shape)
    rest = [a for a in range(x.ndim) if a not in adv]
    adjacent = adv == list(range(adv[0], adv[-1] + 1))
    # torch's result layout of x[indices]: the index dims in place of adjacent indexed dims, else first
    lead = adv[0] if adjacent else 0
    rshape = tuple(x.shape[a] for a in rest[:lead]) + bshape + tuple(x.shape[a] for a in rest[lead:])
    vals = jnp.broadcast_to(jnp.asarray(values).astype(x.dtype), rshape)
    nb = len(bshape)
    vals = jnp.transpose(vals, tuple(range(lead, lead + nb)) + tuple(range(lead)) +
                         tuple(range(lead + nb, len(rshape))))          # [index dims, rest dims]
    xt = jnp.transpose(x, tuple(adv + rest))
    flat = None
    for i, a in zip(idx, adv):
        flat = i if flat is None else flat * size_value(x.shape[a], i.dtype) + i
    merged_n = None
    for a in adv:
        merged_n = x.shape[a] if merged_n is None else merged_n * x.shape[a]
    rest_shape = tuple(x.shape[a] for a in rest)
    merged = jnp.reshape(xt, (merged_n,) + rest_shape)
    out = ix.scatter(merged, jnp.reshape(flat, (-1,)), jnp.reshape(vals, (-1,) + rest_shape), axis=0,
                     mode="add" if accumulate else "set")
    out = jnp.reshape(out, tuple(xt.shape))
    return jnp.transpose(out, tuple(np.argsort(adv + rest)))


def _masked_put(ctx, x, a: int, mask: Any, values: Any, accumulate: bool) -> Any:
    """``x[..., mask, ...] = values`` (``+=`` when ``accumulate``) with one boolean mask over the
    axes ``a, a + 1, ...`` of ``x``, where ``values`` is the same for every selected position (its
    axis for the selected count has size 1 or is absent, e.g. a scalar): a ``where``, with no
    data-dependent size. Values that differ per selected position raise."""
    k = mask.ndim
    if a + k > x.ndim or any(isinstance(m, int) and isinstance(d, int) and m != d
                             for m, d in zip(mask.shape, x.shape[a:a + k])):
        raise IndexError(f"aten.{ctx.name}: the boolean mask of shape {tuple(mask.shape)} does not match "
                         f"axes {a}..{a + k - 1} of {ctx.arg(0)} (shape {tuple(x.shape)})")
    lead, rest = tuple(x.shape[:a]), tuple(x.shape[a + k:])
    v = jnp.asarray(values).astype(x.dtype)
    vshape = (1,) * (len(lead) + 1 + len(rest) - v.ndim) + tuple(v.shape)
    if v.ndim > len(lead) + 1 + len(rest) or vshape[len(lead)] != 1:
        raise NotImplementedError(f"aten.{ctx.name} with a boolean mask and values of shape {tuple(v.shape)} "
                                  "that differ per selected position (a data-dependent count)")
    v = jnp.reshape(v, vshape[:len(lead)] + (1,) * k + vshape[len(lead) + 1:])
    m = jnp.reshape(mask, (1,) * len(lead) + tuple(mask.shape) + (1,) * len(rest))
    if accumulate:
        return x + jnp.where(m, v, jnp.zeros((), x.dtype))
    return jnp.where(m, v, x)


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

