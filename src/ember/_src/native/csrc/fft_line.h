/* The line-contiguous kernel of the fft step (native/emit/fft.py): batched power-of-two rows, each
   line transformed on its own with SIMD across the butterfly index, no register transposes of the
   batch. Included per precision with ELT, ELTI and EM_T(name) defined, after fft_passes.h,
   fft_conv.h (em_fftc_transpose) and fft_typed.h (the job), in front of fft_lanes.h, whose
   em_fftl_run picks it (em_fftk_fits).

   A line of m points is held in blocks of CW points (CZ: the real parts of points b CW .. b CW +
   CW - 1, then their imaginary parts), two line buffers of m / CW blocks (in L1/L2 up to
   EM_FFTK_MAX points). The first Stockham stage has radix CW (em_fftk_first): its butterflies p0 ..
   p0 + CW - 1 are the lanes of one vector each input k (contiguous in the row: points p0 + k m /
   CW), their twiddles W_m^(j p) a vector each output j (a per-call table), and the CW outputs of
   CW butterflies form one CW x CW block of the next line (two register transposes: real and
   imaginary parts). After it every stage's stride is a multiple of CW points, so fft_passes.h's
   stages run on the blocks unchanged (a block is a lane vector of stride CW / CW = 1), with
   broadcast twiddles. The result is in natural order, blocks of CW bins, stored interleaved.
   Real rows (kind 1, length 2m) are the complex line x_2k + i x_2k+1 (read as is), split into
   bins k and m - k in vectors of CW bins and their lane-reversed mirrors; the inverse (kind 2)
   merges the half-spectrum into the line first (the mirror: one reversed load). */
#ifndef EM_FFTK_ONCE
#define EM_FFTK_ONCE
#ifndef EM_FFTK_MAX
#define EM_FFTK_MAX 4096  /* the longest line (complex points) of this kernel: two buffers in L2 */
#endif
#if defined(__GNUC__) && !defined(__clang__)  /* (loops over a block's vectors unrolled: registers, not stack) */
#define EM_FFTK_UNROLL16 _Pragma("GCC unroll 16")
#define EM_FFTK_UNROLL4 _Pragma("GCC unroll 4")
#else
#define EM_FFTK_UNROLL16
#define EM_FFTK_UNROLL4
#endif
#endif
#define CW EM_T(em_cw)
#define CV EM_T(em_cv)
#define CI EM_T(em_ci)
#define CZ EM_T(em_cz)
#define SZ EM_T(em_fftc_sz)
/* CW adjacent complex points at p (2 CW ELT, interleaved) -> one block (re, im), and back */
static inline __attribute__((always_inline)) CZ EM_T(em_fftk_deal)(const ELT *p) {
    CV a, b;
    a = *(const EM_T(em_cvu) *)p; b = *(const EM_T(em_cvu) *)(p + CW);
    CZ z;
#if defined(__GNUC__) && !defined(__clang__)
    CI ev, od;
    for (int i = 0; i < CW; ++i) { ev[i] = 2 * i; od[i] = 2 * i + 1; }
    z.re = __builtin_shuffle(a, b, ev); z.im = __builtin_shuffle(a, b, od);
#else
    for (int i = 0; i < CW / 2; ++i) {
        z.re[i] = a[2 * i]; z.im[i] = a[2 * i + 1]; z.re[i + CW / 2] = b[2 * i]; z.im[i + CW / 2] = b[2 * i + 1];
    }
#endif
    return z;
}
static inline __attribute__((always_inline)) void EM_T(em_fftk_undeal)(ELT *p, CV re, CV im) {
    CV a, b;
#if defined(__GNUC__) && !defined(__clang__)
    CI lo, hi;
    for (int i = 0; i < CW / 2; ++i) { lo[2 * i] = i; lo[2 * i + 1] = i + CW; hi[2 * i] = i + CW / 2; hi[2 * i + 1] = i + CW + CW / 2; }
    a = __builtin_shuffle(re, im, lo); b = __builtin_shuffle(re, im, hi);
#else
    for (int i = 0; i < CW / 2; ++i) {
        a[2 * i] = re[i]; a[2 * i + 1] = im[i]; b[2 * i] = re[i + CW / 2]; b[2 * i + 1] = im[i + CW / 2];
    }
#endif
    *(EM_T(em_cvu) *)p = a; *(EM_T(em_cvu) *)(p + CW) = b;
}
/* *a's lanes in reverse order (lane l <- lane CW - 1 - l; vectors through pointers: a vector
   returned by value changes the ABI on a target without AVX) */
