/* 2-D convolution by FFT (no dilation, one group; a strided one over its phase copies, see
   native/emit/conv_fft.py), for one element type: ELT (float or double) and EM_T(name)
   (name##_f32 / name##_f64) are defined in front of it.

   y[n, j, i, o] = sum over (c, a, b) of x[n, j + a - hlo, i + b - wlo, c] w[o, c, a, b] is, per
   image, input channel and output feature, a circular correlation of the input plane (placed at
   row hlo, column wlo of a P x Q plane of zeros) with the kernel (at the origin): its transform is
   X conj(W), and P >= max(H + hlo, OH + KH - 1 - hlo, OH) (likewise Q) keeps the wrap-around on
   the zero rows, so the first OH x OW values of the inverse are the output. A large image is cut
   into tiles of TH x TW outputs (overlap-save: the plane holds the tile's rows from ty TH - hlo,
   P >= TH + KH - 1), which play the images' part below, a block of NB tiles at a time (passes B
   to D per block). Four passes, each a set of tasks on the thread pool:

   A. every (input channel, group of VL output features): the kernel planes' 2-D real transform
      (scaled by 1 / (P Q), the inverse's normalization) into wf[bin][c][re, im][Op];
   B. every (tile, group of VL channels): the input planes' transform into xf[bin][n][re, im][Cp];
   C. every bin: yf[bin][n][o] = sum over c of xf[bin][n][c] conj(wf[bin][c][o]) (a small complex
      GEMM: register tiles of 4 tiles x 2 vectors of features);
   D. every (tile, group of VL output features): the inverse transform of yf, its first TH rows and
      TW columns (clipped to the image) written to the output.

   A 2-D real transform runs VL planes at once, one plane per vector lane (a "complex vector" is
   two vectors: VL real and VL imaginary parts): rows two at a time as the real and imaginary part
   of one complex transform of length Q (split into the two rows' Q / 2 + 1 bins), then the
   Q / 2 + 1 columns by complex transforms of length P. The 1-D transform is the FFT steps' own:
   fft_passes.h's Stockham passes (em_fftp_mixed over the radices 4, 2, 3 and 5 of P and Q, which
   are 2-3-5-smooth; a 4 then a 2 as one radix-8 pass), included before this file for the same
   precision, so no lane ever moves: the butterflies are vector adds with broadcast twiddles. */

#ifndef EM_CF_COMMON
#define EM_CF_COMMON
#if defined(__AVX512F__)
#define EM_CF_BYTES 64
#else
#define EM_CF_BYTES 32
#endif
#if defined(__FMA__) && EM_CF_BYTES == 64
#define EM_CF_FMA_f32(a, b, c) __builtin_ia32_vfmaddps512_mask((a), (b), (c), (short)-1, 4)
#define EM_CF_FMA_f64(a, b, c) __builtin_ia32_vfmaddpd512_mask((a), (b), (c), (char)-1, 4)
#elif defined(__FMA__)
#define EM_CF_FMA_f32(a, b, c) __builtin_ia32_vfmaddps256((a), (b), (c))
#define EM_CF_FMA_f64(a, b, c) __builtin_ia32_vfmaddpd256((a), (b), (c))
#else
#define EM_CF_FMA_f32(a, b, c) ((a) * (b) + (c))
#define EM_CF_FMA_f64(a, b, c) ((a) * (b) + (c))
#endif
#define EM_CF_VL_f32 ((int64_t)(EM_CF_BYTES / 4))
#define EM_CF_VL_f64 ((int64_t)(EM_CF_BYTES / 8))
#define EM_CF_NFAC 24
static inline int64_t em_cf_min(int64_t a, int64_t b) { return a < b ? a : b; }

