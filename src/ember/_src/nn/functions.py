"""Activation functions, softmax and friends, ``one_hot``, ``standardize`` and
``dot_product_attention``, written over ``ember.numpy`` (so they trace, differentiate and batch).

Piecewise activations are written with ``where`` so that their derivative at a kink is the one JAX
uses (``relu'(0) = 0``); softmax-like functions subtract the (gradient-stopped) maximum for
numerical stability.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ember._src import core
from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src.core import get_aval as _aval
from ember._src.numpy import contractions as cn
from ember._src.numpy import reductions as rd
from ember._src.numpy import ufuncs as uf
from ember._src.prims import attention as attention_prim
from ember._src.prims import elementwise as ew
from ember._src.prims import movement as mv
from ember._src.prims.misc import stop_gradient
from ember.errors import DTypeError, ShapeError

ArrayLike = Any


def _inexact(name: str, x: ArrayLike) -> Any:
    (x,) = uf.promote_args(name, x, to="inexact")
    return x


def _real_float(name: str, x: ArrayLike) -> Any:
    x = _inexact(name, x)
    if dt.is_complex(_aval(x).dtype):
        raise DTypeError(f"{name} requires a real floating dtype, got {_aval(x).dtype}")
    return x


# ---------------------------------------------------------------------------------------------
# Activations
# ---------------------------------------------------------------------------------------------


def relu(x: ArrayLike) -> Any:
    """``max(x, 0)``; the derivative at 0 is 0 (as JAX); NaN propagates."""
    (x,) = uf.promote_args("relu", x)
    return uf.where(uf.less_equal(x, 0), 0, x)


def relu6(x: ArrayLike) -> Any:
    """``min(max(x, 0), 6)``; the derivative is 0 at both kinks."""
    (x,) = uf.promote_args("relu6", x)
    return uf.where(uf.less_equal(x, 0), 0, uf.where(uf.greater_equal(x, 6), 6, x))


def leaky_relu(x: ArrayLike, negative_slope: ArrayLike = 1e-2) -> Any:
    """``x`` where ``x >= 0`` else ``negative_slope * x``."""
    x = _inexact("leaky_relu", x)
    return uf.where(uf.greater_equal(x, 0), x, uf.multiply(negative_slope, x))


def elu(x: ArrayLike, alpha: ArrayLike = 1.0) -> Any:
    """``x`` for ``x > 0`` else ``alpha * (exp(x) - 1)``."""
    x = _real_float("elu", x)
    pos = uf.greater(x, 0)
    safe = uf.where(pos, 0, x)  # keeps exp from overflowing on the unused branch
    return uf.where(pos, x, uf.multiply(alpha, uf.expm1(safe)))


def selu(x: ArrayLike) -> Any:
    """Scaled ELU with the self-normalizing constants of Klambauer et al. (2017)."""
    alpha = 1.6732632423543772848170429916717
    scale = 1.0507009873554804934193349852946
    return uf.multiply(scale, elu(x, alpha))


def celu(x: ArrayLike, alpha: ArrayLike = 1.0) -> Any:
    """Continuously differentiable ELU: ``max(x, 0) + alpha * expm1(min(x, 0) / alpha)``."""
    x = _real_float("celu", x)
    return uf.add(uf.maximum(x, 0), uf.multiply(alpha, uf.expm1(uf.divide(uf.minimum(x, 0), alpha))))


def sigmoid(x: ArrayLike) -> Any:
    """The logistic function ``1 / (1 + exp(-x))``."""
    return ew.logistic(_inexact("sigmoid", x))


def silu(x: ArrayLike) -> Any:
    """``x * sigmoid(x)`` (also called swish)."""
    x = _inexact("silu", x)
    return uf.multiply(x, ew.logistic(x))


swish = silu


def log_sigmoid(x: ArrayLike) -> Any:
    """``log(sigmoid(x))`` computed stably as ``-softplus(-x)``."""
    x = _real_float("log_sigmoid", x)
    return uf.negative(softplus(uf.negative(x)))


def softplus(x: ArrayLike) -> Any:
    """``log(1 + exp(x))`` computed stably as ``max(x, 0) + log1p(exp(-|x|))``."""
    x = _real_float("softplus", x)
    return uf.add(uf.maximum(x, 0), uf.log1p(uf.exp(uf.negative(uf.absolute(x)))))


def soft_sign(x: ArrayLike) -> Any:
    """``x / (|x| + 1)``."""
    x = _inexact("soft_sign", x)
    return uf.divide(x, uf.add(uf.absolute(x), 1))


def hard_tanh(x: ArrayLike) -> Any:
    """``x`` clipped to ``[-1, 1]``."""
    x = _inexact("hard_tanh", x)
    return uf.where(uf.greater(x, 1), 1, uf.where(uf.less(x, -1), -1, x))


def hard_sigmoid(x: ArrayLike) -> Any:
    """``relu6(x + 3) / 6``."""
    x = _inexact("hard_sigmoid", x)
    return uf.divide(relu6(uf.add(x, 3)), 6)


def hard_silu(x: ArrayLike) -> Any:
    """``x * hard_sigmoid(x)`` (also called hard swish)."""
    x = _inexact("hard_silu", x)
    return uf.multiply(x, hard_sigmoid(x))


hard_swish = hard_silu

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def gelu(x: ArrayLike, approximate: bool = True) -> Any:
    """Gaussian error linear unit: the tanh approximation by default, ``x * Phi(x)`` (via ``erfc``)
    when ``approximate=False``."""
    x = _real_float("gelu", x)
    if approximate:
        inner = uf.multiply(_SQRT_2_OVER_PI, uf.add(x, uf.multiply(0.044715, uf.power(x, 3))))
        return uf.multiply(uf.multiply(0.5, x), uf.add(1, uf.tanh(inner)))
    arg = uf.multiply(x, -1.0 / math.sqrt(2.0))
    return uf.multiply(uf.multiply(0.5, x), ew.erfc(arg))


def glu(x: ArrayLike, axis: int = -1) -> Any:
    """Gated linear unit: split ``x`` in two halves along ``axis``, return ``a * sigmoid(b)``."""
    x = _inexact("glu", x)
    a = _aval(x)
    ax = sh.normalize_axis(axis, a.ndim, "axis")
    n = a.shape[ax]
    if not isinstance(n, int) or n % 2:
        raise ShapeError(f"glu: axis {axis} must have an even size, got {sh.dim_str(n)}")
    first = mv.slice_in_dim(x, 0, n // 2, 1, ax)
    second = mv.slice_in_dim(x, n // 2, n, 1, ax)
    return uf.multiply(first, ew.logistic(second))


# ---------------------------------------------------------------------------------------------
# softmax / log_softmax / logsumexp
# ---------------------------------------------------------------------------------------------


def _axes(x: Any, axis: Any) -> tuple[int, ...]:
    nd = _aval(x).ndim
    return tuple(sorted(sh.normalize_axes(axis, nd, "axis")))


def _finite_shift(x: Any, axis: Any, where: ArrayLike) -> Any:
    """The row maximum used to shift softmax inputs. A row with no entries (all masked, or all
    ``-inf``) shifts by 0; a ``+inf`` maximum is kept, so that row becomes NaN as in NumPy's and
    JAX's formulas (``inf - inf``)."""
    x_max = rd.max(x, axis, keepdims=True, where=where, initial=-np.inf)
    return uf.where(uf.equal(x_max, -np.inf), 0, x_max)


