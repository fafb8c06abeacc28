"""Layout passes of the native backend (registered in :data:`.passes.PASSES`).

* ``channels_last``: the convolution kernels work channels-last (NHWC); a convolution of an NCHW
  input into an NCHW output (what PyTorch exports) stages copies in and out of that order around
  every call. The pass gives each such convolution an NHWC input and output instead and carries the
  NHWC value forward through the chain that follows: elementwise ops (batch-norm arithmetic, ReLU,
  residual adds: operands that are splats or broadcasts are re-read in the new order), ``pad`` and
  ``slice`` (a max pool is a padded maximum of strided slices) and reductions whose kept axes keep
  their order (a global average pool). A value is transposed back to NCHW only where a consumer
  outside these needs it (or it is a program output), so a ResNet runs NHWC from the first
  convolution to the classifier: the pool's taps and the adds read contiguous channels, and no
  convolution stages copies. A convolution whose input is not already NHWC gets one transpose, and
  is rewritten only when such a chain leads from it to another convolution (a lone convolution
  keeps its kernel's own NCHW paths: a depthwise one runs on channel planes without copies).
* ``conv_gemm``: an NHWC -> NHWC convolution with a constant kernel (a model's weights; one group,
  no input dilation) that is 1x1 without padding, or has output images of at most
  ``SMALL_IMAGE_PIXELS`` pixels, becomes a ``dot_general`` of its patches by the kernel as a
  (taps x channels, features) matrix: the patches of a 1x1 are the pixels it reads (a strided
  ``slice`` when strided), those of a larger kernel the concatenation of one strided slice of the
  padded input per tap (im2col; 49 x 4608 values for ResNet's 7x7x512 3x3). ``lower_matmul`` runs
  it on ember's GEMM kernel, with the constant kernel prepacked once and its cache blocking. The
  direct convolution kernel runs blocks of 14 consecutive pixels against one panel of 32 features
  at a time: on ResNet's 7x7 stage (49 pixels, 512-2048 channels) every block spans two rows or
  touches the padding and is packed again for each panel. One thread, CPU time:
  1x1 7x7x512->2048 0.83-0.86 -> 0.60-0.62 ms, 3x3 7x7x512->512 2.40 -> 1.87 ms, stride 2
  14x14x512->512 2.24 -> 2.00 ms; the 1x1s at 14x14-56x56 level or faster.
"""

from __future__ import annotations

import numpy as np

from ember._src.native import opinfo
from ember._src.native.base import prim_refs as pr
from ember._src.native.rewrite.passes import Builder, dce, lit, register
from ember._src.prims import dot
from ember._src.prims import movement as mv
from ember._src.prims.conv import conv_p
from ember._src.program import Atom, Eqn, Literal, Program, Var, eqn_effectful

NCHW = (0, 1, 2, 3)  # the lhs / out spec of an NCHW convolution (batch, feature, spatial...)
NHWC = (0, 3, 1, 2)  # ... of an NHWC one
TO_NHWC = (0, 2, 3, 1)  # transpose(x_nchw, TO_NHWC) is x in NHWC order
TO_NCHW = (0, 3, 1, 2)  # its inverse; also the NHWC position of each NCHW axis
_SLICE, _PAD = mv.slice_p, mv.pad_p


def _nchw_conv(e: Eqn) -> bool:
    if e.prim is not conv_p:
        return False
    lhs, _, out = e.params["dimension_numbers"]
    return tuple(lhs) == NCHW and tuple(out) == NCHW


def _nhwc(shape: tuple) -> tuple:
    return tuple(shape[a] for a in TO_NHWC)


def _permuted(seq: tuple) -> tuple:
    """A per-axis parameter of an NCHW value, in NHWC axis order."""
    return tuple(seq[a] for a in TO_NHWC)


