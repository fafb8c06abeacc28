"""Stride-1 2-D convolutions with large kernels by FFT, inside the ``conv`` call step.

:mod:`.conv` asks :func:`chosen` for every convolution it emits; when this module takes it, the
step runs ``csrc/conv_fft.h`` (the algorithm is described there): each image, input channel and
output feature is a circular correlation of zero-padded P x Q planes (P, Q: the smallest 2-3-5-smooth
sizes that keep the wrap-around on zero rows), so the step transforms the kernel planes and the
input planes (2-D real FFTs, one plane per vector lane), multiplies them per frequency bin (a small
complex GEMM over the input channels) and transforms the products back. A 7x7 kernel on 32 x 32
images takes about a third of the direct kernel's multiply-adds.

The step first checks that every input and kernel value is finite (one vectorized pass): a
transform spreads a NaN or Inf over the whole plane, so a call with one runs the direct kernel
instead (same results as without this path).

Taken when (:func:`chosen`): float32/float64, one group, stride 1, no dilation, non-negative low
padding, a static batch, at least ``MIN_TAPS`` taps, the estimated cost (:func:`_cost`) below
``RATIO`` of the direct kernel's, and the spectra within ``MAX_WORKSPACE`` bytes.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

from ember._src.native.csrc import load
from ember._src.native.emit import support
from ember._src.native.emit.calls import CallCode, row_strides
from ember._src.native.runtime.threadpool import usable_cpus
from ember._src.program import Eqn

ENABLED = True  # an internal switch for measurements (the program cache does not key on it)
MIN_TAPS = 16  # kernels of fewer taps (3x3) stay with the direct kernel / Winograd
RATIO = 0.8  # taken when the estimated FFT cost is below this fraction of the direct kernel's
MAX_WORKSPACE = 64 << 20  # bytes of spectra and scratch at most
THREADS = max(1, min(usable_cpus(), 64))  # per-thread scratch is planned for this many pool threads
VEC_BYTES_MAX = 64  # one vector at the widest (AVX-512; EM_CF_BYTES)
NFAC = 24  # radices per transform length at most (EM_CF_NFAC)
_TYPES = {np.dtype(np.float32): ("float", "f32"), np.dtype(np.float64): ("double", "f64")}
_SRC = load("conv_fft.h")


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


class Plan:
    """The FFT geometry of one ``conv`` equation (all sizes static)."""

    def __init__(self, e: Eqn):
        p = e.params
        x, w, y = e.inputs[0].aval, e.inputs[1].aval, e.outvars[0].aval
        ls, rs, os_ = p["dimension_numbers"]
        self.dtype = np.dtype(x.dtype)
        self.N, self.C, self.H, self.W = (x.shape[a] for a in ls)
        self.O, _, self.KH, self.KW = (w.shape[a] for a in rs)
        self.OH, self.OW = y.shape[os_[2]], y.shape[os_[3]]
        (self.hlo, _), (self.wlo, _) = p["padding"]
        self.P = smooth(max(self.H + self.hlo, self.OH + self.KH - 1 - self.hlo, self.OH, self.KH))
        self.Q = smooth(max(self.W + self.wlo, self.OW + self.KW - 1 - self.wlo, self.OW, self.KW))
        self.Qh = self.Q // 2 + 1
        self.bins = self.P * self.Qh
        self.vl = VEC_BYTES_MAX // self.dtype.itemsize
        self.Cp, self.Op = _up(self.C, self.vl), _up(self.O, self.vl)
        xs, ws, ys = row_strides(x.shape), row_strides(w.shape), row_strides(y.shape)
        self.xst = [xs[a] for a in ls]
        self.wst = [ws[a] for a in rs]
        self.yst = [ys[a] for a in os_]
        self.nx = int(np.prod(x.shape))
        self.nw = int(np.prod(w.shape))
        # workspace regions (elements, 64-byte multiples): twiddles, spectra, per-thread scratch
        self.scr = _up((self.P * self.Qh + 2 * max(self.P, self.Q)) * 2 * self.vl)
        self.twp, self.twq = 0, _up(2 * self.P)
        self.wf = self.twq + _up(2 * self.Q)
        self.xf = self.wf + self.bins * self.C * 2 * self.Op
        self.yf = self.xf + self.bins * self.N * 2 * self.Cp
        self.sc = self.yf + self.bins * self.N * 2 * self.Op
        self.elems = self.sc + THREADS * self.scr

    def nbytes(self) -> int:
        return self.elems * self.dtype.itemsize

    def fields(self) -> str:
        """The C initializer of ``em_cf_geo``."""
        vals = [self.N, self.C, self.H, self.W, self.O, self.OH, self.OW, self.KH, self.KW, self.hlo,
                self.wlo, self.P, self.Q, self.Qh, self.Cp, self.Op, *self.xst, *self.wst, *self.yst,
                self.scr]
        fac = ["{" + ", ".join(map(str, radices(n) + [0])) + "}" for n in (self.P, self.Q)]
        return "{" + ", ".join(str(v) for v in vals) + ", " + ", ".join(fac) + "}"


def _fft_ops(n: int) -> float:
    """Vector operations of one length-``n`` transform (a complex vector per element)."""
    per = {4: 4.25, 2: 3.0, 3: 4.0, 5: 6.5}  # per element of a stage (butterfly + twiddle)
    return n * sum(per[r] for r in radices(n))


def _cost(pl: Plan) -> tuple[float, float]:
    """(FFT, direct) estimated costs, in units of one vector multiply-add."""
    vl = pl.vl
    direct = pl.N * pl.OH * pl.OW * pl.C * pl.KH * pl.KW * _up(pl.O, vl) / vl
    p, q = _fft_ops(pl.P), _fft_ops(pl.Q)
    kernel = pl.C * pl.Op / vl * (-(-pl.KH // 2) * q + pl.Qh * p)
    inp = pl.N * pl.Cp / vl * (-(-pl.H // 2) * q + pl.Qh * p)
    out = pl.N * pl.Op / vl * (-(-pl.OH // 2) * q + pl.Qh * p)
    gemm = 4 * pl.bins * pl.N * pl.C * pl.Op / vl
    return kernel + inp + out + 1.3 * gemm, direct


def _plan(e: Eqn) -> Plan | None:
    p = e.params
    x, w = e.inputs[0].aval, e.inputs[1].aval
    if not ENABLED or np.dtype(x.dtype) not in _TYPES:
        return None
    if (p["feature_group_count"] != 1 or tuple(p["window_strides"]) != (1, 1)
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
    if len(radices(pl.P)) >= NFAC or len(radices(pl.Q)) >= NFAC or pl.nbytes() > MAX_WORKSPACE:
        return None
    fft, direct = _cost(pl)
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
    cc.helper(f"em_conv_fft_{sfx}", f"#define ELT {elt}\n#define EM_T(name) name##_{sfx}\n" + _SRC
              + "#undef EM_T\n#undef ELT\n")
    geo = pl.fields()
    key = f"{sfx}_{hashlib.sha1(geo.encode()).hexdigest()[:12]}"
    gdecl = f"const em_cf_geo g_ = {geo}"
    ctx = f"(const em_cf_ctx_{sfx} *)c_"
    steps = [
        (cc.chunk(f"em_cf_kernel_{key}", f"{{ {gdecl}; em_cf_kernel_{sfx}({ctx}, g_, t, tid); }}"),
         pl.C * (pl.Op // pl.vl), 1),
        (cc.chunk(f"em_cf_input_{key}", f"{{ {gdecl}; em_cf_input_{sfx}({ctx}, g_, t, tid); }}"),
         pl.N * (pl.Cp // pl.vl), 1),
        (cc.chunk(f"em_cf_bin_{key}", f"{{ {gdecl}; em_cf_bin_{sfx}({ctx}, g_, t); }}"), pl.bins, 8),
        (cc.chunk(f"em_cf_output_{key}", f"{{ {gdecl}; em_cf_output_{sfx}({ctx}, g_, t, tid); }}"),
         pl.N * (pl.Op // pl.vl), 1),
    ]
    ws = f"(({elt} *){cc.ws})"
    tw = f"em_cf_s_{sfx}"
    lines = [f"if (em_cf_finite_{sfx}({cc.ins[0]}, {pl.nx}, {cc.ins[1]}, {pl.nw})) {{",
             f"    em_cf_twiddles_{sfx}(({tw} *)({ws} + {pl.twp}), {pl.P});",
             f"    em_cf_twiddles_{sfx}(({tw} *)({ws} + {pl.twq}), {pl.Q});",
             f"    em_cf_ctx_{sfx} cv_ = {{{cc.ins[0]}, {cc.ins[1]}, {cc.outs[0]}, {ws} + {pl.xf}, "
             f"{ws} + {pl.wf}, {ws} + {pl.yf}, {ws} + {pl.sc}, (const {tw} *)({ws} + {pl.twp}), "
             f"(const {tw} *)({ws} + {pl.twq})}};"]
    par = cc.openmp and cc.num_threads != 1
    if par:
        work = pl.N * pl.OH * pl.OW * pl.O * pl.C * pl.KH * pl.KW
        lines.append(f"    const int par_ = {work}.0 >= {cc.parallel_threshold}.0;")
    for fn, n, chunks in steps:
        if par and n > 1:
            threads = cc.num_threads or 0
            lines.append(f"    if (par_) em_par({fn}, &cv_, {n}, {threads}, {THREADS}, {chunks}); "
                         f"else {fn}(&cv_, 0, {n}, 0);")
        else:
            lines.append(f"    {fn}(&cv_, 0, {n}, 0);")
    lines.append("} else {")
    lines += ["    " + ln for ln in direct]
    lines.append("}")
    return lines