def softmax(x: ArrayLike, axis: Any = -1, where: ArrayLike = None) -> Any:
    """``exp(x) / sum(exp(x))`` along ``axis`` (an int or a tuple), shifted by the maximum.

    With ``where``, masked-out entries take no part and are 0 in the result.
    """
    x = _real_float("softmax", x)
    x_max = _finite_shift(x, axis, where)
    shifted = uf.subtract(x, stop_gradient(x_max))
    unnormalized = uf.exp(shifted)
    if where is not None:
        unnormalized = uf.where(where, unnormalized, 0)
    result = uf.divide(unnormalized, rd.sum(unnormalized, axis, keepdims=True, where=where))
    if where is not None:
        result = uf.where(where, result, 0)
    return result


def log_softmax(x: ArrayLike, axis: Any = -1, where: ArrayLike = None) -> Any:
    """``x - logsumexp(x)`` along ``axis``; masked-out entries (``where``) are ``-inf``."""
    x = _real_float("log_softmax", x)
    x_max = _finite_shift(x, axis, where)
    shifted = uf.subtract(x, stop_gradient(x_max))
    exp_shifted = uf.exp(shifted)
    if where is not None:
        exp_shifted = uf.where(where, exp_shifted, 0)
    result = uf.subtract(shifted, uf.log(rd.sum(exp_shifted, axis, keepdims=True, where=where)))
    if where is not None:
        result = uf.where(where, result, -np.inf)
    return result