class _Chains:
    """The rewrite state: ``lazy`` maps an NCHW variable's id to the NHWC value it was replaced by
    (the NCHW variable itself is produced only if a consumer needs it)."""

    def __init__(self, b: Builder, onward: set[int]):
        self.b = b
        self.onward = onward
        self.lazy: dict[int, Atom] = {}
        self.moved: dict[int, Var] = {}  # id of an NCHW value -> its transpose (inputs of chains)
        self.shown: set[int] = set()  # lazy values already transposed back (into their own var)

    def is_lazy(self, a: Atom) -> bool:
        return isinstance(a, Var) and a.id in self.lazy

    def nchw(self, a: Atom) -> Atom:
        """``a`` as the program had it: a lazy value is transposed back (once, into its own var; later
        chain consumers still read the NHWC value)."""
        if isinstance(a, Var) and a.id in self.lazy and a.id not in self.shown:
            self.shown.add(a.id)
            self.b.emit(mv.transpose_p, [self.lazy[a.id]], {"permutation": TO_NCHW}, [a])
        return a

    def to_nhwc(self, a: Atom) -> Atom:
        """``a`` (rank 4, NCHW) in NHWC order: its lazy value, or a transpose (once per value)."""
        if isinstance(a, Var) and a.id in self.lazy:
            return self.lazy[a.id]
        if isinstance(a, Var) and a.id in self.moved:
            return self.moved[a.id]
        t = self.b.emit1(mv.transpose_p, [a], {"permutation": TO_NHWC})
        if isinstance(a, Var):
            self.moved[a.id] = t
        return t

    def movable(self, a: Atom, shape: tuple) -> bool:
        """Whether an elementwise operand beside a lazy one can be re-read in NHWC order for free:
        a scalar, a lazy value, or a broadcast (its transpose is an index expression)."""
        if isinstance(a, Literal):
            return a.aval.shape == () or tuple(a.aval.shape) == shape
        if self.is_lazy(a):
            return True
        e = self.b.prod.get(a.id)
        return e is not None and e.prim is pr.BROADCAST_IN_DIM and tuple(a.aval.shape) == shape

    def operand(self, a: Atom) -> Atom:
        if isinstance(a, Literal) and a.aval.shape == ():
            return a
        e = self.b.prod.get(a.id) if isinstance(a, Var) and not self.is_lazy(a) else None
        if e is not None and e.prim is pr.BROADCAST_IN_DIM:
            return self.rebroadcast(e)
        return self.to_nhwc(a)

    def rebroadcast(self, e: Eqn) -> Var:
        """A broadcast to an NCHW shape, made to the NHWC shape instead: the kernels index its
        operand directly (a transpose of the broadcast would index through the NCHW coordinates)."""
        op = e.inputs[0]
        dims = [TO_NCHW[d] for d in e.params["broadcast_dimensions"]]  # NHWC axis of each operand axis
        order = sorted(range(len(dims)), key=dims.__getitem__)
        if order != list(range(len(dims))):
            op = self.b.emit1(mv.transpose_p, [op], {"permutation": tuple(order)})
        return self.b.emit1(pr.BROADCAST_IN_DIM, [op], {"shape": _nhwc(tuple(e.params["shape"])),
                                                        "broadcast_dimensions": tuple(sorted(dims))})

    def step(self, e: Eqn) -> None:
        """Emit ``e`` (inputs already read), in NHWC where it continues a chain."""
        b, ins = self.b, e.inputs
        out = e.outvars[0] if len(e.outvars) == 1 else None
        four = out is not None and len(out.aval.shape) == 4
        if _nchw_conv(e) and (self.is_lazy(ins[0]) or out.id in self.onward):
            lhs, rhs, _ = e.params["dimension_numbers"]
            params = {**e.params, "dimension_numbers": (NHWC, tuple(rhs), NHWC)}
            self.lazy[out.id] = b.emit1(conv_p, [self.to_nhwc(ins[0]), *ins[1:]], params)
            return
        if e.prim is pr.TRANSPOSE and self.is_lazy(ins[0]):  # transpose(transpose(src)): one
            perm = tuple(TO_NCHW[a] for a in e.params["permutation"])
            if perm == tuple(range(len(perm))):
                b.sub[out.id] = self.lazy[ins[0].id]
            else:
                b.emit(e.prim, [self.lazy[ins[0].id]], {"permutation": perm}, e.outvars)
            return
        if four and any(self.is_lazy(a) for a in ins):
            shape = tuple(out.aval.shape)
            if opinfo.is_elementwise(e.prim) and all(self.movable(a, shape) for a in ins):
                self.lazy[out.id] = b.emit1(e.prim, [self.operand(a) for a in ins], e.params)
                return
            if e.prim is _PAD and self.is_lazy(ins[0]):
                cfg = _permuted(tuple(e.params["padding_config"]))
                self.lazy[out.id] = b.emit1(_PAD, [self.lazy[ins[0].id], ins[1]], {"padding_config": cfg})
                return
            if e.prim is _SLICE and self.is_lazy(ins[0]) and len(ins) == 1:
                st = e.params.get("strides")
                params = {"start_indices": _permuted(tuple(e.params["start_indices"])),
                          "limit_indices": _permuted(tuple(e.params["limit_indices"])),
                          "strides": None if st is None else _permuted(tuple(st))}
                self.lazy[out.id] = b.emit1(_SLICE, [self.lazy[ins[0].id]], params)
                return
        if (out is not None and opinfo.is_reduction(e.prim) and set(e.params) == {"axes"} and len(ins) == 1
                and self.is_lazy(ins[0])):
            kept = [TO_NCHW[j] for j in range(4) if j not in e.params["axes"]]
            if kept == sorted(kept):  # the result's axes keep their order: no transpose after
                axes = tuple(sorted(TO_NCHW[j] for j in e.params["axes"]))
                b.emit(e.prim, [self.lazy[ins[0].id]], {"axes": axes}, e.outvars)
                return
        b.emit(e.prim, [self.nchw(a) for a in ins], e.params, e.outvars)


