"""``jax.nn.initializers``: functions ``init(key, shape, dtype) -> array`` for neural-network weights.

Same names, signatures, defaults and formulas as JAX; the random draws are ``ember.random``'s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

import ember.numpy as jnp
from ember import random

RealNumeric = Any
DTypeLike = Any


class Initializer(Protocol):
    """``init(key, shape, dtype=None) -> Array``."""

    def __call__(self, key: Any, shape: Sequence[int], dtype: DTypeLike = None) -> Any: ...


def _dtype(dtype: DTypeLike) -> np.dtype:
    d = np.dtype(np.float32) if dtype is None else np.dtype(dtype)
    if not np.issubdtype(d, np.inexact):
        raise TypeError(f"initializer dtype must be a floating or complex dtype, got {d}")
    return d


def _shape(shape: Any) -> tuple[int, ...]:
    return (int(shape),) if np.ndim(shape) == 0 else tuple(int(s) for s in shape)


def zeros(key: Any, shape: Sequence[int], dtype: DTypeLike = None) -> Any:
    """An initializer returning a zeros array (``key`` is ignored)."""
    return jnp.zeros(_shape(shape), _dtype(dtype))


def ones(key: Any, shape: Sequence[int], dtype: DTypeLike = None) -> Any:
    """An initializer returning a ones array (``key`` is ignored)."""
    return jnp.ones(_shape(shape), _dtype(dtype))


def constant(value: Any, dtype: DTypeLike = None) -> Initializer:
    """Builds an initializer that returns arrays full of ``value``."""
    def init(key: Any, shape: Sequence[int], dtype: DTypeLike = dtype) -> Any:
        return jnp.full(_shape(shape), value, _dtype(dtype))
    return init


def uniform(scale: RealNumeric = 1e-2, dtype: DTypeLike = None) -> Initializer:
    """Builds an initializer drawing uniformly from ``[0, scale)``."""
    def init(key: Any, shape: Sequence[int], dtype: DTypeLike = dtype) -> Any:
        d = _dtype(dtype)
        return random.uniform(key, _shape(shape), d) * jnp.asarray(scale, d)
    return init


def normal(stddev: RealNumeric = 1e-2, dtype: DTypeLike = None) -> Initializer:
    """Builds an initializer drawing from a normal distribution with standard deviation ``stddev``."""
    def init(key: Any, shape: Sequence[int], dtype: DTypeLike = dtype) -> Any:
        d = _dtype(dtype)
        return random.normal(key, _shape(shape), d) * jnp.asarray(stddev, d)
    return init


def truncated_normal(stddev: RealNumeric = 1e-2, dtype: DTypeLike = None, lower: RealNumeric = -2.0,
                     upper: RealNumeric = 2.0) -> Initializer:
    """Builds an initializer: a standard normal truncated to ``[lower, upper]``, times ``stddev``."""
    def init(key: Any, shape: Sequence[int], dtype: DTypeLike = dtype) -> Any:
        d = _dtype(dtype)
        return random.truncated_normal(key, lower, upper, _shape(shape), d) * jnp.asarray(stddev, d)
    return init


def _axes(axis: int | Sequence[int], ndim: int, name: str) -> tuple[int, ...]:
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise ValueError(f"variance_scaling: {name}={axis} is out of range for a {ndim}-d shape")
        out.append(a % ndim)
    return tuple(out)


def _compute_fans(shape: tuple[int, ...], in_axis: int | Sequence[int], out_axis: int | Sequence[int],
                  batch_axis: int | Sequence[int]) -> tuple[float, float]:
    """(fan_in, fan_out): input/output sizes times the receptive field (the other, non-batch axes)."""
    if len(shape) < 1:
        raise ValueError(f"variance_scaling needs a shape with at least one axis, got {shape}")
    ins = _axes(in_axis, len(shape), "in_axis")
    outs = _axes(out_axis, len(shape), "out_axis")
    batch = _axes(batch_axis, len(shape), "batch_axis")
    in_size = math.prod(shape[a] for a in ins)
    out_size = math.prod(shape[a] for a in outs)
    rf = math.prod(s for i, s in enumerate(shape) if i not in set(ins) | set(outs) | set(batch))
    return float(in_size * rf), float(out_size * rf)


# standard deviation of a standard normal truncated to (-2, 2) / of a complex one truncated to |z| < 2
_TRUNC_STD = 0.87962566103423978
_TRUNC_STD_COMPLEX = 0.95311164380491208


def _complex_uniform(key: Any, shape: tuple, dtype: np.dtype) -> Any:
    """Uniform on the unit disk."""
    real = np.dtype(np.float32) if dtype == np.complex64 else np.dtype(np.float64)
    k1, k2 = random.split(key)
    theta = 2 * np.pi * random.uniform(k1, shape, real)
    r = jnp.sqrt(random.uniform(k2, shape, real))
    return (r * jnp.exp(1j * theta)).astype(dtype)


def _complex_truncated_normal(key: Any, upper: float, shape: tuple, dtype: np.dtype) -> Any:
    """A complex standard normal with modulus truncated to ``upper`` (inverse-CDF sampling)."""
    real = np.dtype(np.float32) if dtype == np.complex64 else np.dtype(np.float64)
    k1, k2 = random.split(key)
    t = (1 - jnp.exp(jnp.asarray(-(upper ** 2), real))) * random.uniform(k1, shape, real)
    r = jnp.sqrt(-jnp.log(1 - t))
    theta = 2 * np.pi * random.uniform(k2, shape, real)
    return (r * jnp.exp(1j * theta)).astype(dtype)


def variance_scaling(scale: RealNumeric, mode: str, distribution: str, in_axis: int | Sequence[int] = -2,
                     out_axis: int | Sequence[int] = -1, batch_axis: int | Sequence[int] = (),
                     dtype: DTypeLike = None) -> Initializer:
    """Builds an initializer with variance ``scale / n``, ``n`` the fan given by ``mode``.

    ``mode``: ``"fan_in"``, ``"fan_out"``, ``"fan_avg"`` or ``"fan_geo_avg"``; ``distribution``:
    ``"truncated_normal"`` (at two standard deviations, rescaled), ``"normal"`` or ``"uniform"``
    (a disk for complex dtypes). Axes other than ``in_axis``/``out_axis``/``batch_axis`` are the
    receptive field (convolution kernel axes).
    """
    if mode not in ("fan_in", "fan_out", "fan_avg", "fan_geo_avg"):
        raise ValueError(f"invalid mode for variance scaling initializer: {mode}")
    if distribution not in ("truncated_normal", "normal", "uniform"):
        raise ValueError(f"invalid distribution for variance scaling initializer: {distribution}")

    def init(key: Any, shape: Sequence[int], dtype: DTypeLike = dtype) -> Any:
        shape = _shape(shape)
        d = _dtype(dtype)
        fan_in, fan_out = _compute_fans(shape, in_axis, out_axis, batch_axis)
        denominator = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2,
                       "fan_geo_avg": (fan_in * fan_out) ** 0.5}[mode]
        variance = jnp.asarray(scale / denominator, d)
        complex_ = np.issubdtype(d, np.complexfloating)
        if distribution == "truncated_normal":
            if complex_:
                return _complex_truncated_normal(key, 2, shape, d) * (jnp.sqrt(variance) / _TRUNC_STD_COMPLEX)
            std = jnp.sqrt(variance) / jnp.asarray(_TRUNC_STD, d)
            return random.truncated_normal(key, -2, 2, shape, d) * std
        if distribution == "normal":
            return random.normal(key, shape, d) * jnp.sqrt(variance)
        if complex_:
            return _complex_uniform(key, shape, d) * jnp.sqrt(variance)
        return random.uniform(key, shape, d, -1) * jnp.sqrt(3 * variance)

    return init


def _fan_family(scale: float, mode: str, distribution: str, doc: str) -> Any:
    def builder(in_axis: int | Sequence[int] = -2, out_axis: int | Sequence[int] = -1,
                batch_axis: int | Sequence[int] = (), dtype: DTypeLike = None) -> Initializer:
        return variance_scaling(scale, mode, distribution, in_axis=in_axis, out_axis=out_axis,
                                batch_axis=batch_axis, dtype=dtype)
    builder.__doc__ = doc
    return builder


glorot_uniform = _fan_family(1.0, "fan_avg", "uniform",
                             "Glorot (Xavier) uniform: variance_scaling(1, fan_avg, uniform).")
glorot_normal = _fan_family(1.0, "fan_avg", "truncated_normal",
                            "Glorot (Xavier) normal: variance_scaling(1, fan_avg, truncated_normal).")
lecun_uniform = _fan_family(1.0, "fan_in", "uniform", "LeCun uniform: variance_scaling(1, fan_in, uniform).")
lecun_normal = _fan_family(1.0, "fan_in", "truncated_normal",
                           "LeCun normal: variance_scaling(1, fan_in, truncated_normal).")
he_uniform = _fan_family(2.0, "fan_in", "uniform",
                         "He (Kaiming) uniform: variance_scaling(2, fan_in, uniform).")
he_normal = _fan_family(2.0, "fan_in", "truncated_normal",
                        "He (Kaiming) normal: variance_scaling(2, fan_in, truncated_normal).")
for _f, _n in ((glorot_uniform, "glorot_uniform"), (glorot_normal, "glorot_normal"),
               (lecun_uniform, "lecun_uniform"), (lecun_normal, "lecun_normal"),
               (he_uniform, "he_uniform"), (he_normal, "he_normal")):
    _f.__name__ = _f.__qualname__ = _n
xavier_uniform, xavier_normal = glorot_uniform, glorot_normal
kaiming_uniform, kaiming_normal = he_uniform, he_normal


def orthogonal(scale: RealNumeric = 1.0, column_axis: int = -1, dtype: DTypeLike = None) -> Initializer:
    """Builds an initializer of (semi-)orthogonal matrices along ``column_axis`` (QR of a normal draw)."""
    def init(key: Any, shape: Sequence[int], dtype: DTypeLike = dtype) -> Any:
        shape = _shape(shape)
        d = _dtype(dtype)
        if len(shape) < 2:
            raise ValueError(f"orthogonal initializer requires at least a 2-D shape, got {shape}")
        n_cols = shape[column_axis]
        n_rows = math.prod(shape) // n_cols
        matrix_shape = (n_cols, n_rows) if n_rows < n_cols else (n_rows, n_cols)
        a = random.normal(key, matrix_shape, d)
        q, r = jnp.linalg.qr(a)
        q = q * jnp.sign(jnp.diagonal(r))[None, :]
        if n_rows < n_cols:
            q = q.T
        rest = tuple(s for i, s in enumerate(shape) if i != column_axis % len(shape))
        q = jnp.moveaxis(jnp.reshape(q, rest + (n_cols,)), -1, column_axis)
        return jnp.asarray(scale, d) * q
    return init


def delta_orthogonal(scale: RealNumeric = 1.0, column_axis: int = -1, dtype: DTypeLike = None) -> Initializer:
    """Builds the delta-orthogonal initializer for 3/4/5-D convolution kernels (Xiao et al. 2018).

    The kernel is zero except at its spatial center, which holds an orthogonal ``(in, out)`` matrix.
    """
    def init(key: Any, shape: Sequence[int], dtype: DTypeLike = dtype) -> Any:
        shape = _shape(shape)
        d = _dtype(dtype)
        if len(shape) not in (3, 4, 5):
            raise ValueError("Delta orthogonal initializer requires a 3D, 4D or 5D shape.")
        if shape[-1] < shape[-2]:
            raise ValueError("`fan_in` must be less or equal than `fan_out`. ")
        ortho = orthogonal(scale=scale, column_axis=column_axis, dtype=d)(key, shape[-2:])
        center = tuple((k - 1) // 2 for k in shape[:-2])
        return jnp.zeros(shape, d).at[center].set(ortho)
    return init


__all__ = ["Initializer", "constant", "delta_orthogonal", "glorot_normal", "glorot_uniform", "he_normal",
           "he_uniform", "kaiming_normal", "kaiming_uniform", "lecun_normal", "lecun_uniform", "normal",
           "ones", "orthogonal", "truncated_normal", "uniform", "variance_scaling", "xavier_normal",
           "xavier_uniform", "zeros"]