def logsumexp(a: ArrayLike, axis: Any = None, b: ArrayLike = None, keepdims: bool = False,
              return_sign: bool = False, where: ArrayLike = None) -> Any:
    """``log(sum(b * exp(a)))`` over ``axis``, computed stably (as ``scipy.special.logsumexp``).

    With ``return_sign`` returns ``(log|s|, sign(s))``; otherwise a negative sum gives NaN.
    """
    if b is not None:
        a, b = uf.promote_args("logsumexp", a, b, to="inexact")
        a = uf.where(uf.not_equal(b, 0), a, -np.inf)
    else:
        a = _inexact("logsumexp", a)
    axes = _axes(a, axis)
    shape = _aval(a).shape
    real = uf.real(a)
    amax = rd.max(real, axes, keepdims=True, where=where, initial=-np.inf)
    amax = stop_gradient(uf.where(uf.isfinite(amax), amax, 0))
    exp_a = uf.exp(uf.subtract(a, amax))
    if b is not None:
        exp_a = uf.multiply(exp_a, b)
    sumexp = rd.sum(exp_a, axes, keepdims=keepdims, where=where)
    sign = uf.sign(sumexp)
    is_complex = dt.is_complex(_aval(sumexp).dtype)
    if return_sign or not is_complex:
        sumexp = uf.absolute(sumexp)
    amax_out = amax if keepdims else mv.reshape(amax, tuple(d for i, d in enumerate(shape) if i not in axes))
    out = uf.add(uf.log(sumexp), amax_out)
    if return_sign:
        return out, sign
    if b is not None and not is_complex:
        out = uf.where(uf.less(sign, 0), np.nan, out)
    return out


# ---------------------------------------------------------------------------------------------
# one_hot / standardize
# ---------------------------------------------------------------------------------------------


def one_hot(x: ArrayLike, num_classes: Any, *, dtype: Any = dt.float32, axis: int = -1) -> Any:
    """One-hot encoding: a new axis of size ``num_classes`` at ``axis`` holding ``x == class``.

    Out-of-range entries (negative or ``>= num_classes``) encode as all zeros.
    """
    if not isinstance(num_classes, (int, sh.DimExpr)):
        num_classes = int(core.concrete_or_error(num_classes, "one_hot: num_classes"))
    (x,) = uf.promote_args("one_hot", x)
    a = _aval(x)
    out_nd = a.ndim + 1
    ax = sh.normalize_axis(axis, out_nd, "axis")
    lhs = mv.reshape(x, (*a.shape[:ax], 1, *a.shape[ax:]))
    rhs_shape = tuple(num_classes if i == ax else 1 for i in range(out_nd))
    idx_dtype = a.dtype if a.dtype != dt.bool_ else dt.int32
    rhs = mv.broadcasted_iota(idx_dtype, rhs_shape, ax)
    eq = uf.equal(lhs, rhs)
    return ew.convert_element_type(eq, dt.user_dtype(dtype, "one_hot"))


