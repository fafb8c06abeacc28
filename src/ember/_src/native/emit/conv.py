"""The ``conv`` call step: a direct / implicit-GEMM 2-D convolution inside ``ember_main``.

The primitive (:mod:`ember._src.prims.conv`) runs as one call step whose C is ``csrc/conv.h``,
instantiated for the element type, with the step's geometry (sizes, strides, padding, layouts) a
constant the inlined task functions fold. With symbolic batch, height or width (named dynamic axes)
the fields that depend on them are computed once per call in ``ember_main`` into the step's context
(``_Dyn``: the chunks read them there); the size-dependent choices below are made per call where the
candidates are compiled (flat blocks or not, blocks per task, and the static program's GEMM route
for small images: ``_routes``, ``_gemm_route``, the rules in ``csrc/conv_route.h``), the others take
a route valid for every size. What happens (details in the header's comment):

1. the kernel is packed into panels of two vectors of output features (a pooled pass; depthwise:
   tap-major rows of channels);
2. an input that is not channels-last (NCHW, as PyTorch exports) is copied into NHWC order in the
   workspace by register transposes, image by image (copy, multiply, move out: the copies stay in
   cache; a strided 1x1 convolution copies only the pixels it reads). The direct kernel writes an
   NCHW output itself, each task transposing its pixels out of a small buffer; other outputs that
   are not channels-last and strided per feature are written NHWC into the workspace and moved by
   a last pass (stores at NCHW's power-of-two feature stride would keep evicting each other from
   L1). A depthwise convolution of an NCHW input runs plane by plane, with no copies;
3. tasks of one (image, group, feature panel, chunk of blocks of MR consecutive output pixels)
   run on ember's thread pool; interior blocks multiply straight from the input, the others
   (touching the padding, spanning two rows, the tail) pack their patches into a per-thread tile
   (MR x K values) first. Narrow images, where most blocks would be packed, run flat blocks instead
   (``_Geo._flat_wins``, em_cv_flat): one padded copy of the image per stride phase, blocks of
   virtual pixels on rows a few columns wider than the output, read in place. 3x3 stride-1
   convolutions with enough features run Winograd F(2x2, 3x3) on the same register tiles (rerun
   on the direct route when an operand is not finite: :func:`_winograd`);
   3x3 stride-2 ones may run Winograd on their stride phases (:mod:`.conv_winograd`);
   depthwise convolutions a direct loop over rows of all channels; a kernel larger than its output
   (the kernel cotangent's transpose) one GEMM over every image
   (em_cv_wg: vectors along the batch, i.e. the original input features). A per-feature bias
   and ReLU after the step (the schedule's ``conv_epilogue`` rule, where :func:`_epilogue`
   accepts the step) are applied to each register tile before it is stored (``em_cv_epi``; the
   Winograd routes after their output transforms);
4. an input-dilated convolution (``lhs_dilation``: a strided convolution's input cotangent) runs
   steps 1-3 once per residue class of the output position (a stride-1 convolution with the taps
   that reach it), each into a channels-last staging area, and one pass interleaves them.

The workspace holds the packed kernel, the NHWC copies of one image (only when needed) and one tile
per thread:
nothing proportional to the kernel area times the image, as im2col would be.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import numpy as np

from ember._src import shapes as sh
from ember._src.native.base import symdims
from ember._src.native.base.symdims import cdim
from ember._src.native.csrc import load
from ember._src.native.emit import conv_fft, conv_winograd, gemm_kernel, support
from ember._src.native.emit.calls import CallCode, register, row_strides
from ember._src.native.emit.prepack import prepacked
from ember._src.native.runtime import threadpool
from ember._src.native.runtime.threadpool import usable_cpus
from ember._src.program import Eqn

THREADS = max(1, min(usable_cpus(), 64))  # per-thread tiles are planned for this many pool threads
DW_CHUNK = 64  # channels per depthwise accumulator chunk (EM_CV_DW_CHUNK)
DWP = 64  # pixels per register chunk of the depthwise kernel on channel planes (EM_CV_DWP)
MR_MAX = 14  # pixels per block at the widest (AVX-512; EM_CV_MR)
CB_MAX = 8  # blocks per task at most (about one output row of blocks)
VEC_BYTES_MAX = 64  # bytes of one vector at the widest (EM_CV_BYTES)
WINOGRAD = True  # 3x3 stride-1 single-group convolutions run Winograd F(2x2, 3x3) (False: direct;
# an internal switch for measurements: the program cache does not key on it, use a fresh cache dir)
WGRAD = True  # kernels larger than their output run em_cv_wg (False: the direct kernel; a switch for
# measurements, not keyed by the program cache)
WGRAD_CHUNK = 256  # kernel values (pixels) per chunk of em_cv_wg's rows
FLAT = True  # narrow images may run flat blocks (em_cv_flat; False: never; a switch for measurements,
# not keyed by the program cache)
FLAT_MAX_WIDTH = 48  # ... only for outputs at most this wide (the 112-wide stem measured level either way)
FLAT_PACK_COST = 0.4  # the cost model of _Geo._flat_wins: packing one value, in vector FMAs (set between
# the 7x7 8x32x32x16->32, where flat blocks lost 10% (about 0.5 would choose them), and the strided
# 3x3 8x32x32x16->32 forward (level) and input gradient phases (won), which choose them above 0.25)
FLAT_COPY_COST = 0.25  # ... copying one input value into a phase's padded copy
IMAGE_TASKS = True  # per-image passes of several images run one image per task, each thread on its own
# copies (False: images in turn, each pass split across the threads; a switch for measurements, not keyed)
IMAGE_TASK_MAX_MACS = 1 << 24  # ... when an image takes at most this many multiply-adds (the pool's round
# trips per pass matter there: 3x3 8x32x32x16->32 NCHW on two threads 368 -> 298 us; 28x28x128->128 NCHW,
# 115 M per image, measured level or slower with image tasks, 4.9-5.1 vs 5.0-6.5 ms)
GEMM_ROUTE = True  # symbolic sizes: small output images (and 1x1 kernels) may run one GEMM of the patches
# (False: never; a switch for measurements, not keyed by the program cache)
GEMM_MAX_PIXELS = 64  # ... when the output images have at most this many pixels (the static program's
# rule: rewrite/layout_passes.py's conv_gemm, SMALL_IMAGE_PIXELS)
WINOGRAD_MIN_FEATURES = 16  # ... when both feature counts are at least this
WINOGRAD_MAX_KERNEL_BYTES = 4 << 20  # ... and the transformed kernel (16 C O values) is at most this
WINOGRAD_L2_KERNEL_BYTES = 1 << 20  # a larger transformed kernel does not stay in L2 between blocks of
# tiles: a task then transforms up to WINOGRAD_CHUNK_BYTES of tiles first and reads each kernel panel once
# for all of them (em_cv_wino's CB; ResNet's 14x14x256, 4 MiB: the kernel read once per image instead of
# once per 14 tiles)
WINOGRAD_CHUNK_BYTES = 1 << 20  # ... the transformed tiles of one task (V: 16 C values per tile)
_ALIGN = 16  # workspace regions start at multiples of 16 elements
_TYPES = {np.dtype(np.float32): ("float", "f32"), np.dtype(np.float64): ("double", "f64")}
_SRC = load("conv.h")
_ROUTE = load("conv_route.h")  # the route rules on a call's sizes (symbolic sizes)
_ZIP = load("zip_transpose.h")  # em_cv_tr's register transpose (EM_ZIP_TRANSPOSE)


def _ceil(n: Any, k: int) -> Any:
    """``ceil(n / k)`` of a static or symbolic size."""
    return -(-n // k) if isinstance(n, int) else sh.floordiv(n + (k - 1), k)


def _up(n: Any) -> Any:
    return n + (-n) % _ALIGN if isinstance(n, int) else sh.floordiv(n + (_ALIGN - 1), _ALIGN) * _ALIGN


def flat_wins(H: int, W: int, OH: int, OW: int, KH: int, KW: int, sh: int, sw: int, hlo: int, wlo: int,
              C: int, K: int, nvec: int, mr: int, max_width: int, pack: float, copy: float) -> bool:
    """Whether flat blocks (em_cv_flat) are estimated cheaper than blocks of ``mr`` consecutive output
    pixels for an output of ``OH x OW`` at most ``max_width`` wide: the latter pack every block that
    touches the padding or spans two output rows (``mr x K`` values, ``pack`` of a vector FMA each),
    the former copy the input once per image (``copy`` per value) and compute ``ceil(KW / sw) - 1``
    dropped columns per output row. ``csrc/conv_route.h`` evaluates the same rule in C on a call's
    sizes (symbolic sizes); ``nvec``: vectors of output features per panel."""
    if not (0 < OW <= max_width and OH > 0):
        return False
    q = OH * OW
    packed = 0
    for q0 in range(0, q, mr):
        oh, ow0 = divmod(q0, OW)
        ih0, iw0 = oh * sh - hlo, ow0 * sw - wlo
        packed += not (q0 + mr <= q and ow0 + mr <= OW and ih0 >= 0 and ih0 + KH <= H
                       and iw0 >= 0 and iw0 + (mr - 1) * sw + KW <= W)
    Hz, Wz = -(-KH // sh) + OH - 1, -(-KW // sw) + OW - 1
    blocks, vblocks = -(-q // mr), -(-((OH - 1) * Wz + OW) // mr)
    direct = mr * K * (blocks * nvec + packed * pack)
    flat = mr * K * (vblocks * nvec) + copy * (sh * sw * Hz * Wz * C)
    return flat < direct


class _Geo:
    """The step's sizes, read from the equation (feature and kernel sizes are static; the batch,
    height and width may be symbolic: C expressions of the program's size symbols then; flat blocks
    and the blocks per task are then chosen per call, em_cv_wg and image tasks are off)."""

    def __init__(self, e: Eqn, phase: tuple | None = None, flat: bool | None = None, wino: bool = True):
        """``phase``: one residue class of an input-dilated convolution's output (``_phases``, per
        axis): the stride-1 convolution of the undilated input with the taps that reach it, written
        at every ``lhs_dilation``-th output position. ``wino=False``: never Winograd (the direct
        route a Winograd step reruns on a non-finite operand). ``flat``: the route of symbolic sizes'
        variant (None: the cost rule's at static sizes, blocks at symbolic ones, ``flat_dyn`` then
        telling whether flat blocks may win at some size: the step chooses at run time)."""
        p = e.params
        x, w, y = e.inputs[0].aval, e.inputs[1].aval, e.outvars[0].aval
        ls, rs, os_ = p["dimension_numbers"]
        self.dtype = np.dtype(x.dtype)
        self.itemsize = self.dtype.itemsize
        self.N, self.C, self.H, self.W = (x.shape[a] for a in ls)
        self.O, self.Cg, self.KH, self.KW = (w.shape[a] for a in rs)
        self.OH, self.OW = y.shape[os_[2]], y.shape[os_[3]]
        self.G = p["feature_group_count"]
        self.Og = self.O // self.G
        self.K = self.KH * self.KW * self.Cg
        self.sh, self.sw = p["window_strides"]
        self.dh, self.dw = p["rhs_dilation"]
        (self.hlo, _), (self.wlo, _) = self.pads = p["padding"]
        xs, ws, ys = row_strides(x.shape), row_strides(w.shape), row_strides(y.shape)
        self.xst = [xs[a] for a in ls]  # n, c, h, w
        self.wst = [ws[a] for a in rs]  # o, i, kh, kw
        self.yst = [ys[a] for a in os_]  # n, o, h, w of the output
        self.woff = 0  # element offset of the kernel a phase starts at
        if phase is not None:
            (k0h, self.KH, st_h, self.dh, self.hlo, self.OH, _, _), \
                (k0w, self.KW, st_w, self.dw, self.wlo, self.OW, _, _) = phase
            self.woff = k0h * self.wst[2] + k0w * self.wst[3]
            self.wst = [self.wst[0], self.wst[1], self.wst[2] * st_h, self.wst[3] * st_w]
            # written channels-last into the step's staging area (em_cv_dil_out interleaves the phases)
            self.yst = [self.OH * self.OW * self.O, 1, self.OW * self.O, self.O]
            self.K = self.KH * self.KW * self.Cg
        self.ybase = self.wsbase = ""  # C pointers overriding the output and the workspace (phases)
        self.relu = 0  # the fused epilogue's ReLU (CallCode.epilogue; its bias is the context's)
        self.depthwise = self.Cg == 1 and self.Og == 1
        self.static_hw = all(isinstance(v, int) for v in (self.H, self.W, self.OH, self.OW))
        # a kernel larger than the output (the kernel cotangent's transpose): one GEMM over every image,
        # vectors along the batch (em_cv_wg), when it fills the vectors at least three quarters
        vl_max = VEC_BYTES_MAX // self.itemsize
        self.bv = -(-self.N // vl_max) * vl_max if isinstance(self.N, int) else 0
        self.wgrad = (WGRAD and self.G == 1 and not self.depthwise and isinstance(self.N, int) and self.N > 0
                      and self.static_hw
                      and self.KH * self.KW > self.OH * self.OW > 0 and 4 * self.N >= 3 * self.bv)
        three_by_three = (self.KH, self.KW, self.sh, self.sw, self.dh, self.dw, self.G) == (3, 3) + (1,) * 5
        self.winograd = (wino and WINOGRAD and not self.wgrad and three_by_three
                         and self.C >= WINOGRAD_MIN_FEATURES and self.O >= WINOGRAD_MIN_FEATURES
                         and 16 * self.C * self.O * self.itemsize <= WINOGRAD_MAX_KERNEL_BYTES)
        # the direct kernel writes an NCHW output (each feature's pixels contiguous) itself: a chunk
        # of pixels into a local buffer, transposed out; another layout is staged in NHWC order in
        # the workspace and moved last
        self.planar = (not self.depthwise and not self.winograd and not self.wgrad
                       and self.yst[2:] == [self.OW, 1])
        self.nhwc_in = (self.xst[1] == 1 and self.xst[3] == self.C and self.xst[2] == self.W * self.C)
        # a depthwise convolution of an input that is not channels-last runs plane by plane in place
        self.dwplane = self.depthwise and not self.nhwc_in
        # features contiguous: the tiles store vectors at any pixel strides
        self.staged = self.yst[1] != 1 and not self.planar and not self.dwplane and not self.wgrad
        self.ost = [self.OH * self.OW * self.O, 1, self.OW * self.O, self.O] if self.staged else self.yst
        self.rowmode = self.G == 1 and self.dw == 1
        nr_max = 2 * VEC_BYTES_MAX // self.itemsize
        panels = -(-self.Og // nr_max) * nr_max
        self.wp_elems = _up(self.KH * self.KW * self.C if self.depthwise
                            else 16 * panels * self.C if self.winograd else self.G * panels * self.K)
        # flat blocks (em_cv_flat): one padded copy per stride phase, read in place by every block
        self.Hz, self.Wz = -(-self.KH // self.sh) + self.OH - 1, -(-self.KW // self.sw) + self.OW - 1
        self.flat_dyn = flat is None and not self.static_hw and self._flat_eligible()
        self.flat = self._flat_wins() if flat is None else flat and self._flat_eligible()
        if not self.flat:
            self.Hz = self.Wz = 0
        # a layout copy runs image by image (copy, multiply, move out), so the copies stay in cache
        self.copied = ((not self.nhwc_in or self.flat) and not self.dwplane
                       and not self.wgrad)  # copied channels-last (flat: per stride phase, padded)
        # a strided 1x1 convolution (no low padding) copies only the pixels it reads, then runs stride 1
        self.sub = (self.copied and not self.flat and (self.KH, self.KW, self.hlo, self.wlo) == (1, 1, 0, 0)
                    and (self.sh, self.sw) != (1, 1))
        self.per_image = self.copied or self.staged
        images = 1 if self.per_image else self.N
        copy_hw = self.OH * self.OW if self.sub else self.H * self.W
        self.xt_elems = _up(images * copy_hw * self.C) if self.copied else 0
        if self.flat:  # the phases' copies and MR zero pixels after them
            self.xt_elems = _up((self.sh * self.sw * self.Hz * self.Wz + MR_MAX) * self.C)
        self.yt_elems = _up(images * self.OH * self.OW * self.O) if self.staged else 0
        # several small images with per-image passes: one task per image (copy, multiply, move out on
        # one thread, into that thread's own copies) instead of each pass split across the threads with
        # a pool round trip per pass and image; when the images split evenly or are many
        self.image_tasks = (IMAGE_TASKS and self.per_image and THREADS > 1 and isinstance(self.N, int)
                            and self.static_hw
                            and self.N >= 2 and (self.N % THREADS == 0 or self.N >= 4 * THREADS)
                            and self.OH * self.OW * self.O * self.K <= IMAGE_TASK_MAX_MACS)
        self.xt1, self.yt1 = self.xt_elems, self.yt_elems  # one thread's
        if self.image_tasks:
            self.xt_elems, self.yt_elems = THREADS * self.xt1, THREADS * self.yt1
        # blocks per task: about one output row (symbolic widths: computed per call, at most CB_MAX)
        self.CB: Any = (max(1, min(CB_MAX, -(-self.OW // MR_MAX))) if isinstance(self.OW, int)
                        else f"em_cv_task_blocks({cdim(self.OW)}, {MR_MAX}, {CB_MAX})")
        # em_cv_dwplane's padded plane: the rows read, each the taps of OW rounded up to DWP pixels
        span = sh.dmax(0, (self.KW - 1) * self.dw + (_ceil(self.OW, DWP) * DWP - 1) * self.sw + 1)
        rows = sh.dmax(0, (self.OH - 1) * self.sh + (self.KH - 1) * self.dh + 1)
        if self.depthwise:
            self.tile = _up(rows * _up(span) if self.dwplane else self.OW * min(self.C, DW_CHUNK))
        elif self.flat:  # no packed patches; em_cv_flatcopy's transposed row of a layout not channels-last
            self.tile = _up(self.W * self.C) if not self.nhwc_in else _ALIGN  # (> 0: lout marks planar)
        else:
            self.tile = _up(MR_MAX * (16 * self.C if self.winograd else self.K))
            if self.sub:  # em_cv_nhwc_sub's gathered row
                self.tile = sh.dmax(self.tile, _up(self.C * self.OW))
        self.lout = self.tile if self.planar else 0
        self.tile += (self.CB if isinstance(self.CB, int) else CB_MAX) * MR_MAX * nr_max if self.planar else 0
        if self.winograd:  # one task per CB blocks of MR tiles of 2x2 outputs; the tile's last element
            # sums x * 0 over the values the thread transformed (em_cv_wino: NaN when one is not finite)
            self.CB = self._wino_blocks()
            self.tile = _up(MR_MAX * 16 * self.C * self.CB) + _ALIGN
            self.nch = (f"(({cdim(_ceil(self.OH, 2) * _ceil(self.OW, 2))} + EM_CV_MR * {self.CB} - 1)"
                        f" / (EM_CV_MR * {self.CB}))")
        else:  # blocks of MR (virtual, when flat) pixels
            q = (self.OH - 1) * self.Wz + self.OW if self.flat else self.OH * self.OW
            self.nch = f"(({cdim(q)} + EM_CV_MR * {self.CB} - 1) / (EM_CV_MR * {self.CB}))"
        self.tiles_elems = THREADS * self.tile
        if self.wgrad:  # em_cv_wg: one padded image (rows x columns x bv) and the accumulator slots
            rows = (self.OH - 1) * self.sh + (self.KH - 1) * self.dh + 1
            cols = (self.OW - 1) * self.sw + (self.KW - 1) * self.dw + 1
            self.wp_elems, self.yt_elems = 0, 0
            self.xt_elems = _up(rows * cols * self.bv)
            self.tiles_elems = _up(-(-self.Og // 8) * 8 * (self.OH * self.OW * self.bv + 2 * vl_max))
            self.wg_rows = rows
            self.wg_rc = max(1, WGRAD_CHUNK // self.KW)  # kernel rows per chunk (em_cv_wg's RC)

    def _wino_blocks(self) -> int:
        """em_cv_wino's blocks of MR tiles per task: 1 while the transformed kernel stays in L2; for a
        larger one as many as WINOGRAD_CHUNK_BYTES of transformed tiles hold, at most an image's, and
        few enough that every thread gets a task."""
        if (16 * self.C * self.O * self.itemsize <= WINOGRAD_L2_KERNEL_BYTES or not self.static_hw
                or not isinstance(self.N, int)):
            return 1
        blocks = -(-_ceil(self.OH, 2) * _ceil(self.OW, 2) // MR_MAX)  # per image
        cb = max(1, min(blocks, WINOGRAD_CHUNK_BYTES // (MR_MAX * 16 * self.C * self.itemsize)))
        if self.N * -(-blocks // cb) < THREADS:  # split an image's tiles between the threads
            cb = max(1, -(-blocks * self.N // THREADS))
        return cb

    def _flat_eligible(self) -> bool:
        """Whether flat blocks may run at some size (the size-independent conditions)."""
        return (FLAT and self.G == 1 and self.dh == self.dw == 1
                and self.KH * self.KW > 1  # (1x1: a patch is C contiguous values, its packing a copy like
                # the flat one)
                and not self.depthwise and not self.winograd and not self.wgrad and self.sh * self.sw <= 16)

    def _flat_args(self) -> tuple:
        """The arguments of :func:`flat_wins` (and of its C twin em_cv_flat_wins) but the sizes."""
        nvec = 1 if self.Og <= VEC_BYTES_MAX // self.itemsize else 2
        return (self.KH, self.KW, self.sh, self.sw, self.hlo, self.wlo, self.C, self.K, nvec, MR_MAX,
                FLAT_MAX_WIDTH, FLAT_PACK_COST, FLAT_COPY_COST)

    def _flat_wins(self) -> bool:
        """Whether flat blocks (em_cv_flat) are estimated cheaper at these (static) sizes."""
        if not (self.static_hw and self._flat_eligible()):
            return False
        return flat_wins(self.H, self.W, self.OH, self.OW, *self._flat_args())

    def flat_choice(self) -> str:
        """The C condition (evaluated in ``ember_main`` on the call's sizes) under which flat blocks
        run: :func:`flat_wins` as em_cv_flat_wins (``csrc/conv_route.h``)."""
        args = [cdim(v) for v in (self.H, self.W, self.OH, self.OW)] + [
            repr(a) if isinstance(a, float) else cdim(a) for a in self._flat_args()]
        return f"em_cv_flat_wins({', '.join(args)})"

    def fields(self, sfx: str, run: bool = False, dyn: _Dyn | None = None) -> str:
        """The C initializer of ``em_cv_geo`` (P in C: the panel width is the compiled ISA's);
        ``run``: as the multiply sees it (a subsampled copy is an OH x OW image at stride 1);
        ``dyn``: where the chunk functions read the fields that depend on size symbols."""
        nr = f"(2 * EM_CV_VL_{sfx})"
        H, W, sh, sw, hlo, wlo = ((self.OH, self.OW, 1, 1, 0, 0) if run and self.sub
                                  else (self.H, self.W, self.sh, self.sw, self.hlo, self.wlo))
        vals = [H, W, self.C, self.OH, self.OW, self.G, self.Cg, self.Og,
                f"(({self.Og} + {nr} - 1) / {nr})", self.KH, self.KW, sh, sw, self.dh, self.dw,
                hlo, wlo, self.K, *self.xst, *self.wst, *self.ost, self.tile, self.lout,
                self.CB, self.nch, self.Hz, self.Wz, self.relu]
        text = [cdim(v) if not isinstance(v, str) else v for v in vals]
        return "{" + ", ".join(dyn.ref(t) if dyn is not None else t for t in text) + "}"


class _Dyn:
    """The values of a convolution step that depend on the program's size symbols. Those symbols
    are locals of ``ember_main``, not visible in the thread-pool chunk functions: ``ember_main``
    computes each value once per call into the step's context (``em_cv_dctx``: the kernel's
    context, then the values), and the chunks read them from there. The chunks' text then names
    slots, not expressions: identical layers share their chunk functions."""

    def __init__(self, sfx: str):
        self.sfx = sfx
        self.vals: list[str] = []

    def ref(self, text: str) -> str:
        """``text`` as a chunk reads it: itself when static, else its slot of the context."""
        if symdims.PREFIX not in text:
            return text
        if text not in self.vals:
            self.vals.append(text)
        return f"d_->s[{self.vals.index(text)}]"

    def decl(self, text: str, cc: CallCode) -> str:
        """The statement ``text`` of a chunk, after its pointer to the context's values if it reads
        them."""
        if "d_->s[" not in text:
            return text
        cc.helper(f"em_cv_dctx_{self.sfx}",
                  f"typedef struct {{ em_cv_ctx_{self.sfx} c; int64_t s[]; }} em_cv_dctx_{self.sfx};\n")
        return f"const em_cv_dctx_{self.sfx} *d_ = (const em_cv_dctx_{self.sfx} *)c_; {text}"

    def ctx(self, inner: str, cc: CallCode) -> str:
        """The context declaration around the kernel's context initializer ``inner``."""
        if not self.vals:
            return f"em_cv_ctx_{self.sfx} cv_ = {inner};"
        n = len(self.vals)  # the chunks read the values through the unsized em_cv_dctx (same layout)
        name = f"em_cv_dctx_{self.sfx}_{n}"
        cc.helper(name, f"typedef struct {{ em_cv_ctx_{self.sfx} c; int64_t s[{n}]; }} {name};\n")
        return f"{name} cv_ = {{{inner}, {{{', '.join(self.vals)}}}}};"


def _reads(i: int, lo: int, k: int, d: int, s: int, o: int) -> bool:
    """Whether input index ``i`` is read by some tap (``em_cv_read``)."""
    return any((j := i + lo - kk * d) >= 0 and j % s == 0 and j // s < o for kk in range(k))


def _phases(n: int, k: int, d: int, a: int, lo: int, out: int) -> list:
    """Per residue ``rho`` of the output index modulo the input dilation ``a`` along one axis:
    ``(first tap, taps, tap step, dilation, pad lo, outputs, rho, a)`` of the stride-1 convolution of
    the undilated input (length ``n``) giving outputs ``rho, rho + a, ...`` (no taps: zeros there):
    output ``rho + a u`` and tap ``k0 + m step`` read input ``u + (rho + k0 d - lo) / a + m d / g``
    (``g = gcd(d, a)``, ``step = a / g``)."""
    g = math.gcd(d, a)
    res = []
    for rho in range(a):
        taps = [t for t in range(k) if (rho + t * d - lo) % a == 0]
        u = -(-(out - rho) // a) if out > rho else 0
        k0 = taps[0] if taps else 0
        res.append((k0, len(taps), a // g, d // g, -((rho + k0 * d - lo) // a), u, rho, a))
    return res


def _phase_list(e: Eqn) -> list:
    """The phases of an input-dilated convolution, one per residue pair of the output position with
    outputs: ``(h phase, w phase)`` as :func:`_phases` gives them (taps 0 along either: zeros)."""
    p = e.params
    ls, rs, os_ = p["dimension_numbers"]
    x, w, y = e.inputs[0].aval, e.inputs[1].aval, e.outvars[0].aval
    ph, pw = (_phases(x.shape[ls[i]], w.shape[rs[i]], p["rhs_dilation"][i - 2], p["lhs_dilation"][i - 2],
                      p["padding"][i - 2][0], y.shape[os_[i]]) for i in (2, 3))
    return [(a, b) for a in ph for b in pw if a[5] and b[5]]


def _dilated(e: Eqn) -> bool:
    return tuple(e.params.get("lhs_dilation", (1, 1))) != (1, 1)


def _accepts(e: Eqn) -> bool:
    x, w = e.inputs[0].aval, e.inputs[1].aval
    if np.dtype(x.dtype) not in _TYPES or np.dtype(w.dtype) != np.dtype(x.dtype):
        return False
    if _dilated(e) and (tuple(e.params["window_strides"]) != (1, 1) or max(e.params["lhs_dilation"]) > 64):
        return False  # em_cv_dil_out: at most 64 residues a row
    ls = e.params["dimension_numbers"][0]
    if not all(isinstance(x.shape[a], int) for a in ls[2:]) and _dilated(e):
        return False  # the phases of an input-dilated convolution need static sizes
    return isinstance(x.shape[ls[1]], int) and all(isinstance(d, int) for d in w.shape)


def _staged_phases(e: Eqn) -> tuple[list, Any]:
    """An input-dilated convolution's phases with taps, each with its offset in the staging area
    (elements; its output, channels-last), and the staging area's size."""
    out, off = [], 0
    for a, b in _phase_list(e):
        if a[1] and b[1]:
            g = _Geo(e, (a, b))
            out.append((a, b, g, off))
            off = off + _up(g.N * g.OH * g.OW * g.O)
    return out, off


def _workspace_direct(e: Eqn) -> Any:
    g = _Geo(e, wino=False)
    flat = _footprint(_Geo(e, flat=True, wino=False)) if g.flat_dyn else 0
    return sh.dmax(_footprint(g), flat)


def _footprint(g: _Geo) -> Any:
    return (g.wp_elems + g.xt_elems + g.yt_elems + g.tiles_elems) * g.dtype.itemsize


def _workspace(e: Eqn) -> Any:
    if not _dilated(e):
        g = _Geo(e)
        flat = _footprint(_Geo(e, flat=True)) if g.flat_dyn else 0  # (the route chosen per call)
        if g.winograd:  # the direct route it reruns on a non-finite operand (_winograd)
            flat = sh.dmax(flat, _workspace_direct(e))
        out = sh.dmax(sh.dmax(_footprint(g), flat), conv_fft.workspace(e))
        return sh.dmax(sh.dmax(out, conv_winograd.workspace(g)), _gemm_cols(g) * g.itemsize)
    phases, stage = _staged_phases(e)
    out: Any = 0
    for *_, g, _ in phases:
        out = sh.dmax(out, _footprint(g))
    return out + stage * np.dtype(e.outvars[0].aval.dtype).itemsize


def epilogue_bias(cc: CallCode) -> str:
    """The C pointer of the step's fused bias (``0``: none)."""
    return cc.epilogue[0] if cc.epilogue is not None and cc.epilogue[0] else "0"


def _epilogue(e: Eqn) -> bool:
    """Whether the step applies a fused per-feature bias and ReLU in its stores (the schedule's
    ``conv_epilogue`` rule): the routes whose tiles go through ``em_cv_tstore`` or a Winograd
    output transform, and the patches' GEMM of symbolic sizes (its kernel's store); not depthwise,
    the kernel-gradient GEMM, the FFT route, an input-dilated convolution or a symbolic feature
    count."""
    out_spec = e.params["dimension_numbers"][2]
    if _dilated(e) or not _accepts(e) or not isinstance(e.outvars[0].aval.shape[out_spec[1]], int):
        return False
    if conv_fft.chosen(e):
        return False
    g = _Geo(e)
    return not g.depthwise and not g.wgrad


@register("conv", "direct / implicit-GEMM convolution on the thread pool; an input-dilated one (a "
          "strided convolution's input cotangent) as one stride-1 convolution per residue class of the "
          "output position, interleaved by one last pass (conv.py, csrc/conv.h)", _accepts, _workspace,
          symbolic_ok=True, epilogue=_epilogue)
def _conv(e: Eqn, cc: CallCode) -> list[str]:
    if not _dilated(e):
        relu = int(cc.epilogue is not None and cc.epilogue[1])
        g = _Geo(e)
        g.relu = relu
        direct = _winograd(e, g, cc) if g.winograd else _routes(e, g, cc)
        if conv_fft.chosen(e):
            return conv_fft.emit(e, cc, direct)
        if conv_winograd.chosen(g):
            return conv_winograd.emit(g, cc, *_TYPES[g.dtype], direct)
        return _gemm_route(g, cc, direct)
    y = e.outvars[0].aval
    ls, _, os_ = e.params["dimension_numbers"]
    ys = row_strides(y.shape)
    N, O, H, W = (y.shape[a] for a in os_)
    elt, sfx = _TYPES[np.dtype(y.dtype)]
    ah, aw = e.params["lhs_dilation"]
    phases, stage = _staged_phases(e)
    ws = f"(({elt} *){cc.ws})"
    wsbase = f"((char *){cc.ws} + {cdim(stage)} * {np.dtype(y.dtype).itemsize})"
    lines = []
    offs, pu, pv = [-1] * (ah * aw), [1] * (ah * aw), [1] * (ah * aw)
    for a, b, g, off in phases:
        g.ybase, g.wsbase = f"{ws} + {cdim(off)}", wsbase
        lines += ["{"] + ["    " + ln for ln in _emit(g, cc)] + ["}"]
        if isinstance(off, int):
            offs[a[6] * aw + b[6]], pu[a[6] * aw + b[6]], pv[a[6] * aw + b[6]] = off, a[5], b[5]
    # the phases' outputs interleaved into the output (zeros where no tap reaches), row by row
    if any(not isinstance(off, int) for *_, off in phases):  # a symbolic batch: per-phase offsets in C
        tab = ", ".join(f"(int64_t)({cdim(off)})" for *_, off in phases)
        idx = {(a[6], b[6]): i for i, (a, b, _, _) in enumerate(phases)}
        offs = [f"offs_[{idx[(r // aw, r % aw)]}]" if (r // aw, r % aw) in idx else "-1"
                for r in range(ah * aw)]
        for a, b, _, _ in phases:
            pu[a[6] * aw + b[6]], pv[a[6] * aw + b[6]] = a[5], b[5]
        pre = f"const int64_t offs_[] = {{{tab}}}; "
    else:
        pre = ""
    key = hashlib.sha1(f"{offs} {pu} {pv} {ah} {aw} {H} {W} {O} {ys} {os_}".encode()).hexdigest()[:12]
    strides = ", ".join(cdim(ys[a]) for a in os_)
    def arr(v: list) -> str:
        return "{" + ", ".join(map(str, v)) + "}"

    body = (f"{{ {pre}const int64_t off_[] = {arr(offs)}, pu_[] = {arr(pu)}, pv_[] = {arr(pv)}; "
            f"const em_cv_ctx_{sfx} *c = (const em_cv_ctx_{sfx} *)c_; "
            f"em_cv_dil_out_{sfx}(c->xsrc, c->y, off_, pu_, pv_, {ah}, {aw}, {H}, {W}, {O}, {strides}, "
            "t); }")
    out = cc.chunk(f"em_cv_dilout_{sfx}_{key}", body)
    n = f"(int64_t){cdim(N)} * {H}"
    lines.append(f"{{ em_cv_ctx_{sfx} cv_ = {{{ws}, 0, 0, 0, 0, 0, {cc.outs[0]}, {cc.outs[0]}}};")
    if cc.openmp and cc.num_threads != 1:
        lines.append(f"  if ({n} > 1) em_par({out}, &cv_, {n}, {cc.num_threads or 0}, {THREADS}, 4); "
                     f"else {out}(&cv_, 0, {n}, 0); }}")
    else:
        lines.append(f"  {out}(&cv_, 0, {n}, 0); }}")
    return lines


def _winograd(e: Eqn, g: _Geo, cc: CallCode) -> list[str]:
    """A stride-1 3x3 step on Winograd F(2x2, 3x3) (``em_cv_wino``), whose transforms turn an
    infinite input or kernel value into NaN (``inf - inf``) where the direct sum gives an infinity:
    the transforms sum ``x * 0`` over what they read into each thread tile's last element, and the
    step reruns on the direct route when a sum is not zero. A constant kernel that is not finite
    takes the direct route only."""
    d = _Geo(e, wino=False)
    d.relu = g.relu
    direct = _routes(e, d, cc)
    const = cc.const_ins[1] if len(cc.const_ins) > 1 else None
    if const is not None and not np.isfinite(np.asarray(getattr(const, "value", const))).all():
        return direct
    elt, _ = _TYPES[g.dtype]
    tb = f"(({elt} *){cc.ws} + {cdim(g.wp_elems)} + {cdim(g.xt_elems)} + {cdim(g.yt_elems)})"
    last = f"k_ * {cdim(g.tile)} + {cdim(g.tile)} - 1"
    return (["{", f"    {elt} *const tb_ = {tb}, bad_ = 0;",
             f"    for (int64_t k_ = 0; k_ < {THREADS}; ++k_) tb_[{last}] = 0;"]
            + ["    " + ln for ln in _emit(g, cc)]
            + [f"    for (int64_t k_ = 0; k_ < {THREADS}; ++k_) bad_ += tb_[{last}];",
               "    if (bad_ != 0) {"] + ["        " + ln for ln in direct] + ["    }", "}"])


def _routes(e: Eqn, g: _Geo, cc: CallCode) -> list[str]:
    """The C of a convolution without input dilation: :func:`_emit`'s of ``g``, or, where the sizes
    are symbolic and flat blocks may win at some size (``g.flat_dyn``), both routes and the choice
    between them on the call's sizes (``_Geo.flat_choice``). Each route packs the kernel in its own
    tap order (``em_cv_tapos``): a constant kernel is kept packed once per route."""
    if not g.flat_dyn:
        return _emit(g, cc)
    cc.helper("em_cv_route", _ROUTE)
    fg = _Geo(e, flat=True, wino=False)  # (g is not Winograd's: a Winograd step's rerun route here too)
    fg.relu = g.relu  # the fused epilogue's ReLU, on either route
    flat, blocks = _emit(fg, cc), _emit(g, cc)
    return ([f"if ({g.flat_choice()}) {{"] + ["    " + ln for ln in flat] + ["} else {"]
            + ["    " + ln for ln in blocks] + ["}"])


def _emit(g: _Geo, cc: CallCode) -> list[str]:
    """The C of one convolution geometry (its kernel from ``g.woff``; ``g.ybase``, ``g.wsbase``: the
    output and workspace pointers when not the step's own)."""
    elt, sfx = _TYPES[g.dtype]
    cc.helper("em_zip_transpose", _ZIP)  # before the first instantiation (one copy per program)
    if not g.static_hw:
        cc.helper("em_cv_route", _ROUTE)  # em_cv_task_blocks
    cc.helper(f"em_conv_{sfx}", f"#define ELT {elt}\n#define EM_T(name) name##_{sfx}\n" + _SRC
              + "#undef EM_T\n#undef ELT\n")
    dyn = _Dyn(sfx)
    geo = g.fields(sfx, dyn=dyn)
    rgeo = g.fields(sfx, run=True, dyn=dyn)  # the multiply's
    ystr = ", ".join(dyn.ref(cdim(v)) for v in g.yst)  # the unstaging pass's output strides
    kinds = f"{g.depthwise} {g.dwplane} {g.rowmode} {g.winograd} {g.sub} {g.flat}"
    key = f"{sfx}_{hashlib.sha1(f'{geo} {rgeo} {ystr} {kinds}'.encode()).hexdigest()[:12]}"
    ctx = f"(const em_cv_ctx_{sfx} *)c_"
    nb = "(int64_t)1" if g.per_image else f"(int64_t){cdim(g.N)}"  # images per pass
    gdecl = dyn.decl(f"const em_cv_geo g_ = {geo}", cc)
    rdecl = dyn.decl(f"const em_cv_geo g_ = {rgeo}", cc)
    if g.depthwise:
        pack = cc.chunk(f"em_cv_packw_{key}", f"{{ {gdecl}; em_cv_packdw_{sfx}({ctx}, g_); }}")
        kernel = "dwplane" if g.dwplane else "dwrow"
        run = cc.chunk(f"em_cv_run_{key}", f"{{ {gdecl}; em_cv_{kernel}_{sfx}({ctx}, g_, t, tid); }}")
        n_pack, n_run = "1", f"{nb} * {g.C if g.dwplane else cdim(g.OH)}"
    elif g.wgrad:
        pack = run = ""
    elif g.winograd:
        pack = cc.chunk(f"em_cv_packw_{key}", f"{{ {gdecl}; em_cv_wino_packw_{sfx}({ctx}, g_, t, tid); }}")
        run = cc.chunk(f"em_cv_run_{key}", f"{{ {gdecl}; em_cv_wino_{sfx}({ctx}, g_, t, tid); }}")
        n_pack = f"(({g.Og} + 2 * EM_CV_VL_{sfx} - 1) / (2 * EM_CV_VL_{sfx}))"
        n_run = f"{nb} * {g.nch}"
    else:
        pack = cc.chunk(f"em_cv_packw_{key}", f"{{ {gdecl}; em_cv_packw_{sfx}({ctx}, g_, t); }}")
        body = (f"em_cv_flat_{sfx}({ctx}, g_, t, tid)" if g.flat
                else f"em_cv_blocks_{sfx}({ctx}, g_, {int(g.rowmode)}, t, tid)")
        run = cc.chunk(f"em_cv_run_{key}", f"{{ {rdecl}; {body}; }}")
        panels = f"(({g.Og} + 2 * EM_CV_VL_{sfx} - 1) / (2 * EM_CV_VL_{sfx}))"
        n_pack = f"(int64_t){g.G} * {panels}"
        n_run = f"{nb} * {g.G} * {panels} * {g.nch}"
    ws = f"(({elt} *){g.wsbase or cc.ws})"
    xt = f"{ws} + {cdim(g.wp_elems)}"
    yt = f"{xt} + {cdim(g.xt_elems)}"
    tiles = f"{yt} + {cdim(g.yt_elems)}"
    xin, y = cc.ins[0], g.ybase or cc.outs[0]
    if g.per_image:  # the passes after the packing run per image, on pointers offset to it
        xin, y = f"{xin} + n_ * {cdim(g.xst[0])}", f"{y} + n_ * {cdim(g.yst[0])}"
    x = xt if g.copied else xin

    def ctx_decl() -> str:
        return dyn.ctx(f"{{{xin}, {w_in}, {x}, {xt}, wp_, {tiles}, {yt if g.staged else y}, {y}, "
                       f"{epilogue_bias(cc)}}}", cc)

    if g.wgrad:
        return _wgrad(g, cc, key, sfx, elt)
    w_in = f"{cc.ins[1]} + {g.woff}" if g.woff else cc.ins[1]
    lines, kept = prepacked(cc, elt, ws, g.wp_elems * g.itemsize if isinstance(g.wp_elems, int) else 0)
    pack_steps = [(pack, "np_", 2)]
    steps = [(run, "nr_", 4)]
    if g.copied:
        allcols = int(g.static_hw and all(_reads(i, g.wlo, g.KW, g.dw, g.sw, g.OW) for i in range(g.W)))
        body = (f"em_cv_flatcopy_{sfx}({ctx}, g_, t, tid)" if g.flat
                else f"em_cv_nhwc_sub_{sfx}({ctx}, g_, t, tid)" if g.sub
                else f"em_cv_nhwc_{sfx}({ctx}, g_, {allcols}, t)")
        copy = cc.chunk(f"em_cv_copy_{key}", f"{{ {gdecl}; {body}; }}")
        steps.insert(0, (copy, "nc_", 4))
    if g.staged:
        unstage = cc.chunk(f"em_cv_unstage_{key}",
                            f"{{ {gdecl}; em_cv_unstage_{sfx}({ctx}, g_, t, {ystr}); }}")
        steps.append((unstage, "nu_", 4))
    copy_rows = g.sh * g.Hz if g.flat else g.OH if g.sub else g.H
    counts = (f"const int64_t np_ = {n_pack}, nr_ = {n_run}, nc_ = {nb} * {cdim(copy_rows)}, "
              f"nu_ = {nb} * {cdim(g.OH)};")

    def calls(group: list) -> list[str]:
        if group is pack_steps and kept:
            packing = " ".join(calls(list(group)))
            return [f"if (pcl_ != 1) {{ {packing} }} if (pcl_ == 0) em_prepack_done(pst_);"]
        if cc.openmp and cc.num_threads != 1:
            threads = cc.num_threads or 0
            return [f"if (par_ && {n} > 1) em_par({fn}, &cv_, {n}, {threads}, {THREADS}, {chunks}); "
                    f"else {fn}(&cv_, 0, {n}, 0);" for fn, n, chunks in group]
        return [f"{fn}(&cv_, 0, {n}, 0);" for fn, n, _ in group]

    if cc.openmp and cc.num_threads != 1:
        work = f"(double){cdim(g.N)} * {cdim(g.OH * g.OW * g.O * g.K)}"
        lines.append(f"const int par_ = {work} >= {cc.parallel_threshold}.0;")
    lines.append(counts)
    if not g.per_image:
        return lines + [ctx_decl()] + calls(pack_steps) + calls(steps)
    if g.image_tasks and cc.openmp and cc.num_threads != 1 and (cc.num_threads or THREADS) > 1:
        return lines + _image_tasks(g, cc, key, sfx, ctx_decl(), calls(pack_steps), steps, counts)
    lines.append("{ const int64_t n_ = 0; " + ctx_decl() + " " + " ".join(calls(pack_steps)) + " }")
    lines.append(f"for (int64_t n_ = 0; n_ < (int64_t){cdim(g.N)}; ++n_) {{")
    lines.append("    " + ctx_decl())
    lines += ["    " + c for c in calls(steps)]
    lines.append("}")
    return lines


def _image_tasks(g: _Geo, cc: CallCode, key: str, sfx: str, ctx0: str, pack: list[str], steps: list,
                 counts: str) -> list[str]:
    """Emit the per-image passes (``steps``: copy, multiply, move out) as one pool task per image:
    the task offsets image 0's context (``ctx0``, with ``n_`` = 0) to its image and to the thread's
    slices of the copies, then runs each pass over its whole range on that thread."""
    ctx = f"em_cv_ctx_{sfx}"
    moves = [f"cv_.xsrc += t * {cdim(g.xst[0])}", f"cv_.y += t * {cdim(g.yst[0])}",
             f"cv_.xt += tid * {cdim(g.xt1)}",
             "cv_.x = cv_.xt" if g.copied else "cv_.x = cv_.xsrc",
             f"cv_.out += tid * {cdim(g.yt1)}" if g.staged else "cv_.out = cv_.y"]
    passes = " ".join(f"{fn}(&cv_, 0, {n}, tid);" for fn, n, _ in steps)
    body = (f"{{ {counts} (void)np_; (void)nr_; (void)nc_; (void)nu_; {ctx} cv_ = *(const {ctx} *)c_; "
            + "; ".join(moves) + f"; {passes} }}")
    task = cc.chunk(f"em_cv_image_{key}", body)
    threads = cc.num_threads or 0
    return ["{ const int64_t n_ = 0; " + ctx0 + " " + " ".join(pack),
            f"  if (par_) em_par({task}, &cv_, {cdim(g.N)}, {threads}, {THREADS}, 1); "
            f"else {task}(&cv_, 0, {cdim(g.N)}, 0); }}"]


def _wgrad(g: _Geo, cc: CallCode, key: str, sfx: str, elt: str) -> list[str]:
    """Emit em_cv_wg: zero the accumulator slots; per image (its operand pointers offset to it) copy
    its padded rows, then multiply (tasks: groups of feature tiles); move the sums out."""
    ctx = f"(const em_cv_ctx_{sfx} *)c_"
    gdecl = f"const em_cv_geo g_ = {g.fields(sfx)}"
    par = cc.openmp and cc.num_threads != 1
    threads = (cc.num_threads or THREADS) if par else 1
    ot = f"(({g.Og} + EM_CV_WG_NO - 1) / EM_CV_WG_NO)"
    og = f"(({ot} + {threads} - 1) / {threads})"
    B = f"(int64_t){g.N}"
    copy = cc.chunk(f"em_cv_wgcopy_{key}", f"{{ {gdecl}; em_cv_wg_copy_{sfx}({ctx}, g_, {B}, t); }}")
    run = cc.chunk(f"em_cv_wgrun_{key}",
                   f"{{ {gdecl}; em_cv_wg_{sfx}({ctx}, g_, {B}, {og}, {g.wg_rc}, t); }}")
    ws = f"(({elt} *){g.wsbase or cc.ws})"
    xt, tiles = ws, f"{ws} + {cdim(g.xt_elems)}"

    def ctx_decl(n: str) -> str:
        y = g.ybase or cc.outs[0]
        w = f"{cc.ins[1]} + {g.woff}"
        return (f"em_cv_ctx_{sfx} cv_ = {{{cc.ins[0]} + {n} * {cdim(g.xst[1])}, {w} + {n} * "
                f"{cdim(g.wst[1])}, {xt}, {xt}, {ws}, {tiles}, {y}, {y}}};")

    def call(fn: str, n: str) -> str:
        if par:
            return (f"if (par_ && {n} > 1) em_par({fn}, &cv_, {n}, {cc.num_threads or 0}, {THREADS}, 1); "
                    f"else {fn}(&cv_, 0, {n}, 0);")
        return f"{fn}(&cv_, 0, {n}, 0);"

    lines = []
    if par:
        work = g.N * g.OH * g.OW * g.O * g.K
        lines.append(f"const int par_ = {work}.0 >= {cc.parallel_threshold}.0;")
    lines.append(f"for (int64_t k_ = 0; k_ < {cdim(g.tiles_elems)}; ++k_) ({tiles})[k_] = 0;")
    lines.append(f"for (int64_t f_ = 0; f_ < (int64_t){g.C}; ++f_) {{")
    lines.append("    " + ctx_decl("f_"))
    lines.append("    " + call(copy, f"(int64_t){g.wg_rows}"))
    lines.append("    " + call(run, f"(({ot} + {og} - 1) / {og})"))
    lines.append("}")
    lines.append(f"{{ {ctx_decl('0')} {{ {gdecl}; em_cv_wg_out_{sfx}(&cv_, g_, {B}); }} }}")
    return lines


def _unpadded_1x1(g: _Geo) -> bool:
    return (g.KH, g.KW) == (1, 1) and all(isinstance(v, int) and v == 0 for q in g.pads for v in q)


def _gemm_eligible(g: _Geo) -> bool:
    """Whether the symbolic step of ``g`` may run one GEMM of its patches at some size (the
    size-independent conditions of the static ``conv_gemm`` rewrite, which needs static image
    sizes): float32 on ember's GEMM kernel, one group, channels-last input and output."""
    return (GEMM_ROUTE and g.dtype == np.dtype(np.float32) and not g.static_hw and g.G == 1
            and not g.depthwise and g.woff == 0 and not g.ybase and g.nhwc_in and g.yst[1] == 1
            and g.yst[3] == g.O and g.yst[2] == g.OW * g.O and (_unpadded_1x1(g) or g.C >= 8)
            and gemm_kernel.kernel_symbol() is not None)


def _gemm_cols(g: _Geo) -> Any:
    """Elements of the GEMM route's patch matrix (0: none; an unpadded stride-1 1x1 convolution
    multiplies its input in place)."""
    if not _gemm_eligible(g) or (_unpadded_1x1(g) and (g.sh, g.sw) == (1, 1)):
        return 0
    pixels = g.OH * g.OW if _unpadded_1x1(g) else GEMM_MAX_PIXELS
    return _up(g.N * pixels * g.K)


def _gemm_route(g: _Geo, cc: CallCode, direct: list[str]) -> list[str]:
    """The symbolic step with the static program's GEMM route (``conv_gemm``) chosen per call: where
    the output images have at most ``GEMM_MAX_PIXELS`` pixels (an unpadded 1x1 kernel: any size),
    the kernel library is loaded and its row rule holds, the patches (``em_cv_cols_f32``) times the
    kernel as a ``(KH KW C) x O`` matrix, packed once at compile time for the kernel's prepacked-B
    entry; else ``direct`` (the step's other routes). Needs a finite constant kernel."""
    const = cc.const_ins[1] if len(cc.const_ins) > 1 else None
    if not _gemm_eligible(g) or cc.keep_array is None or const is None:
        return direct
    value = np.asarray(getattr(const, "value", const))
    if not np.isfinite(value).all():
        return direct
    rs = cc.eqn.params["dimension_numbers"][1]
    wmat = np.ascontiguousarray(np.transpose(value, (rs[2], rs[3], rs[1], rs[0])).reshape(g.K, g.O),
                                np.float32)
    packed = cc.keep_array(gemm_kernel.prepack_b(gemm_kernel.op_b(wmat, g.K, g.O, g.O, 1)))
    gemm_kernel.load()  # builds the kernel library in the background (once); the direct route runs until then
    cc.helper("em_cv_route", _ROUTE)
    m = f"(int64_t){cdim(g.N * g.OH * g.OW)}"
    rows = gemm_kernel.kernel_rows(g.O, g.K, prepacked=True)
    pixels = f"(int64_t){cdim(g.OH * g.OW)}"
    size = "1" if _unpadded_1x1(g) else f"{pixels} > 0 && {pixels} <= {GEMM_MAX_PIXELS}"
    guard = f"f_ && {size} && m_ >= {max(1, gemm_kernel.PREPACKED_MIN_ROWS)} && m_ <= {rows}"
    nthreads = "1"
    if cc.openmp and cc.num_threads != 1:
        threadpool.load()
        nthreads = f"((double)m_ * {g.O * g.K} >= {cc.parallel_threshold}.0 ? {cc.num_threads or 0} : 1)"
    x = cc.ins[0]
    if _gemm_cols(g):
        cols = f"((float *){cc.ws})"
        vals = [g.xst[0], g.xst[2], g.xst[3], g.H, g.W, g.C, g.OH, g.OW, g.KH, g.KW, g.sh, g.sw, g.dh, g.dw,
                g.hlo, g.wlo]
        fill = [f"em_cv_cols_f32({x}, {', '.join(cdim(v) for v in vals)}, {cols}, 0, m_);"]
        a = cols
    else:
        fill, a = [], x
    relu = int(cc.epilogue is not None and cc.epilogue[1])  # the step's fused epilogue, in the kernel's store
    call = (f"f_(m_, {g.O}, {g.K}, 1.0f, {a}, {g.K}, 1, (const float *){packed}, 0.0f, {cc.outs[0]}, "
            f"{g.O}, {epilogue_bias(cc)}, {relu}, {nthreads});")
    support.need("gemm_kernel")
    return ([f"const int64_t m_ = {m}; em_skp_fn_t f_ = em_skp_fn();", f"if ({guard}) {{"]
            + ["    " + ln for ln in fill + [call]] + ["} else {"] + ["    " + ln for ln in direct] + ["}"])
