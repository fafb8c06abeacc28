"""``ember.random``: JAX-compatible counter-based random numbers on threefry2x32 keys.

A key is a raw ``uint32[2]`` array (what ``jax.random.PRNGKey`` returns); ``key`` and
``PRNGKey`` both make one. Every sampler is a pure function of its key, written over lax-level
operations, so it runs eagerly, under ``jit`` and under ``vmap`` with identical results.

``bits``, ``uniform`` and ``normal`` are bit-identical to JAX's threefry implementation for
float32 / float16 / bfloat16 / uint* in both of JAX's schemes: the partitionable one (JAX's
default since 0.5, ember's default) and the classic one (flag ``jax_threefry_partitionable`` off,
see :mod:`ember._src.prims.random_bits`); float64 ``uniform`` is bit-identical and float64
``normal`` agrees to a few ulps. To get there, float32
``normal``/``gumbel``/``exponential``/``laplace``/``logistic`` evaluate ``erf_inv``, ``log`` and
``log1p`` with the exact algorithms XLA's CPU backend uses (Giles' polynomial; Cephes ``logf``
and ``log1p``, with their fused multiply-adds emulated in float64, which is exact here because
the float32 product fits in a double): :mod:`ember._src.xla_math`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ember._src import core
from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src.numpy import linalg_functions as la
from ember._src.numpy.ufuncs import asarray
from ember._src.prims import elementwise as ew
from ember._src.prims import movement as mv
from ember._src.prims import random_bits as rb
from ember._src.prims import reductions as red
from ember._src.prims.indexing import take
from ember._src.prims.misc import sort, stop_gradient
from ember._src.xla_math import _c, erf_inv, fma, log, log1p
from ember.errors import ShapeError

Array = Any
Shape = Sequence[int]

# ---------------------------------------------------------------------------------------------
# keys
# ---------------------------------------------------------------------------------------------


def PRNGKey(seed: int | Array) -> Array:  # noqa: N802
    """A raw threefry key ``uint32[2]`` from an integer seed, as ``jax.random.PRNGKey``."""
    return rb.threefry_seed(seed)


def key(seed: int | Array, *, impl: str | None = None) -> Array:
    """A threefry key from an integer seed (ember keys are raw ``uint32[2]`` arrays)."""
    if impl not in (None, "threefry2x32"):
        raise ValueError(f"only the threefry2x32 PRNG is implemented, got impl={impl!r}")
    return rb.threefry_seed(seed)


def key_data(keys: Array) -> Array:
    """The ``uint32`` data of a key (ember keys are their data)."""
    k = asarray(keys)
    a = core.get_aval(k)
    if a.dtype != dt.uint32 or not a.shape or a.shape[-1] != 2:
        raise TypeError(f"key_data: expected uint32[..., 2] keys, got {a.str_short()}")
    return k


def wrap_key_data(key_bits_array: Array, *, impl: str | None = None) -> Array:
    """Keys from their ``uint32[..., 2]`` data (the identity for threefry keys)."""
    return key_data(key_bits_array)


def clone(key: Array) -> Array:
    return key


def split(key: Array, num: int | tuple[int, ...] = 2) -> Array:
    """``num`` new keys (shape ``(num, 2)``, or ``(*num, 2)`` for a tuple)."""
    key = rb.check_key("split", key)
    shape = tuple(num) if isinstance(num, (tuple, list)) else (int(num),)
    return rb.threefry_split(key, shape)


def fold_in(key: Array, data: int | Array) -> Array:
    """A new key that mixes the 32-bit integer ``data`` into ``key``."""
    return rb.threefry_fold_in(rb.check_key("fold_in", key), data)


def _shape(shape: Any, name: str) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    try:
        out = tuple(int(s) for s in shape)
    except TypeError:
        raise TypeError(f"{name}: shape must be a tuple of ints, got {shape!r}") from None
    if any(s < 0 for s in out):
        raise ShapeError(f"{name}: negative dimension in shape {out}")
    return out


def _float_dtype(dtype: Any, name: str) -> np.dtype:
    d = dt.default_float if dtype is None else dt.user_dtype(dtype, name)
    if not dt.is_float(d):
        raise ValueError(f"dtype argument to `{name}` must be a float dtype, got {d}")
    return d


def bits(key: Array, shape: Shape = (), dtype: Any = None) -> Array:
    """Uniform random bits of an unsigned integer dtype (default uint32)."""
    key = rb.check_key("bits", key)
    d = dt.uint32 if dtype is None else dt.user_dtype(dtype, "bits")
    if np.dtype(d).kind != "u":
        raise ValueError(f"dtype argument to `bits` must be an unsigned int dtype, got {d}")
    return rb.threefry_random_bits(key, np.dtype(d).itemsize * 8, _shape(shape, "bits"))


# ---------------------------------------------------------------------------------------------
# uniform / normal
# ---------------------------------------------------------------------------------------------


def _bound(v: Any, dtype: np.dtype, shape: tuple) -> Any:
    v = asarray(v)
    a = core.get_aval(v)
    if len(a.shape) > len(shape) or sh.broadcast_shapes(a.shape, shape, op="random") != shape:
        raise ShapeError(f"random: a bound of shape {sh.shape_str(a.shape)} does not broadcast to the "
                         f"sample shape {sh.shape_str(shape)}")
    v = ew.convert_element_type(v, dtype)
    return mv.broadcast_to_rank_shape(v, shape)


def _uniform(key: Array, shape: tuple, dtype: np.dtype, minval: Any, maxval: Any) -> Array:
    info = dt.finfo(dtype)
    nbits, nmant = info.bits, info.nmant
    rng_bits = 8 if nmant < 8 else nbits
    uint = np.dtype(f"uint{nbits}")
    raw = rb.threefry_random_bits(key, rng_bits, shape)
    if rng_bits != nbits:
        raw = ew.convert_element_type(raw, uint)
    one_bits = np.array(1.0, dtype).view(uint)
    fbits = ew.bitwise_or(ew.shift_right_logical(raw, _c(raw, rng_bits - nmant)), _c(raw, one_bits))
    floats = ew.sub(rb.bitcast_convert_type(fbits, dtype), mv.full(shape, 1.0, dtype))
    lo, hi = _bound(minval, dtype, shape), _bound(maxval, dtype, shape)
    return ew.max(lo, _scale_shift(floats, ew.sub(hi, lo), lo))


def _scale_shift(x: Any, scale: Any, shift: Any) -> Any:
    """``x * scale + shift``, fused into one rounding for float32 as XLA's CPU backend does."""
    return fma(x, scale, shift)