def _onward(p: Program) -> set[int]:
    """Ids of the values from which elementwise ops, pads and slices lead to an NCHW convolution
    (a chain started there saves that convolution's staging)."""
    found: set[int] = set()
    for e in reversed(p.eqns):
        if _nchw_conv(e):
            found.update(a.id for a in e.inputs[:1] if isinstance(a, Var))
        elif (opinfo.is_elementwise(e.prim) or e.prim in (_PAD, _SLICE)) and \
                any(v.id in found for v in e.outvars):
            found.update(a.id for a in e.inputs if isinstance(a, Var))
    return found


@register
def channels_last(p: Program) -> Program:
    """NCHW convolutions and the chains after them run channels-last (module docstring)."""
    if not any(_nchw_conv(e) for e in p.eqns):
        return p
    b = Builder(p)
    chains = _Chains(b, _onward(p))
    for e in p.eqns:
        chains.step(Eqn(e.prim, [b.read(a) for a in e.inputs], e.params, e.outvars))
    for a in p.outvars:
        chains.nchw(b.read(a))
    return dce(b.finish())


SMALL_IMAGE_PIXELS = 64  # conv_gemm: a larger kernel runs as one GEMM when its output images have at
# most this many pixels (ResNet's 7x7 stage; measured level at 14x14, slower at 28x28 where Winograd runs)


def _gemm_conv(e: Eqn) -> bool:
    """Whether ``e`` is an NHWC -> NHWC convolution that ``conv_gemm`` rewrites (given a constant
    kernel): one group, no input dilation, no negative padding, static sizes but the batch (a
    named dynamic axis: the product's rows), float32/64; 1x1 without padding, or a larger kernel
    with small output images. A 1x1 kernel's images may also have a symbolic height and width: its
    patches are its input, or a strided slice of it, at any size."""
    if e.prim is not conv_p:
        return False
    p = e.params
    lhs, rhs, out = p["dimension_numbers"]
    x, w, y = e.inputs[0].aval, e.inputs[1].aval, e.outvars[0].aval
    if not (tuple(lhs) == NHWC and tuple(out) == NHWC and p["feature_group_count"] == 1
            and tuple(p.get("lhs_dilation", (1, 1))) == (1, 1) and len(w.shape) == 4
            and all(isinstance(d, int) for d in (x.shape[3], *w.shape, y.shape[3]))
            and np.dtype(x.dtype) in (np.dtype(np.float32), np.dtype(np.float64))
            and np.dtype(w.dtype) == np.dtype(x.dtype)
            and all(isinstance(v, int) and v >= 0 for pair in p["padding"] for v in pair)):
        return False
    if all(w.shape[a] == 1 for a in rhs[2:]):
        return all(tuple(q) == (0, 0) for q in p["padding"])
    return (all(isinstance(d, int) for d in (*x.shape[1:3], *y.shape[1:3]))  # batch: any
            and 0 < y.shape[1] * y.shape[2] <= SMALL_IMAGE_PIXELS and w.shape[rhs[1]] >= 8)