/* The step's geometry (a constant the emitter writes into each task function). */
typedef struct {
    int64_t N, C, H, W, O, OH, OW, KH, KW, hlo, wlo;
    int64_t P, Q, Qh, Cp, Op;        /* transform sizes; Qh = Q / 2 + 1 bins a row; C, O rounded up */
    int64_t xsn, xsc, xsh, xsw;      /* input strides (elements) */
    int64_t wso, wsi, wsh, wsw;      /* kernel strides */
    int64_t ysn, yso, ysh, ysw;      /* output strides */
    int64_t scr;                     /* elements of one thread's scratch */
    int64_t TH, TW, NTY, NTX, NB;    /* output tile size, tiles per image along each axis, tiles a block */
    int32_t facp[EM_CF_NFAC], facq[EM_CF_NFAC];  /* radices of P and Q, 0-terminated */
} em_cf_geo;
#endif

_Static_assert(EM_CF_BYTES == EM_CV_BYTES, "conv_fft.h's vectors are fft_passes.h's");
/* the vector types of fft_passes.h: em_cv (VL values, one per lane), em_cz (VL complex values: a
   vector of real and one of imaginary parts), em_fftc_sz (one complex value: the twiddles) */
typedef EM_T(em_cvu) EM_T(em_cf_u);  /* a vector at any element-aligned address */
typedef EM_T(em_fftc_sz) EM_T(em_cf_s);

typedef struct {
    const ELT *x, *w;      /* the operands */
    ELT *y;                /* the output */
    ELT *xf, *wf, *yf;     /* the spectra (workspace) */
    ELT *scratch;          /* per-thread scratch */
    const EM_T(em_cf_s) *twp, *twq;  /* exp(-2 pi i j / P), j < P; the same for Q */
    const ELT *xsrc, *wsrc;  /* a strided convolution's operands (x and w: their phase copies) */
    ELT *xs2d, *ws2d;      /* the phase copies (workspace) */
    int64_t blk, nb;       /* passes B to D: the block's first tile and its tiles */
} EM_T(em_cf_ctx);

#define CFV EM_T(em_cv)
#define CFZ EM_T(em_cz)
#define CFS EM_T(em_cf_s)

/* VL values at p, lane stride st, the first cl of them (the rest zero); and back. */
static inline __attribute__((always_inline)) CFV EM_T(em_cf_ld)(const ELT *p, int64_t st, int64_t cl) {
    if (st == 1 && cl == EM_T(EM_CF_VL)) return *(const EM_T(em_cf_u) *)p;
    CFV v = {0};
    for (int64_t l = 0; l < cl; ++l) v[l] = p[l * st];
    return v;
}

static inline __attribute__((always_inline)) void EM_T(em_cf_st)(ELT *p, int64_t st, int64_t cl, CFV v) {
    if (st == 1 && cl == EM_T(EM_CF_VL)) {
        *(EM_T(em_cf_u) *)p = v;
        return;
    }
    for (int64_t l = 0; l < cl; ++l) p[l * st] = v[l];
}

/* Split Z = FFT(r1 + i r2) (length Q) into the bins k <= Q / 2 of r1 (t1) and r2 (t2; null: r2 = 0,
   not stored). */
static inline __attribute__((always_inline)) void EM_T(em_cf_split)(const CFZ *z, int64_t Q, int64_t Qh, CFZ *t1,
                                                                   CFZ *t2) {
    for (int64_t k = 0; k < Qh; ++k) {
        const CFZ a = z[k], b = z[(Q - k) % Q];
        t1[k].re = (ELT)0.5 * (a.re + b.re);
        t1[k].im = (ELT)0.5 * (a.im - b.im);
        if (t2) {
            t2[k].re = (ELT)0.5 * (a.im + b.im);
            t2[k].im = (ELT)0.5 * (b.re - a.re);
        }
    }
}

