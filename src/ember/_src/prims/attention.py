"""The ``attention`` primitive: fused scaled dot-product attention ``softmax(Q K^T s + bias) V``.

Operands (heads-major layout, as PyTorch's ``scaled_dot_product_attention``):

* ``q`` ``[B, Hq, L, D]``, ``k`` ``[B, Hk, S, D]``, ``v`` ``[B, Hk, S, Dv]``; ``Hq`` a multiple of
  ``Hk`` (grouped-query attention: query head ``h`` reads key/value head ``h // (Hq // Hk)``);
* optional ``bias`` (added to the scaled logits) and ``mask`` (bool, True = attend), each rank 4
  with every dim equal to ``[B, Hq, L, S]``'s or 1 (broadcast).

Params: ``scale`` (the logits' factor), ``causal`` (``None``; ``"top_left"``: query ``i`` sees keys
``j <= i``, PyTorch's ``is_causal``; ``"bottom_right"``: ``j <= i + S - L``, the queries are the
last ``L`` positions of a key/value cache), ``mask_value`` (``None``: masked logits are ``-inf``
and a row with nothing to attend gives zeros, as PyTorch's CPU kernels; a float: masked logits
*become* that value before a plain softmax, as ``jax.nn.dot_product_attention``, so such a row
averages all values for a finite value and is NaN for ``-inf``, as ``softmax`` of ``-inf`` is),
``has_bias`` / ``has_mask`` (which optional operands follow ``v``).

The primitive exists so that a backend can run it without materializing the ``L x S`` scores or
mask: the native backend's tiled online-softmax kernel (``native/emit/attention.py``) keeps memory
linear in the sequence length and skips key blocks above a causal diagonal. Its JVP is written
with ``dot_general``/softmax primitives (materializing the scores: differentiation is not the
memory-critical path), so ``grad`` works through the usual transposes.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ember._src import ad_util as ad
from ember._src import core
from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src.core import Primitive, ShapedArray
from ember._src.prims import dot, misc
from ember._src.prims import elementwise as ew
from ember._src.prims import movement as mv
from ember._src.prims import reductions as rd
from ember.errors import DTypeError, ShapeError

CAUSAL_MODES = (None, "top_left", "bottom_right")

attention_p = Primitive("attention")


def _split(args: Any, has_bias: bool, has_mask: bool) -> tuple[Any, Any, Any, Any, Any]:
    q, k, v, *rest = args
    bias = rest.pop(0) if has_bias else None
    mask = rest.pop(0) if has_mask else None
    return q, k, v, bias, mask


def _keep_np(L: int, S: int, causal: str | None, mask: np.ndarray | None) -> np.ndarray:
    i = np.arange(L)[:, None]
    j = np.arange(S)[None, :]
    keep = np.ones((L, S), bool)
    if causal == "top_left":
        keep = j <= i
    elif causal == "bottom_right":
        keep = j <= i + (S - L)
    return keep if mask is None else keep & mask


def _attention_impl(*args: np.ndarray, scale: float, causal: str | None, mask_value: float | None,
                    has_bias: bool, has_mask: bool) -> np.ndarray:
    q, k, v, bias, mask = _split(args, has_bias, has_mask)
    B, Hq, L, _ = q.shape
    Hk, S = k.shape[1], k.shape[2]
    G = Hq // Hk if Hk else 1
    q64, k64, v64 = (np.asarray(t, np.float64) for t in (q, k, v))
    kk = np.repeat(k64, G, axis=1)
    vv = np.repeat(v64, G, axis=1)
    s = np.einsum("bhld,bhsd->bhls", q64, kk) * scale
    if bias is not None:
        s = s + np.asarray(bias, np.float64)
    keep = np.broadcast_to(_keep_np(L, S, causal, mask), s.shape)
    fill = -np.inf if mask_value is None else float(mask_value)
    s = np.where(keep, s, fill)
    m = s.max(axis=-1, keepdims=True) if S else np.zeros((*s.shape[:-1], 1))
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        e = np.exp(s - m)
        den = e.sum(axis=-1, keepdims=True)
        p = e / (np.where(den == 0, 1.0, den) if mask_value is None else den)
    return np.einsum("bhls,bhsd->bhld", p, vv).astype(q.dtype)


def _is_one(d: Any) -> bool:
    return isinstance(d, int) and d == 1


def _same_or_one(name: str, shape: tuple, full: tuple) -> None:
    if len(shape) != 4:
        raise ShapeError(f"attention: {name} must be rank 4 (broadcast to [B, Hq, L, S]), got "
                         f"{sh.shape_str(shape)}")
    for a, b in zip(shape, full):
        if not _is_one(a) and a != b:
            raise ShapeError(f"attention: {name} shape {sh.shape_str(shape)} does not broadcast to "
                             f"{sh.shape_str(full)}")


def _attention_abstract(*avals: ShapedArray, scale: float, causal: str | None, mask_value: float | None,
                        has_bias: bool, has_mask: bool) -> ShapedArray:
    q, k, v, bias, mask = _split(avals, has_bias, has_mask)
    if causal not in CAUSAL_MODES:
        raise ValueError(f"attention: causal must be one of {CAUSAL_MODES}, got {causal!r}")
    for name, a in (("query", q), ("key", k), ("value", v)):
        if a.ndim != 4:
            raise ShapeError(f"attention: {name} must be rank 4 [B, H, seq, head_dim], got "
                             f"{sh.shape_str(a.shape)}")
        if not dt.is_float(a.dtype):
            raise DTypeError(f"attention: {name} must have a real floating dtype, got {a.dtype}")
    if not (q.dtype == k.dtype == v.dtype):
        raise DTypeError(f"attention: query, key and value dtypes differ ({q.dtype}, {k.dtype}, {v.dtype})")
    B, Hq, L, D = q.shape
    if k.shape[0] != B or v.shape[0] != B or k.shape[1] != v.shape[1] or k.shape[2] != v.shape[2] \
            or k.shape[3] != D:
        raise ShapeError(f"attention: query {sh.shape_str(q.shape)}, key {sh.shape_str(k.shape)} and "
                         f"value {sh.shape_str(v.shape)} do not match "
                         "([B, Hq, L, D], [B, Hk, S, D], [B, Hk, S, Dv])")
    Hk, S = k.shape[1], k.shape[2]
    if isinstance(Hq, int) and isinstance(Hk, int) and (Hk == 0 or Hq % Hk):
        raise ShapeError(f"attention: query heads {Hq} must be a multiple of key/value heads {Hk}")
    full = (B, Hq, L, S)
    if bias is not None:
        _same_or_one("bias", bias.shape, full)
        if bias.dtype != q.dtype:
            raise DTypeError(f"attention: bias dtype {bias.dtype} differs from query dtype {q.dtype}")
    if mask is not None:
        _same_or_one("mask", mask.shape, full)
        if mask.dtype != dt.bool_:
            raise DTypeError(f"attention: mask must be bool, got {mask.dtype}")
    return ShapedArray((B, Hq, L, v.shape[3]), q.dtype, weak_type=False)


# ---- decomposition (used by the JVP) ---------------------------------------------------------------


def _grouped(x: Any, Hk: Any, G: Any) -> Any:
    B, _, L, n = core.get_aval(x).shape
    return mv.reshape(x, (B, Hk, G, L, n))


def _fill(x: Any, value: float) -> Any:
    """A constant with ``x``'s shape and dtype."""
    a = core.get_aval(x)
    return mv.full(a.shape, value, a.dtype)


