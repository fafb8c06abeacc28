"""2-D convolutions with large kernels by FFT, inside the ``conv`` call step.

:mod:`.conv` asks :func:`chosen` for every convolution it emits; when this module takes it, the
step runs ``csrc/conv_fft.h`` (the algorithm is described there): each image (or tile of it),
input channel and output feature is a circular correlation of zero-padded P x Q planes (P, Q:
2-3-5-smooth), so the step transforms the kernel planes and the input planes (2-D real FFTs, one
plane per vector lane, on the FFT steps' own Stockham passes, ``csrc/fft_passes.h``), multiplies
them per frequency bin (a small complex GEMM over the input channels) and transforms the products
back. A 7x7 kernel on 32 x 32 images takes about a fifth of
the direct kernel's multiply-adds.

* **Tiles** (overlap-save): a large image is cut into tiles of ``P - KH + 1`` output rows (and
  columns), each transformed with its ``KH - 1`` rows of context, so the kernel spectrum (``P Q C O``
  values) stays in cache; the tiles run in blocks (input transforms, products, inverse transforms)
  whose spectra stay within about ``BLOCK_BYTES``. :class:`Plan` picks the tiling of least
  estimated cost.
* **Strides**: a stride-``s`` convolution is a stride-1 one over the ``s x s`` phase images
  (``x[s u + b]``; ``s * s * C`` channels) with the taps each phase meets (:func:`_phase_axis`):
  the ResNet stem (7x7/2 on 3 channels) becomes 4x4 taps over 12 channels at half resolution. The
  step copies the phases and the rearranged kernel into its workspace first.
* **NaN and Inf**: a transform spreads a NaN or an Inf over its whole plane, so the step first
  checks every input and kernel value (one vectorized pass) and runs the direct kernel instead
  when one is not finite: results as without this path.

Taken when (:func:`chosen`): float32/float64, one group, equal strides up to ``MAX_STRIDE``, no
dilation, non-negative low padding, static sizes, at least ``MIN_TAPS`` taps, a kernel spectrum
within ``MAX_KERNEL_SPECTRUM`` bytes, a workspace within ``MAX_WORKSPACE``, and an estimated cost
(:meth:`Plan.cost`) below ``RATIO`` of the direct kernel's.
"""

from __future__ import annotations

import functools
import hashlib
import math

import numpy as np

from ember._src.native.csrc import load
from ember._src.native.emit import support
from ember._src.native.emit.calls import CallCode, row_strides
from ember._src.native.emit.fft import passes_helper
from ember._src.native.emit.fft_blocks import contracted
from ember._src.native.runtime import toolchain
from ember._src.native.runtime.threadpool import usable_cpus
from ember._src.program import Eqn

ENABLED = True  # an internal switch for measurements (the program cache does not key on it)
MIN_TAPS = 16  # kernels of fewer taps (3x3) stay with the direct kernel / Winograd
RATIO = 0.85  # taken when the estimated FFT cost is below this fraction of the direct kernel's
# The direct kernel's multiply-adds per cycle over the FFT passes', by the vector width the C is
# compiled for (efficiency()). 512-bit: fitted on the Xeon of docs/performance.md (one thread, CPU
# time, prepacked kernels; FFT / direct time: 7x7/2 stem 1x224x224x3->64 2.24 / 1.67 ms, 7x7
# 8x32x32x16->32 1.15 / 2.89, 7x7 4x64x64x32->32 4.09 / 10.17, 5x5 1x32x32x16->32 0.166 / 0.189,
# 4x4 1x56x56x64->64 2.79 / 2.62): the model's ratios were 1.45-1.9x too low at 1.8, so the stem ran
# by FFT 1.34x slower than direct. 256-bit (AVX2): 1.8, fitted on a Zen 4 (which runs 512-bit FMAs as
# two 256-bit halves, so both paths ran at AVX2's width) before the kernels were prepacked.
EFFICIENCY = {"512": 3.1, "256": 1.8}
MAX_KERNEL_SPECTRUM = 4 << 20  # bytes: a larger kernel spectrum is re-read from memory every block
MAX_WORKSPACE = 64 << 20  # bytes of spectra and scratch at most
THREADS = max(1, min(usable_cpus(), 64))  # per-thread scratch is planned for this many pool threads
MAX_STRIDE = 4  # a strided convolution runs over its phase copies (stride squared times the channels)
BLOCK_BYTES = 2 << 20  # tiles a block (input, GEMM, output passes): their spectra within about this
L2_BYTES = 1 << 20  # a kernel spectrum beyond this is streamed from memory (the cost model)
VEC_BYTES_MAX = 64  # one vector at the widest (AVX-512; EM_CF_BYTES)
NFAC = 24  # radices per transform length at most (EM_CF_NFAC)
_TYPES = {np.dtype(np.float32): ("float", "f32"), np.dtype(np.float64): ("double", "f64")}
_SRC = load("conv_fft.h")  # after fft_passes.h (fft.passes_helper): its transform and vector types


