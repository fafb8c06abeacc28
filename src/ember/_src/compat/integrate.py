"""``trapezoid``: the composite trapezoidal rule along one axis."""

from __future__ import annotations

from typing import Any

import ember.numpy as jnp


def trapezoid(y: Any, x: Any = None, dx: Any = 1.0, axis: int = -1) -> Any:
    """Integral of ``y`` along ``axis`` by the trapezoidal rule, at points ``x`` or spacing ``dx``."""
    y = jnp.moveaxis(jnp.asarray(y), axis, -1)
    if x is None:
        d = jnp.asarray(dx)
    else:
        x = jnp.asarray(x)
        if x.ndim == 1:
            if x.shape[0] != y.shape[-1]:
                raise ValueError(f"trapezoid: x has {x.shape[0]} points, y has {y.shape[-1]} along "
                                 f"axis {axis}")
            d = jnp.diff(x)
        else:
            d = jnp.diff(jnp.moveaxis(x, axis, -1), axis=-1)
    return 0.5 * jnp.sum(d * (y[..., 1:] + y[..., :-1]), axis=-1)


__all__ = ["trapezoid"]