def uniform(key: Array, shape: Shape = (), dtype: Any = None, minval: Any = 0.0,
            maxval: Any = 1.0) -> Array:
    """Uniform floats in ``[minval, maxval)`` (bit-identical to ``jax.random.uniform``)."""
    key = rb.check_key("uniform", key)
    return _uniform(key, _shape(shape, "uniform"), _float_dtype(dtype, "uniform"), minval, maxval)


def normal(key: Array, shape: Shape = (), dtype: Any = None) -> Array:
    """Standard normal samples (bit-identical to ``jax.random.normal`` for float32)."""
    key = rb.check_key("normal", key)
    shape = _shape(shape, "normal")
    d = dt.default_float if dtype is None else dt.user_dtype(dtype, "normal")
    if dt.is_complex(d):
        rd = dt.real_dtype(d)
        k_re, k_im = _split2(key)
        # XLA divides a complex value by sqrt(2) as a product with its rounded reciprocal
        s = mv.full(shape, np.array(1.0, rd) / np.array(np.sqrt(2), rd), rd)
        re = ew.mul(_normal_real(k_re, shape, rd), s)
        im = ew.mul(_normal_real(k_im, shape, rd), s)
        return ew.complex(re, im)
    if not dt.is_float(d):
        raise ValueError(f"dtype argument to `normal` must be a float or complex dtype, got {d}")
    return _normal_real(key, shape, d)


def _split2(key: Array) -> tuple[Array, Array]:
    ks = rb.threefry_split(key, (2,))
    return _row(ks, 0), _row(ks, 1)


def _row(keys: Array, i: int) -> Array:
    return mv.reshape(mv.slice(keys, (i, 0), (i + 1, 2)), (2,))


def _normal_real(key: Array, shape: tuple, dtype: np.dtype) -> Array:
    lo = np.nextafter(np.array(-1.0, dtype), np.array(0.0, dtype))
    u = _uniform(key, shape, dtype, lo, 1.0)
    return ew.mul(mv.full(shape, np.sqrt(2), dtype), erf_inv(u))