def _nonzero(d: object) -> bool:
    """Whether an output size is not a static 0 (a symbolic size is at least 1)."""
    return not (isinstance(d, int) and d == 0)


def _patches(b: Builder, x: Atom, e: Eqn, kh: int, kw: int) -> Atom:
    """The NHWC image of ``x``'s pixels that tap (``kh``, ``kw``) of ``e`` reads (``x`` padded)."""
    n, _, _, c = x.aval.shape
    oh, ow = e.outvars[0].aval.shape[1:3]
    (sh_, sw_), (dh, dw) = e.params["window_strides"], e.params["rhs_dilation"]
    start = (0, kh * dh, kw * dw, 0)
    # (an empty output image reads nothing: the slice of that axis is empty, not [start:start - s + 1])
    limit = (n, kh * dh + (oh - 1) * sh_ + 1 if _nonzero(oh) else start[1],
             kw * dw + (ow - 1) * sw_ + 1 if _nonzero(ow) else start[2], c)
    if start == (0, 0, 0, 0) and limit == tuple(x.aval.shape) and (sh_, sw_) == (1, 1):
        return x
    return b.emit1(_SLICE, [x], {"start_indices": start, "limit_indices": limit, "strides": (1, sh_, sw_, 1)})


def constant_ids(p: Program) -> set[int]:
    """Ids of the values computed from captured constants and literals alone (a model's kernels, also
    after batch-norm folding: ``fold_constants`` evaluates them once)."""
    out = {v.id for v in p.constvars}
    for e in p.eqns:
        if not eqn_effectful(e) and all(isinstance(a, Literal) or a.id in out for a in e.inputs):
            out.update(v.id for v in e.outvars)
    return out


@register
def conv_gemm(p: Program) -> Program:
    """NHWC convolutions with a constant kernel as matrix products over (taps, channels) (module
    docstring). A kernel passed in stays on the convolution kernel, which packs it in one pass per
    call (the GEMM would first need its transposed copy)."""
    if not any(_gemm_conv(e) for e in p.eqns):
        return p
    b = Builder(p)
    consts = constant_ids(p)
    for e in p.eqns:
        ins = [b.read(a) for a in e.inputs]
        if not (_gemm_conv(Eqn(e.prim, ins, e.params, e.outvars)) and isinstance(ins[1], Var)
                and ins[1].id in consts):
            b.emit(e.prim, ins, e.params, e.outvars)
            continue
        x, w = ins
        rhs = e.params["dimension_numbers"][1]
        ws = w.aval.shape
        KH, KW, C, O = ws[rhs[2]], ws[rhs[3]], ws[rhs[1]], ws[rhs[0]]
        if any(lo or hi for lo, hi in e.params["padding"]):
            (hlo, hhi), (wlo, whi) = e.params["padding"]
            x = b.emit1(_PAD, [x, lit(0, x.aval.dtype)],
                        {"padding_config": ((0, 0, 0), (hlo, hhi, 0), (wlo, whi, 0), (0, 0, 0))})
        taps = [_patches(b, x, e, i, j) for i in range(KH) for j in range(KW)]
        cols = taps[0] if len(taps) == 1 else b.emit1(mv.concatenate_p, taps, {"dimension": 3})
        # the kernel as a (KH KW C, O) matrix in the patches' (tap, channel) order
        perm = (rhs[2], rhs[3], rhs[1], rhs[0])
        if perm != (0, 1, 2, 3):
            w = b.emit1(mv.transpose_p, [w], {"permutation": perm})
        w2 = b.reshape(w, (KH * KW * C, O))
        b.emit(dot.dot_general_p, [cols, w2], {"dimension_numbers": (((3,), (0,)), ((), ())),
                                               "preferred_element_type": None}, e.outvars)
    return dce(b.finish())
