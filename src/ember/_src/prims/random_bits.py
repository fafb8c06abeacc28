"""Counter-based random bits: the ``threefry2x32`` hash, ``bitcast_convert_type``, and the
rejection samplers ``random_gamma`` / ``random_poisson``.

The key functions below (``threefry_seed``, ``threefry_split``, ``threefry_fold_in``,
``threefry_random_bits``) reproduce JAX's two threefry schemes bit for bit; a key is a
``uint32[2]`` array in both. The flag ``jax_threefry_partitionable`` (default on, as in JAX since
0.5; environment ``EMBER_THREEFRY_PARTITIONABLE``) picks the scheme when a program is traced:

* partitionable (default): element ``i`` of the output (row-major index) hashes the 64-bit
  counter ``i`` split into its high and low words, one per hash lane; ``split`` stacks the two
  lanes as the new key, 32-bit ``bits`` are the XOR of the lanes, 64-bit bits are
  ``hi << 32 | lo``, 8/16-bit bits the XOR truncated.
* classic (``jax_threefry_partitionable=False``): ``split`` hashes ``iota(2 * num)``, and random
  bits hash ``iota(ceil(bits * size / 32))`` with the two halves of the counter array fed to the
  two hash lanes.

``fold_in`` is the same in both: the hash of ``[0, data]``.

``random_gamma`` and ``random_poisson`` are primitives because their rejection loops have a
data-dependent trip count (ember has no ``while_loop`` primitive at this level); their NumPy
implementations follow JAX's algorithms (Marsaglia-Tsang per element with its own key; Knuth /
Hormann's transformed rejection on the whole array) using the same key streams.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.special as sps

from ember._src import ad_util as ad
from ember._src import core, flags
from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src.array import asarray_eager
from ember._src.core import Primitive, ShapedArray
from ember._src.prims import elementwise as ew
from ember._src.prims import movement as mv
from ember.errors import DTypeError, ShapeError

PARTITIONABLE = flags.define_bool(
    "jax_threefry_partitionable", True, "EMBER_THREEFRY_PARTITIONABLE",
    "JAX's partitionable threefry scheme for split and random bits (JAX's default since 0.5); "
    "off gives the classic scheme")

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_KS_PARITY = np.uint32(0x1BD11BDA)

# ---------------------------------------------------------------------------------------------
# threefry2x32: 20 rounds of Threefish-style mixing on two uint32 lanes
# ---------------------------------------------------------------------------------------------


def _as_value(x: Any) -> Any:
    """A tracer as it is, anything else as an ember Array."""
    return x if isinstance(x, core.Tracer) else asarray_eager(x)

def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def threefry2x32_np(k1: Any, k2: Any, x1: Any, x2: Any) -> tuple[np.ndarray, np.ndarray]:
    """The Threefry-2x32 hash (Salmon et al. 2011, 20 rounds) on NumPy uint32 arrays (broadcasting)."""
    k1, k2, x1, x2 = (np.asarray(a, dtype=np.uint32) for a in (k1, k2, x1, x2))
    ks = (k1, k2, k1 ^ k2 ^ _KS_PARITY)
    with np.errstate(over="ignore"):
        a, b = x1 + ks[0], x2 + ks[1]
        for i in range(5):
            for r in _ROTATIONS[i % 2]:
                a = a + b
                b = _rotl(b, r) ^ a
            a = a + ks[(i + 1) % 3]
            b = b + ks[(i + 2) % 3] + np.uint32(i + 1)
    return a, b


threefry2x32_p = Primitive("threefry2x32", multiple_results=True)


def _threefry_abstract(*avals: ShapedArray) -> list[ShapedArray]:
    for a in avals:
        if a.dtype != dt.uint32:
            raise DTypeError(f"threefry2x32 requires uint32 operands, got {a.dtype}")
    shape = core.check_same_shapes("threefry2x32", list(avals))
    return [ShapedArray(shape, dt.uint32), ShapedArray(shape, dt.uint32)]


def _threefry_impl(k1: np.ndarray, k2: np.ndarray, x1: np.ndarray, x2: np.ndarray) -> list[np.ndarray]:
    return list(threefry2x32_np(k1, k2, x1, x2))


def _threefry_jvp(primals: list, tangents: list) -> tuple[list, list]:
    outs = threefry2x32_p.bind(*primals)
    return list(outs), [ad.Zero.from_value(o) for o in outs]


threefry2x32_p.impl = _threefry_impl
threefry2x32_p.abstract_eval = _threefry_abstract
threefry2x32_p.jvp = _threefry_jvp
threefry2x32_p.batch = ew.elementwise_batch(threefry2x32_p)
threefry2x32_p.na("transpose", "threefry2x32 is a hash on integers, not a linear map")

# ---------------------------------------------------------------------------------------------
# bitcast_convert_type: reinterpret the bits of each element (equal widths only)
# ---------------------------------------------------------------------------------------------

bitcast_convert_type_p = Primitive("bitcast_convert_type")
bitcast_convert_type_p.cost_class = "free"  # a reinterpretation of the bits (aot.estimate_cost)


def _bitcast_abstract(x: ShapedArray, *, new_dtype: np.dtype) -> ShapedArray:
    if np.dtype(x.dtype).itemsize != np.dtype(new_dtype).itemsize:
        raise DTypeError(f"bitcast_convert_type: {x.dtype} and {new_dtype} have different widths")
    return ShapedArray(x.shape, new_dtype, False)


def _bitcast_jvp(primals: list, tangents: list, *, new_dtype: np.dtype) -> tuple[list, list]:
    out = bitcast_convert_type_p.bind(primals[0], new_dtype=new_dtype)
    return [out], [ad.Zero.from_value(out)]


bitcast_convert_type_p.impl = lambda x, *, new_dtype: np.array(x, order="C").view(new_dtype)
bitcast_convert_type_p.abstract_eval = _bitcast_abstract
bitcast_convert_type_p.jvp = _bitcast_jvp
bitcast_convert_type_p.batch = lambda vals, dims, *, new_dtype: (
    [bitcast_convert_type_p.bind(vals[0], new_dtype=new_dtype)], [dims[0]])
bitcast_convert_type_p.na("transpose", "reinterpreting bits is not linear")


def bitcast_convert_type(x: Any, new_dtype: Any) -> Any:
    """Reinterpret the bits of each element of ``x`` as ``new_dtype`` (same width)."""
    new_dtype = dt.canonicalize(new_dtype)
    if core.get_aval(x).dtype == new_dtype:
        return x
    return bitcast_convert_type_p.bind(x, new_dtype=new_dtype)


# ---------------------------------------------------------------------------------------------
# JAX-compatible key functions (expressed in lax-level ops, so they trace and vmap)
# ---------------------------------------------------------------------------------------------


def _u32(v: int, shape: Sequence[int] = ()) -> Any:
    return mv.full(tuple(shape), np.uint32(v), dt.uint32)


def check_key(name: str, key: Any) -> Any:
    """Validate a raw threefry key (``uint32[2]``) and return it as an ember value."""
    key = _as_value(key)
    a = core.get_aval(key)
    if a.dtype != dt.uint32 or a.shape != (2,):
        raise TypeError(f"{name}: expected a PRNG key (uint32[2], e.g. from ember.random.key), got "
                        f"{a.str_short()}. For a batch of keys use ember.vmap.")
    return key


def _key_halves(key: Any) -> tuple[Any, Any]:
    k1 = mv.reshape(mv.slice(key, (0,), (1,)), ())
    k2 = mv.reshape(mv.slice(key, (1,), (2,)), ())
    return k1, k2


def threefry_2x32(key: Any, count: Any) -> Any:
    """Hash the uint32 array ``count`` with ``key``: its flattened halves feed the two lanes."""
    shape = core.get_aval(count).shape
    n = sh.size(shape)
    if not isinstance(n, int):
        raise ShapeError("threefry_2x32 needs a static count size")
    flat = mv.reshape(count, (n,))
    odd = n % 2
    if odd:
        flat = mv.concatenate([flat, _u32(0, (1,))], 0)
    h = (n + odd) // 2
    k1, k2 = _key_halves(key)
    x1, x2 = mv.slice(flat, (0,), (h,)), mv.slice(flat, (h,), (2 * h,))
    y1, y2 = threefry2x32_p.bind(mv.broadcast_in_dim(k1, (h,), ()), mv.broadcast_in_dim(k2, (h,), ()),
                                 x1, x2)
    out = mv.concatenate([y1, y2], 0) if h else y1
    if odd:
        out = mv.slice(out, (0,), (n,))
    return mv.reshape(out, shape)


def threefry_seed(seed: Any) -> Any:
    """A raw key from an integer seed: ``[seed >> 32, seed & 0xFFFFFFFF]`` as uint32.

    A Python int is an int32 seed when it fits (as JAX's default 32-bit mode: ``-1`` gives
    ``[0, 0xFFFFFFFF]``), otherwise int64/uint64 with 64-bit dtypes on, or its low 32 bits with
    them off (as JAX). 32-bit seeds have a zero high word.
    """
    if isinstance(seed, (bool, np.bool_)):
        raise TypeError("PRNG key seed must be an integer, got a bool")
    if isinstance(seed, int) and not dt.x64_enabled() and not -(2**31) <= seed < 2**31:
        if not -(2**63) <= seed < 2**63:
            raise OverflowError(f"PRNG key seed {seed} does not fit in int64")
        seed = np.asarray(seed & 0xFFFFFFFF, dtype=np.uint32)  # its low 32 bits, as JAX's 32-bit mode
    elif isinstance(seed, int):
        seed = np.asarray(seed, dtype=dt.python_scalar_dtype(seed))
    seed = _as_value(seed)
    a = core.get_aval(seed)
    if a.shape:
        raise TypeError(f"PRNG key seed must be a scalar; got shape {a.str_short()}")
    if not dt.is_integer(a.dtype):
        raise TypeError(f"PRNG key seed must be an integer; got {a.dtype}")
    if a.weak_type:
        seed = ew.convert_element_type(seed, a.dtype)
    if np.dtype(a.dtype).itemsize == 8:
        hi = ew.convert_element_type(ew.shift_right_logical(seed, mv.full_like(seed, 32)), dt.uint32)
    else:
        hi = _u32(0)
    lo = ew.convert_element_type(seed, dt.uint32)  # two's-complement wrap, as a C cast
    return mv.concatenate([mv.reshape(hi, (1,)), mv.reshape(lo, (1,))], 0)


def threefry_split(key: Any, shape: Sequence[int]) -> Any:
    """``prod(shape)`` new keys, shaped ``(*shape, 2)``, in the scheme the flag selects."""
    shape = tuple(int(s) for s in shape)
    if PARTITIONABLE.value:
        y1, y2 = _hash_index(key, shape)
        return mv.concatenate([mv.reshape(y1, (*shape, 1)), mv.reshape(y2, (*shape, 1))], len(shape))
    num = math.prod(shape)
    counts = mv.iota(dt.uint32, num * 2)
    return mv.reshape(threefry_2x32(key, counts), (*shape, 2))


def _hash_index(key: Any, shape: tuple[int, ...]) -> tuple[Any, Any]:
    """Both hash lanes of every element's row-major index (a 64-bit counter as ``(hi, lo)``)."""
    size = math.prod(shape)
    if size >= 2**32:
        raise NotImplementedError("random bits arrays of 2**32 or more elements are not supported")
    lo = mv.reshape(mv.iota(dt.uint32, size), shape)
    k1, k2 = _key_halves(key)
    return threefry2x32_p.bind(mv.broadcast_in_dim(k1, shape, ()), mv.broadcast_in_dim(k2, shape, ()),
                               _u32(0, shape), lo)