# ---------------------------------------------------------------------------------------------
# Simple transforms of uniforms
# ---------------------------------------------------------------------------------------------


def bernoulli(key: Array, p: Any = 0.5, shape: Shape | None = None, mode: str = "low") -> Array:
    """Booleans that are True with probability ``p``."""
    key = rb.check_key("bernoulli", key)
    if mode not in ("low", "high"):
        raise ValueError(f"got mode={mode!r}, expected 'high' or 'low'")
    p = asarray(p)
    d = core.get_aval(p).dtype
    if not dt.is_float(d):
        raise TypeError(f"bernoulli probability `p` must have a floating dtype, got {d}")
    shape = core.get_aval(p).shape if shape is None else _shape(shape, "bernoulli")
    pb = _bound(p, d, shape)
    if mode == "high":
        u = _uniform(key, (2, *shape), d, 0.0, 1.0)
        u1, u2 = (mv.reshape(mv.slice_in_dim(u, i, i + 1, 1, 0), shape) for i in (0, 1))
        u2 = ew.mul(u2, mv.full(shape, 2.0 ** -dt.finfo(d).nmant, d))
        return ew.lt(u2, ew.sub(pb, u1))
    return ew.lt(_uniform(key, shape, d, 0.0, 1.0), pb)


def exponential(key: Array, shape: Shape = (), dtype: Any = None) -> Array:
    """Exponential(1) samples: ``-log1p(-u)``."""
    key = rb.check_key("exponential", key)
    shape, d = _shape(shape, "exponential"), _float_dtype(dtype, "exponential")
    u = _uniform(key, shape, d, 0.0, 1.0)
    return ew.neg(log1p(ew.neg(u)))


def gumbel(key: Array, shape: Shape = (), dtype: Any = None, mode: str = "low") -> Array:
    """Standard Gumbel samples ``-log(-log(u))``."""
    key = rb.check_key("gumbel", key)
    shape, d = _shape(shape, "gumbel"), _float_dtype(dtype, "gumbel")
    info = dt.finfo(d)
    if mode in ("high", "highest"):
        u = _uniform(key, (2, *shape), d, 0.0, 1.0)
        high, low = (mv.reshape(mv.slice_in_dim(u, i, i + 1, 1, 0), shape) for i in (0, 1))
        small = ew.add(ew.add(high, ew.mul(mv.full(shape, 2.0 ** -info.nmant, d), low)),
                       mv.full(shape, info.tiny, d))
        x = ew.select(ew.ge(high, mv.full(shape, 0.5, d)), high, small)
        return ew.neg(log(ew.neg(log1p(ew.neg(x)))))
    if mode != "low":
        raise ValueError(f"gumbel: mode must be 'low', 'high' or 'highest', got {mode!r}")
    u = _uniform(key, shape, d, float(info.tiny), 1.0)
    return ew.neg(log(ew.neg(log(u))))


def laplace(key: Array, shape: Shape = (), dtype: Any = None) -> Array:
    """Laplace(0, 1) samples."""
    key = rb.check_key("laplace", key)
    shape, d = _shape(shape, "laplace"), _float_dtype(dtype, "laplace")
    u = _uniform(key, shape, d, -1.0 + float(dt.finfo(d).epsneg), 1.0)
    return ew.mul(ew.sign(u), log1p(ew.neg(ew.abs(u))))


def logistic(key: Array, shape: Shape = (), dtype: Any = None) -> Array:
    """Standard logistic samples ``log(u) - log1p(-u)``."""
    key = rb.check_key("logistic", key)
    shape, d = _shape(shape, "logistic"), _float_dtype(dtype, "logistic")
    x = _uniform(key, shape, d, float(dt.finfo(d).tiny), 1.0)
    return ew.sub(log(x), log1p(ew.neg(x)))


def cauchy(key: Array, shape: Shape = (), dtype: Any = None) -> Array:
    """Standard Cauchy samples ``tan(pi * (u - 1/2))``."""
    key = rb.check_key("cauchy", key)
    shape, d = _shape(shape, "cauchy"), _float_dtype(dtype, "cauchy")
    u = _uniform(key, shape, d, float(dt.finfo(d).eps), 1.0)
    pi = mv.full(shape, np.pi, d)
    return ew.tan(ew.mul(pi, ew.sub(u, mv.full(shape, 0.5, d))))