static inline __attribute__((always_inline)) void EM_T(em_fftk_rev)(CV *a) {
#if defined(__GNUC__) && !defined(__clang__)
    CI r;
    for (int i = 0; i < CW; ++i) r[i] = CW - 1 - i;
    *a = __builtin_shuffle(*a, r);
#else
    const CV b = *a;
    for (int i = 0; i < CW; ++i) (*a)[i] = b[CW - 1 - i];
#endif
}
/* *c = lane 0 of *a, then lanes CW - 1 .. 1 of *b (the mirror of bins k0 .. k0 + CW - 1 of a line
   of blocks: a the block of bin m - k0, b the one before it) */
static inline __attribute__((always_inline)) void EM_T(em_fftk_mirror)(const CV *a, const CV *b, CV *c) {
#if defined(__GNUC__) && !defined(__clang__)
    CI r;
    r[0] = 0;
    for (int i = 1; i < CW; ++i) r[i] = 2 * CW - i;
    *c = __builtin_shuffle(*a, *b, r);
#else
    (*c)[0] = (*a)[0];
    for (int i = 1; i < CW; ++i) (*c)[i] = (*b)[CW - i];
#endif
}
/* o = the CW-point DFT of v (v overwritten; sg = 1 forward, -1 inverse): 4 points; 8
   (em_fftp_bf8); 16 as 4 x 4 (four 4-point DFTs of the inputs k2, 4 + k2, .., twiddles
   W_16^(j1 k2), four 4-point DFTs over k2 give X[j1 + 4 j2]); unrolled, so v and o stay in
   registers (a loop kept them on the stack) */
static inline __attribute__((always_inline)) void EM_T(em_fftk_dftw)(CZ *v, CZ *o, ELT sg) {
    if (CW == 4) {
        EM_T(em_fftp_dft4)(&v[0], &v[1], &v[2], &v[3], sg);
        for (int k = 0; k < 4; ++k) o[k] = v[k];
    } else if (CW == 8) {
        const SZ w[8] = {{0, 0}};
        EM_T(em_fftp_bf8)(v, 1, o, 1, w, 0, sg, 0);
    } else {
        static const double c16[10] = {1.0, 0.92387953251128675613, 0.70710678118654752440, 0.38268343236508977173,
                                       0.0, -0.38268343236508977173, -0.70710678118654752440, -0.92387953251128675613,
                                       -1.0, -0.92387953251128675613};
        static const double s16[10] = {0.0, 0.38268343236508977173, 0.70710678118654752440, 0.92387953251128675613,
                                       1.0, 0.92387953251128675613, 0.70710678118654752440, 0.38268343236508977173,
                                       0.0, -0.38268343236508977173};
        EM_FFTK_UNROLL4 for (int k2 = 0; k2 < 4; ++k2)
            EM_T(em_fftp_dft4)(&v[k2], &v[4 + k2], &v[8 + k2], &v[12 + k2], sg);
        EM_FFTK_UNROLL4 for (int j1 = 1; j1 < 4; ++j1)
            EM_FFTK_UNROLL4 for (int k2 = 1; k2 < 4; ++k2) {  /* W_16^e = cos(2 pi e / 16) - sg i sin(..) */
                const int e = j1 * k2;
                const SZ w = {(ELT)c16[e], (ELT)(-sg * s16[e])};
                v[4 * j1 + k2] = EM_T(em_czmul)(v[4 * j1 + k2], w);
            }
        EM_FFTK_UNROLL4 for (int j1 = 0; j1 < 4; ++j1) {
            CZ a = v[4 * j1], b = v[4 * j1 + 1], c = v[4 * j1 + 2], d = v[4 * j1 + 3];
            EM_T(em_fftp_dft4)(&a, &b, &c, &d, sg);
            o[j1] = a; o[j1 + 4] = b; o[j1 + 8] = c; o[j1 + 12] = d;
        }
    }
}
/* the first stage's twiddles: tv[(p0 / CW) CW + j] lane l = W_m^(j (p0 + l)) (direction sg), for
   the blocks p0 of the m / CW butterflies (j = 0 entries unused; lanes past the last butterfly: 1) */
static void EM_T(em_fftk_twv)(CZ *tv, int64_t m, const SZ *tw, ELT sg) {
    const int64_t n1 = m / CW;
    for (int64_t p0 = 0; p0 < n1; p0 += CW)
        for (int j = 0; j < CW; ++j)
            for (int l = 0; l < CW; ++l) {
                const SZ w = tw[p0 + l < n1 ? j * (p0 + l) : 0];
                tv[p0 + j].re[l] = w.re; tv[p0 + j].im[l] = sg * w.im;
            }
}
/* the first stage's butterflies p0 .. p0 + CW - 1 (radix CW, length m, stride 1) of their inputs v
   (v[k] lane l: point p0 + l + k m / CW) into the blocks y[p0 ..] */
