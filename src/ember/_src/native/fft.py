"""The ``fft`` call step: complex and real FFTs over trailing axes, in C, inside ``ember_main``.

ember carries its own FFT rather than calling a library: every length works, and nothing is
allocated at run time (twiddle tables and line buffers come from the step's arena workspace).

* **Algorithm.** Each line is gathered into a double-precision buffer and transformed with a
  recursive mixed-radix decimation-in-time Cooley-Tukey FFT over the prime factors of ``n``
  (radix-4 and radix-2 butterflies written out; an odd prime ``p`` by a direct ``p``-point DFT per
  butterfly that computes outputs ``u`` and ``p - u`` together from the symmetric pairs of inputs:
  ``O(n * sum(p))``). A length with a prime factor above :data:`BLUESTEIN_PRIME` uses Bluestein's
  chirp-z algorithm instead: the transform becomes a cyclic convolution of length ``m2``, the power
  of two at least ``2n - 1``, done with two radix-2 FFTs (the chirp's transform is made once per
  call). Twiddles ``exp(-2 pi i j / n)`` are computed with libm ``cos``/``sin`` in double, and the
  chirp's phase reduces ``k**2`` modulo ``2n`` first, so float32 results carry float32 rounding only
  once, when stored (error well below NumPy's own float32 pocketfft's).
* **Types** (as :mod:`ember._src.prims.fft`): ``FFT``/``IFFT`` (``IFFT`` scales each axis by
  ``1/n``), ``RFFT`` (the last axis's full transform of a real line, first ``n//2 + 1`` bins kept,
  then complex FFTs over the other axes) and ``IRFFT`` (inverse complex FFTs over the leading
  transformed axes in a workspace copy, then each last-axis line is extended to its Hermitian
  spectrum and inverse transformed, keeping the real part: the imaginary parts of the DC and
  Nyquist bins are ignored, as NumPy's ``irfft`` does).
* **Empty** operands or a zero length give zeros, as the reference does.
"""

from __future__ import annotations

import math

import numpy as np

from ember._src.native.calls import CallCode, register
from ember._src.program import Eqn, Literal

BLUESTEIN_PRIME = 64  # a prime factor above this switches the length to Bluestein's algorithm
_Z = 16  # bytes of one em_z (two doubles)