def rademacher(key: Array, shape: Shape = (), dtype: Any = None) -> Array:
    """Samples of -1 or +1 with equal probability."""
    key = rb.check_key("rademacher", key)
    shape = _shape(shape, "rademacher")
    d = dt.default_int if dtype is None else dt.user_dtype(dtype, "rademacher")
    b = bernoulli(key, 0.5, shape)
    return ew.convert_element_type(ew.sub(ew.mul(mv.full(shape, 2, dt.int32), ew.convert_element_type(
        b, dt.int32)), mv.full(shape, 1, dt.int32)), d)


def _two_parameters(name: str, key: Array, dtype: Any, a: Any, b: Any, shape: Shape | None) -> tuple:
    """The checked key, float dtype, the two parameters as arrays and the sample shape (by default
    the parameters' broadcast shape) of a two-parameter float distribution."""
    key = rb.check_key(name, key)
    d = _float_dtype(dtype, name)
    a, b = asarray(a), asarray(b)
    if shape is None:
        shape = sh.broadcast_shapes(core.get_aval(a).shape, core.get_aval(b).shape)
    return key, d, a, b, _shape(shape, name)


def truncated_normal(key: Array, lower: Any, upper: Any, shape: Shape | None = None,
                     dtype: Any = None) -> Array:
    """Standard normal samples truncated to the open interval ``(lower, upper)``."""
    key, d, lower, upper, shape = _two_parameters("truncated_normal", key, dtype, lower, upper, shape)
    lo, hi = _bound(lower, d, shape), _bound(upper, d, shape)
    s = mv.full(shape, np.sqrt(2), d)
    a, b = ew.erf(ew.div(lo, s)), ew.erf(ew.div(hi, s))
    u = ew.max(a, ew.add(ew.mul(_uniform(key, shape, d, 0.0, 1.0), ew.sub(b, a)), a))
    out = ew.mul(s, erf_inv(u))
    lo_open = ew.nextafter(stop_gradient(lo), mv.full(shape, np.inf, d))
    hi_open = ew.nextafter(stop_gradient(hi), mv.full(shape, -np.inf, d))
    return ew.min(ew.max(out, lo_open), hi_open)


# ---------------------------------------------------------------------------------------------
# Integers, permutations and choices
# ---------------------------------------------------------------------------------------------


def _int_operand(v: Any) -> Any:
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return asarray(np.asarray(int(v), dtype=dt.python_scalar_dtype(int(v))))
    v = asarray(v)
    a = core.get_aval(v)
    if not dt.is_integer(a.dtype):
        v = ew.convert_element_type(v, dt.default_int)
    elif a.weak_type:
        v = ew.convert_element_type(v, a.dtype)
    return v


def _convert_and_clip_integer(val: Any, dtype: np.dtype) -> Any:
    vd = core.get_aval(val).dtype
    lo = max(int(np.iinfo(dtype).min), int(np.iinfo(vd).min))
    hi = min(int(np.iinfo(dtype).max), int(np.iinfo(vd).max))
    val = ew.min(ew.max(val, mv.full_like(val, lo)), mv.full_like(val, hi))
    return ew.convert_element_type(val, dtype)


def _urem(x: Any, span: Any) -> Any:
    """Unsigned remainder with XLA's convention ``x % 0 == x``."""
    zero = ew.eq(span, _c(span, 0))
    return ew.select(zero, x, ew.rem(x, ew.select(zero, _c(span, 1), span)))


def randint(key: Array, shape: Shape, minval: Any, maxval: Any, dtype: Any = None) -> Array:
    """Uniform integers in ``[minval, maxval)`` (JAX's algorithm: bit-identical results)."""
    key = rb.check_key("randint", key)
    shape = _shape(shape, "randint")
    d = dt.default_int if dtype is None else dt.user_dtype(dtype, "randint")
    if not dt.is_integer(d):
        raise TypeError(f"randint only accepts integer dtypes, got {d}")
    minval, maxval = _int_operand(minval), _int_operand(maxval)
    info = np.iinfo(d)
    if info.bits < 32:
        minval = ew.convert_element_type(minval, dt.int32)
        maxval = ew.convert_element_type(maxval, dt.int32)
        minval = ew.min(ew.max(minval, _c(minval, int(info.min))), _c(minval, int(info.max)))
        maxval = ew.min(ew.max(maxval, _c(maxval, int(info.min))), _c(maxval, int(info.max) + 1))
        return ew.convert_element_type(_randint(key, shape, minval, maxval, dt.int32), d)
    return _randint(key, shape, minval, maxval, d)