def standardize(x: ArrayLike, axis: Any = -1, mean: ArrayLike = None, variance: ArrayLike = None,
                epsilon: ArrayLike = 1e-5, where: ArrayLike = None) -> Any:
    """``(x - mean) / sqrt(variance + epsilon)`` over ``axis`` (layer-norm without scale/offset).

    ``mean``/``variance`` are computed when not given (broadcastable with keepdims shapes).
    """
    x = _inexact("standardize", x)
    if mean is None:
        mean = rd.mean(x, axis, keepdims=True, where=where)
        if variance is None:
            centered = uf.subtract(x, mean)
            variance = rd.mean(uf.real(uf.multiply(centered, uf.conjugate(centered))), axis,
                               keepdims=True, where=where)
    elif variance is None:
        # as JAX: E[|x|^2] - |mean|^2 with the given mean
        variance = uf.subtract(rd.mean(uf.real(uf.multiply(x, uf.conjugate(x))), axis, keepdims=True,
                                       where=where),
                               uf.real(uf.multiply(mean, uf.conjugate(mean))))
    return uf.multiply(uf.subtract(x, mean), ew.rsqrt(uf.add(variance, epsilon)))


# ---------------------------------------------------------------------------------------------
# dot_product_attention
# ---------------------------------------------------------------------------------------------


def _large_negative(d: np.dtype) -> float:
    return float(-0.7 * dt.finfo(d).max)


def _check_attention_shapes(q: Any, k: Any, v: Any) -> tuple:
    avals = {"query": _aval(q), "key": _aval(k), "value": _aval(v)}
    for name, a in avals.items():
        if a.ndim != 4:
            raise ShapeError(f"dot_product_attention: {name} must have rank 3 [T, N, H] or 4 "
                             f"[B, T, N, H], got shape {sh.shape_str(a.shape)}")
    pairs = [("batch size", 0, "query", "key"), ("batch size", 0, "query", "value"),
             ("key length", 1, "key", "value"), ("number of heads", 2, "key", "value"),
             ("head dim", 3, "query", "key")]
    for what, dim, n1, n2 in pairs:
        s1, s2 = avals[n1].shape, avals[n2].shape
        if s1[dim] != s2[dim]:
            raise ShapeError(f"dot_product_attention: {what} differs: {n1} {sh.shape_str(s1)} has "
                             f"{sh.dim_str(s1[dim])} at dim {dim}, {n2} {sh.shape_str(s2)} has "
                             f"{sh.dim_str(s2[dim])}")
    B, T, N, H = avals["query"].shape
    S, K = avals["key"].shape[1:3]
    if N != K and not (isinstance(N, int) and isinstance(K, int) and N % K == 0):
        raise ShapeError(f"dot_product_attention: the number of query heads ({sh.dim_str(N)}) must be a "
                         f"multiple of the number of key/value heads ({sh.dim_str(K)})")
    return B, T, N, H, S, K


