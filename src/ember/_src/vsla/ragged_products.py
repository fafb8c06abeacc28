"""Row-wise ``conv`` and ``kron`` of :class:`~ember._src.vsla.ragged.Ragged` batches of 1-D rows whose
row lengths are a runtime value (under ``vsla.jit``): one program for every set of lengths.

Under ``vsla.jit`` a Ragged argument also brings a bound on its row lengths, ``row_cap`` (a named
dynamic axis: ``next_pow2`` of its longest row). The rows are gathered into a ``(rows, row_cap)``
matrix (slack zero), multiplied as a batch of VArray rows at those capacities (the batched conv of
``symbolic.py``: its direct or FFT path), and the results are gathered back to back into the flat
result: position ``p`` belongs to the row ``searchsorted(ends, p)`` of the results' row ends. The
flat result is stored at a capacity that bounds the sum of the result rows (``len(a.values) +
len(b.values)`` for ``conv``, ``len(a.values) * row_cap(b)`` for ``kron``); positions past the last
row are zero.
"""
from __future__ import annotations

from typing import Any

import numpy as np

import ember.numpy as enp
from ember import lax
from ember._src.vsla import symbolic as sym

__all__ = ["conv_runtime", "kron_runtime"]


def _row_cap(r: Any) -> Any:
    """The bound on a row's length: the named axis ``vsla.jit`` gave it, else the stored size."""
    return r.row_cap if r.row_cap is not None else r.values.shape[0]


def _lengths(r: Any) -> Any:
    sp = r.shapes if r.symbolic else enp.asarray(r.shapes)
    return sp[:, 0].astype(np.int32)


def _padded(r: Any, cap: Any, dtype: Any) -> Any:
    """The rows as a ``(rows, cap)`` matrix, zero past each row's length."""
    ln = _lengths(r)
    starts = enp.cumsum(ln) - ln
    col = lax.iota(np.int32, cap)[None, :]
    inside = col < ln[:, None]
    idx = enp.where(inside, starts[:, None] + col, 0)
    vals = r.values.astype(dtype)
    return enp.where(inside, enp.take(vals, enp.reshape(idx, (-1,))).reshape(idx.shape), sym.zero(dtype))


def _compact(full: Any, lo: Any, total: Any) -> Any:
    """Rows ``full[i, :lo[i]]`` back to back in a flat array of capacity ``total`` (zeros past them)."""
    ends = enp.cumsum(lo)
    p = lax.iota(np.int32, total)
    row = enp.searchsorted(ends, p, side="right").astype(np.int32)
    nrows = lo.shape[0]
    rc = enp.minimum(row, nrows - 1)
    k = p - enp.take(ends - lo, rc)
    width = full.shape[1]
    valid = (row < nrows) & (k < width)
    flat = enp.reshape(full, (-1,))
    src = enp.where(valid, rc * width + enp.clip(k, 0, width - 1), 0)
    return enp.where(valid, enp.take(flat, src), sym.zero(full.dtype))


def conv_runtime(a: Any, b: Any, method: str, threshold: int) -> tuple[Any, Any, Any]:
    """``(values, shapes, row_cap)`` of the row-wise conv: row ``i`` has ``la_i + lb_i - 1`` entries
    (0 when either row is empty)."""
    dtype = np.dtype(enp.result_type(a.values.dtype, b.values.dtype))
    ca, cb = _row_cap(a), _row_cap(b)
    pa, pb = _padded(a, ca, dtype), _padded(b, cb, dtype)
    la, lb = _lengths(a), _lengths(b)
    rows = sym.lengths_const([0])  # the batch axis' length is not read by the conv kernels
    full, _ = sym.conv((pa, enp.concatenate([rows, enp.max(la)[None]])),
                       (pb, enp.concatenate([rows, enp.max(lb)[None]])), method, threshold)
    lo = enp.where((la > 0) & (lb > 0), la + lb - 1, 0).astype(np.int32)
    out = _compact(full.astype(dtype), lo, a.values.shape[0] + b.values.shape[0])
    return out, lo[:, None], ca + cb - 1


def _minimal(p: Any) -> Any:
    """Per row of a padded matrix, one past its last nonzero."""
    pos = lax.iota(np.int32, p.shape[1])[None, :] + 1
    return enp.max(enp.where(p != 0, pos, 0), axis=1).astype(np.int32)


def kron_runtime(a: Any, b: Any) -> tuple[Any, Any, Any]:
    """``(values, shapes, row_cap)`` of the row-wise kron of the rows' minimal representatives: row
    ``i`` has ``ma_i * mb_i`` entries, entry ``k`` is ``a_i[k // mb_i] * b_i[k % mb_i]``."""
    dtype = np.dtype(enp.result_type(a.values.dtype, b.values.dtype))
    ca, cb = _row_cap(a), _row_cap(b)
    pa, pb = _padded(a, ca, dtype), _padded(b, cb, dtype)
    ma, mb = _minimal(pa), _minimal(pb)
    lo = (ma * mb).astype(np.int32)
    ends = enp.cumsum(lo)
    total = a.values.shape[0] * cb  # sum(ma_i mb_i) <= sum(la_i) * cb
    p = lax.iota(np.int32, total)
    row = enp.searchsorted(ends, p, side="right").astype(np.int32)
    nrows = lo.shape[0]
    rc = enp.minimum(row, nrows - 1)
    k = p - enp.take(ends - lo, rc)
    step = enp.maximum(enp.take(mb, rc), 1)
    i, j = enp.clip(k // step, 0, ca - 1), enp.clip(k % step, 0, cb - 1)
    va = enp.take(enp.reshape(pa, (-1,)), rc * ca + i)
    vb = enp.take(enp.reshape(pb, (-1,)), rc * cb + j)
    out = enp.where(row < nrows, va * vb, sym.zero(dtype))
    return out, lo[:, None], ca * cb