def smooth(n: int) -> int:
    """The smallest 2-3-5-smooth integer ``>= n``."""
    m = max(1, n)
    while True:
        k = m
        for p in (2, 3, 5):
            while k % p == 0:
                k //= p
        if k == 1:
            return m
        m += 1


def radices(n: int) -> list[int]:
    """The Stockham stages of length ``n`` (2-3-5-smooth): radix 4 first, then 2, 3, 5."""
    out = []
    for r in (4, 2, 3, 5):
        while n % r == 0:
            out.append(r)
            n //= r
    assert n == 1, n
    return out


def _up(n: int, m: int = 16) -> int:
    return n + (-n) % m


def _phase_axis(s: int, k: int, lo: int) -> tuple[int, int, list[int]]:
    """One axis of a stride-``s`` convolution (``k`` taps, low padding ``lo``) as a stride-1 one over
    the ``s`` phases ``x_b[u] = x[s u + b]``: ``(taps, low padding, map)``, ``map[b * taps + q]`` the
    original tap phase ``b``'s tap ``q`` stands for (-1: none). Tap ``a`` of output ``j`` reads
    ``x[s j + a - lo]`` = ``x_b[j + q + d]`` with ``b = (a - lo) mod s``, ``a = s q + ...``."""
    rows = []
    for b in range(s):
        a = (b + lo) % s
        d = (a - lo - b) // s
        nq = -(-(k - a) // s) if a < k else 0
        rows.append((a, d, nq))
    l0 = max((-d for _, d, nq in rows if nq), default=0)
    taps = max((nq + d + l0 for _, d, nq in rows if nq), default=1)
    m = []
    for a, d, nq in rows:
        for q in range(taps):
            qq = q - d - l0
            m.append(s * qq + a if 0 <= qq < nq else -1)
    return taps, l0, m


def _axis_options(h: int, lo: int, oh: int, kh: int) -> list[tuple[int, int, int]]:
    """Transform sizes along one axis, ``(P, output rows a tile, tiles)``: the whole image in one
    plane, or tiles of ``P - kh + 1`` output rows."""
    pu = smooth(max(h + lo, oh + kh - 1 - lo, oh, kh))
    out = [(pu, oh, 1)]
    for p in (16, 20, 24, 30, 32, 36, 40, 48, 60, 64):
        if kh < p < pu and p - kh + 1 < oh:
            out.append((p, p - kh + 1, -(-oh // (p - kh + 1))))
    return out


class Plan:
    """The FFT geometry of one ``conv`` equation (all sizes static): the stride-1 problem (for a
    strided convolution: over its phase copies), the tiles, the workspace regions."""

    def __init__(self, e: Eqn, choice: tuple | None = None):
        p = e.params
        x, w, y = e.inputs[0].aval, e.inputs[1].aval, e.outvars[0].aval
        ls, rs, os_ = p["dimension_numbers"]
        self.dtype = np.dtype(x.dtype)
        self.N, self.C0, self.H0, self.W0 = (x.shape[a] for a in ls)
        self.O, _, self.KH0, self.KW0 = (w.shape[a] for a in rs)
        self.OH, self.OW = y.shape[os_[2]], y.shape[os_[3]]
        (hlo, _), (wlo, _) = p["padding"]
        self.s = p["window_strides"][0]
        xs, ws, ys = row_strides(x.shape), row_strides(w.shape), row_strides(y.shape)
        self.xst0 = [xs[a] for a in ls]
        self.wst0 = [ws[a] for a in rs]
        self.yst = [ys[a] for a in os_]
        self.nx = int(np.prod(x.shape))
        self.nw = int(np.prod(w.shape))
        s_ = self.s
        self.KH, self.hlo, self.khm = _phase_axis(s_, self.KH0, hlo)
        self.KW, self.wlo, self.kwm = _phase_axis(s_, self.KW0, wlo)
        self.H, self.W, self.C = -(-self.H0 // s_), -(-self.W0 // s_), s_ * s_ * self.C0
        if s_ == 1:
            self.xst, self.wst = self.xst0, self.wst0
        else:  # the phase copies: NHWC and HWIO
            self.xst = [self.H * self.W * self.C, 1, self.W * self.C, self.C]
            self.wst = [1, self.O, self.KW * self.C * self.O, self.C * self.O]
        self.vl = VEC_BYTES_MAX // self.dtype.itemsize
        self.Cp, self.Op = _up(self.C, self.vl), _up(self.O, self.vl)
        if choice is None:  # the cheapest tiling whose kernel spectrum stays in cache (else any)
            plans = [Plan(e, (a, b)) for a in _axis_options(self.H, self.hlo, self.OH, self.KH)
                     for b in _axis_options(self.W, self.wlo, self.OW, self.KW)]
            fits = [q for q in plans if q.kernel_spectrum_bytes() <= MAX_KERNEL_SPECTRUM] or plans
            best = min(fits, key=lambda q: q.cost()[0])
            choice = (best.P, best.TH, best.NTY), (best.Q, best.TW, best.NTX)
        (self.P, self.TH, self.NTY), (self.Q, self.TW, self.NTX) = choice
        self.Qh = self.Q // 2 + 1
        self.bins = self.P * self.Qh
        self.NT = self.N * self.NTY * self.NTX
        # tiles a block: their spectra within about BLOCK_BYTES (at least one register tile's worth)
        per = self.bins * 2 * (self.Cp + self.Op) * self.dtype.itemsize
        self.NB = min(self.NT, max(4, BLOCK_BYTES // per // 4 * 4))
        # workspace regions (elements, 64-byte multiples): twiddles, spectra, phase copies, scratch
        self.scr = _up((self.P * self.Qh + 2 * max(self.P, self.Q)) * 2 * self.vl)
        self.twp, self.twq = 0, _up(2 * self.P)
        self.wf = self.twq + _up(2 * self.Q)
        self.xf = self.wf + self.bins * self.C * 2 * self.Op
        self.yf = self.xf + self.bins * self.NB * 2 * self.Cp
        self.xs2d = self.yf + self.bins * self.NB * 2 * self.Op
        self.ws2d = self.xs2d + (_up(self.N * self.H * self.W * self.C) if s_ > 1 else 0)
        self.sc = self.ws2d + (_up(self.KH * self.KW * self.C * self.O) if s_ > 1 else 0)
        self.elems = self.sc + THREADS * self.scr

    def nbytes(self) -> int:
        return self.elems * self.dtype.itemsize

    def cost(self) -> tuple[float, float]:
        """(FFT, direct) estimated costs, in units of one vector multiply-add (fitted on one Zen 4
        core: a transform's stage, the product's loads, the spectra's memory traffic)."""
        vl = self.vl
        direct = self.N * self.OH * self.OW * self.C0 * self.KH0 * self.KW0 * _up(self.O, vl) / vl
        p, q = _fft_ops(self.P), _fft_ops(self.Q)
        rows = min(self.P, self.H + self.hlo, self.TH + self.KH - 1)
        kernel = self.C * self.Op / vl * (-(-self.KH // 2) * q + self.Qh * p)
        inp = self.NT * self.Cp / vl * (-(-rows // 2) * q + self.Qh * p)
        out = self.NT * self.Op / vl * (-(-self.TH // 2) * q + self.Qh * p)
        # per bin, tile group of up to 4 tiles and feature vector: C x (4 FMAs per tile, 2 loads)
        groups = -(-self.NB // 4) * -(-self.NT // self.NB)
        gemm = self.bins * self.C * self.Op / vl * (4 * self.NT + 2 * groups)
        wf = self.bins * self.C * 2 * self.Op * self.dtype.itemsize
        mem = wf / 64 * (1 + -(-self.NT // self.NB)) * (0.5 if wf > L2_BYTES else 0.1)
        return efficiency() * (kernel + inp + out + gemm) + mem, direct

    def kernel_spectrum_bytes(self) -> int:
        return self.bins * self.C * 2 * self.Op * self.dtype.itemsize

    def fields(self) -> str:
        """The C initializer of ``em_cf_geo``."""
        vals = [self.N, self.C, self.H, self.W, self.O, self.OH, self.OW, self.KH, self.KW, self.hlo,
                self.wlo, self.P, self.Q, self.Qh, self.Cp, self.Op, *self.xst, *self.wst, *self.yst,
                self.scr, self.TH, self.TW, self.NTY, self.NTX, self.NB]
        fac = ["{" + ", ".join(map(str, radices(n) + [0])) + "}" for n in (self.P, self.Q)]
        return "{" + ", ".join(str(v) for v in vals) + ", " + ", ".join(fac) + "}"


@functools.cache
def efficiency() -> float:
    """:data:`EFFICIENCY` for the vector width the generated C is compiled for on this machine
    (512-bit where the compiler's target has AVX-512F, else 256-bit)."""
    try:
        info = toolchain.find_compiler()
    except Exception:  # noqa: BLE001 - no compiler: nothing is compiled, any value serves
        info = None
    wide = info is not None and "-mavx512f" in set(info.target.split())
    return EFFICIENCY["512" if wide else "256"]


def _fft_ops(n: int) -> float:
    """Vector operations of one length-``n`` transform (a complex vector per element)."""
    per = {4: 4.25, 2: 3.0, 3: 4.0, 5: 6.5}  # per element of a stage (butterfly + twiddle)
    return n * sum(per[r] for r in radices(n))


def _plan(e: Eqn) -> Plan | None:
    p = e.params
    x, w = e.inputs[0].aval, e.inputs[1].aval
    if not ENABLED or np.dtype(x.dtype) not in _TYPES:
        return None
    st = tuple(p["window_strides"])
    if not all(isinstance(v, int) for lo_hi in p["padding"] for v in lo_hi):
        return None  # ("SAME" at a stride > 1 of a symbolic size)
    if (p["feature_group_count"] != 1 or st[0] != st[1] or st[0] > MAX_STRIDE
            or tuple(p["rhs_dilation"]) != (1, 1) or tuple(p.get("lhs_dilation", (1, 1))) != (1, 1)
            or min(lo for lo, _ in p["padding"]) < 0):
        return None
    if not all(isinstance(d, int) for d in (*x.shape, *w.shape, *e.outvars[0].aval.shape)):
        return None
    if math.prod(x.shape) == 0 or math.prod(e.outvars[0].aval.shape) == 0:
        return None
    rs = p["dimension_numbers"][1]
    if w.shape[rs[2]] * w.shape[rs[3]] < MIN_TAPS:
        return None
    pl = Plan(e)
    if (len(radices(pl.P)) >= NFAC or len(radices(pl.Q)) >= NFAC or pl.nbytes() > MAX_WORKSPACE
            or pl.kernel_spectrum_bytes() > MAX_KERNEL_SPECTRUM):
        return None
    fft, direct = pl.cost()
    return pl if fft < RATIO * direct else None


def chosen(e: Eqn) -> bool:
    """Whether the ``conv`` equation ``e`` runs by FFT."""
    return _plan(e) is not None


def workspace(e: Eqn) -> int:
    """Bytes of workspace the FFT path of ``e`` needs (0 when it does not run by FFT)."""
    pl = _plan(e)
    return pl.nbytes() if pl is not None else 0


def emit(e: Eqn, cc: CallCode, direct: list[str]) -> list[str]:
    """The FFT step of ``e`` (:func:`chosen` must hold); ``direct``: the direct kernel's lines, run
    instead when an operand holds a NaN or an Inf."""
    pl = _plan(e)
    assert pl is not None
    elt, sfx = _TYPES[pl.dtype]
    support.need("math.h")
    passes_helper(cc, elt, sfx)
    cc.helper(f"em_conv_fft_{sfx}", f"#define ELT {elt}\n#define EM_T(name) name##_{sfx}\n" + contracted(_SRC)
              + "#undef EM_T\n#undef ELT\n")
    geo = pl.fields()
    key = f"{sfx}_{hashlib.sha1(f'{geo} {pl.khm} {pl.kwm}'.encode()).hexdigest()[:12]}"
    gdecl = f"const em_cf_geo g_ = {geo}"
    ctx = f"(const em_cf_ctx_{sfx} *)c_"

    def chunk(name: str, call: str) -> str:
        return cc.chunk(f"em_cf_{name}_{key}", f"{{ {gdecl}; em_cf_{name}_{sfx}({ctx}, g_, {call}); }}")

    def arr(v: list) -> str:
        return "{" + ", ".join(map(str, v)) + "}"

    vl = f"EM_CF_VL_{sfx}"  # the compiled ISA's vector (the plan pads to the widest, a multiple of it)
    once, per_block = [], [
        (chunk("input", "t, tid"), f"cv_.nb * ({pl.Cp} / {vl})", 1),
        (chunk("bin", "t"), str(pl.bins), 8),
        (chunk("output", "t, tid"), f"cv_.nb * ({pl.Op} / {vl})", 1),
    ]
    ws = f"(({elt} *){cc.ws})"
    x, w = cc.ins[0], cc.ins[1]
    if pl.s > 1:  # the phase copies first
        xst, wst = arr(pl.xst0), arr(pl.wst0)
        s2dx = (f"const int64_t st_[] = {xst}; em_cf_s2d_x_{sfx}({ctx}, g_, {pl.s}, {pl.H0}, {pl.W0}, "
                f"{pl.C0}, st_, t);")
        s2dw = (f"const int64_t st_[] = {wst}; const int kh_[] = {arr(pl.khm)}, kw_[] = {arr(pl.kwm)}; "
                f"em_cf_s2d_w_{sfx}({ctx}, g_, {pl.s}, {pl.C0}, st_, kh_, kw_);")
        once.append((cc.chunk(f"em_cf_s2dx_{key}", f"{{ {gdecl}; {s2dx} }}"), str(pl.N * pl.H), 4))
        once.append((cc.chunk(f"em_cf_s2dw_{key}", f"{{ {gdecl}; {s2dw} }}"), "1", 1))
        x, w = f"{ws} + {pl.xs2d}", f"{ws} + {pl.ws2d}"
    once.append((chunk("kernel", "t, tid"), f"{pl.C} * ({pl.Op} / {vl})", 1))
    tw = f"em_cf_s_{sfx}"
    lines = [f"if (em_cf_finite_{sfx}({cc.ins[0]}, {pl.nx}, {cc.ins[1]}, {pl.nw})) {{",
             f"    em_fftp_twiddles_{sfx}(({tw} *)({ws} + {pl.twp}), {pl.P});",
             f"    em_fftp_twiddles_{sfx}(({tw} *)({ws} + {pl.twq}), {pl.Q});",
             f"    em_cf_ctx_{sfx} cv_ = {{{x}, {w}, {cc.outs[0]}, {ws} + {pl.xf}, {ws} + {pl.wf}, "
             f"{ws} + {pl.yf}, {ws} + {pl.sc}, (const {tw} *)({ws} + {pl.twp}), "
             f"(const {tw} *)({ws} + {pl.twq}), {cc.ins[0]}, {cc.ins[1]}, {ws} + {pl.xs2d}, "
             f"{ws} + {pl.ws2d}, 0, 0}};"]
    par = cc.openmp and cc.num_threads != 1
    if par:
        work = pl.N * pl.OH * pl.OW * pl.O * pl.C0 * pl.KH0 * pl.KW0
        lines.append(f"    const int par_ = {work}.0 >= {cc.parallel_threshold}.0;")

    def call(fn: str, n: str, chunks: int, ind: str) -> str:
        if par and n != "1":
            threads = cc.num_threads or 0
            return (f"{ind}if (par_ && {n} > 1) em_par({fn}, &cv_, {n}, {threads}, {THREADS}, {chunks}); "
                    f"else {fn}(&cv_, 0, {n}, 0);")
        return f"{ind}{fn}(&cv_, 0, {n}, 0);"

    lines += [call(fn, n, ch, "    ") for fn, n, ch in once]
    lines.append(f"    for (int64_t b_ = 0; b_ < {pl.NT}; b_ += {pl.NB}) {{")
    lines.append(f"        cv_.blk = b_; cv_.nb = {pl.NT} - b_ < {pl.NB} ? {pl.NT} - b_ : {pl.NB};")
    lines += [call(fn, n, ch, "        ") for fn, n, ch in per_block]
    lines.append("    }")
    lines.append("} else {")
    lines += ["    " + ln for ln in direct]
    lines.append("}")
    return lines