static inline __attribute__((always_inline)) void EM_T(em_fftk_group)(CZ *v, CZ *y, int64_t p0, const CZ *tv, ELT sg) {
    CZ o[CW];
    EM_T(em_fftk_dftw)(v, o, sg);
    CV re[CW], im[CW];
    re[0] = o[0].re; im[0] = o[0].im;
    EM_FFTK_UNROLL16 for (int j = 1; j < CW; ++j) {
        const CZ t = EM_T(em_czmulv)(o[j], tv[p0 + j]);
        re[j] = t.re; im[j] = t.im;
    }
    EM_T(em_fftc_transpose)(re);
    EM_T(em_fftc_transpose)(im);
    EM_FFTK_UNROLL16 for (int l = 0; l < CW; ++l) { y[p0 + l].re = re[l]; y[p0 + l].im = im[l]; }
}
/* the first stage (radix CW, length m, stride 1) from the row src (interleaved; null: from the
   blocks xb, m a multiple of CW^2) into the blocks y. When CW does not divide the m / CW
   butterflies, the last group's lanes past them are padding: read from the row's next points (the
   last input from a copy of the row's end: nothing past the row is read), written to blocks past
   the line's (y has room for them), never read. */
static inline __attribute__((always_inline)) void EM_T(em_fftk_first)(const ELT *src, const CZ *xb, CZ *y, int64_t m,
                                                                      const CZ *tv, ELT sg) {
    const int64_t n1 = m / CW;
    int64_t p0 = 0;
    for (; p0 + CW <= n1; p0 += CW) {
        CZ v[CW];
        EM_FFTK_UNROLL16 for (int k = 0; k < CW; ++k)
            v[k] = src ? EM_T(em_fftk_deal)(src + 2 * (p0 + k * n1)) : xb[(p0 + k * n1) / CW];
        EM_T(em_fftk_group)(v, y, p0, tv, sg);
    }
    if (p0 < n1) {  /* (src only) */
        CZ v[CW];
        ELT e[2 * CW] = {0};
        for (int k = 0; k < CW - 1; ++k) v[k] = EM_T(em_fftk_deal)(src + 2 * (p0 + k * n1));
        memcpy(e, src + 2 * (p0 + (CW - 1) * n1), (size_t)(2 * (n1 - p0)) * sizeof(ELT));
        v[CW - 1] = EM_T(em_fftk_deal)(e);
        EM_T(em_fftk_group)(v, y, p0, tv, sg);
    }
}
/* the transform of one line (first stage from src or xb into b1, the rest on b1 / b0: a power of
   two's (rad null) or the stages rad[0 .. nr) of a 2-3-5 length) down to the stage at length nend
   (1: all of them; else that last stage's radix, left to em_fftk_last): returns the buffer of
   blocks holding it */
static CZ *EM_T(em_fftk_line)(const ELT *src, const CZ *xb, CZ *b0, CZ *b1, int64_t m, const SZ *tw,
                              const CZ *tv, ELT sg, int64_t nend, const int8_t *rad, int nr) {
    EM_T(em_fftk_first)(src, xb, b1, m, tv, sg);
    if (rad) return EM_T(em_fftp_stages)(b1, b0, m, m / CW, 1, rad, nr - (nend > 1), tw, sg);
    return EM_T(em_fftp_fft_to)(b1, b0, m, m / CW, 1, tw, sg, 0, nend);
}
/* the radix of the last Stockham stage over nb blocks (em_fftp_fft_to's sequence: 8 or 4; rad: the
   last of rad[0 .. nr)) */
static inline int64_t EM_T(em_fftk_lastr)(int64_t nb, const int8_t *rad, int nr) {
    if (rad) return rad[nr - 1];
    int64_t q = nb;
    while (em_fftp_radix(q) != q) q /= em_fftp_radix(q);
    return q;
}
/* the last stage (radix r = 8 or 4; 5, 3 or 2 for a 2-3-5 length; stride s = nb / r blocks, no twiddles) of the line x fused into
   its store: blocks q + s j of the result, times scale, interleaved to d + os (q + s j) (no pass
   over the transformed line; os 2 CW: a line's blocks; the lanes' adjacent columns: their row
   stride) */
