"""``ember.numpy.pad``, as ``numpy.pad`` with modes constant, edge, reflect, symmetric, wrap and empty,
written over the movement primitives (other modes gather static runs of indices); the pad widths
must be static.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember._src import core
from ember._src.array import Array
from ember._src.numpy.manipulation import _arr, _ndim, _shape
from ember._src.prims import elementwise as ew
from ember._src.prims import movement as mv
from ember.errors import ShapeError

ArrayLike = Any


def _gather_runs(x: Any, axis: int, idx: np.ndarray) -> Any:
    """``take(x, idx, axis)`` for a static ``idx``, as slices, reversals, broadcasts and one concat."""
    pieces = []
    i, m = 0, len(idx)
    while i < m:
        j = i + 1
        step = int(idx[j] - idx[i]) if j < m else 1
        if step not in (-1, 0, 1):
            step = 1
        else:
            while j < m and idx[j] - idx[j - 1] == step:
                j += 1
        if step == 1 or j == i + 1:
            j = max(j, i + 1)
            pieces.append(mv.slice_in_dim(x, int(idx[i]), int(idx[j - 1]) + 1, 1, axis))
        elif step == -1:
            pieces.append(mv.rev(mv.slice_in_dim(x, int(idx[j - 1]), int(idx[i]) + 1, 1, axis), (axis,)))
        else:
            one = mv.slice_in_dim(x, int(idx[i]), int(idx[i]) + 1, 1, axis)
            shape = list(_shape(one))
            shape[axis] = j - i
            pieces.append(mv.broadcast_in_dim(one, shape, tuple(range(len(shape)))))
        i = j
    return mv.concatenate(pieces, axis) if len(pieces) > 1 else pieces[0]


def _pad_index(mode: str, n: int, lo: int, hi: int) -> np.ndarray:
    p = np.arange(-lo, n + hi)
    if mode == "edge":
        return np.clip(p, 0, n - 1)
    if mode == "wrap":
        return p % n
    if mode == "symmetric":
        m = p % (2 * n)
        return np.where(m < n, m, 2 * n - 1 - m)
    if n == 1:  # reflect
        return np.zeros_like(p)
    period = 2 * (n - 1)
    m = p % period
    return np.where(m < n, m, period - m)


_PAD_MODES = ("constant", "edge", "reflect", "symmetric", "wrap", "empty")


def pad(array: ArrayLike, pad_width: Any, mode: str = "constant", **kwargs: Any) -> Any:
    """Pad an array, as ``numpy.pad``: ``pad_width`` is an int, ``(before, after)`` or one pair per
    axis; modes ``constant`` (``constant_values``: a scalar, possibly traced, or per-axis pairs),
    ``edge``, ``reflect``, ``symmetric``, ``wrap`` (and ``empty``, which pads with zeros)."""
    x = _arr(array)
    shape = _shape(x)
    nd = len(shape)
    aval = core.get_aval(x)
    if isinstance(pad_width, core.Tracer):
        pad_width = core.concrete_or_error(pad_width, "pad: pad_width")
    pw = np.asarray(pad_width.value if isinstance(pad_width, Array) else pad_width)
    if pw.dtype.kind not in "iu":
        raise TypeError(f"pad: pad_width must be of integral type, got {pw.dtype}")
    try:
        pw = np.broadcast_to(pw, (nd, 2))
    except ValueError:
        raise ShapeError(f"pad: pad_width of shape {pw.shape} cannot be broadcast to ({nd}, 2) for an "
                         f"array of dimension {nd}") from None
    if (pw < 0).any():
        raise ShapeError(f"pad: pad_width must be non-negative, got {pw.tolist()}")
    if callable(mode) or mode not in _PAD_MODES:
        if mode in ("maximum", "minimum", "mean", "median", "linear_ramp") or callable(mode):
            raise NotImplementedError(f"pad: mode {mode!r} is not implemented")
        raise ValueError(f"pad: unknown mode {mode!r}; supported: {_PAD_MODES}")
    allowed = {"constant": {"constant_values"}, "reflect": {"reflect_type"},
               "symmetric": {"reflect_type"}}.get(mode, set())
    extra = set(kwargs) - allowed
    if extra:
        raise ValueError(f"pad: unsupported keyword arguments for mode {mode!r}: {sorted(extra)}")
    if mode in ("constant", "empty"):
        cv = kwargs.get("constant_values", 0)
        if isinstance(cv, core.Tracer):
            if _ndim(cv) != 0:
                raise ShapeError("pad: a traced constant_values must be a scalar")
            v = ew.convert_element_type(cv, aval.dtype, weak_type=aval.weak_type)
            return mv.pad(x, v, [(int(lo), int(hi), 0) for lo, hi in pw])
        cvn = np.asarray(cv.value if isinstance(cv, Array) else cv)
        if cvn.ndim == 0:
            v = mv.full((), cvn, aval.dtype)
            if aval.weak_type:
                v = ew.convert_element_type(v, aval.dtype, weak_type=True)
            if not pw.any():
                return x
            return mv.pad(x, v, [(int(lo), int(hi), 0) for lo, hi in pw])
        try:
            cvn = np.broadcast_to(cvn, (nd, 2))
        except ValueError:
            raise ShapeError(f"pad: constant_values of shape {cvn.shape} cannot be broadcast to "
                             f"({nd}, 2)") from None
        for ax in range(nd):
            for side, width in enumerate(pw[ax]):
                if width:
                    cfg = [(0, 0, 0)] * nd
                    cfg[ax] = (int(width), 0, 0) if side == 0 else (0, int(width), 0)
                    v = ew.convert_element_type(mv.full((), cvn[ax, side], aval.dtype), aval.dtype,
                                                weak_type=aval.weak_type)
                    x = mv.pad(x, v, cfg)
        return x
    if kwargs.get("reflect_type", "even") != "even":
        raise NotImplementedError("pad: reflect_type='odd' is not implemented")
    for ax in range(nd):
        lo, hi = int(pw[ax, 0]), int(pw[ax, 1])
        if not (lo or hi):
            continue
        n = shape[ax]
        if not isinstance(n, int):
            raise ShapeError(f"pad: mode {mode!r} on the symbolic axis {ax} is not supported")
        if n == 0:
            raise ShapeError(f"pad: can't extend the empty axis {ax} using modes other than 'constant' or "
                             "'empty'")
        x = _gather_runs(x, ax, _pad_index(mode, n, lo, hi))
    return x


__all__ = ["pad"]
