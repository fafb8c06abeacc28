"""``packbits`` and ``unpackbits``: booleans to bits of uint8 and back, as NumPy.

Written with shifts, masks and a sum over a length-8 axis, so both trace under ``jit`` and vmap.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src.array import asarray_eager
from ember._src.core import get_aval as _aval
from ember._src.numpy.operands import _arr, _convert, _full, _ravel
from ember._src.prims import elementwise as ew
from ember._src.prims import movement as mv
from ember._src.prims import reductions as red
from ember.errors import DTypeError

ArrayLike = Any
BITORDERS = ("big", "little")


def _bit_weights(bitorder: str, name: str) -> np.ndarray:
    if bitorder not in BITORDERS:
        raise ValueError(f"{name}: bitorder must be 'big' or 'little', got {bitorder!r}")
    w = 1 << np.arange(8, dtype=np.uint8)
    return w[::-1].copy() if bitorder == "big" else w


def packbits(a: ArrayLike, /, axis: int | None = None, bitorder: str = "big") -> Any:
    """Pack the truth values of ``a`` into uint8, eight per byte along ``axis`` (the flattened array
    when ``None``), zero-padding the last byte; ``bitorder="big"`` puts the first element in the most
    significant bit. As ``numpy.packbits``."""
    x = _arr(a)
    d = _aval(x).dtype
    if not (d == dt.bool_ or dt.is_integer(d)):
        raise DTypeError(f"packbits: expected an integer or boolean array, got {d}")
    w = _bit_weights(bitorder, "packbits")
    if axis is None:
        x, axis = _ravel(x), 0
    axis = sh.normalize_axis(axis, _aval(x).ndim, "packbits axis")
    bits = _convert(ew.ne(x, _full(_aval(x).shape, 0, d)), dt.uint8)
    n = _aval(bits).shape[axis]
    nbytes = -(-n // 8)
    cfg = [(0, 0, 0)] * _aval(bits).ndim
    cfg[axis] = (0, nbytes * 8 - n, 0)
    bits = mv.pad(bits, _full((), 0, dt.uint8), cfg)
    shape = _aval(bits).shape
    grouped = mv.reshape(bits, (*shape[:axis], nbytes, 8, *shape[axis + 1:]))
    gshape = _aval(grouped).shape
    weights = mv.broadcast_in_dim(_weights_array(w), gshape, (axis + 1,))
    return red.reduce_sum(ew.mul(grouped, weights), (axis + 1,))


def _weights_array(w: np.ndarray) -> Any:
    return asarray_eager(w)


def unpackbits(a: ArrayLike, /, axis: int | None = None, count: int | None = None,
               bitorder: str = "big") -> Any:
    """Unpack each uint8 of ``a`` into eight 0/1 uint8 values along ``axis`` (the flattened array when
    ``None``); ``count`` keeps that many bits (negative: drops from the end; beyond the data: zero
    padding). As ``numpy.unpackbits``."""
    x = _arr(a)
    if _aval(x).dtype != dt.uint8:
        raise DTypeError(f"unpackbits: expected an array of uint8, got {_aval(x).dtype}")
    w = _bit_weights(bitorder, "unpackbits")
    shifts = np.log2(w).astype(np.uint8)
    if axis is None:
        x, axis = _ravel(x), 0
    axis = sh.normalize_axis(axis, _aval(x).ndim, "unpackbits axis")
    shape = _aval(x).shape
    n = shape[axis]
    exp_shape = (*shape[:axis + 1], 8, *shape[axis + 1:])
    xb = mv.broadcast_in_dim(x, exp_shape, (*range(axis + 1), *range(axis + 2, len(exp_shape))))
    sb = mv.broadcast_in_dim(_weights_array(shifts), exp_shape, (axis + 1,))
    bits = ew.bitwise_and(ew.shift_right_logical(xb, sb), _full(exp_shape, 1, dt.uint8))
    bits = mv.reshape(bits, (*shape[:axis], n * 8, *shape[axis + 1:]))
    if count is None:
        return bits
    count = int(count)
    total = n * 8
    if count < 0:
        if -count > total:
            raise ValueError(f"unpackbits: -count ({-count}) must not exceed the number of bits ({total})")
        count += total
    if count <= total:
        return mv.slice_in_dim(bits, 0, count, 1, axis)
    cfg = [(0, 0, 0)] * _aval(bits).ndim
    cfg[axis] = (0, count - total, 0)
    return mv.pad(bits, _full((), 0, dt.uint8), cfg)


__all__ = ["packbits", "unpackbits"]
