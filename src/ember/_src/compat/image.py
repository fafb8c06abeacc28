"""``jax.image``: ``resize`` and ``scale_and_translate`` with separable kernels.

Each resized axis is one matrix product with an ``(input, output)`` weight matrix built from the
kernel (triangle, Keys cubic with a = -0.5, Lanczos 3/5), widened by the downscaling factor when
``antialias`` (so downsampling averages); ``nearest`` picks ``floor((i + 0.5) * in / out)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import ember.numpy as jnp


def _triangle(x: Any) -> Any:
    return jnp.maximum(0.0, 1.0 - x)


def _keys_cubic(x: Any) -> Any:
    near = ((1.5 * x - 2.5) * x) * x + 1.0
    far = ((-0.5 * x + 2.5) * x - 4.0) * x + 2.0
    return jnp.where(x >= 2.0, 0.0, jnp.where(x >= 1.0, far, near))


def _lanczos(radius: float) -> Callable[[Any], Any]:
    return lambda x: jnp.where(x < radius, jnp.sinc(x) * jnp.sinc(x / radius), 0.0)


_KERNELS: dict[str, Callable[[Any], Any]] = {
    "linear": _triangle, "bilinear": _triangle, "trilinear": _triangle, "triangle": _triangle,
    "cubic": _keys_cubic, "bicubic": _keys_cubic, "tricubic": _keys_cubic,
    "lanczos3": _lanczos(3.0), "lanczos5": _lanczos(5.0),
}


def _method(method: str) -> str:
    name = str(getattr(method, "name", method)).lower()
    if name != "nearest" and name not in _KERNELS:
        raise ValueError(f"image resize method must be nearest, linear, cubic, lanczos3 or lanczos5; "
                         f"got {method!r}")
    return name


def _weights(n_in: int, n_out: int, scale: Any, translation: Any, kernel: Callable, antialias: bool,
             dtype: Any) -> Any:
    inv = 1.0 / scale
    kscale = jnp.maximum(inv, 1.0) if antialias else 1.0
    sample = (jnp.arange(n_out, dtype=dtype) + 0.5) * inv - translation * inv - 0.5
    w = kernel(jnp.abs(sample[None, :] - jnp.arange(n_in, dtype=dtype)[:, None]) / kscale)
    total = jnp.sum(w, axis=0, keepdims=True)
    w = jnp.where(jnp.abs(total) > 1000.0 * float(np.finfo(np.float32).eps),
                  w / jnp.where(total != 0, total, 1.0), 0.0)
    inside = (sample >= -0.5) & (sample <= n_in - 0.5)
    return jnp.where(inside[None, :], w, 0.0).astype(dtype)


def _apply(image: Any, axis: int, w: Any) -> Any:
    moved = jnp.moveaxis(image, axis, -1)
    return jnp.moveaxis(jnp.matmul(moved, w), -1, axis)


def _float_image(image: Any) -> Any:
    image = jnp.asarray(image)
    return image if jnp.issubdtype(image.dtype, jnp.inexact) else image.astype(jnp.float32)


def scale_and_translate(image: Any, shape: Sequence[int], spatial_dims: Sequence[int], scale: Any,
                        translation: Any, method: str = "linear", antialias: bool = True,
                        precision: Any = None) -> Any:
    """Resample ``image`` to ``shape``: output pixel ``o`` of axis ``spatial_dims[i]`` samples input
    position ``(o + 0.5 - translation[i]) / scale[i] - 0.5``."""
    name = _method(method)
    if name == "nearest":
        raise ValueError("scale_and_translate does not support method 'nearest' (as JAX); use resize")
    x = _float_image(image)
    shape = tuple(int(s) for s in shape)
    if len(shape) != x.ndim:
        raise ValueError(f"scale_and_translate: shape {shape} must have one entry per axis of the "
                         f"{x.ndim}-d image")
    scale = jnp.asarray(scale, x.real.dtype if jnp.issubdtype(x.dtype, jnp.complexfloating) else x.dtype)
    translation = jnp.asarray(translation, scale.dtype)
    for i, d in enumerate(spatial_dims):
        w = _weights(x.shape[d], shape[d], scale[i], translation[i], _KERNELS[name], antialias, scale.dtype)
        x = _apply(x, d, w.astype(x.dtype))
    return x


def resize(image: Any, shape: Sequence[int], method: str, antialias: bool = True,
           precision: Any = None) -> Any:
    """Resize ``image`` to ``shape`` (every axis whose size changes) with ``method``."""
    name = _method(method)
    image = jnp.asarray(image)
    shape = tuple(int(s) for s in shape)
    if len(shape) != image.ndim:
        raise ValueError(f"resize: shape {shape} must have one entry per axis of the {image.ndim}-d image")
    dims = [d for d in range(image.ndim) if image.shape[d] != shape[d]]
    if not dims:
        return image
    if name == "nearest":
        out = image
        for d in dims:
            idx = jnp.floor((jnp.arange(shape[d]) + 0.5) * (image.shape[d] / shape[d])).astype(jnp.int32)
            out = jnp.take(out, idx, axis=d)
        return out
    scale = [shape[d] / image.shape[d] for d in dims]
    return scale_and_translate(image, shape, dims, scale, [0.0] * len(dims), name, antialias, precision)


__all__ = ["resize", "scale_and_translate"]