static inline __attribute__((always_inline)) void EM_T(em_fftk_last)(const CZ *x, int64_t nb, const int r, ELT *d,
                                                                     int64_t os, ELT scale, ELT sg) {
    const int64_t s = nb / r;
    for (int64_t q = 0; q < s; ++q) {
        CZ o[8];
        if (r == 8) {
            const SZ w[8] = {{0, 0}};
            EM_T(em_fftp_bf8)(x + q, s, o, 1, w, 0, sg, 0);
        } else if (r == 4) {
            o[0] = x[q]; o[1] = x[q + s]; o[2] = x[q + 2 * s]; o[3] = x[q + 3 * s];
            EM_T(em_fftp_dft4)(&o[0], &o[1], &o[2], &o[3], sg);
        } else {
            for (int k = 0; k < r; ++k) o[k] = x[q + k * s];
            EM_DFT_SMALL(o, r, sg, CV, ELT);
        }
        for (int k = 0; k < r; ++k) EM_T(em_fftk_undeal)(d + os * (q + s * k), o[k].re * scale, o[k].im * scale);
    }
}
/* one line from src or xb through the last stage into d (interleaved) times scale */
static inline __attribute__((always_inline)) void EM_T(em_fftk_line_out)(const ELT *src, const CZ *xb, CZ *b0, CZ *b1,
                                                                         int64_t m, const SZ *tw, const CZ *tv, ELT sg,
                                                                         ELT *d, ELT scale, const int8_t *rad, int nr) {
    const int64_t nb = m / CW, r = EM_T(em_fftk_lastr)(nb, rad, nr);
    const CZ *x = EM_T(em_fftk_line)(src, xb, b0, b1, m, tw, tv, sg, r, rad, nr);
    if (r == 8) EM_T(em_fftk_last)(x, nb, 8, d, 2 * CW, scale, sg);
    else if (r == 4) EM_T(em_fftk_last)(x, nb, 4, d, 2 * CW, scale, sg);
    else if (r == 5) EM_T(em_fftk_last)(x, nb, 5, d, 2 * CW, scale, sg);
    else if (r == 3) EM_T(em_fftk_last)(x, nb, 3, d, 2 * CW, scale, sg);
    else EM_T(em_fftk_last)(x, nb, 2, d, 2 * CW, scale, sg);
}
/* the line kernel's job: the job j of length m with its table tw (tw[j] = exp(-2 pi i j / m), j <
   m, then the real split's rt[k] = exp(-i pi k / m), k <= m); a 2-3-5 length's stages after the
   first: rad[0 .. nr) (else rad null) */
typedef struct {
    const EM_T(em_fft_job) *j;
    const SZ *tw;
    int64_t m;
    const int8_t *rad;
    int nr;
    /* tvd[tid]: thread tid's first-stage twiddles are in its scratch already (built by its first
       chunk of this call: a job runs 4 chunks per thread, and the twiddles cost about as much as
       a line's transform at 1024 points) */
    volatile int8_t tvd[64];
} EM_T(em_fftk_job);
/* whether the line kernel takes a job of (half-)length m (fac: its factors, null for a power of
   two): a multiple of CW (whole blocks) from CW^2 (a power of two: the first stage's butterflies
   fill whole CW x CW blocks; other lengths pad the last group) to EM_FFTK_MAX points whose odd
   factors are 3s and 5s, rows of a complex last axis or a real one through the half-length line */
static inline int EM_T(em_fftk_fits)(const EM_T(em_fft_job) *j, int64_t m, const int32_t *fac) {
    if (m % CW || m < CW * CW || m > EM_FFTK_MAX || !(j->kind == 0 ? j->inner == 1 : j->half)) return 0;
    if (fac)
        for (int64_t q = m, i = 0; q > 1; q /= fac[i++])
            if (fac[i] > 5) return 0;
    return 1;
}
/* lines [lo, hi) of the job; thread tid's scratch: two line buffers and the first stage's twiddles
   (m / CW blocks each, the second and third rounded up to whole groups of CW; a fourth for the
   inverse real transform's merged line: blocks, or interleaved when the groups are padded) */
