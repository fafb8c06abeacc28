"""3x3 stride-2 convolutions by Winograd on their stride phases, inside the ``conv`` call step.

:mod:`.conv` asks :func:`chosen` for every convolution geometry it emits (after the FFT path);
when this module takes it, the step runs ``csrc/conv_winograd.h`` (the algorithm is described
there): along each axis a tile of two outputs reads five inputs, the even taps (the stride phase
with two taps) by F(2, 2) and the odd tap directly, three transform points with 2, 1 and 2
products; in two dimensions 3 x 3 points, 25 products per tile of 2 x 2 outputs and feature pair
instead of 36. Each point is one GEMM (tiles by ``K`` = 4C, 2C or C, by the features) on the
direct kernel's register tiles (``em_cv_tile``), its kernel transformed by a pass per call.

* **Tiles** run ``MR`` at a time over the whole batch (image-major), so the last block of an image
  does not leave the register tile part empty.
* **NaN and Inf**: the transforms' subtractions can turn an Inf into a NaN (never reach another
  output), so the passes sum ``x * 0`` over the values they read and the step reruns the direct
  kernel when a sum is not zero: results as without this path.

Taken when (:func:`chosen`): float32/float64, one group, a 3x3 kernel at stride 2, no dilation,
static batch and image sizes, a transformed kernel within ``MAX_KERNEL_BYTES``, and an estimated cost
(:func:`_costs`) below ``RATIO`` of the direct kernel's.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ember._src.native.csrc import load
from ember._src.native.emit.calls import CallCode
from ember._src.native.emit.prepack import prepacked
from ember._src.native.runtime.threadpool import usable_cpus

ENABLED = True  # an internal switch for measurements (the program cache does not key on it)
RATIO = 0.9  # taken when the estimated cost is below this fraction of the direct kernel's
IN_COST = 4.0  # the input transform, vector operations per transformed vector (loads, subtractions, stores)
OUT_COST = 12.0  # the output transform per tile and feature vector (9 stores, 9 loads, 10 adds, 4 stores)
PAIRS = 25  # feature pairs per tile (products per tile and feature over C)
MAX_KERNEL_BYTES = 2 << 20  # the transformed kernel (25 C O values) within about L2: every register block
# streams all of it (ResNet-50's 56x56x128->28x28 stride 2, 1.6 MiB, in the model at batch 1 (one thread,
# interleaved): 58.8 -> 57.9 ms; 1x28x28x128->256 stride 2, 3.2 MiB, measured level with the direct
# kernel; allowing ResNet-50's 28x28x256->14x14, 6.25 MiB, too measured slower in the model, also with
# tasks transforming several blocks of tiles before reading each kernel panel once)
MR_MAX = 14  # tiles per register block at the widest (EM_CV_MR)
VEC_BYTES_MAX = 64  # one vector at the widest (EM_CV_BYTES)
THREADS = max(1, min(usable_cpus(), 64))  # per-thread tiles are planned for this many pool threads
_SRC = load("conv_winograd.h")


def _up(n: int, m: int = 16) -> int:
    return n + (-n) % m


def _eligible(g: Any) -> bool:
    return (ENABLED and g.G == 1 and not g.depthwise and not g.wgrad and g.woff == 0 and not g.ybase
            and (g.KH, g.KW, g.sh, g.sw, g.dh, g.dw) == (3, 3, 2, 2, 1, 1)
            and isinstance(g.N, int) and g.static_hw
            and g.N > 0 and g.OH > 0 and g.OW > 0 and g.C > 0 and g.O > 0
            and PAIRS * g.C * g.O * g.itemsize <= MAX_KERNEL_BYTES)


def _tiles(g: Any) -> int:
    return g.N * -(-g.OH // 2) * -(-g.OW // 2)


def _costs(g: Any) -> tuple[float, float]:
    """(Winograd, direct) estimated costs in vector multiply-adds at the widest vectors: the direct
    kernel's blocks of ``MR`` output pixels (about one in 20 virtual when flat), the Winograd
    path's blocks of ``MR`` tiles with their transforms."""
    vl = VEC_BYTES_MAX // g.itemsize
    nvec = -(-g.O // vl)
    blocks = g.N * -(-g.OH * g.OW // MR_MAX)
    direct = blocks * MR_MAX * g.K * nvec
    wblocks = -(-_tiles(g) // MR_MAX)
    wino = wblocks * MR_MAX * (PAIRS * g.C * nvec + IN_COST * PAIRS * -(-g.C // vl) + OUT_COST * nvec)
    return wino, direct


def chosen(g: Any) -> bool:
    """Whether the convolution geometry ``g`` (a :class:`.conv._Geo`) runs by Winograd."""
    if not _eligible(g):
        return False
    wino, direct = _costs(g)
    return wino < RATIO * direct


def _planar(g: Any) -> bool:
    """Whether the input's pixels are contiguous per channel (NCHW): copied channels-last first."""
    return g.xst[3] == 1 and g.xst[1] != 1


def _layout(g: Any) -> tuple[int, int, int, int, int]:
    """(packed kernel elements, channels-last input copy elements, channels-last output staging
    elements, elements per thread tile, offset of the tile's x * 0 sum)."""
    nr = 2 * VEC_BYTES_MAX // g.itemsize
    wp = _up(PAIRS * g.C * -(-g.O // nr) * nr)
    xt = _up(g.N * g.H * g.W * g.C) if _planar(g) else 0
    yt = _up(g.N * g.OH * g.OW * g.O) if g.yst[1] != 1 else 0  # features strided (NCHW): staged
    bad = PAIRS * g.C * MR_MAX
    return wp, xt, yt, _up(bad + 1), bad


def workspace(g: Any) -> int:
    """Bytes of workspace the Winograd path of ``g`` needs (0 when it is not chosen)."""
    if not chosen(g):
        return 0
    wp, xt, yt, ts, _ = _layout(g)
    return (wp + xt + yt + THREADS * ts) * g.itemsize


def _n_pack(g: Any, sfx: str) -> str:
    """The kernel pass's tasks (feature panels of two vectors), in C."""
    return f"(({g.O} + 2 * EM_CV_VL_{sfx} - 1) / (2 * EM_CV_VL_{sfx}))"


def emit(g: Any, cc: CallCode, elt: str, sfx: str, direct: list[str]) -> list[str]:
    """The Winograd step of ``g`` (:func:`chosen` must hold; conv.h already instantiated for
    ``sfx``); ``direct``: the direct kernel's lines, run instead when an operand is not finite."""
    cc.helper(f"em_conv_winograd_{sfx}", f"#define ELT {elt}\n#define EM_T(name) name##_{sfx}\n" + _SRC
              + "#undef EM_T\n#undef ELT\n")
    wp, xt, yt, ts, bad = _layout(g)
    geo = g.fields(sfx)
    xs = [g.H * g.W * g.C, 1, g.W * g.C, g.C] if xt else g.xst
    ys = [g.OH * g.OW * g.O, 1, g.OW * g.O, g.O] if yt else g.yst
    strides = f"const int64_t xs_[] = {{{', '.join(map(str, xs))}}}, ys_[] = {{{', '.join(map(str, ys))}}}"
    nt = _tiles(g)
    key = f"{sfx}_{hashlib.sha1(f'{geo} {strides} {nt}'.encode()).hexdigest()[:12]}"
    gdecl = f"const em_cv_geo g_ = {geo}"
    ctx = f"(const em_cv_ctx_{sfx} *)c_"
    pack = cc.chunk(f"em_cw_packw_{key}", f"{{ {gdecl}; em_cw_packw_{sfx}({ctx}, g_, t, "
                                          f"({ctx})->tiles + tid * {ts} + {bad}); }}")
    run = cc.chunk(f"em_cw_run_{key}", f"{{ {gdecl}; {strides}; em_cw_run_{sfx}({ctx}, g_, t, tid, {nt}, "
                                       f"{ts}, {bad}, xs_, ys_); }}")
    pack_step = (pack, _n_pack(g, sfx), 1)
    steps = [pack_step]
    if xt:
        copy = cc.chunk(f"em_cw_copy_{key}", f"{{ {gdecl}; em_cw_copy_{sfx}({ctx}, g_, t); }}")
        steps.append((copy, str(g.N * g.H), 4))
    steps.append((run, f"(({nt} + EM_CV_MR - 1) / EM_CV_MR)", 2))
    if yt:  # the staged rows moved into the output's layout
        out = ", ".join(map(str, g.yst))
        unstage = cc.chunk(f"em_cw_unstage_{key}",
                           f"{{ {gdecl}; em_cv_unstage_{sfx}({ctx}, g_, t, {out}); }}")
        steps.append((unstage, str(g.N * g.OH), 4))
    ws = f"(({elt} *){cc.ws})"
    x, w, y = cc.ins[0], cc.ins[1], cc.outs[0]
    xc = f"{ws} + {wp}" if xt else x
    yc = f"{ws} + {wp + xt}" if yt else y
    decl, kept = prepacked(cc, elt, ws, wp * g.itemsize)
    lines = ["{", *("    " + ln for ln in decl),
             f"    {elt} *tl_ = {ws} + {wp + xt + yt}, bad_ = 0;",
             f"    em_cv_ctx_{sfx} cv_ = {{{x}, {w}, {xc}, {xc}, wp_, tl_, {yc}, {y}, "
             f"{cc.epilogue[0] if cc.epilogue is not None and cc.epilogue[0] else 0}}};",
             f"    for (int64_t k_ = 0; k_ < {THREADS}; ++k_) tl_[k_ * {ts} + {bad}] = 0;"]
    par = cc.openmp and cc.num_threads != 1
    if par:
        work = g.N * g.OH * g.OW * g.O * g.K
        lines.append(f"    const int par_ = {work}.0 >= {cc.parallel_threshold}.0;")
    for fn, n, chunks in steps:
        if par:
            call = (f"if (par_ && {n} > 1) em_par({fn}, &cv_, {n}, {cc.num_threads or 0}, "
                    f"{THREADS}, {chunks}); else {fn}(&cv_, 0, {n}, 0);")
        else:
            call = f"{fn}(&cv_, 0, {n}, 0);"
        if kept and (fn, n, chunks) == pack_step:  # packed once (a finite constant kernel)
            call = f"if (pcl_ != 1) {{ {call} }} if (pcl_ == 0) em_prepack_done(pst_);"
        lines.append("    " + call)
    lines.append(f"    for (int64_t k_ = 0; k_ < {THREADS}; ++k_) bad_ += tl_[k_ * {ts} + {bad}];")
    lines.append("    if (bad_ != 0) {")
    lines += ["        " + ln for ln in direct]
    lines += ["    }", "}"]
    return lines
