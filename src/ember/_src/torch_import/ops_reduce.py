"""ATen reductions beyond the basic ones: variance forms, vector norms, median/kthvalue,
cummax/cummin with indices and pairwise distances."""

from __future__ import annotations

import numpy as np

import ember.lax as lax
import ember.numpy as jnp
from ember._src.torch_import.ops import _dims, _norm, handler
from ember._src.torch_import.ops_scatter import _sort


@handler("aten.var.dim", doc="variance (unbiased or not)")
def _var_dim(ctx, x, dim=None, unbiased=True, keepdim=False):
    return jnp.var(x, axis=_dims(dim, x.ndim), ddof=1 if unbiased else 0, keepdims=keepdim)


@handler("aten.var_mean.correction", doc="variance and mean with a correction")
def _var_mean(ctx, x, dim=None, *, correction=None, keepdim=False):
    axes = _dims(dim, x.ndim)
    return (jnp.var(x, axis=axes, ddof=1 if correction is None else correction, keepdims=keepdim),
            jnp.mean(x, axis=axes, keepdims=keepdim))


@handler("aten.linalg_vector_norm.default", doc="vector p-norm over dims (p = inf, -inf, 0 or any real)")
def _vector_norm(ctx, x, ord=2, dim=None, keepdim=False, *, dtype=None):
    axes = _dims(dim, x.ndim)
    a = jnp.abs(x)
    if ord == float("inf"):
        return jnp.max(a, axis=axes, keepdims=keepdim)
    if ord == float("-inf"):
        return jnp.min(a, axis=axes, keepdims=keepdim)
    if ord == 0:
        return jnp.sum((a != 0).astype(x.dtype), axis=axes, keepdims=keepdim)
    if ord == 1:
        return jnp.sum(a, axis=axes, keepdims=keepdim)
    if ord == 2:
        return jnp.sqrt(jnp.sum(a * a, axis=axes, keepdims=keepdim))
    return jnp.sum(a ** ord, axis=axes, keepdims=keepdim) ** (1.0 / ord)


def _kth(x, k: int, dim: int, keepdim: bool):
    """The k-th smallest (0-based) value along ``dim`` and its index (NaN largest)."""
    if x.ndim == 0:
        return x, jnp.zeros((), np.int64)
    dim = _norm(dim, x.ndim)
    vals, idx = _sort(x, dim, False)
    v, i = lax.slice_in_dim(vals, k, k + 1, axis=dim), lax.slice_in_dim(idx, k, k + 1, axis=dim)
    return (v, i) if keepdim else (jnp.squeeze(v, dim), jnp.squeeze(i, dim))


@handler("aten.kthvalue.default", doc="the k-th smallest value along a dim and its index")
def _kthvalue(ctx, x, k, dim=-1, keepdim=False):
    return _kth(x, k - 1, dim, keepdim)


@handler("aten.median.dim", doc="the lower median along a dim and its index")
def _median_dim(ctx, x, dim=-1, keepdim=False):
    n = int(x.shape[_norm(dim, x.ndim)]) if x.ndim else 1
    return _kth(x, (n - 1) // 2, dim, keepdim)


def _cum_extreme(x, dim: int, is_max: bool):
    if x.ndim == 0:
        return x, jnp.zeros((), np.int64)
    dim = _norm(dim, x.ndim)
    vals = (lax.cummax if is_max else lax.cummin)(x, axis=dim)
    pos = lax.broadcasted_iota(np.int64, x.shape, dim)
    # torch's index: the last position up to here whose value is the running extreme
    idx = lax.cummax(jnp.where(x == vals, pos, jnp.zeros_like(pos)), axis=dim)
    return vals, idx


@handler("aten.cummax.default", doc="running maximum and its index")
def _cummax(ctx, x, dim):
    return _cum_extreme(x, dim, True)


@handler("aten.cummin.default", doc="running minimum and its index")
def _cummin(ctx, x, dim):
    return _cum_extreme(x, dim, False)


@handler("aten._cdist_forward.default", doc="pairwise p-norm distances between row sets")
def _cdist(ctx, a, b, p, compute_mode=None):
    d = jnp.abs(jnp.expand_dims(a, -2) - jnp.expand_dims(b, -3))  # [..., P, R, M]
    if p == 2:
        return jnp.sqrt(jnp.sum(d * d, axis=-1))
    if p == float("inf"):
        return jnp.max(d, axis=-1)
    if p == 0:
        return jnp.sum((d != 0).astype(a.dtype), axis=-1)
    if p == 1:
        return jnp.sum(d, axis=-1)
    return jnp.sum(d ** p, axis=-1) ** (1.0 / p)


@handler("transformers.grouped_mm_fallback.default",
         doc="transformers' grouped matrix product of mixture-of-experts layers (rows sorted by expert)")
def _grouped_mm(ctx, x, w, offs):
    """``out[r] = x[r] @ w[e]`` for the expert ``e`` whose row range ``[offs[e-1], offs[e])`` holds
    ``r`` (rows past ``offs[-1]`` are zero). Computed as every expert's product of every row, then
    one pick per row: E times the work of the grouped product, but static shapes and no copies
    of the weights."""
    rows = lax.broadcasted_iota(offs.dtype, (x.shape[0],), 0)
    expert = jnp.searchsorted(offs, rows, side="right")                  # [S]
    every = jnp.einsum("si,eio->seo", x, w)                              # [S, E, O]
    pick = jnp.minimum(expert, w.shape[0] - 1).astype(np.int32)
    out = jnp.take_along_axis(every, pick[:, None, None], axis=1)[:, 0, :]
    return jnp.where((expert < w.shape[0])[:, None], out, jnp.zeros_like(out))