/* Pass A, task t = c * (Op / VL) + group: kernel planes w[o0 + l, c, :, :] (l < VL) -> wf. */
static inline __attribute__((always_inline)) void EM_T(em_cf_kernel)(const EM_T(em_cf_ctx) *c, const em_cf_geo g,
                                                                    int64_t t, int64_t tid) {
    const int64_t VL = EM_T(EM_CF_VL), ng = g.Op / VL, ci = t / ng, o0 = (t % ng) * VL;
    const int64_t ol = em_cf_min(VL, g.O - o0), L = g.P > g.Q ? g.P : g.Q;
    CFZ *tb = (CFZ *)(c->scratch + tid * g.scr), *l0 = tb + g.P * g.Qh, *l1 = l0 + L;
    const ELT sc = (ELT)(1.0 / ((double)g.P * (double)g.Q));
    const ELT *wc = c->w + o0 * g.wso + ci * g.wsi;
    for (int64_t i = g.KH * g.Qh; i < g.P * g.Qh; ++i) tb[i].re = tb[i].im = (CFV){0};  /* rows past KH */
    for (int64_t a = 0; a < g.KH; a += 2) {  /* kernel rows a, a + 1 (zero past KH) */
        for (int64_t i = 0; i < g.Q; ++i) l0[i].re = l0[i].im = (CFV){0};
        for (int64_t b = 0; b < g.KW; ++b) {
            l0[b].re = sc * EM_T(em_cf_ld)(wc + a * g.wsh + b * g.wsw, g.wso, ol);
            if (a + 1 < g.KH) l0[b].im = sc * EM_T(em_cf_ld)(wc + (a + 1) * g.wsh + b * g.wsw, g.wso, ol);
        }
        const CFZ *z = EM_T(em_fftp_mixed)(l0, l1, g.Q, g.facq, c->twq, 1);
        EM_T(em_cf_split)(z, g.Q, g.Qh, tb + a * g.Qh, a + 1 < g.KH ? tb + (a + 1) * g.Qh : 0);
    }
    ELT *wf = c->wf + ci * 2 * g.Op + o0;
    const int64_t bs = g.C * 2 * g.Op;
    for (int64_t k = 0; k < g.Qh; ++k) {
        for (int64_t p = 0; p < g.P; ++p) l0[p] = tb[p * g.Qh + k];
        const CFZ *z = EM_T(em_fftp_mixed)(l0, l1, g.P, g.facp, c->twp, 1);
        for (int64_t p = 0; p < g.P; ++p) {
            ELT *d = wf + (p * g.Qh + k) * bs;
            *(EM_T(em_cf_u) *)d = z[p].re;
            *(EM_T(em_cf_u) *)(d + g.Op) = z[p].im;
        }
    }
}

/* Pass B, task t = i * (Cp / VL) + group, tile T = blk + i of the block (image n, tile row ty,
   column tx): plane row r, column q hold input pixel (ty TH - hlo + r, tx TW - wlo + q) of
   channels c0 + l (l < VL; zero outside the image) -> xf[bin][i]. Untiled (one tile), the plane
   holds the whole image at (hlo, wlo); tiled, P >= TH + KH - 1, so the rows and columns past
   TH + KH - 1 are never read by the tile's outputs. */
