"""``ember.typing``: type aliases for annotations, as ``jax.typing``."""

from __future__ import annotations

from typing import Any, Union

import numpy as np

from ember._src.array import Array
from ember._src.core import Tracer

ArrayLike = Union[Array, Tracer, np.ndarray, np.bool_, np.number, bool, int, float, complex]  # noqa: UP007
"""Anything ember functions accept as an array argument."""

DTypeLike = Union[str, type, np.dtype, Any]  # noqa: UP007
"""Anything that names a dtype (``"float32"``, ``np.float32``, ``jnp.float32``, a dtype)."""

Shape = tuple[int, ...]

__all__ = ["ArrayLike", "DTypeLike", "Shape"]