_CORE = """\
typedef struct { double re, im; } em_z;
static inline em_z em_zmul(em_z a, em_z b) {
    em_z r = {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
    return r;
}
typedef struct {
    int64_t n, m2;              /* length; Bluestein's power-of-two length (0: direct) */
    const int32_t *fac, *fac2;  /* prime factors of n (direct) or of m2 (Bluestein) */
    int inv;
    em_z *tw, *tmp, *chirp, *tw2, *bf, *a, *c;
} em_fft_plan;
static void em_fft_twiddles(em_z *tw, int64_t n) {
    for (int64_t j = 0; j < n; ++j) {
        double ang = -6.283185307179586476925286766559 * (double)j / (double)n;
        tw[j].re = cos(ang); tw[j].im = sin(ang);
    }
}
/* out[0..n) = DFT of in[0], in[is], ..., by decimation in time over the factors fac; the
   twiddle table tw has n * ts entries (stride ts at this level); inv conjugates every twiddle. */
static void em_fft_work(em_z *out, const em_z *in, int64_t is, const int32_t *fac, int64_t n,
                        const em_z *tw, int64_t ts, int inv, em_z *tmp) {
    const int64_t p = fac[0], m = n / p;
    const double sg = inv ? -1.0 : 1.0;
    if (m == 1) {
        for (int64_t q = 0; q < p; ++q) out[q] = in[q * is];
    } else {
        for (int64_t q = 0; q < p; ++q)
            em_fft_work(out + q * m, in + q * is, is * p, fac + 1, m, tw, ts * p, inv, tmp);
    }
    if (p == 4) {  /* radix 4: W_4 = -i forward, +i inverse */
        for (int64_t k = 0; k < m; ++k) {
            em_z w1 = tw[k * ts], w2 = tw[2 * k * ts], w3 = tw[3 * k * ts];
            w1.im *= sg; w2.im *= sg; w3.im *= sg;
            em_z f0 = out[k], b1 = em_zmul(out[m + k], w1), b2 = em_zmul(out[2 * m + k], w2),
                 b3 = em_zmul(out[3 * m + k], w3);
            em_z s0 = {f0.re + b2.re, f0.im + b2.im}, s1 = {f0.re - b2.re, f0.im - b2.im};
            em_z s2 = {b1.re + b3.re, b1.im + b3.im}, s3 = {b1.re - b3.re, b1.im - b3.im};
            out[k].re = s0.re + s2.re; out[k].im = s0.im + s2.im;
            out[2 * m + k].re = s0.re - s2.re; out[2 * m + k].im = s0.im - s2.im;
            out[m + k].re = s1.re + sg * s3.im; out[m + k].im = s1.im - sg * s3.re;
            out[3 * m + k].re = s1.re - sg * s3.im; out[3 * m + k].im = s1.im + sg * s3.re;
        }
        return;
    }
    if (p == 2) {
        for (int64_t k = 0; k < m; ++k) {
            em_z w = tw[k * ts]; w.im *= sg;
            em_z a = out[k], b = em_zmul(out[m + k], w);
            out[k].re = a.re + b.re; out[k].im = a.im + b.im;
            out[m + k].re = a.re - b.re; out[m + k].im = a.im - b.im;
        }
        return;
    }
    /* odd p: outputs u and p - u share the sums over the pairs (q, p - q), since
       W^(qu) t_q + W^(-qu) t_(p-q) = c (t_q + t_(p-q)) + i s (t_q - t_(p-q)) with W^(qu) = c + i s */
    const int64_t h = (p - 1) / 2;
    for (int64_t k = 0; k < m; ++k) {
        tmp[0] = out[k];
        for (int64_t q = 1; q < p; ++q) {
            em_z w = tw[q * k * ts]; w.im *= sg;
            tmp[q] = em_zmul(out[q * m + k], w);
        }
        const em_z x0 = tmp[0];
        em_z s0 = x0;
        for (int64_t q = 1; q < p; ++q) { s0.re += tmp[q].re; s0.im += tmp[q].im; }
        out[k] = s0;
        for (int64_t u = 1; u <= h; ++u) {
            double ar = 0, ai = 0, br = 0, bi = 0;
            for (int64_t q = 1, r = u; q <= h; ++q, r = r + u >= p ? r + u - p : r + u) {
                const double c = tw[r * m * ts].re, s = tw[r * m * ts].im * sg;
                ar += (tmp[q].re + tmp[p - q].re) * c; ai += (tmp[q].im + tmp[p - q].im) * c;
                br += (tmp[q].re - tmp[p - q].re) * s; bi += (tmp[q].im - tmp[p - q].im) * s;
            }
            out[u * m + k].re = x0.re + ar - bi; out[u * m + k].im = x0.im + ai + br;
            out[(p - u) * m + k].re = x0.re + ar + bi; out[(p - u) * m + k].im = x0.im + ai - br;
        }
    }
}
/* Fill a plan's tables in ws; returns the first em_z of ws after them. */
static em_z *em_fft_make(em_fft_plan *p, int64_t n, const int32_t *fac, int64_t m2, const int32_t *fac2,
                         int inv, em_z *ws) {
    p->n = n; p->m2 = m2; p->fac = fac; p->fac2 = fac2; p->inv = inv;
    if (!m2) {
        p->tw = ws; p->tmp = ws + n;
        em_fft_twiddles(p->tw, n);
        return ws + 2 * n;
    }
    p->chirp = ws; p->tw2 = ws + n; p->bf = p->tw2 + m2; p->a = p->bf + m2; p->c = p->a + m2;
    p->tmp = p->c + m2;
    for (int64_t k = 0; k < n; ++k) {  /* chirp_k = exp(-+ i pi k^2 / n), k^2 reduced mod 2n */
        double ang = 3.14159265358979323846264338327950288 * (double)((k * k) % (2 * n)) / (double)n;
        p->chirp[k].re = cos(ang); p->chirp[k].im = inv ? sin(ang) : -sin(ang);
    }
    em_fft_twiddles(p->tw2, m2);
    for (int64_t j = 0; j < m2; ++j) { p->a[j].re = 0; p->a[j].im = 0; }
    for (int64_t k = 0; k < n; ++k) {
        em_z b = p->chirp[k]; b.im = -b.im;
        p->a[k] = b;
        if (k) p->a[m2 - k] = b;
    }
    em_fft_work(p->bf, p->a, 1, fac2, m2, p->tw2, 1, 0, p->tmp);
    return p->tmp + 2;
}
/* out[0..n) = the plan's transform of in[0..n) (out and in distinct). */
static void em_fft_line(const em_fft_plan *p, const em_z *in, em_z *out) {
    if (!p->m2) { em_fft_work(out, in, 1, p->fac, p->n, p->tw, 1, p->inv, p->tmp); return; }
    const int64_t n = p->n, m2 = p->m2;
    for (int64_t k = 0; k < n; ++k) p->a[k] = em_zmul(in[k], p->chirp[k]);
    for (int64_t k = n; k < m2; ++k) { p->a[k].re = 0; p->a[k].im = 0; }
    em_fft_work(p->c, p->a, 1, p->fac2, m2, p->tw2, 1, 0, p->tmp);
    for (int64_t j = 0; j < m2; ++j) p->c[j] = em_zmul(p->c[j], p->bf[j]);
    em_fft_work(p->a, p->c, 1, p->fac2, m2, p->tw2, 1, 1, p->tmp);
    const double s = 1.0 / (double)m2;
    for (int64_t k = 0; k < n; ++k) {
        em_z r = em_zmul(p->a[k], p->chirp[k]);
        out[k].re = r.re * s; out[k].im = r.im * s;
    }
}
"""