def _randint(key: Array, shape: tuple, minval: Any, maxval: Any, d: np.dtype) -> Array:
    for v in (minval, maxval):
        if sh.broadcast_shapes(core.get_aval(v).shape, shape, op="randint") != shape:
            raise ShapeError(f"randint: bounds of shape {sh.shape_str(core.get_aval(v).shape)} do not "
                             f"broadcast to {sh.shape_str(shape)}")
    md = core.get_aval(maxval).dtype
    dmax = _convert_and_clip_integer(mv.full((), int(np.iinfo(d).max), d), md)
    out_of_range = ew.gt(maxval, mv.broadcast_to_rank_shape(dmax, core.get_aval(maxval).shape))
    minval = mv.broadcast_to_rank_shape(_convert_and_clip_integer(minval, d), shape)
    maxval = mv.broadcast_to_rank_shape(_convert_and_clip_integer(maxval, d), shape)
    out_of_range = mv.broadcast_to_rank_shape(out_of_range, shape)
    nbits = np.iinfo(d).bits
    k1, k2 = _split2(key)
    higher = rb.threefry_random_bits(k1, nbits, shape)
    lower = rb.threefry_random_bits(k2, nbits, shape)
    ud = np.dtype(f"uint{nbits}")
    span = ew.convert_element_type(ew.sub(maxval, minval), ud)
    span = ew.select(ew.le(maxval, minval), _c(span, 1), span)
    span = ew.select(ew.bitwise_and(out_of_range, ew.gt(maxval, minval)), ew.add(span, _c(span, 1)), span)
    mult = _urem(_c(span, 2 ** (nbits // 2)), span)
    mult = _urem(ew.mul(mult, mult), span)
    off = ew.add(ew.mul(_urem(higher, span), mult), _urem(lower, span))
    off = _urem(off, span)
    return ew.add(minval, ew.convert_element_type(off, d))


def _shuffle(key: Array, x: Any, axis: int) -> Array:
    a = core.get_aval(x)
    size = math.prod(a.shape)
    rounds = int(np.ceil(3 * np.log(max(1, size)) / np.log(np.iinfo(np.uint32).max)))
    for _ in range(rounds):
        key, sub = _split2(key)
        sort_keys = rb.threefry_random_bits(sub, 32, a.shape)
        _, x = sort([sort_keys, x], dimension=axis, num_keys=1)
    return x


def permutation(key: Array, x: int | Array, axis: int = 0, independent: bool = False) -> Array:
    """A random permutation of ``arange(x)`` or of ``x`` along ``axis``."""
    key = rb.check_key("permutation", key)
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return _shuffle(key, mv.iota(dt.int32, int(x)), 0)
    x = asarray(x)
    a = core.get_aval(x)
    if a.ndim == 0:
        if not dt.is_integer(a.dtype):
            raise TypeError("x must be an integer or at least 1-dimensional")
        n = int(core.concrete_or_error(x, "argument x of ember.random.permutation()"))
        return _shuffle(key, mv.iota(dt.int32, n), 0)
    axis = sh.normalize_axis(axis, a.ndim)
    if independent or a.ndim == 1:
        return _shuffle(key, x, axis)
    ind = _shuffle(key, mv.iota(dt.int32, a.shape[axis]), 0)
    return take(x, ind, axis)


def choice(key: Array, a: int | Array, shape: Shape = (), replace: bool = True, p: Any = None,
           axis: int = 0, mode: str | None = None) -> Array:
    """Random samples from ``a`` (or ``arange(a)``), with or without replacement, optional ``p``."""
    key = rb.check_key("choice", key)
    if not isinstance(shape, (tuple, list)):
        raise TypeError(f"shape argument of ember.random.choice must be a sequence, got {shape}")
    shape = _shape(shape, "choice")
    arr = asarray(a) if not isinstance(a, (int, np.integer)) else None
    if arr is None or core.get_aval(arr).ndim == 0:
        n_inputs = int(a) if arr is None else int(core.concrete_or_error(arr, "ember.random.choice(a)"))
        arr_nd = 0
    else:
        aa = core.get_aval(arr)
        axis = sh.normalize_axis(axis, aa.ndim)
        n_inputs, arr_nd = aa.shape[axis], aa.ndim
    n_draws = math.prod(shape)
    if n_draws == 0:
        d = dt.default_int if arr_nd == 0 else core.get_aval(arr).dtype
        return mv.full(shape, 0, d)
    if n_inputs <= 0:
        raise ValueError("a must be greater than 0 unless no samples are taken")
    if not replace and n_draws > n_inputs:
        raise ValueError(f"Cannot take a larger sample (size {n_draws}) than population (size "
                         f"{n_inputs}) when 'replace=False'")
    if p is None:
        if replace:
            ind = randint(key, shape, 0, n_inputs)
            result = ind if arr_nd == 0 else take(arr, ind, axis)
        else:
            perm = permutation(key, n_inputs if arr_nd == 0 else arr, axis)
            result = mv.slice_in_dim(perm, 0, n_draws, 1, axis if arr_nd else 0)
    else:
        pa = asarray(p)
        pd = core.get_aval(pa).dtype
        if not dt.is_inexact(pd):
            pa = ew.convert_element_type(pa, dt.default_float)
        if core.get_aval(pa).shape != (n_inputs,):
            raise ValueError("p must be None or a 1D vector with the same size as a.shape[axis]. "
                             f"p has shape {core.get_aval(pa).shape} and a.shape[axis] is {n_inputs}.")
        pd = core.get_aval(pa).dtype
        if replace:
            cum = red.cumsum(pa, 0)
            total = mv.reshape(mv.slice(cum, (n_inputs - 1,), (n_inputs,)), ())
            u = _uniform(key, shape, pd, 0.0, 1.0)
            r = ew.mul(mv.broadcast_in_dim(total, shape, ()), ew.sub(mv.full(shape, 1.0, pd), u))
            # searchsorted(cum, r, side='left') == number of entries strictly below r
            nd = len(shape)
            less = ew.lt(mv.broadcast_in_dim(cum, (*shape, n_inputs), (nd,)),
                         mv.broadcast_in_dim(r, (*shape, n_inputs), tuple(range(nd))))
            ind = red.reduce_sum(ew.convert_element_type(less, dt.int32), (nd,))
        else:
            g = ew.add(gumbel(key, (n_inputs,), pd, mode=mode or "low"), log(pa))
            _, order = sort([ew.neg(g), mv.iota(dt.int32, n_inputs)], dimension=0, num_keys=1)
            ind = mv.slice(order, (0,), (n_draws,))
        result = ind if arr_nd == 0 else take(arr, ind, axis)
    if arr_nd == 0:
        return mv.reshape(result, shape)
    aa = core.get_aval(arr)
    return mv.reshape(result, (*aa.shape[:axis], *shape, *aa.shape[axis + 1:]))


def categorical(key: Array, logits: Any, axis: int = -1, shape: Shape | None = None,
                replace: bool = True, mode: str | None = None) -> Array:
    """Samples from categorical distributions given unnormalized log-probabilities (Gumbel-max)."""
    key = rb.check_key("categorical", key)
    logits = asarray(logits)
    la = core.get_aval(logits)
    axis = sh.normalize_axis(axis, la.ndim)
    batch_shape = tuple(s for i, s in enumerate(la.shape) if i != axis)
    shape = batch_shape if shape is None else _shape(shape, "categorical")
    if shape[len(shape) - len(batch_shape):] != batch_shape:
        raise ShapeError(f"categorical: shape {shape} must end with the batch shape {batch_shape}")
    prefix = shape[:len(shape) - len(batch_shape)]
    if replace:
        logits_shape = list(shape[len(shape) - len(batch_shape):])
        logits_shape.insert(axis, la.shape[axis])
        full_shape = (*prefix, *logits_shape)
        g = gumbel(key, full_shape, la.dtype, mode=mode or "low")
        lb = mv.broadcast_in_dim(logits, full_shape, tuple(range(len(prefix), len(full_shape))))
        return red.argmax(ew.add(g, lb), len(prefix) + axis, dt.default_int)
    k = math.prod(prefix)
    if k > la.shape[axis]:
        raise ValueError(f"Number of samples without replacement ({k}) cannot exceed number of "
                         f"categories ({la.shape[axis]}).")
    z = mv.moveaxis(ew.add(logits, gumbel(key, la.shape, la.dtype, mode=mode or "low")), axis, -1)
    n = la.shape[axis]
    idx = mv.broadcasted_iota(dt.int32, core.get_aval(z).shape, len(batch_shape))
    _, order = sort([ew.neg(z), idx], dimension=len(batch_shape), num_keys=1)
    top = mv.slice_in_dim(order, 0, k, 1, len(batch_shape))
    del n
    top = mv.moveaxis(top, -1, 0)
    return mv.reshape(top, shape)


# ---------------------------------------------------------------------------------------------
# Gamma family, Poisson
# ---------------------------------------------------------------------------------------------


def _gamma(key: Array, a: Any, shape: Shape | None, dtype: Any, log_space: bool, name: str) -> Array:
    key = rb.check_key(name, key)
    d = _float_dtype(dtype, name)
    a = asarray(a)
    shape = core.get_aval(a).shape if shape is None else _shape(shape, name)
    a = _bound(a, d, shape)
    return rb.random_gamma(key, a, log_space)


def gamma(key: Array, a: Any, shape: Shape | None = None, dtype: Any = None) -> Array:
    """Gamma(a, 1) samples (differentiable in ``a`` by implicit reparameterization)."""
    return _gamma(key, a, shape, dtype, False, "gamma")


def loggamma(key: Array, a: Any, shape: Shape | None = None, dtype: Any = None) -> Array:
    """Logs of Gamma(a, 1) samples, accurate for small ``a``."""
    return _gamma(key, a, shape, dtype, True, "loggamma")


def beta(key: Array, a: Any, b: Any, shape: Shape | None = None, dtype: Any = None) -> Array:
    """Beta(a, b) samples from two log-gamma draws."""
    key, d, a, b, shape = _two_parameters("beta", key, dtype, a, b, shape)
    ka, kb = _split2(key)
    lga = loggamma(ka, _bound(a, d, shape), shape, d)
    lgb = loggamma(kb, _bound(b, d, shape), shape, d)
    m = ew.max(lga, lgb)
    ga, gb = ew.exp(ew.sub(lga, m)), ew.exp(ew.sub(lgb, m))
    return ew.div(ga, ew.add(ga, gb))


def dirichlet(key: Array, alpha: Any, shape: Shape | None = None, dtype: Any = None) -> Array:
    """Dirichlet(alpha) samples (normalized log-gamma draws along the last axis)."""
    key = rb.check_key("dirichlet", key)
    d = _float_dtype(dtype, "dirichlet")
    alpha = asarray(alpha)
    aa = core.get_aval(alpha)
    if aa.ndim < 1:
        raise ValueError(f"dirichlet requires alpha.ndim >= 1, got alpha.ndim == {aa.ndim}")
    shape = aa.shape[:-1] if shape is None else _shape(shape, "dirichlet")
    full = (*shape, aa.shape[-1])
    lg = loggamma(key, _bound(alpha, d, full), full, d)
    m = red.reduce_max(lg, (len(full) - 1,))
    e = ew.exp(ew.sub(lg, mv.broadcast_in_dim(m, full, tuple(range(len(shape))))))
    s = red.reduce_sum(e, (len(full) - 1,))
    return ew.div(e, mv.broadcast_in_dim(s, full, tuple(range(len(shape)))))


def chisquare(key: Array, df: Any, shape: Shape | None = None, dtype: Any = None) -> Array:
    """Chi-square(df) samples (``2 * Gamma(df / 2)``)."""
    d = _float_dtype(dtype, "chisquare")
    df = asarray(df)
    shape = core.get_aval(df).shape if shape is None else _shape(shape, "chisquare")
    half = ew.div(_bound(df, d, shape), mv.full(shape, 2.0, d))
    return ew.mul(mv.full(shape, 2.0, d), gamma(key, half, shape, d))


def poisson(key: Array, lam: Any, shape: Shape | None = None, dtype: Any = None) -> Array:
    """Poisson(lam) samples (Knuth below 10, transformed rejection above, as JAX)."""
    key = rb.check_key("poisson", key)
    d = dt.default_int if dtype is None else dt.user_dtype(dtype, "poisson")
    if not dt.is_integer(d):
        raise TypeError(f"poisson: dtype must be an integer dtype, got {d}")
    lam = asarray(lam)
    shape = core.get_aval(lam).shape if shape is None else _shape(shape, "poisson")
    return rb.random_poisson(key, _bound(lam, dt.float32, shape), d)


# ---------------------------------------------------------------------------------------------
# Multivariate
# ---------------------------------------------------------------------------------------------


def multivariate_normal(key: Array, mean: Any, cov: Any, shape: Shape | None = None, dtype: Any = None,
                        method: str = "cholesky") -> Array:
    """Samples of N(mean, cov); ``cov`` is factored by ``cholesky``, ``eigh`` or ``svd``."""
    key = rb.check_key("multivariate_normal", key)
    if method not in ("svd", "eigh", "cholesky"):
        raise ValueError("method must be one of {'svd', 'eigh', 'cholesky'}")
    mean, cov = asarray(mean), asarray(cov)
    md = dt.promote(dt.dtype_and_weak(mean), dt.dtype_and_weak(cov))[0]
    if not dt.is_inexact(md):
        md = dt.default_float
    d = md if dtype is None else _float_dtype(dtype, "multivariate_normal")
    mean, cov = ew.convert_element_type(mean, d), ew.convert_element_type(cov, d)
    ma, ca = core.get_aval(mean), core.get_aval(cov)
    if ma.ndim < 1:
        raise ValueError(f"multivariate_normal requires mean.ndim >= 1, got mean.ndim == {ma.ndim}")
    if ca.ndim < 2:
        raise ValueError(f"multivariate_normal requires cov.ndim >= 2, got cov.ndim == {ca.ndim}")
    n = ma.shape[-1]
    if ca.shape[-2:] != (n, n):
        raise ValueError(f"multivariate_normal requires cov.shape == (..., n, n) for n={n}, but got "
                         f"cov.shape == {ca.shape}.")
    if shape is None:
        shape = sh.broadcast_shapes(ma.shape[:-1], ca.shape[:-2])
    shape = _shape(shape, "multivariate_normal")
    if method == "svd":
        u, s, _ = la.svd(cov)
        factor = ew.mul(u, _expand_row(ew.sqrt(s)))
    elif method == "eigh":
        w, v = la.eigh(cov)
        factor = ew.mul(v, _expand_row(ew.sqrt(w)))
    else:
        factor = la.cholesky(cov)
    z = normal(key, (*shape, n), d)
    full = (*shape, n, n)
    fb = mv.broadcast_to_rank_shape(factor, full)
    zb = mv.broadcast_in_dim(z, full, (*range(len(shape)), len(shape) + 1))
    out = red.reduce_sum(ew.mul(fb, zb), (len(full) - 1,))
    return ew.add(mv.broadcast_to_rank_shape(mean, (*shape, n)), out)


def _expand_row(v: Any) -> Any:
    a = core.get_aval(v)
    shape = (*a.shape[:-1], a.shape[-1], a.shape[-1])
    return mv.broadcast_in_dim(v, shape, (*range(a.ndim - 1), a.ndim))


def orthogonal(key: Array, n: int, shape: Shape = (), dtype: Any = None, m: int | None = None) -> Array:
    """Haar-distributed ``(n, m)`` matrices with orthonormal columns (or rows when ``n < m``)."""
    key = rb.check_key("orthogonal", key)
    shape = _shape(shape, "orthogonal")
    d = dt.default_float if dtype is None else dt.user_dtype(dtype, "orthogonal")
    m = n if m is None else int(m)
    z = normal(key, (*shape, max(n, m), min(n, m)), d)
    q, r = la.qr(z)
    diag = la.diagonal(r)
    x = ew.mul(q, mv.broadcast_in_dim(ew.sign(diag), core.get_aval(q).shape,
                                      (*range(len(shape)), len(shape) + 1)))
    if n < m:
        x = mv.moveaxis(x, -1, -2)
    return x


__all__ = [
    "PRNGKey", "bernoulli", "beta", "bits", "categorical", "cauchy", "chisquare", "choice", "clone",
    "dirichlet", "exponential", "fold_in", "gamma", "gumbel", "key", "key_data", "laplace", "loggamma",
    "logistic", "multivariate_normal", "normal", "orthogonal", "permutation", "poisson", "rademacher",
    "randint", "split", "truncated_normal", "uniform", "wrap_key_data",
]