def threefry_fold_in(key: Any, data: Any) -> Any:
    """A new key from ``key`` and a 32-bit integer ``data`` (the hash of ``[0, data]``)."""
    if isinstance(data, int) and not isinstance(data, bool):
        data = np.asarray(data & 0xFFFFFFFF, dtype=np.uint32)
    data = _as_value(data)
    if core.get_aval(data).shape:
        raise TypeError("fold_in: data must be a scalar")
    if not dt.is_integer(core.get_aval(data).dtype):
        raise TypeError(f"fold_in: data must be an integer, got {core.get_aval(data).dtype}")
    data = ew.convert_element_type(data, dt.uint32)
    counts = mv.concatenate([_u32(0, (1,)), mv.reshape(data, (1,))], 0)
    return threefry_2x32(key, counts)


_UINT = {8: dt.uint8, 16: dt.uint16, 32: dt.uint32, 64: dt.uint64}


def threefry_random_bits(key: Any, bit_width: int, shape: Sequence[int]) -> Any:
    """Uniform random unsigned integers of ``bit_width`` bits, in the scheme the flag selects."""
    if bit_width not in _UINT:
        raise TypeError(f"random bits: bit_width must be 8, 16, 32 or 64, got {bit_width}")
    shape = tuple(int(s) for s in shape)
    dtype = _UINT[bit_width]
    if PARTITIONABLE.value:
        y1, y2 = _hash_index(key, shape)
        if bit_width == 64:
            hi, lo = ew.convert_element_type(y1, dtype), ew.convert_element_type(y2, dtype)
            return ew.bitwise_or(ew.shift_left(hi, mv.full_like(hi, 32)), lo)
        return ew.convert_element_type(ew.bitwise_xor(y1, y2), dtype)
    size = math.prod(shape)
    max_count = -(-bit_width * size // 32)
    if max_count >= 2**32 - 1:
        raise NotImplementedError("random bits arrays of 2**32 or more words are not supported")
    bits = threefry_2x32(key, mv.iota(dt.uint32, max_count))
    if bit_width == 64:
        half = max_count // 2
        hi = ew.convert_element_type(mv.slice(bits, (0,), (half,)), dtype)
        lo = ew.convert_element_type(mv.slice(bits, (half,), (max_count,)), dtype)
        bits = ew.bitwise_or(ew.shift_left(hi, mv.full_like(hi, 32)), lo)
    elif bit_width in (8, 16):
        per = 32 // bit_width
        wide = mv.broadcast_in_dim(bits, (max_count, per), (0,))
        shifts = ew.mul(mv.broadcasted_iota(dt.uint32, (max_count, per), 1),
                        _u32(bit_width, (max_count, per)))
        parts = ew.bitwise_and(ew.shift_right_logical(wide, shifts),
                               _u32((1 << bit_width) - 1, (max_count, per)))
        bits = ew.convert_element_type(mv.reshape(parts, (max_count * per,)), dtype)
        bits = mv.slice(bits, (0,), (size,))
    return mv.reshape(bits, shape)


# ---------------------------------------------------------------------------------------------
# NumPy mirrors of the key functions (used inside the rejection samplers' implementations)
# ---------------------------------------------------------------------------------------------


def _np_hash(keys: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``threefry_2x32`` for a batch of keys ``(..., 2)`` and one 1-d count array: ``(..., n)``."""
    n = counts.shape[0]
    flat = np.concatenate([counts, np.zeros(n % 2, np.uint32)])
    h = flat.shape[0] // 2
    k1, k2 = keys[..., 0:1], keys[..., 1:2]
    y1, y2 = threefry2x32_np(k1, k2, flat[:h], flat[h:])
    return np.concatenate([np.broadcast_to(y1, (*keys.shape[:-1], h)),
                           np.broadcast_to(y2, (*keys.shape[:-1], h))], axis=-1)[..., :n]


def _np_hash_index(keys: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Both lanes of the hash of indices ``0..size-1`` (partitionable scheme): ``(..., size)`` each."""
    lo = np.arange(size, dtype=np.uint32)
    return threefry2x32_np(keys[..., 0:1], keys[..., 1:2], np.zeros_like(lo), lo)


def np_split(keys: np.ndarray, num: int) -> np.ndarray:
    """Split each key in ``keys (..., 2)`` into ``num``: ``(..., num, 2)``."""
    if PARTITIONABLE.value:
        return np.stack(_np_hash_index(keys, num), axis=-1)
    out = _np_hash(keys, np.arange(2 * num, dtype=np.uint32))
    return out.reshape(*keys.shape[:-1], num, 2)


def np_uniform(keys: np.ndarray, shape: tuple, dtype: np.dtype) -> np.ndarray:
    """``uniform(key, shape, dtype)`` in [0, 1) for each key of ``keys (..., 2)`` (float32/64)."""
    size = math.prod(shape)
    if PARTITIONABLE.value:
        y1, y2 = _np_hash_index(keys, size)
        if dtype == np.float64:
            bits = (y1.astype(np.uint64) << np.uint64(32)) | y2
            u = (bits >> np.uint64(12)).astype(np.float64) * 2.0**-52
        else:
            u = ((y1 ^ y2) >> np.uint32(9)).astype(np.float32) * np.float32(2.0**-23)
    elif dtype == np.float64:
        b = _np_hash(keys, np.arange(2 * size, dtype=np.uint32)).astype(np.uint64)
        bits = (b[..., :size] << np.uint64(32)) | b[..., size:]
        u = (bits >> np.uint64(12)).astype(np.float64) * 2.0**-52
    else:
        bits = _np_hash(keys, np.arange(size, dtype=np.uint32))
        u = (bits >> np.uint32(9)).astype(np.float32) * np.float32(2.0**-23)
    return u.reshape(*keys.shape[:-1], *shape)


def np_normal(keys: np.ndarray, shape: tuple, dtype: np.dtype) -> np.ndarray:
    """``normal(key, shape, dtype)`` per key (erf_inv in float64, so within an ulp of JAX)."""
    lo = np.nextafter(np.array(-1.0, dtype), np.array(0.0, dtype))
    u = np.maximum(lo, np_uniform(keys, shape, dtype) * (1 - lo) + lo).astype(dtype)
    return (np.sqrt(2.0) * sps.erfinv(u.astype(np.float64))).astype(dtype)


# ---------------------------------------------------------------------------------------------
# random_gamma(key, a): Marsaglia-Tsang, one key per element (keys split as JAX does)
# ---------------------------------------------------------------------------------------------

random_gamma_p = Primitive("random_gamma")
_FALLBACK = "runs as a native fallback step (its NumPy implementation is called back from the program): "


def _gamma_one_np(keys: np.ndarray, alpha: np.ndarray, log_space: bool) -> np.ndarray:
    """Vectorized ``_gamma_one``: every element runs its own rejection loop in lockstep."""
    dtype = alpha.dtype.type
    one, third = dtype(1), dtype(1.0 / 3.0)
    boost_mask = alpha >= one
    alpha_orig = alpha
    alpha = np.where(boost_mask, alpha, alpha + one)
    d = alpha - third
    c = third / np.sqrt(d)
    ks = np_split(keys, 2)
    key, subkey = ks[:, 0], ks[:, 1]
    m = alpha.shape[0]
    X, V, U = np.zeros(m, alpha.dtype), np.ones(m, alpha.dtype), np.full(m, 2, alpha.dtype)

    def cond(X: np.ndarray, V: np.ndarray, U: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return (U >= one - dtype(0.0331) * (X * X)) & \
                (np.log(U) >= X * dtype(0.5) + d * (one - V + np.log(V)))

    active = cond(X, V, U)
    it = 0
    while active.any():
        it += 1
        if it > 10000:
            raise RuntimeError("random_gamma: rejection loop did not terminate")
        idx = np.nonzero(active)[0]
        k3 = np_split(key[idx], 3)
        key[idx] = k3[:, 0]
        xkey, ukey = k3[:, 1], k3[:, 2]
        x = np.zeros(idx.shape[0], alpha.dtype)
        v = np.full(idx.shape[0], -1, alpha.dtype)
        inner = v <= 0
        while inner.any():
            j = np.nonzero(inner)[0]
            k2 = np_split(xkey[j], 2)
            xkey[j] = k2[:, 0]
            x[j] = np_normal(k2[:, 1], (), alpha.dtype)
            v[j] = one + x[j] * c[idx[j]]
            inner = v <= 0
        X[idx] = x * x
        V[idx] = v * v * v
        U[idx] = np_uniform(ukey, (), alpha.dtype)
        active = cond(X, V, U)
    with np.errstate(all="ignore"):
        if log_space:
            log_samples = np.log1p(-np_uniform(subkey, (), alpha.dtype))
            log_boost = np.where(boost_mask | (log_samples == 0), dtype(0), log_samples * (one / alpha_orig))
            return (np.log(d) + np.log(V) + log_boost).astype(alpha.dtype)
        samples = one - np_uniform(subkey, (), alpha.dtype)
        boost = np.where(boost_mask, one, np.power(samples, one / alpha_orig))
        return (d * V * boost).astype(alpha.dtype)


def _gamma_impl(key: np.ndarray, a: np.ndarray, *, log_space: bool) -> np.ndarray:
    kshape = key.shape[:-1]
    a_dtype = a.dtype
    if dt.is_low_precision(a.dtype):
        a = a.astype(np.float32)
    split_count = math.prod(a.shape[len(kshape):])
    keys = np_split(key.reshape(-1, 2), split_count).reshape(-1, 2)
    flat = a.reshape(-1)
    if flat.size == 0:
        return np.zeros(a.shape, a_dtype)
    out = _gamma_one_np(keys, flat, log_space)
    return out.reshape(a.shape).astype(a_dtype)


def _gamma_abstract(key: ShapedArray, a: ShapedArray, *, log_space: bool) -> ShapedArray:
    if key.dtype != dt.uint32 or not key.shape or key.shape[-1] != 2:
        raise TypeError(f"random_gamma: key must be uint32[..., 2], got {key.str_short()}")
    if tuple(a.shape[:key.ndim - 1]) != tuple(key.shape[:-1]):
        raise ShapeError(f"random_gamma: key batch shape {sh.shape_str(key.shape[:-1])} is not a prefix "
                         f"of the shape of a {sh.shape_str(a.shape)}")
    if not dt.is_float(a.dtype):
        raise DTypeError(f"random_gamma: a must be a float, got {a.dtype}")
    return a.strip_weak()


def _gamma_jvp(primals: list, tangents: list, *, log_space: bool) -> tuple[list, list]:
    key, a = primals
    out = random_gamma_p.bind(key, a, log_space=log_space)
    ta = tangents[1]
    if ad.is_zero(ta):
        return [out], [ad.Zero.from_value(out)]
    return [out], [ew.mul(ta, random_gamma_grad_p.bind(a, out, log_space=log_space))]


def _gamma_batch(vals: list, dims: list, *, log_space: bool) -> tuple[list, list]:
    vals = ew.bring_to_front(vals, dims)
    return [random_gamma_p.bind(*vals, log_space=log_space)], [0]


random_gamma_p.impl = _gamma_impl
random_gamma_p.abstract_eval = _gamma_abstract
random_gamma_p.jvp = _gamma_jvp
random_gamma_p.batch = _gamma_batch
random_gamma_p.na("transpose", "sampling is not linear")
random_gamma_p.na("lowering", _FALLBACK + "rejection sampling with data-dependent loops stays in NumPy")

# d sample / d alpha by implicit differentiation of the CDF: -(dP/da) / (dP/dx)
random_gamma_grad_p = Primitive("random_gamma_grad")


def _gamma_grad_impl(a: np.ndarray, sample: np.ndarray, *, log_space: bool) -> np.ndarray:
    a64 = a.astype(np.float64)
    x = np.exp(sample.astype(np.float64)) if log_space else sample.astype(np.float64)
    with np.errstate(all="ignore"):
        h = 1e-5 * np.maximum(a64, 1.0)
        dp_da = (sps.gammainc(a64 + h, x) - sps.gammainc(a64 - h, x)) / (2 * h)
        log_pdf = (a64 - 1) * np.log(x) - x - sps.gammaln(a64)
        g = -dp_da / np.exp(log_pdf)
        if log_space:
            g = g / x
        g = np.where(x > 0, g, 0.0)
    return g.astype(a.dtype)


random_gamma_grad_p.impl = _gamma_grad_impl
random_gamma_grad_p.abstract_eval = lambda a, sample, *, log_space: a.strip_weak()
random_gamma_grad_p.batch = lambda vals, dims, *, log_space: (
    [random_gamma_grad_p.bind(*ew.bring_to_front(vals, dims), log_space=log_space)], [0])
random_gamma_grad_p.na("jvp", "second derivatives of gamma samples are not implemented")
random_gamma_grad_p.na("transpose", "not linear")
random_gamma_grad_p.na("lowering", _FALLBACK + "series/asymptotic gradient of the gamma CDF stays in NumPy")


def random_gamma(key: Any, a: Any, log_space: bool = False) -> Any:
    """Gamma(a) samples (or their logs) with one subkey per element of ``a``."""
    return random_gamma_p.bind(key, a, log_space=bool(log_space))


# ---------------------------------------------------------------------------------------------
# random_poisson(key, lam): Knuth for lam < 10, Hormann's transformed rejection otherwise
# ---------------------------------------------------------------------------------------------

random_poisson_p = Primitive("random_poisson")


def _poisson_knuth_np(key: np.ndarray, lam: np.ndarray) -> np.ndarray:
    k = np.zeros(lam.shape, np.int64)
    log_prod = np.zeros(lam.shape, np.float32)
    it = 0
    while (log_prod > -lam).any():
        ks = np_split(key, 2)
        key, sub = ks[0], ks[1]
        k = np.where(log_prod > -lam, k + 1, k)
        with np.errstate(divide="ignore"):
            log_prod = log_prod + np.log(np_uniform(sub, lam.shape, np.float32))
        it += 1
        if it > 100000:
            raise RuntimeError("random_poisson: loop did not terminate")
    return k - 1


def _poisson_rejection_np(key: np.ndarray, lam: np.ndarray) -> np.ndarray:
    f = np.float32
    with np.errstate(all="ignore"):
        log_lam = np.log(lam)
        b = f(0.931) + f(2.53) * np.sqrt(lam)
        a = f(-0.059) + f(0.02483) * b
        inv_alpha = f(1.1239) + f(1.1328) / (b - f(3.4))
        v_r = f(0.9277) - f(3.6224) / (b - f(2))
        k_out = np.full(lam.shape, -1, np.float32)
        accepted = np.zeros(lam.shape, bool)
        it = 0
        while (~accepted).any():
            ks = np_split(key, 3)
            key = ks[0]
            u = np_uniform(ks[1], lam.shape, np.float32) - f(0.5)
            v = np_uniform(ks[2], lam.shape, np.float32)
            us = f(0.5) - np.abs(u)
            k = np.floor((f(2) * a / us + b) * u + lam + f(0.43))
            s = np.log(v * inv_alpha / (a / (us * us) + b))
            t = -lam + k * log_lam - sps.gammaln(k + f(1)).astype(np.float32)
            accept1 = (us >= f(0.07)) & (v <= v_r)
            reject = (k < 0) | ((us < f(0.013)) & (v > us))
            accept = accept1 | (~reject & (s <= t))
            k_out = np.where(accept, k, k_out)
            accepted |= accept
            it += 1
            if it > 100000:
                raise RuntimeError("random_poisson: loop did not terminate")
    return k_out


def _poisson_one(key: np.ndarray, lam: np.ndarray) -> np.ndarray:
    use_knuth = np.isnan(lam) | (lam < 10)
    lam_knuth = np.where(use_knuth, lam, np.float32(0))
    lam_rej = np.where(use_knuth, np.float32(1e5), lam)
    res = np.where(use_knuth, _poisson_knuth_np(key, lam_knuth), _poisson_rejection_np(key, lam_rej))
    return np.where(lam == 0, 0, res)


def _poisson_impl(key: np.ndarray, lam: np.ndarray, *, dtype: np.dtype) -> np.ndarray:
    kshape = key.shape[:-1]
    lam = lam.astype(np.float32)
    keys = key.reshape(-1, 2)
    lams = lam.reshape(keys.shape[0], *lam.shape[len(kshape):])
    out = np.stack([_poisson_one(keys[i], lams[i]) for i in range(keys.shape[0])]) if keys.shape[0] \
        else np.zeros(lams.shape)
    return out.reshape(lam.shape).astype(dtype)


def _poisson_abstract(key: ShapedArray, lam: ShapedArray, *, dtype: np.dtype) -> ShapedArray:
    if key.dtype != dt.uint32 or not key.shape or key.shape[-1] != 2:
        raise TypeError(f"random_poisson: key must be uint32[..., 2], got {key.str_short()}")
    if tuple(lam.shape[:key.ndim - 1]) != tuple(key.shape[:-1]):
        raise ShapeError("random_poisson: key batch shape must prefix the shape of lam")
    return ShapedArray(lam.shape, dtype)


def _poisson_jvp(primals: list, tangents: list, *, dtype: np.dtype) -> tuple[list, list]:
    out = random_poisson_p.bind(*primals, dtype=dtype)
    return [out], [ad.Zero.from_value(out)]


random_poisson_p.impl = _poisson_impl
random_poisson_p.abstract_eval = _poisson_abstract
random_poisson_p.jvp = _poisson_jvp
random_poisson_p.batch = lambda vals, dims, *, dtype: (
    [random_poisson_p.bind(*ew.bring_to_front(vals, dims), dtype=dtype)], [0])
random_poisson_p.na("transpose", "sampling is not linear")
random_poisson_p.na("lowering", _FALLBACK + "rejection sampling with data-dependent loops stays in NumPy")


def random_poisson(key: Any, lam: Any, dtype: Any) -> Any:
    """Poisson(lam) samples of integer ``dtype`` (the whole array shares ``key``'s stream)."""
    return random_poisson_p.bind(key, lam, dtype=dt.canonicalize(dtype))
