"""``linalg.tensorinv``: the inverse of a tensor viewed as a square matrix, as NumPy."""

from __future__ import annotations

import math
from typing import Any

from ember._src import core
from ember._src import shapes as sh
from ember._src.numpy.linalg_functions import _inexact, inv
from ember._src.prims import movement as mv
from ember.errors import ShapeError

ArrayLike = Any


def tensorinv(a: ArrayLike, ind: int = 2) -> Any:
    """The inverse of ``a`` with respect to ``tensordot(..., ind)``, as ``numpy.linalg.tensorinv``.

    ``a`` is reshaped to a ``prod(a.shape[:ind]) x prod(a.shape[ind:])`` matrix (which must be square)
    and inverted; the result has shape ``a.shape[ind:] + a.shape[:ind]``, so that
    ``tensordot(tensorinv(a, ind), a, ind)`` is the identity of shape ``a.shape[ind:] * 2``.
    """
    (x,) = _inexact(a)
    shape = core.get_aval(x).shape
    ind = int(ind)
    if ind <= 0:
        raise ValueError(f"tensorinv: ind must be a positive integer, got {ind}")
    rows, cols = math.prod(shape[:ind]), math.prod(shape[ind:])
    if rows != cols:
        raise ShapeError(f"tensorinv: a of shape {sh.shape_str(shape)} is not square for ind={ind} "
                         f"({rows} x {cols})")
    m = inv(mv.reshape(x, (rows, cols)))
    return mv.reshape(m, (*shape[ind:], *shape[:ind]))


__all__ = ["tensorinv"]