static inline __attribute__((always_inline)) void EM_T(em_cf_input)(const EM_T(em_cf_ctx) *c, const em_cf_geo g,
                                                                   int64_t t, int64_t tid) {
    const int64_t VL = EM_T(EM_CF_VL), ng = g.Cp / VL, i = t / ng, c0 = (t % ng) * VL, T = c->blk + i;
    const int64_t n = T / (g.NTY * g.NTX), ty = (T / g.NTX) % g.NTY, tx = T % g.NTX;
    const int64_t cl = em_cf_min(VL, g.C - c0), L = g.P > g.Q ? g.P : g.Q;
    const int64_t ih0 = ty * g.TH - g.hlo, iw0 = tx * g.TW - g.wlo;  /* image pixel of plane (0, 0) */
    const int64_t r0 = ih0 < 0 ? -ih0 : 0, r1 = em_cf_min(g.P, g.H - ih0);
    const int64_t q0 = iw0 < 0 ? -iw0 : 0, q1 = em_cf_min(g.Q, g.W - iw0);
    CFZ *tb = (CFZ *)(c->scratch + tid * g.scr), *l0 = tb + g.P * g.Qh, *l1 = l0 + L;
    const ELT *xn = c->x + n * g.xsn + c0 * g.xsc + ih0 * g.xsh + iw0 * g.xsw;
    for (int64_t k = 0; k < g.P * g.Qh; ++k)  /* the rows no image row lands on */
        if (k < r0 * g.Qh || k >= r1 * g.Qh) tb[k].re = tb[k].im = (CFV){0};
    for (int64_t r = r0; r < r1; r += 2) {  /* plane rows r, r + 1 */
        for (int64_t q = 0; q < g.Q; ++q) l0[q].re = l0[q].im = (CFV){0};
        const ELT *x0 = xn + r * g.xsh, *x1 = x0 + g.xsh;
        for (int64_t q = q0; q < q1; ++q) {
            l0[q].re = EM_T(em_cf_ld)(x0 + q * g.xsw, g.xsc, cl);
            if (r + 1 < r1) l0[q].im = EM_T(em_cf_ld)(x1 + q * g.xsw, g.xsc, cl);
        }
        const CFZ *z = EM_T(em_fftp_mixed)(l0, l1, g.Q, g.facq, c->twq, 1);
        CFZ *t1 = tb + r * g.Qh;
        EM_T(em_cf_split)(z, g.Q, g.Qh, t1, r + 1 < r1 ? t1 + g.Qh : 0);
    }
    ELT *xf = c->xf + i * 2 * g.Cp + c0;
    const int64_t bs = g.NB * 2 * g.Cp;
    for (int64_t k = 0; k < g.Qh; ++k) {
        for (int64_t p = 0; p < g.P; ++p) l0[p] = tb[p * g.Qh + k];
        const CFZ *z = EM_T(em_fftp_mixed)(l0, l1, g.P, g.facp, c->twp, 1);
        for (int64_t p = 0; p < g.P; ++p) {
            ELT *d = xf + (p * g.Qh + k) * bs;
            *(EM_T(em_cf_u) *)d = z[p].re;
            *(EM_T(em_cf_u) *)(d + g.Cp) = z[p].im;
        }
    }
}

/* Pass C's register tile: tiles n0 .. n0 + nb - 1, feature vectors v0 .. v0 + nv - 1 of one bin
   (xb, wb, yb: the bin's spectra): y = sum over c of x conj(w). */