# Per element type ELT (float or double): complex arrays are interleaved (re, im) pairs of T.
_TYPED = """\
/* transform every line along the middle axis of a complex (outer, n, inner) array; src may be dst */
static void em_fft_axis_T(const ELT *src, ELT *dst, int64_t outer, int64_t n, int64_t inner,
                          const em_fft_plan *p, em_z *line, em_z *res, double scale) {
    for (int64_t o = 0; o < outer; ++o) for (int64_t i = 0; i < inner; ++i) {
        const int64_t base = 2 * (o * n * inner + i), st = 2 * inner;
        for (int64_t j = 0; j < n; ++j) {
            line[j].re = src[base + j * st]; line[j].im = src[base + j * st + 1];
        }
        em_fft_line(p, line, res);
        for (int64_t j = 0; j < n; ++j) {
            dst[base + j * st] = (ELT)(res[j].re * scale); dst[base + j * st + 1] = (ELT)(res[j].im * scale);
        }
    }
}
/* real (outer, n) -> complex (outer, n/2 + 1) */
static void em_rfft_last_T(const ELT *x, ELT *out, int64_t outer, int64_t n, const em_fft_plan *p, em_z *line,
                           em_z *res) {
    const int64_t nh = n / 2 + 1;
    for (int64_t o = 0; o < outer; ++o) {
        for (int64_t j = 0; j < n; ++j) { line[j].re = x[o * n + j]; line[j].im = 0; }
        em_fft_line(p, line, res);
        for (int64_t j = 0; j < nh; ++j) {
            out[2 * (o * nh + j)] = (ELT)res[j].re; out[2 * (o * nh + j) + 1] = (ELT)res[j].im;
        }
    }
}
/* complex (outer, n/2 + 1) Hermitian half-spectra -> real (outer, n), inverse, times scale */
static void em_irfft_last_T(const ELT *h, ELT *out, int64_t outer, int64_t n, const em_fft_plan *p,
                            em_z *line,
                            em_z *res, double scale) {
    const int64_t nh = n / 2 + 1;
    for (int64_t o = 0; o < outer; ++o) {
        const ELT *ho = h + 2 * o * nh;
        for (int64_t j = 0; j < nh; ++j) { line[j].re = ho[2 * j]; line[j].im = ho[2 * j + 1]; }
        for (int64_t j = nh; j < n; ++j) { line[j].re = ho[2 * (n - j)]; line[j].im = -ho[2 * (n - j) + 1]; }
        em_fft_line(p, line, res);
        for (int64_t j = 0; j < n; ++j) out[o * n + j] = (ELT)(res[j].re * scale);
    }
}
"""


def _factors(n: int) -> list[int]:
    """The radices of ``n``: 4s while four divides it, then its prime factors ascending."""
    out, p = [], 2
    while n % 4 == 0:
        out.append(4)
        n //= 4
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


def plan_of(n: int) -> tuple[list[int], int, list[int]]:
    """``(factors, m2, factors of m2)`` for length ``n``: direct mixed radix (``m2 == 0``) or
    Bluestein with the power-of-two convolution length ``m2``."""
    f = _factors(n) or [1]
    if max(f) <= BLUESTEIN_PRIME:
        return f, 0, []
    m2 = 1 << (2 * n - 2).bit_length()
    return [], m2, _factors(m2)


def _plan_elems(n: int) -> int:
    """em_z elements the tables of ``n``'s plan take (:c:func:`em_fft_make`)."""
    _, m2, _ = plan_of(n)
    return 2 * n if not m2 else n + 4 * m2 + 2


def _axes(e: Eqn) -> tuple[tuple, tuple, str, tuple]:
    x = e.inputs[0]
    return tuple(x.aval.shape), tuple(e.outvars[0].aval.shape), e.params["fft_type"], \
        tuple(e.params["fft_lengths"])


def _empty(e: Eqn) -> bool:
    shape, oshape, _, lengths = _axes(e)
    return math.prod(shape) == 0 or math.prod(oshape) == 0 or 0 in lengths


