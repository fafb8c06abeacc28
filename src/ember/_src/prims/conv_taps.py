"""The cotangents of a ``conv`` whose spatial sizes are symbolic, built tap by tap.

The ``conv`` primitive's transposes are convolutions themselves (:mod:`.conv`), but with symbolic
image sizes they would need what the primitive keeps static: the kernel cotangent convolves the
input with the output cotangent *as the kernel* (a symbolic kernel size), and a strided
convolution's input cotangent pads by an amount that depends on the size modulo the stride. So
here, for symbolic heights or widths, each of the ``KH x KW`` kernel taps is one strided slice of
the padded input (``N x OH x OW x C``, channels-last) and one matrix product with the cotangent:

* kernel cotangent, tap ``(i, j)``: ``sum_{n, oh, ow} x_tap[n, oh, ow, g Cg + c] ct[n, oh, ow, g Og + o]``
  (groups as a batch axis of the product);
* input cotangent: each tap's product ``ct @ w[i, j]^T`` scattered back by the transposes of the
  slice and of the padding (``slice_p.transpose``, ``pad_p.transpose``: zeros interleaved, then
  cropped), summed over the taps.

Only padding, slices, transposes, reshapes and products: every size expression stays symbolic,
and the operations run natively. A stride-1 input cotangent still runs as a ``conv`` (its padding
is static), see :func:`.conv._lhs_cotangent`.
"""

from __future__ import annotations

from typing import Any

from ember._src import ad_util as ad
from ember._src import core
from ember._src.core import ShapedArray
from ember._src.prims import dot as dotp
from ember._src.prims import elementwise as ew
from ember._src.prims import movement as mv

_TO_NHWC = (0, 2, 3, 1)  # (batch, feature, h, w) spec order -> (batch, h, w, feature)


def _nhwc(x: Any, spec: tuple) -> Any:
    """``x`` (axes laid out as ``spec``: batch, feature, spatial...) as (N, H, W, C)."""
    return mv.transpose(x, tuple(spec[a] for a in _TO_NHWC))


def _from_nhwc(x: Any, spec: tuple) -> Any:
    """The inverse of :func:`_nhwc`."""
    perm = [0] * 4
    for pos, role in enumerate(_TO_NHWC):
        perm[spec[role]] = pos
    return mv.transpose(x, tuple(perm))


def _geometry(x_shape: tuple, ct_shape: tuple, params: dict) -> tuple:
    """The padding config of the (N, H, W, C) input and each tap's slice bounds and strides."""
    (hlo, hhi), (wlo, whi) = params["padding"]
    sh_, sw = params["window_strides"]
    dh, dw = params["rhs_dilation"]
    N, _, _, C = x_shape
    _, OH, OW, _ = ct_shape
    cfg = ((0, 0, 0), (hlo, hhi, 0), (wlo, whi, 0), (0, 0, 0))

    def bounds(i: int, j: int) -> tuple:
        start = (0, i * dh, j * dw, 0)
        limit = (N, i * dh + (OH - 1) * sh_ + 1, j * dw + (OW - 1) * sw + 1, C)
        return start, limit, (1, sh_, sw, 1)
    return cfg, bounds


def rhs_cotangent(ct: Any, x: Any, w_aval: ShapedArray, params: dict) -> Any:
    """The kernel cotangent of ``conv(x, w)`` for the output cotangent ``ct``."""
    ls, rs, os_ = params["dimension_numbers"]
    G = params["feature_group_count"]
    xc, cc = _nhwc(x, ls), _nhwc(ct, os_)
    N, H, W, C = core.get_aval(xc).shape
    _, OH, OW, O = core.get_aval(cc).shape
    KH, KW = w_aval.shape[rs[2]], w_aval.shape[rs[3]]
    Cg, Og = C // G, O // G
    cfg, bounds = _geometry((N, H, W, C), (N, OH, OW, O), params)
    xp = mv.pad(xc, mv.full((), 0, core.get_aval(xc).dtype), cfg)
    cg = mv.reshape(cc, (N, OH, OW, G, Og))
    taps = []
    for i in range(KH):
        for j in range(KW):
            xs = mv.reshape(mv.slice(xp, *bounds(i, j)), (N, OH, OW, G, Cg))
            t = dotp.dot_general(xs, cg, (((0, 1, 2), (0, 1, 2)), ((3,), (3,))))  # G Cg Og
            taps.append(mv.reshape(mv.transpose(t, (1, 0, 2)), (1, Cg, O)))
    k = mv.reshape(mv.concatenate(taps, 0), (KH, KW, Cg, O))
    perm = [0] * 4  # (KH, KW, Cg, O) -> the kernel's layout rs = (o, i, kh, kw)
    for pos, role in enumerate((2, 3, 1, 0)):
        perm[rs[role]] = pos
    return mv.transpose(k, tuple(perm))


def lhs_cotangent(ct: Any, x_aval: ShapedArray, w: Any, params: dict) -> Any:
    """The input cotangent of ``conv(x, w)`` for the output cotangent ``ct``."""
    ls, rs, os_ = params["dimension_numbers"]
    G = params["feature_group_count"]
    cc = _nhwc(ct, os_)
    N, OH, OW, O = core.get_aval(cc).shape
    x_shape = tuple(x_aval.shape[ls[a]] for a in _TO_NHWC)
    C = x_shape[3]
    Cg, Og = C // G, O // G
    wc = mv.transpose(w, (rs[2], rs[3], rs[1], rs[0]))  # KH KW Cg O
    KH, KW = core.get_aval(wc).shape[:2]
    cfg, bounds = _geometry(x_shape, (N, OH, OW, O), params)
    dtype = x_aval.dtype
    zero = mv.full((), 0, dtype)
    padded = ShapedArray(mv.pad_p.abstract_eval(ShapedArray(x_shape, dtype), ShapedArray((), dtype),
                                                padding_config=cfg).shape, dtype)
    cg = mv.reshape(cc, (N, OH, OW, G, Og))
    total = None
    for i in range(KH):
        for j in range(KW):
            wt = mv.reshape(mv.slice(wc, (i, j, 0, 0), (i + 1, j + 1, Cg, O)), (Cg, G, Og))
            t = dotp.dot_general(cg, wt, (((4,), (2,)), ((3,), (1,))))  # G N OH OW Cg
            t = mv.reshape(mv.transpose(t, (1, 2, 3, 0, 4)), (N, OH, OW, C))
            start, limit, strides = bounds(i, j)
            (back,) = mv.slice_p.transpose(t, ad.UndefPrimal(padded), start_indices=start,
                                           limit_indices=limit, strides=strides)
            total = back if total is None else ew.add(total, back)
    dx, _ = mv.pad_p.transpose(total, ad.UndefPrimal(ShapedArray(x_shape, dtype)), zero, padding_config=cfg)
    return _from_nhwc(dx, ls)