static EM_TASK_ATTR void EM_T(em_fftk_task)(void *c, int64_t lo, int64_t hi, int64_t tid) {
    const EM_T(em_fftk_job) *kj = (const EM_T(em_fftk_job) *)c;
    const EM_T(em_fft_job) *j = kj->j;
    const int64_t m = kj->m, nb = m / CW, nbp = (nb + CW - 1) / CW * CW;  /* (nbp: the padded groups) */
    const ELT sg = (j->kind == 2 || (j->kind == 0 && j->p->inv)) ? (ELT)-1 : (ELT)1;
    CZ *b0 = (CZ *)(j->scratch + tid * j->stride), *b1 = b0 + nb, *tv = b1 + nbp, *xb = tv + nbp;
    const SZ *rt = kj->tw + m;
    if (tid >= 64 || !kj->tvd[tid]) {  /* (no two chunks of one tid run at once: em_par) */
        EM_T(em_fftk_twv)(tv, m, kj->tw, sg);
        if (tid < 64) ((EM_T(em_fftk_job) *)c)->tvd[tid] = 1;
    }
    for (int64_t l = lo; l < hi; ++l) {
        if (j->kind == 0) {
            const ELT scale = (ELT)j->scale;
            EM_T(em_fftk_line_out)(j->src + 2 * l * m, 0, b0, b1, m, kj->tw, tv, sg, j->dst + 2 * l * m, scale, kj->rad,
                                       kj->nr);
        } else if (j->kind == 1) {  /* bins k0 + l of 2 X = E + W^k O (em_fftc_split), halved */
            const CZ *z = EM_T(em_fftk_line)(j->src + 2 * l * m, 0, b0, b1, m, kj->tw, tv, sg, 1, kj->rad, kj->nr);
            ELT *d = j->dst + 2 * l * (m + 1);
            const ELT h = (ELT)0.5;
            for (int64_t b = 0; b < nb; ++b) {
                const CZ a = z[b], na = z[b ? nb - b : 0], nbm = z[nb - b - 1];
                CV br, bi;
                EM_T(em_fftk_mirror)(&na.re, &nbm.re, &br);
                EM_T(em_fftk_mirror)(&na.im, &nbm.im, &bi);
                const CZ t = EM_T(em_fftk_deal)((const ELT *)(rt + b * CW));
                const CV er = a.re + br, ei = a.im - bi, orr = a.im + bi, oi = br - a.re;
                EM_T(em_fftk_undeal)(d + 2 * CW * b, h * (er + orr * t.re - oi * t.im), h * (ei + orr * t.im + oi * t.re));
            }
            d[2 * m] = z[0].re[0] - z[0].im[0];  /* X_m = Re Z_0 - Im Z_0 */
            d[2 * m + 1] = 0;
        } else {  /* Z_k = merge(h_k, h_(m-k), W^k) (em_fftc_merge), the imaginary parts of h_0, h_m dropped */
            const ELT *s = j->src + 2 * l * (m + 1);
            const ELT scale = (ELT)j->scale;
            for (int64_t b = 0; b < nb; ++b) {
                CZ a = EM_T(em_fftk_deal)(s + 2 * CW * b), q = EM_T(em_fftk_deal)(s + 2 * (m - CW * b - CW + 1));
                EM_T(em_fftk_rev)(&q.re);
                EM_T(em_fftk_rev)(&q.im);
                if (b == 0) { a.im[0] = 0; q.im[0] = 0; }
                const CZ t = EM_T(em_fftk_deal)((const ELT *)(rt + b * CW));
                const CV er = a.re + q.re, ei = a.im - q.im, dr = a.re - q.re, di = a.im + q.im;
                const CV orr = dr * t.re + di * t.im, oi = di * t.re - dr * t.im;
                if (nbp == nb) { xb[b].re = er - oi; xb[b].im = ei + orr; }
                else EM_T(em_fftk_undeal)((ELT *)(xb + b), er - oi, ei + orr);  /* (padded: read as a row) */
            }
            if (nbp == nb) EM_T(em_fftk_line_out)(0, xb, b0, b1, m, kj->tw, tv, sg, j->dst + 2 * l * m, scale, kj->rad, kj->nr);
            else EM_T(em_fftk_line_out)((const ELT *)xb, 0, b0, b1, m, kj->tw, tv, sg, j->dst + 2 * l * m, scale, kj->rad,
                                        kj->nr);
        }
    }
}
/* run job j (of em_fftk_fits; fac as there) over its lines with table tw, on the pool when par */
static void EM_T(em_fftk_run)(const EM_T(em_fft_job) *j, int64_t m, const SZ *tw, const int32_t *fac, int64_t lines,
                              int par, int64_t nt) {
    int8_t rad[64];
    int lg = 0;
    while ((1 << lg) < CW) ++lg;
    EM_T(em_fftk_job) kj = {j, tw, m, fac ? rad : 0, fac ? em_fftp_radices(fac, m, lg, rad) : 0, {0}};
    if (par && nt > 1 && lines > 1) em_par(EM_T(em_fftk_task), &kj, lines, nt, nt, 4);
    else EM_T(em_fftk_task)(&kj, 0, lines, 0);
}
#undef CW
#undef CV
#undef CI
#undef CZ
#undef SZ
