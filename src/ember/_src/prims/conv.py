"""The ``conv`` primitive: a 2-D convolution (cross-correlation) with strides, explicit padding,
kernel ("atrous") dilation, any axis layout and feature groups.

``lax.conv_general_dilated`` binds it for the configurations it covers (two spatial axes, no input
dilation, ``batch_group_count == 1``, real floating operands) and keeps its im2col composite
otherwise. It exists so that a backend can run the convolution without materializing im2col: the
native backend's call step (``native/emit/conv.py``, ``csrc/conv.h``) reads the input in place.

Params (all static, hashable):

* ``window_strides`` ``(sh, sw)``; ``padding`` ``((lo, hi), (lo, hi))`` (negative values crop);
  ``rhs_dilation`` ``(dh, dw)``; ``lhs_dilation`` ``(ah, aw)``: the input with ``a - 1`` zeros
  between neighbours (a transposed convolution; the input cotangent of a strided one binds it);
* ``dimension_numbers`` ``(lhs_spec, rhs_spec, out_spec)``, each a permutation of ``range(4)``:
  ``lhs_spec = (batch, feature, spatial...)``, ``rhs_spec = (out feature, in feature, spatial...)``,
  ``out_spec = (batch, feature, spatial...)``, as ``lax.ConvDimensionNumbers``;
* ``feature_group_count`` ``G``: input features ``C = G * Cg`` (the kernel's input-feature size is
  ``Cg``), output features ``O = G * Og``; group ``g`` maps inputs ``[g Cg, (g+1) Cg)`` to outputs
  ``[g Og, (g+1) Og)``.

``out[n, o, y, x] = sum_{c < Cg, i, j} lhs_pad[n, g(o) Cg + c, y sh + i dh, x sw + j dw] rhs[o, c, i, j]``.

Rules: the JVP is bilinear; the transposes are convolutions themselves (as JAX's): the input
cotangent convolves the stride-dilated output cotangent (``lhs_dilation`` = the strides) with the
flipped kernel (input and output features swapped per group), the kernel cotangent convolves the
input, with batch and features exchanged, with the output cotangent as the kernel (strides and
dilation exchanged). vmap folds a mapped axis into the batch (input only), the output features
(kernel only) or the groups (both).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ember._src import ad_util as ad
from ember._src import core
from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src.core import Primitive, ShapedArray
from ember._src.prims import conv_taps
from ember._src.prims import movement as mv
from ember.errors import DTypeError, ShapeError

conv_p = Primitive("conv")

NHWC = ((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2))  # ("NHWC", "HWIO", "NHWC") as dimension numbers


def _dims(shape: tuple, spec: tuple) -> tuple:
    """``shape`` read in ``spec`` order: (batch-like, feature-like, spatial 0, spatial 1)."""
    return tuple(shape[a] for a in spec)


def _place(dims: Sequence[Any], spec: tuple) -> tuple:
    """The shape whose axis ``spec[i]`` has size ``dims[i]``."""
    out: list[Any] = [0] * len(spec)
    for d, a in zip(dims, spec):
        out[a] = d
    return tuple(out)


def out_size(n: Any, k: int, stride: int, dil: int, lo: int, hi: int) -> Any:
    """Output length of one spatial axis (0 when the dilated kernel does not fit). A symbolic ``n``
    gives ``(n + lo + hi - span) // stride + 1``: the call checks that the kernel fits at run time
    (a size where it does not is an error there, see :func:`fits`)."""
    span = n + lo + hi - ((k - 1) * dil + 1)
    if not isinstance(span, int):
        return sh.floordiv(span, stride) + 1 if stride != 1 else span + 1
    return span // stride + 1 if span >= 0 else 0


def dilated(n: Any, a: int) -> Any:
    """Length of an axis of ``n`` values with ``a - 1`` zeros between neighbours."""
    if a == 1:
        return n
    return (n - 1) * a + 1 if n > 0 else 0


def symbolic_spatial(shape: tuple, spec: tuple) -> bool:
    """Whether a spatial size of ``shape`` (laid out as ``spec``) is symbolic."""
    return any(not isinstance(shape[a], int) for a in spec[2:])


def _conv_abstract(x: ShapedArray, w: ShapedArray, *, window_strides: tuple, padding: tuple,
                   rhs_dilation: tuple, dimension_numbers: tuple, feature_group_count: int,
                   lhs_dilation: tuple = (1, 1)) -> ShapedArray:
    ls, rs, os_ = dimension_numbers
    if x.ndim != 4 or w.ndim != 4:
        raise ShapeError(f"conv: lhs and rhs must be rank 4, got {sh.shape_str(x.shape)} and "
                         f"{sh.shape_str(w.shape)}")
    if x.dtype != w.dtype:
        raise DTypeError(f"conv: lhs dtype {x.dtype} differs from rhs dtype {w.dtype}")
    if not dt.is_float(x.dtype) or dt.is_complex(x.dtype):
        raise DTypeError(f"conv: operands must have a real floating dtype, got {x.dtype}")
    N, C, H, W = _dims(x.shape, ls)
    O, I, KH, KW = _dims(w.shape, rs)
    G = feature_group_count
    for name, v in (("C", C), ("O", O), ("I", I), ("KH", KH), ("KW", KW)):
        if not isinstance(v, int):
            raise ShapeError(f"conv: {name} must be static, got {v}")
    if not (isinstance(H, int) and isinstance(W, int)) and tuple(lhs_dilation) != (1, 1):
        raise ShapeError(f"conv: input dilation needs static spatial sizes, got {H}x{W}")
    if KH < 1 or KW < 1:
        raise ShapeError(f"conv: kernel spatial sizes must be positive, got {KH}x{KW}")
    if C != I * G:
        raise ShapeError(f"conv: lhs has {C} input features but rhs expects {I} x feature_group_count {G}")
    if O % G:
        raise ShapeError(f"conv: rhs output features ({O}) must be divisible by feature_group_count ({G})")
    (slo, shi), (wlo, whi) = padding
    OH = out_size(dilated(H, lhs_dilation[0]), KH, window_strides[0], rhs_dilation[0], slo, shi)
    OW = out_size(dilated(W, lhs_dilation[1]), KW, window_strides[1], rhs_dilation[1], wlo, whi)
    return ShapedArray(_place((N, O, OH, OW), os_), x.dtype, x.weak_type and w.weak_type)


def _conv_impl(x: np.ndarray, w: np.ndarray, *, window_strides: tuple, padding: tuple, rhs_dilation: tuple,
               dimension_numbers: tuple, feature_group_count: int,
               lhs_dilation: tuple = (1, 1)) -> np.ndarray:
    """NumPy reference: one batched matrix product per kernel tap over the padded input."""
    ls, rs, os_ = dimension_numbers
    xc = np.transpose(x, (ls[0], ls[2], ls[3], ls[1]))  # N H W C
    if tuple(lhs_dilation) != (1, 1):
        n, h, w_, c = xc.shape
        xd = np.zeros((n, dilated(h, lhs_dilation[0]), dilated(w_, lhs_dilation[1]), c), xc.dtype)
        xd[:, ::lhs_dilation[0], ::lhs_dilation[1]] = xc
        xc = xd
    wc = np.transpose(w, (rs[2], rs[3], rs[1], rs[0]))  # KH KW Cg O
    N, H, W, C = xc.shape
    KH, KW, Cg, O = wc.shape
    G = feature_group_count
    (sh_, sw), (dh, dw) = window_strides, rhs_dilation
    (hlo, hhi), (wlo, whi) = padding
    OH = out_size(H, KH, sh_, dh, hlo, hhi)
    OW = out_size(W, KW, sw, dw, wlo, whi)
    # crop negative padding, pad the rest with zeros
    xc = xc[:, max(-hlo, 0):H - max(-hhi, 0), max(-wlo, 0):W - max(-whi, 0)]
    xc = np.pad(xc, ((0, 0), (max(hlo, 0), max(hhi, 0)), (max(wlo, 0), max(whi, 0)), (0, 0)))
    out = np.zeros((G, N * OH * OW, O // G), x.dtype)
    wg = wc.reshape(KH, KW, Cg, G, O // G).transpose(0, 1, 3, 2, 4)  # KH KW G Cg Og
    if OH and OW and N:
        with np.errstate(all="ignore"):
            for i in range(KH):
                for j in range(KW):
                    xs = xc[:, i * dh:i * dh + (OH - 1) * sh_ + 1:sh_, j * dw:j * dw + (OW - 1) * sw + 1:sw]
                    xs = xs.reshape(N * OH * OW, G, Cg).transpose(1, 0, 2)
                    out += np.matmul(xs, wg[i, j])
    y = out.transpose(1, 0, 2).reshape(N, OH, OW, O)  # N OH OW O
    inv = [0] * 4
    for src, a in zip((0, 3, 1, 2), os_):
        inv[a] = src
    return np.ascontiguousarray(np.transpose(y, inv))


def _pad(v: Any) -> Any:
    """One padding amount as a param: an int, or a size expression (``"SAME"`` at a stride > 1 of
    a symbolic size, :func:`ember._src.lax.windows.padtype_to_pads`)."""
    return int(v) if isinstance(v, (int, np.integer)) else sh.canonical_dim(v)


def conv(x: Any, w: Any, window_strides: Sequence[int], padding: Sequence[Sequence[int]],
         rhs_dilation: Sequence[int], dimension_numbers: Sequence[Sequence[int]],
         feature_group_count: int = 1, lhs_dilation: Sequence[int] = (1, 1)) -> Any:
    """Bind :data:`conv_p` (see the module docstring for the parameters)."""
    return conv_p.bind(x, w, window_strides=tuple(int(s) for s in window_strides),
                       padding=tuple((_pad(lo), _pad(hi)) for lo, hi in padding),
                       rhs_dilation=tuple(int(d) for d in rhs_dilation),
                       dimension_numbers=tuple(tuple(int(a) for a in s) for s in dimension_numbers),
                       feature_group_count=int(feature_group_count),
                       lhs_dilation=tuple(int(a) for a in lhs_dilation))


def _lhs_cotangent(ct: Any, x_aval: ShapedArray, w: Any, *, window_strides: tuple, padding: tuple,
                   rhs_dilation: tuple, dimension_numbers: tuple, feature_group_count: int,
                   lhs_dilation: tuple = (1, 1)) -> Any:
    """d lhs: the cotangent, dilated by the strides (``lhs_dilation``: the native step runs one
    stride-1 convolution per residue class of the output position, written in place), convolved
    with the flipped kernel, whose input and output features are swapped within each group. An
    input that was itself dilated takes every ``lhs_dilation``-th value of its dilated cotangent."""
    ls, rs, os_ = dimension_numbers
    G = feature_group_count
    if tuple(lhs_dilation) != (1, 1):
        shape = list(x_aval.shape)
        for a, k in zip(ls[2:], lhs_dilation):
            shape[a] = dilated(shape[a], k)
        g = _lhs_cotangent(ct, ShapedArray(tuple(shape), x_aval.dtype), w, window_strides=window_strides,
                           padding=padding, rhs_dilation=rhs_dilation, dimension_numbers=dimension_numbers,
                           feature_group_count=G)
        steps = [1] * 4
        for a, k in zip(ls[2:], lhs_dilation):
            steps[a] = k
        return mv.slice(g, (0,) * 4, tuple(shape), steps)
    _, _, H, W = _dims(x_aval.shape, ls)
    # kernel -> (KH, KW, Og, G * Cg): features swapped per group, flipped
    wc = mv.transpose(w, (rs[2], rs[3], rs[1], rs[0]))  # KH KW Cg O
    KH, KW, Cg, O = core.get_aval(wc).shape
    wc = mv.reshape(wc, (KH, KW, Cg, G, O // G))
    wc = mv.transpose(wc, (0, 1, 4, 3, 2))
    wc = mv.reshape(wc, (KH, KW, O // G, G * Cg))
    wc = mv.rev(wc, (0, 1))
    pads = []
    for n, k, d, s, (lo, _), oh in zip((H, W), (KH, KW), rhs_dilation, window_strides, padding,
                                       _dims(core.get_aval(ct).shape, os_)[2:]):
        keff = (k - 1) * d + 1
        pads.append((keff - 1 - lo, n - dilated(oh, s) + lo))
    return conv(ct, wc, (1, 1), pads, rhs_dilation, (os_, NHWC[1], ls), G, lhs_dilation=window_strides)


def _rhs_cotangent(ct: Any, x: Any, w_aval: ShapedArray, *, window_strides: tuple, padding: tuple,
                   rhs_dilation: tuple, dimension_numbers: tuple, feature_group_count: int,
                   lhs_dilation: tuple = (1, 1)) -> Any:
    """d rhs: the input (dilated first if ``lhs_dilation``), with batch and features exchanged (and
    groups ahead of the batch), convolved with the output cotangent as kernel; strides and dilation
    exchange roles."""
    ls, rs, os_ = dimension_numbers
    G = feature_group_count
    if tuple(lhs_dilation) != (1, 1):
        cfg = [(0, 0, 0)] * 4
        for a, k in zip(ls[2:], lhs_dilation):
            cfg[a] = (0, 0, k - 1)
        x = mv.pad(x, mv.full((), 0, core.get_aval(x).dtype), cfg)
    N, C, H, W = _dims(core.get_aval(x).shape, ls)
    O, Cg, KH, KW = _dims(w_aval.shape, rs)
    if G > 1:  # lhs' (Cg, G * N, H, W): group g's features are its images
        xg = mv.transpose(x, (ls[1], ls[0], ls[2], ls[3]))  # C N H W
        xg = mv.reshape(xg, (G, Cg, N, H, W))
        xg = mv.reshape(mv.transpose(xg, (1, 0, 2, 3, 4)), (Cg, G * N, H, W))
        lspec = (0, 1, 2, 3)
    else:
        xg, lspec = x, (ls[1], ls[0], ls[2], ls[3])
    _, _, OH, OW = _dims(core.get_aval(ct).shape, os_)
    pads = [(lo, (k - 1) * d + (o - 1) * s + 1 - n - lo)
            for (lo, _), k, d, o, s, n in zip(padding, (KH, KW), rhs_dilation, (OH, OW), window_strides,
                                              (H, W))]
    cspec = (os_[1], os_[0], os_[2], os_[3])  # as a kernel: out features = ct's features, in = batch
    ospec = (rs[1], rs[0], rs[2], rs[3])
    return conv(xg, ct, rhs_dilation, pads, window_strides, (lspec, cspec, ospec), G)


def _conv_transpose(ct: Any, x: Any, w: Any, **params: Any) -> list:
    if isinstance(x, ad.UndefPrimal) and isinstance(w, ad.UndefPrimal):
        raise TypeError("conv is not linear in both operands at once")
    ls = params["dimension_numbers"][0]
    if isinstance(x, ad.UndefPrimal):
        if ad.is_zero(ct):
            return [ad.Zero(x.aval), None]
        if symbolic_spatial(x.aval.shape, ls) and tuple(params["window_strides"]) != (1, 1):
            return [conv_taps.lhs_cotangent(ct, x.aval, w, params), None]  # padding depends on sizes
        return [_lhs_cotangent(ct, x.aval, w, **params), None]
    if ad.is_zero(ct):
        return [None, ad.Zero(w.aval)]
    if symbolic_spatial(core.get_aval(x).shape, ls):  # the cotangent as a kernel: symbolic taps
        return [None, conv_taps.rhs_cotangent(ct, x, w.aval, params)]
    return [None, _rhs_cotangent(ct, x, w.aval, **params)]


def _conv_batch(vals: list, dims: list, *, window_strides: tuple, padding: tuple, rhs_dilation: tuple,
                dimension_numbers: tuple, feature_group_count: int,
                lhs_dilation: tuple = (1, 1)) -> tuple[list, list]:
    """vmap: a mapped input folds into the batch, a mapped kernel into the output features (after
    the group axis), both into the groups."""
    (x, w), (bx, bw) = vals, dims
    ls, rs, os_ = dimension_numbers
    G = feature_group_count
    if bx is not None:  # x -> (B, N, H, W, C)
        x = mv.transpose(x, (bx, *(a + (a >= bx) for a in (ls[0], ls[2], ls[3], ls[1]))))
    if bw is not None:  # w -> (B, KH, KW, Cg, O)
        w = mv.transpose(w, (bw, *(a + (a >= bw) for a in (rs[2], rs[3], rs[1], rs[0]))))
    B = core.get_aval(x).shape[0] if bx is not None else core.get_aval(w).shape[0]
    kw = dict(window_strides=window_strides, padding=padding, rhs_dilation=rhs_dilation,
              dimension_numbers=NHWC, lhs_dilation=lhs_dilation)
    if bw is None:
        wc = mv.transpose(w, (rs[2], rs[3], rs[1], rs[0]))
        _, N, H, W, C = core.get_aval(x).shape
        y = conv_p.bind(mv.reshape(x, (B * N, H, W, C)), wc, feature_group_count=G, **kw)
        _, OH, OW, O = core.get_aval(y).shape
        y = mv.reshape(y, (B, N, OH, OW, O))  # B N OH OW O
    else:
        _, KH, KW, Cg, O = core.get_aval(w).shape
        Og = O // G
        if bx is None:  # O' = (G, B, Og)
            wc = mv.transpose(mv.reshape(w, (B, KH, KW, Cg, G, Og)), (1, 2, 3, 4, 0, 5))
            xc = mv.transpose(x, (ls[0], ls[2], ls[3], ls[1]))
            y = conv_p.bind(xc, mv.reshape(wc, (KH, KW, Cg, G * B * Og)), feature_group_count=G, **kw)
            N, OH, OW = core.get_aval(y).shape[:3]
            y = mv.transpose(mv.reshape(y, (N, OH, OW, G, B, Og)), (4, 0, 1, 2, 3, 5))
        else:  # C' = (B, C), O' = (B, O), B * G groups
            _, N, H, W, C = core.get_aval(x).shape
            xc = mv.reshape(mv.transpose(x, (1, 2, 3, 0, 4)), (N, H, W, B * C))
            wc = mv.reshape(mv.transpose(w, (1, 2, 3, 0, 4)), (KH, KW, Cg, B * O))
            y = conv_p.bind(xc, wc, feature_group_count=B * G, **kw)
            N, OH, OW = core.get_aval(y).shape[:3]
            y = mv.transpose(mv.reshape(y, (N, OH, OW, B, O)), (3, 0, 1, 2, 4))
        y = mv.reshape(y, (B, *core.get_aval(y).shape[1:4], O))
    # (B, N, OH, OW, O) -> B first, then the out_spec layout
    perm = [0] * 4
    for src, a in zip((0, 3, 1, 2), os_):
        perm[a] = src
    return [mv.transpose(y, (0, *(p + 1 for p in perm)))], [0]


conv_p.impl = _conv_impl
conv_p.abstract_eval = _conv_abstract
conv_p.jvp = ad.bilinear_jvp(conv_p)
conv_p.transpose = _conv_transpose
conv_p.batch = _conv_batch