def _copy_bytes(e: Eqn) -> int:
    """Bytes of the IRFFT workspace copy of the operand (multi-axis IRFFT only), 64-aligned."""
    shape, _, ft, lengths = _axes(e)
    if ft != "IRFFT" or len(lengths) == 1:
        return 0
    return -(-math.prod(shape) * np.dtype(e.inputs[0].aval.dtype).itemsize // 64) * 64


def _workspace(e: Eqn) -> int:
    if _empty(e):
        return 0
    _, _, _, lengths = _axes(e)
    elems = max(_plan_elems(n) + 2 * n for n in lengths)
    return _copy_bytes(e) + elems * _Z + 64


def _accepts(e: Eqn) -> bool:
    return not isinstance(e.inputs[0], Literal)


def _plan(cc: CallCode, name: str, n: int, inv: bool) -> list[str]:
    fac, m2, fac2 = plan_of(n)
    arr = lambda v: "{" + ", ".join(str(int(t)) for t in (v or [0])) + "}"  # noqa: E731
    return [f"static const int32_t {name}f_[] = {arr(fac)}, {name}g_[] = {arr(fac2)};",
            f"em_fft_plan {name};",
            f"em_z *{name}e_ = em_fft_make(&{name}, {n}, {name}f_, {m2}, {name}g_, {int(inv)}, zw_);"]


@register("fft", "native call: mixed-radix / Bluestein FFT in C over each transformed axis (fft.py)",
          _accepts, _workspace, complex_ok=True)
def _fft(e: Eqn, cc: CallCode) -> list[str]:
    shape, oshape, ft, lengths = _axes(e)
    out_d = np.dtype(e.outvars[0].aval.dtype)
    if _empty(e):
        size = math.prod(oshape) * out_d.itemsize
        return [f"memset({cc.outs[0]}, 0, {size});"] if size else []
    real_t = "float" if np.dtype(e.inputs[0].aval.dtype) in (np.float32, np.complex64) else "double"
    s = "f32" if real_t == "float" else "f64"
    cc.helper("em_fft_core", _CORE)
    cc.helper(f"em_fft_{s}", _TYPED.replace("_T(", f"_{s}(").replace("ELT", real_t))
    nd, k = len(oshape), len(lengths)
    inv = ft in ("IFFT", "IRFFT")
    cpy = _copy_bytes(e)
    x, y = f"(const {real_t} *)({cc.ins[0]})", f"({real_t} *)({cc.outs[0]})"
    lines = [f"em_z *zw_ = (em_z *)({cc.ws} + {cpy});"]

    def axis_step(src: str, dst: str, axis: int, shp: tuple) -> list[str]:
        n = int(shp[axis])
        outer, inner = math.prod(shp[:axis]), math.prod(shp[axis + 1:])
        scale = repr(1.0 / n) if inv else "1.0"
        body = _plan(cc, "pl_", n, inv)
        body.append(f"em_fft_axis_{s}({src}, {dst}, {outer}, {n}, {inner}, &pl_, pl_e_, pl_e_ + {n}, "
                    f"{scale});")
        return ["{", *("    " + b for b in body), "}"]

    if ft in ("FFT", "IFFT"):
        src = x
        for axis in range(nd - 1, nd - k - 1, -1):
            lines += axis_step(src, y, axis, oshape)
            src = y
        return lines
    n_last = lengths[-1]
    outer_last = math.prod(shape[:-1])
    if ft == "RFFT":
        body = _plan(cc, "pl_", n_last, False)
        body.append(f"em_rfft_last_{s}({x}, {y}, {outer_last}, {n_last}, &pl_, pl_e_, pl_e_ + {n_last});")
        lines += ["{", *("    " + b for b in body), "}"]
        for axis in range(nd - 2, nd - k - 1, -1):
            lines += axis_step(y, y, axis, oshape)
        return lines
    # IRFFT: inverse complex FFTs over the leading transformed axes in a copy, then the last axis
    h = x
    if k > 1:
        h = f"(({real_t} *)({cc.ws}))"
        nbytes = math.prod(shape) * np.dtype(e.inputs[0].aval.dtype).itemsize
        lines.append(f"memcpy({h}, {x}, {nbytes});")
        for axis in range(nd - 2, nd - k - 1, -1):
            lines += axis_step(h, h, axis, shape)
    body = _plan(cc, "pl_", n_last, True)
    body.append(f"em_irfft_last_{s}({h}, {y}, {outer_last}, {n_last}, &pl_, pl_e_, pl_e_ + {n_last}, "
                f"{1.0 / n_last!r});")
    return lines + ["{", *("    " + b for b in body), "}"]