def _scores(q: Any, k: Any, scale: float) -> Any:
    """``scale * Q K^T`` as ``[B, Hq, L, S]`` (key heads shared by groups of query heads)."""
    qa, ka = core.get_aval(q), core.get_aval(k)
    Hq, Hk = qa.shape[1], ka.shape[1]
    G = Hq // Hk
    s = dot.dot_general(_grouped(q, Hk, G), k, (((4,), (3,)), ((0, 1), (0, 1))))
    s = mv.reshape(s, (qa.shape[0], Hq, qa.shape[2], ka.shape[2]))
    return ew.mul(s, _fill(s, scale)) if scale != 1.0 else s


def _apply(p: Any, v: Any) -> Any:
    """``P V`` for ``P`` ``[B, Hq, L, S]`` and ``v`` ``[B, Hk, S, Dv]``."""
    pa, va = core.get_aval(p), core.get_aval(v)
    Hq, Hk = pa.shape[1], va.shape[1]
    o = dot.dot_general(_grouped(p, Hk, Hq // Hk), v, (((4,), (2,)), ((0, 1), (0, 1))))
    return mv.reshape(o, (pa.shape[0], Hq, pa.shape[2], va.shape[3]))


def _keep(shape: tuple, causal: str | None, mask: Any) -> Any:
    """The bool ``[B, Hq, L, S]`` of attended positions, or None when everything is attended."""
    L, S = shape[2], shape[3]
    keep = None
    if causal is not None:
        i = mv.broadcasted_iota(dt.int32, (L, S), 0)
        j = mv.broadcasted_iota(dt.int32, (L, S), 1)
        if causal == "bottom_right":  # j <= i + S - L  <=>  S-1-j >= L-1-i
            keep = ew.ge(mv.rev(j, (1,)), mv.rev(i, (0,)))
        else:
            keep = ew.le(j, i)
        keep = mv.broadcast_in_dim(keep, shape, (2, 3))
    if mask is not None:
        m = mv.broadcast_in_dim(mask, shape, (0, 1, 2, 3))
        keep = m if keep is None else ew.bitwise_and(keep, m)
    return keep


def probabilities(q: Any, k: Any, bias: Any, mask: Any, *, scale: float, causal: str | None,
                  mask_value: float | None) -> tuple[Any, Any]:
    """``(P, keep)``: the attention weights ``[B, Hq, L, S]`` by the primitive's rule, and the
    attended positions (None: all)."""
    s = _scores(q, k, scale)
    shape = core.get_aval(s).shape
    if bias is not None:
        s = ew.add(s, mv.broadcast_in_dim(bias, shape, (0, 1, 2, 3)))
    keep = _keep(shape, causal, mask)
    if keep is not None:
        fill = -np.inf if mask_value is None else float(mask_value)
        s = ew.select(keep, s, _fill(s, fill))
    m = rd.reduce_max(s, (3,))
    m = ew.select(ew.is_finite(m), m, _fill(m, 0))
    m = misc.stop_gradient(m)
    e = ew.exp(ew.sub(s, mv.broadcast_in_dim(m, shape, (0, 1, 2))))
    den = rd.reduce_sum(e, (3,))
    if mask_value is None:  # PyTorch's rule: a row with nothing to attend gives zeros
        den = ew.select(ew.eq(den, _fill(den, 0)), _fill(den, 1), den)
    return ew.div(e, mv.broadcast_in_dim(den, shape, (0, 1, 2))), keep


def reference(q: Any, k: Any, v: Any, bias: Any = None, mask: Any = None, *, scale: float,
              causal: str | None = None, mask_value: float | None = None) -> Any:
    """The primitive written with ``dot_general`` and softmax primitives (materializes ``L x S``)."""
    p, _ = probabilities(q, k, bias, mask, scale=scale, causal=causal, mask_value=mask_value)
    return _apply(p, v)


def _attention_jvp(primals: list, tangents: list, *, scale: float, causal: str | None,
                   mask_value: float | None, has_bias: bool, has_mask: bool) -> tuple[list, list]:
    q, k, v, bias, mask = _split(primals, has_bias, has_mask)
    dq, dk, dv, dbias, _ = _split(tangents, has_bias, has_mask)
    params = dict(scale=scale, causal=causal, mask_value=mask_value, has_bias=has_bias, has_mask=has_mask)
    out = attention_p.bind(*primals, **params)
    if all(ad.is_zero(t) for t in (dq, dk, dv)) and (dbias is None or ad.is_zero(dbias)):
        return [out], [ad.Zero.from_value(out)]
    p, keep = probabilities(q, k, bias, mask, scale=scale, causal=causal, mask_value=mask_value)
    shape = core.get_aval(p).shape
    ds = None
    if not ad.is_zero(dq):
        ds = _scores(dq, k, scale)
    if not ad.is_zero(dk):
        t = _scores(q, dk, scale)
        ds = t if ds is None else ew.add(ds, t)
    if dbias is not None and not ad.is_zero(dbias):
        t = mv.broadcast_in_dim(dbias, shape, (0, 1, 2, 3))
        ds = t if ds is None else ew.add(ds, t)
    dout = None
    if ds is not None:
        if keep is not None:
            ds = ew.select(keep, ds, _fill(ds, 0))
        pds = ew.mul(p, ds)
        row = mv.broadcast_in_dim(rd.reduce_sum(pds, (3,)), shape, (0, 1, 2))
        dout = _apply(ew.sub(pds, ew.mul(p, row)), v)
    if not ad.is_zero(dv):
        t = _apply(p, dv)
        dout = t if dout is None else ew.add(dout, t)
    return [out], [dout]


def _attention_batch(vals: list, dims: list, *, scale: float, causal: str | None, mask_value: float | None,
                     has_bias: bool, has_mask: bool) -> tuple[list, list]:
    """vmap: the mapped axis is merged into ``B`` (a bias/mask with ``B`` = 1 stays broadcast)."""
    n = next(core.get_aval(x).shape[d] for x, d in zip(vals, dims) if d is not None)
    moved = [x if d is None else mv.moveaxis(x, d, 0) for x, d in zip(vals, dims)]
    B = core.get_aval(moved[0]).shape[0 if dims[0] is None else 1]

    def merge(x: Any, batched: bool, bias_like: bool) -> Any:
        a = core.get_aval(x)
        if not batched:
            if bias_like and _is_one(a.shape[0]):
                return x
            x = mv.broadcast_in_dim(x, (n, *a.shape), (1, 2, 3, 4))
        a = core.get_aval(x)
        if bias_like and _is_one(a.shape[1]) and not _is_one(B):
            x = mv.broadcast_in_dim(x, (n, B, *a.shape[2:]), (0, 1, 2, 3, 4))
        a = core.get_aval(x)
        return mv.reshape(x, (n * a.shape[1], *a.shape[2:]))

    ops = [merge(x, d is not None, i >= 3) for i, (x, d) in enumerate(zip(moved, dims))]
    r = attention_p.bind(*ops, scale=scale, causal=causal, mask_value=mask_value, has_bias=has_bias,
                         has_mask=has_mask)
    return [mv.reshape(r, (n, B, *core.get_aval(r).shape[1:]))], [0]


attention_p.impl = _attention_impl
attention_p.abstract_eval = _attention_abstract
attention_p.jvp = _attention_jvp
attention_p.batch = _attention_batch
attention_p.na("transpose", "not linear")


def attention(q: Any, k: Any, v: Any, bias: Any = None, mask: Any = None, *, scale: float | None = None,
              causal: str | None = None, mask_value: float | None = None) -> Any:
    """Fused attention ``softmax(scale * Q K^T + bias, masked) V`` over heads-major operands
    (see the module docstring). ``scale`` defaults to ``1/sqrt(D)`` (``D`` must then be static)."""
    D = core.get_aval(q).shape[-1]
    if scale is None:
        if not isinstance(D, int):
            raise ShapeError("attention: scale must be given for a symbolic head dim")
        scale = 1.0 / math.sqrt(D) if D else 1.0
    extras = [t for t in (bias, mask) if t is not None]
    return attention_p.bind(q, k, v, *extras, scale=float(scale), causal=causal,
                            mask_value=None if mask_value is None else float(mask_value),
                            has_bias=bias is not None, has_mask=mask is not None)