static inline __attribute__((always_inline)) void EM_T(em_cf_mm)(const ELT *xb, const ELT *wb, ELT *yb,
                                                                const em_cf_geo g, int64_t n0, const int nb,
                                                                int64_t v0, const int nv) {
    const int64_t VL = EM_T(EM_CF_VL);
    CFV ar[4][2], ai[4][2];
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i)
#pragma GCC unroll 2
        for (int v = 0; v < 2; ++v) ar[i][v] = ai[i][v] = (CFV){0};
    for (int64_t ci = 0; ci < g.C; ++ci) {
        const ELT *wc = wb + ci * 2 * g.Op + v0 * VL;
        CFV wr[2], wi[2], wn[2];
#pragma GCC unroll 2
        for (int v = 0; v < nv; ++v) {
            wr[v] = *(const EM_T(em_cf_u) *)(wc + v * VL);
            wi[v] = *(const EM_T(em_cf_u) *)(wc + g.Op + v * VL);
            wn[v] = -wi[v];
        }
#pragma GCC unroll 4
        for (int i = 0; i < nb; ++i) {
            const ELT *xc = xb + (n0 + i) * 2 * g.Cp + ci;
            const CFV xr = (CFV){0} + xc[0], xi = (CFV){0} + xc[g.Cp];
#pragma GCC unroll 2
            for (int v = 0; v < nv; ++v) {  /* (xr + i xi)(wr - i wi) */
                ar[i][v] = EM_T(EM_CF_FMA)(xr, wr[v], ar[i][v]);
                ar[i][v] = EM_T(EM_CF_FMA)(xi, wi[v], ar[i][v]);
                ai[i][v] = EM_T(EM_CF_FMA)(xi, wr[v], ai[i][v]);
                ai[i][v] = EM_T(EM_CF_FMA)(xr, wn[v], ai[i][v]);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < nb; ++i)
#pragma GCC unroll 2
        for (int v = 0; v < nv; ++v) {
            ELT *d = yb + (n0 + i) * 2 * g.Op + (v0 + v) * VL;
            *(EM_T(em_cf_u) *)d = ar[i][v];
            *(EM_T(em_cf_u) *)(d + g.Op) = ai[i][v];
        }
}

/* Pass C, task t = bin: the block's nb tiles. */
static inline __attribute__((always_inline)) void EM_T(em_cf_bin)(const EM_T(em_cf_ctx) *c, const em_cf_geo g,
                                                                 int64_t t) {
    const int64_t nvec = g.Op / EM_T(EM_CF_VL), nb = c->nb;
    const ELT *xb = c->xf + t * g.NB * 2 * g.Cp, *wb = c->wf + t * g.C * 2 * g.Op;
    ELT *yb = c->yf + t * g.NB * 2 * g.Op;
    for (int64_t v0 = 0; v0 < nvec; v0 += 2) {
        const int nv = v0 + 2 <= nvec ? 2 : 1;
        int64_t n0 = 0;
        for (; n0 + 4 <= nb; n0 += 4) {
            if (nv == 2) EM_T(em_cf_mm)(xb, wb, yb, g, n0, 4, v0, 2);
            else EM_T(em_cf_mm)(xb, wb, yb, g, n0, 4, v0, 1);
        }
        for (; n0 < nb; ++n0) {
            if (nv == 2) EM_T(em_cf_mm)(xb, wb, yb, g, n0, 1, v0, 2);
            else EM_T(em_cf_mm)(xb, wb, yb, g, n0, 1, v0, 1);
        }
    }
}

/* Pass D, task t = i * (Op / VL) + group: the inverse of yf's planes (tile blk + i, features
   o0 + l) -> the tile's outputs (its first TH x TW values, clipped to the image). */
static inline __attribute__((always_inline)) void EM_T(em_cf_output)(const EM_T(em_cf_ctx) *c, const em_cf_geo g,
                                                                    int64_t t, int64_t tid) {
    const int64_t VL = EM_T(EM_CF_VL), ng = g.Op / VL, i = t / ng, o0 = (t % ng) * VL, T = c->blk + i;
    const int64_t n = T / (g.NTY * g.NTX), ty = (T / g.NTX) % g.NTY, tx = T % g.NTX;
    const int64_t ol = em_cf_min(VL, g.O - o0), L = g.P > g.Q ? g.P : g.Q;
    const int64_t jn = em_cf_min(g.TH, g.OH - ty * g.TH), wn = em_cf_min(g.TW, g.OW - tx * g.TW);
    CFZ *tb = (CFZ *)(c->scratch + tid * g.scr), *l0 = tb + g.P * g.Qh, *l1 = l0 + L;
    const ELT *yf = c->yf + i * 2 * g.Op + o0;
    const int64_t bs = g.NB * 2 * g.Op;
    ELT *yn = c->y + n * g.ysn + o0 * g.yso + ty * g.TH * g.ysh + tx * g.TW * g.ysw;
    for (int64_t j = 0; j < jn; ++j)  /* the output lines, requested for writing while the columns run */
        for (int64_t q = 0; q < wn; ++q) __builtin_prefetch(yn + j * g.ysh + q * g.ysw, 1, 2);
    for (int64_t k = 0; k < g.Qh; ++k) {
        for (int64_t p = 0; p < g.P; ++p) {
            const ELT *s = yf + (p * g.Qh + k) * bs;
            l0[p].re = *(const EM_T(em_cf_u) *)s;
            l0[p].im = *(const EM_T(em_cf_u) *)(s + g.Op);
        }
        const CFZ *z = EM_T(em_fftp_mixed)(l0, l1, g.P, g.facp, c->twp, -1);
        for (int64_t j = 0; j < jn; ++j) tb[j * g.Qh + k] = z[j];
    }
    for (int64_t j = 0; j < jn; j += 2) {  /* output rows j, j + 1: the inverse of Y1 + i Y2 */
        const CFZ *y1 = tb + j * g.Qh, *y2 = y1 + g.Qh;
        const int two = j + 1 < jn;
        for (int64_t k = 0; k < g.Q; ++k) {
            if (k < g.Qh) {
                l0[k].re = two ? y1[k].re - y2[k].im : y1[k].re;
                l0[k].im = two ? y1[k].im + y2[k].re : y1[k].im;
            } else {
                const int64_t m = g.Q - k;
                l0[k].re = two ? y1[m].re + y2[m].im : y1[m].re;
                l0[k].im = two ? y2[m].re - y1[m].im : -y1[m].im;
            }
        }
        const CFZ *z = EM_T(em_fftp_mixed)(l0, l1, g.Q, g.facq, c->twq, -1);
        for (int64_t q = 0; q < wn; ++q) {
            EM_T(em_cf_st)(yn + j * g.ysh + q * g.ysw, g.yso, ol, z[q].re);
            if (two) EM_T(em_cf_st)(yn + (j + 1) * g.ysh + q * g.ysw, g.yso, ol, z[q].im);
        }
    }
}

/* A strided convolution as a stride-1 one (see conv_fft.py): row t = n * H + u of the phase copy
   xs2d[n][u][v][(bh s + bw) C0 + ch] = xsrc[n, s u + bh, s v + bw, ch] (zero past the image; H0,
   W0, C0 and the strides st[4] = n, c, h, w: the original input's). */
static inline __attribute__((always_inline)) void EM_T(em_cf_s2d_x)(const EM_T(em_cf_ctx) *c, const em_cf_geo g,
                                                                   const int64_t s, const int64_t H0,
                                                                   const int64_t W0, const int64_t C0,
                                                                   const int64_t *st, int64_t t) {
    const int64_t n = t / g.H, u = t % g.H;
    ELT *d = c->xs2d + t * g.W * g.C;
    for (int64_t v = 0; v < g.W; ++v)
        for (int64_t bh = 0; bh < s; ++bh)
            for (int64_t bw = 0; bw < s; ++bw) {
                const int64_t ih = s * u + bh, iw = s * v + bw;
                ELT *dd = d + v * g.C + (bh * s + bw) * C0;
                if (ih >= H0 || iw >= W0) {
                    for (int64_t ch = 0; ch < C0; ++ch) dd[ch] = 0;
                    continue;
                }
                const ELT *ss = c->xsrc + n * st[0] + ih * st[2] + iw * st[3];
                for (int64_t ch = 0; ch < C0; ++ch) dd[ch] = ss[ch * st[1]];
            }
}

/* ... and its kernel, HWIO: ws2d[qh][qw][(bh s + bw) C0 + ch][o] = wsrc[o, ch, kh[bh][qh],
   kw[bw][qw]] (zero where the map holds -1; st[4] = o, i, h, w: the original kernel's strides). */
static inline __attribute__((always_inline)) void EM_T(em_cf_s2d_w)(const EM_T(em_cf_ctx) *c, const em_cf_geo g,
                                                                   const int64_t s, const int64_t C0,
                                                                   const int64_t *st, const int *kh,
                                                                   const int *kw) {
    for (int64_t qh = 0; qh < g.KH; ++qh)
        for (int64_t qw = 0; qw < g.KW; ++qw)
            for (int64_t bh = 0; bh < s; ++bh)
                for (int64_t bw = 0; bw < s; ++bw) {
                    const int a = kh[bh * g.KH + qh], b = kw[bw * g.KW + qw];
                    for (int64_t ch = 0; ch < C0; ++ch) {
                        ELT *d = c->ws2d + ((qh * g.KW + qw) * g.C + (bh * s + bw) * C0 + ch) * g.O;
                        for (int64_t o = 0; o < g.O; ++o)
                            d[o] = a < 0 || b < 0 ? 0 : c->wsrc[o * st[0] + ch * st[1] + a * st[2] + b * st[3]];
                    }
                }
}

/* 1 when every value of x[0..nx) and w[0..nw) is finite (x * 0 is NaN exactly for NaN and Inf). */
static int EM_T(em_cf_finite)(const ELT *x, int64_t nx, const ELT *w, int64_t nw) {
    ELT s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < nx; ++i) s += x[i] * (ELT)0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < nw; ++i) s += w[i] * (ELT)0;
    return s == 0;
}

#undef CFV
#undef CFZ
#undef CFS