def dot_product_attention(query: ArrayLike, key: ArrayLike, value: ArrayLike, bias: ArrayLike = None,
                          mask: ArrayLike = None, *, scale: float | None = None, is_causal: bool = False,
                          query_seq_lengths: ArrayLike = None, key_value_seq_lengths: ArrayLike = None,
                          local_window_size: Any = None, implementation: str | None = None) -> Any:
    """Scaled dot-product attention, as ``jax.nn.dot_product_attention``.

    ``query`` is ``[B, T, N, H]`` and ``key``/``value`` ``[B, S, K, H]`` (``N`` a multiple of ``K``:
    grouped-query attention), or the same without the batch axis. ``bias`` (added to the logits)
    and ``mask`` (bool, True = attend) broadcast to ``[B, N, T, S]``. ``is_causal`` lets query
    ``i`` see keys ``j <= i``. Masked logits become a large negative number before a softmax
    computed in float32 at least. Returns ``[B, T, N, H]``.
    """
    if implementation not in (None, "xla", "reference"):
        raise ValueError(f"dot_product_attention: unknown implementation {implementation!r}")
    q, k, v = cn.promote_dtypes("dot_product_attention", query, key, value)
    if not dt.is_float(_aval(q).dtype):
        q, k, v = (_cast(t, dt.to_float(_aval(t).dtype)) for t in (q, k, v))
    unbatched = _aval(q).ndim == 3
    if unbatched:
        if _aval(k).ndim != 3 or _aval(v).ndim != 3:
            raise ShapeError("dot_product_attention: query, key and value must all be rank 3 or all rank 4")
        q, k, v = (mv.reshape(t, (1, *_aval(t).shape)) for t in (q, k, v))
    B, T, N, H, S, K = _check_attention_shapes(q, k, v)
    G = 1 if N == K else N // K
    in_dtype = _aval(q).dtype
    acc = dt.float32 if dt.is_low_precision(in_dtype) else in_dtype
    if scale is None:
        scale = 1.0 / math.sqrt(H) if isinstance(H, int) else None
    if (not dt.is_low_precision(in_dtype) and isinstance(H, int) and query_seq_lengths is None
            and key_value_seq_lengths is None and local_window_size is None):
        out = _fused_attention(q, k, v, bias, mask, float(scale), is_causal, _large_negative(acc))
        return mv.reshape(out, _aval(out).shape[1:]) if unbatched else out
    qg = mv.reshape(q, (B, T, K, G, H))
    logits = cn.einsum("BTKGH,BSKH->BKGTS", qg, k, preferred_element_type=acc)
    if scale is None:  # a symbolic head dim: 1/sqrt(H) from a sum of H ones
        logits = uf.multiply(logits, ew.rsqrt(rd.sum(mv.full((H,), 1, acc))))
    else:
        logits = uf.multiply(logits, scale)
    logits = mv.reshape(logits, (B, N, T, S))
    if bias is not None:
        bias = uf.asarray(bias)
        logits = uf.add(logits, _cast(bias, acc))
    combined = None if mask is None else _as_bool(mask)
    if is_causal:
        i = mv.broadcasted_iota(dt.int32, (T, S), 0)
        j = mv.broadcasted_iota(dt.int32, (T, S), 1)
        combined = _and(combined, ew.le(j, i))
    if local_window_size is not None:
        left, right = (local_window_size, local_window_size) if isinstance(local_window_size, int) \
            else local_window_size
        i = mv.broadcasted_iota(dt.int32, (T, S), 0)
        j = mv.broadcasted_iota(dt.int32, (T, S), 1)
        combined = _and(combined, uf.logical_and(uf.greater_equal(j, uf.subtract(i, int(left))),
                                                 uf.less_equal(j, uf.add(i, int(right)))))
    if query_seq_lengths is not None:
        ql = mv.reshape(uf.asarray(query_seq_lengths), (B, 1, 1, 1))
        combined = _and(combined, uf.less(mv.broadcasted_iota(dt.int32, (1, 1, T, 1), 2), ql))
    if key_value_seq_lengths is not None:
        kl = mv.reshape(uf.asarray(key_value_seq_lengths), (B, 1, 1, 1))
        combined = _and(combined, uf.less(mv.broadcasted_iota(dt.int32, (1, 1, 1, S), 3), kl))
    if combined is not None:
        logits = uf.where(combined, logits, _large_negative(acc))
    probs = softmax(logits, axis=-1)
    probs = _cast(probs, _aval(v).dtype)
    probs = mv.reshape(probs, (B, K, G, T, S))
    out = cn.einsum("BKGTS,BSKH->BTKGH", probs, v)
    out = mv.reshape(out, (B, T, N, _aval(v).shape[3]))
    if unbatched:
        out = mv.reshape(out, _aval(out).shape[1:])
    return out


