"""Sliding-window building blocks shared by convolutions and windowed reductions.

Both ``lax.conv_general_dilated`` and ``lax.reduce_window`` are composed from existing primitives
(so they differentiate, vmap and compile natively with no new primitive):

* :func:`dilate_and_pad` inserts ``dilation - 1`` holes between elements and pads the edges with
  one ``lax.pad`` (interior padding; negative edge padding crops);
* :func:`window_taps` gathers the taps of a window with strided static slices, one ``lax.slice``
  per tap *per axis* (``sum(window)`` slices, not ``prod(window)``), stacked on new trailing axes;
* :func:`padtype_to_pads` resolves ``"SAME"``/``"SAME_LOWER"``/``"VALID"`` to explicit pairs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember._src import core
from ember._src import shapes as sh
from ember._src.prims import movement as mv

PADDING_STRINGS = ("SAME", "SAME_LOWER", "VALID")


def out_size(n: Any, window: int, stride: int) -> Any:
    """Number of window positions of a (dilated) ``window`` over ``n`` elements with ``stride``.
    A symbolic ``n`` gives ``(n - window) // stride + 1``, as a convolution's output size: the
    window is taken to fit, and the slices of :func:`tap_bounds` check it at each binding."""
    if not isinstance(n, int):
        return sh.floordiv(n - window, stride) + 1 if stride != 1 else n - window + 1
    return max(0, (n - window) // stride + 1) if n >= window else 0


def tap_bounds(n: Any, m: Any, stride: int, offset: int) -> tuple[Any, Any]:
    """``(start, limit)`` of the strided slice reading tap ``offset`` (its position in the dilated
    window) of the ``m`` window positions over an axis of ``n``."""
    if not isinstance(n, int) or not isinstance(m, int):
        return offset, offset + (m - 1) * stride + 1
    start = min(offset, n)
    return start, (start + (m - 1) * stride + 1 if m > 0 else start)


def dilate_dim(d: int, dilation: int) -> int:
    """Size of an axis of ``d`` elements after inserting ``dilation - 1`` holes between them."""
    return 0 if d == 0 else 1 + dilation * (d - 1)


def padtype_to_pads(in_shape: Sequence[int], window_shape: Sequence[int], window_strides: Sequence[int],
                    padding: str) -> list[tuple[int, int]]:
    """Explicit ``(low, high)`` pairs for a padding string, as ``jax.lax.padtype_to_pads``.

    ``"VALID"`` pads nothing; ``"SAME"`` pads so that the output has ``ceil(n / stride)`` positions,
    with the odd element at the high end; ``"SAME_LOWER"`` puts it at the low end.
    """
    kind = padding.upper() if isinstance(padding, str) else padding
    if kind not in PADDING_STRINGS:
        raise ValueError(f"padding must be one of {PADDING_STRINGS} or a sequence of (low, high) pairs, "
                         f"got {padding!r}")
    if kind == "VALID":
        return [(0, 0)] * len(in_shape)
    pads = []
    for n, k, s in zip(in_shape, window_shape, window_strides):
        out = -(-n // s)
        if not isinstance(out * s - n, int):  # a symbolic size at a stride > 1: ceil(n / s) as a
            # floordiv of a nonnegative size (the form size comparisons can bound)
            pads.append(_symbolic_same(n, k, s, sh.floordiv(n + (s - 1), s), kind))
            continue
        total = max(0, (out - 1) * s + k - n)
        small = total // 2
        pads.append((small, total - small) if kind == "SAME" else (total - small, small))
    return pads


def _symbolic_same(n: Any, k: int, s: int, out: Any, kind: str) -> tuple[Any, Any]:
    """The ``"SAME"`` / ``"SAME_LOWER"`` pair of a symbolic size ``n`` (``n >= 1``) at stride ``s``:
    the pad depends on ``n mod s``. The total ``(out - 1) s + k - n`` is ``k - 1 - (n - 1) mod s``:
    never negative when ``k >= s`` (else the low pad is that of its positive part); the high pad
    is the rest of the total, negative (cropping what no window reads) where the positive part is
    0, so that the output size stays ``out = ceil(n / s)`` as a symbolic expression."""
    total = (out - 1) * s + k - n
    split = total if k >= s else sh.dmax(0, total)
    small = sh.floordiv(split, 2)
    lo = small if kind == "SAME" else split - small
    return lo, total - lo


def normalize_pads(padding: Any, nd: int, name: str) -> list[tuple[int, int]]:
    """Validate an explicit padding: ``nd`` pairs of integers."""
    try:
        pads = [(int(lo), int(hi)) for lo, hi in padding]
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name}: padding must be a string or a sequence of (low, high) integer pairs, "
                         f"got {padding!r}") from e
    if len(pads) != nd:
        raise ValueError(f"{name}: padding has {len(pads)} pairs for {nd} window dimensions")
    return pads


def positive_ints(values: Any, nd: int, name: str, what: str) -> tuple[int, ...]:
    """``values`` (``None`` meaning all ones) as ``nd`` positive integers."""
    if values is None:
        return (1,) * nd
    out = tuple(int(v) for v in values)
    if len(out) != nd:
        raise ValueError(f"{name}: {what} has {len(out)} entries, expected {nd}")
    if any(v < 1 for v in out):
        raise ValueError(f"{name}: {what} must be positive, got {out}")
    return out


def dilate_and_pad(x: Any, value: Any, axes: Sequence[int], pads: Sequence[tuple[int, int]],
                   dilation: Sequence[int]) -> Any:
    """``x`` with ``dilation - 1`` copies of ``value`` between elements and ``pads`` at the ends of
    each of ``axes`` (other axes untouched); ``value`` is a scalar of ``x``'s dtype."""
    nd = core.get_aval(x).ndim
    config = [(0, 0, 0)] * nd
    for ax, (lo, hi), dil in zip(axes, pads, dilation):
        config[ax] = (lo, hi, dil - 1)
    if all(c == (0, 0, 0) for c in config):
        return x
    return mv.pad(x, value, config)


def window_taps(x: Any, axes: Sequence[int], window: Sequence[int], strides: Sequence[int],
                dilation: Sequence[int], at: int | None = None) -> Any:
    """The window taps of ``x`` on new axes.

    ``out[..., o_j, ..., t_1, ..., t_m, ...] = x[..., o_j * strides[j] + t_j * dilation[j], ...]`` for
    the axes ``axes[j]`` (which shrink to the number of window positions), with one new axis of size
    ``window[j]`` per entry, in order, starting at position ``at`` (default: trailing). ``axes`` must
    all lie before ``at``.
    """
    nd = core.get_aval(x).ndim
    at = nd if at is None else at
    for j, (ax, k, s, dil) in enumerate(zip(axes, window, strides, dilation)):
        shape = core.get_aval(x).shape
        n = shape[ax]
        span = dilate_dim(k, dil)
        m = out_size(n, span, s)
        pos = at + j
        pieces = []
        for t in range(k):
            start, limit = tap_bounds(n, m, s, t * dil)
            piece = mv.slice_in_dim(x, start, limit, s, ax)
            ps = core.get_aval(piece).shape
            pieces.append(mv.reshape(piece, (*ps[:pos], 1, *ps[pos:])))
        x = pieces[0] if k == 1 else mv.concatenate(pieces, pos)
    return x