def _heads_major(x: Any) -> Any:
    return mv.transpose(x, (0, 2, 1, 3))


def _rank4(x: ArrayLike, name: str) -> Any:
    x = x if isinstance(x, core.Tracer) else uf.asarray(x)
    a = _aval(x)
    if a.ndim > 4:
        raise ShapeError(f"dot_product_attention: {name} must broadcast to [B, N, T, S], got shape "
                         f"{sh.shape_str(a.shape)}")
    return mv.reshape(x, (1,) * (4 - a.ndim) + tuple(a.shape))


def _fused_attention(q: Any, k: Any, v: Any, bias: ArrayLike, mask: ArrayLike, scale: float,
                     is_causal: bool, mask_value: float) -> Any:
    """``[B, T, N, H]`` attention as one fused ``attention`` step (heads-major operands): masked
    logits become ``mask_value``, as the composed path's ``where``."""
    b = None if bias is None else _cast(_rank4(bias, "bias"), _aval(q).dtype)
    m = None if mask is None else _rank4(_as_bool(mask), "mask")
    out = attention_prim.attention(_heads_major(q), _heads_major(k), _heads_major(v), b, m, scale=scale,
                                   causal="top_left" if is_causal else None, mask_value=mask_value)
    return _heads_major(out)


def _cast(x: Any, d: np.dtype) -> Any:
    return x if _aval(x).dtype == d else ew.convert_element_type(x, d, weak_type=False)


def _as_bool(m: ArrayLike) -> Any:
    m = m if isinstance(m, core.Tracer) else uf.asarray(m)
    if _aval(m).dtype != dt.bool_:
        m = uf.not_equal(m, 0)
    return m


def _and(a: Any, b: Any) -> Any:
    return b if a is None else uf.logical_and(a, b)


__all__ = [
    "celu", "dot_product_attention", "elu", "gelu", "glu", "hard_sigmoid", "hard_silu", "hard_swish",
    "hard_tanh", "leaky_relu", "log_sigmoid", "log_softmax", "logsumexp", "one_hot", "relu", "relu6",
    "selu", "sigmoid", "silu", "soft_sign", "softmax", "softplus", "standardize", "swish",
]


# ---------------------------------------------------------------------------------------------
# More activations (mish, squareplus, sparse_plus) and the deprecated ``normalize`` alias
# ---------------------------------------------------------------------------------------------


def mish(x: ArrayLike) -> Any:
    """``x * tanh(softplus(x))``."""
    x = _real_float("mish", x)
    return uf.multiply(x, uf.tanh(softplus(x)))


def squareplus(x: ArrayLike, b: ArrayLike = 4) -> Any:
    """``(x + sqrt(x**2 + b)) / 2``, a smooth approximation of ``relu``."""
    x = _real_float("squareplus", x)
    return uf.divide(uf.add(x, uf.sqrt(uf.add(uf.square(x), b))), 2)


def sparse_plus(x: ArrayLike) -> Any:
    """0 for ``x <= -1``, ``(x + 1)**2 / 4`` on ``(-1, 1)``, ``x`` for ``x >= 1``."""
    x = _real_float("sparse_plus", x)
    mid = uf.divide(uf.square(uf.add(x, 1)), 4)
    return uf.where(uf.less_equal(x, -1), 0, uf.where(uf.greater_equal(x, 1), x, mid))


def normalize(x: ArrayLike, axis: Any = -1, mean: ArrayLike = None, variance: ArrayLike = None,
              epsilon: ArrayLike = 1e-5, where: ArrayLike = None) -> Any:
    """Deprecated alias of :func:`standardize` (as ``jax.nn.normalize`` was); warns."""
    import warnings
    warnings.warn("ember.nn.normalize is deprecated; use ember.nn.standardize", DeprecationWarning,
                  stacklevel=2)
    return standardize(x, axis, mean, variance, epsilon, where)


__all__ += ["mish", "normalize", "sparse_plus", "squareplus"]
