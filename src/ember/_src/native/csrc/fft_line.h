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
   merges the half-spectrum into the line first (the mirror: one reversed load).
   Pair blocks (em_fftk_fits returns 2: a 2-3-5 length that CW / 2 divides and CW does not, complex
   rows and the RFFT): two lines at once, a block holding CW / 2 points of each (the second line's
   from lane CW / 2 on); the first stage has radix h = CW / 2 (an h x h transpose per half), the
   later stages are the same (their twiddles are broadcast), and the store and the real split
   write each half to its own line. */
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
/* CW / 2 adjacent complex points at p and CW / 2 at q (CW ELT each, interleaved) -> one block (re,
   im: lanes 0 .. CW / 2 - 1 from p, the rest from q), and back (em_fftk_undeal2); q = p + CW: CW
   adjacent points (em_fftk_deal), else the same points of two lines (a pair block) */
static inline __attribute__((always_inline)) CZ EM_T(em_fftk_deal2)(const ELT *p, const ELT *q) {
    CV a, b;
    a = *(const EM_T(em_cvu) *)p; b = *(const EM_T(em_cvu) *)q;
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
static inline __attribute__((always_inline)) CZ EM_T(em_fftk_deal)(const ELT *p) { return EM_T(em_fftk_deal2)(p, p + CW); }
static inline __attribute__((always_inline)) void EM_T(em_fftk_undeal2)(ELT *p, ELT *q, CV re, CV im) {
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
    *(EM_T(em_cvu) *)p = a; *(EM_T(em_cvu) *)q = b;
}
static inline __attribute__((always_inline)) void EM_T(em_fftk_undeal)(ELT *p, CV re, CV im) {
    EM_T(em_fftk_undeal2)(p, p + CW, re, im);
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
/* in each run of h lanes (h = CW, or CW / 2 for pair blocks), *c = its lane 0 of *a, then its lanes h -
   1 .. 1 of *b (the mirror of bins k0 .. k0 + h - 1 of a line of blocks: a the block of bin m - k0, b
   the one before it) */
static inline __attribute__((always_inline)) void EM_T(em_fftk_mirror)(const CV *a, const CV *b, CV *c, const int h) {
#if defined(__GNUC__) && !defined(__clang__)
    CI r;
    for (int i = 0; i < CW; ++i) r[i] = i % h ? CW + i - i % h + h - i % h : i;
    *c = __builtin_shuffle(*a, *b, r);
#else
    for (int i = 0; i < CW; ++i) (*c)[i] = i % h ? (*b)[i - i % h + h - i % h] : (*a)[i];
#endif
}
/* o = the h-point DFT of v (h = CW, or CW / 2 for pair blocks; v overwritten; sg = 1 forward, -1
   inverse): 4 points; 8
   (em_fftp_bf8); 16 as 4 x 4 (four 4-point DFTs of the inputs k2, 4 + k2, .., twiddles
   W_16^(j1 k2), four 4-point DFTs over k2 give X[j1 + 4 j2]); unrolled, so v and o stay in
   registers (a loop kept them on the stack) */
static inline __attribute__((always_inline)) void EM_T(em_fftk_dftw)(CZ *v, CZ *o, ELT sg, const int h) {
    if (h == 4) {
        EM_T(em_fftp_dft4)(&v[0], &v[1], &v[2], &v[3], sg);
        for (int k = 0; k < 4; ++k) o[k] = v[k];
    } else if (h == 8) {
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
/* the first stage's twiddles (radix h: CW, or CW / 2 for pair blocks): tv[p0 + j] lane l = W_m^(j (p0
   + l % h)) (direction sg), for the groups p0 of h of the m / h butterflies (j = 0 entries unused;
   lanes past the last butterfly: 1) */
static void EM_T(em_fftk_twv)(CZ *tv, int64_t m, const SZ *tw, ELT sg, const int h) {
    const int64_t n1 = m / h;
    for (int64_t p0 = 0; p0 < n1; p0 += h)
        for (int j = 0; j < h; ++j)
            for (int l = 0; l < CW; ++l) {
                const int64_t p = p0 + l % h;
                const SZ w = tw[p < n1 ? j * p : 0];
                tv[p0 + j].re[l] = w.re; tv[p0 + j].im[l] = sg * w.im;
            }
}
/* the first stage's butterflies p0 .. p0 + h - 1 (radix h, length m, stride 1) of their inputs v
   (v[k] lane l: point p0 + l % h + k m / h, of the pair's second line from lane h on when h < CW)
   into the blocks y[p0 ..] (h x h transposes: block p0 + l lane j + c h = output j of butterfly p0 +
   l of line c) */
static inline __attribute__((always_inline)) void EM_T(em_fftk_group)(CZ *v, CZ *y, int64_t p0, const CZ *tv, ELT sg,
                                                                      const int h) {
    CZ o[CW];
    EM_T(em_fftk_dftw)(v, o, sg, h);
    CV re[CW], im[CW];
    re[0] = o[0].re; im[0] = o[0].im;
    EM_FFTK_UNROLL16 for (int j = 1; j < h; ++j) {
        const CZ t = EM_T(em_czmulv)(o[j], tv[p0 + j]);
        re[j] = t.re; im[j] = t.im;
    }
    EM_T(em_fftc_transpose_h)(re, h);
    EM_T(em_fftc_transpose_h)(im, h);
    EM_FFTK_UNROLL16 for (int l = 0; l < h; ++l) { y[p0 + l].re = re[l]; y[p0 + l].im = im[l]; }
}
/* the first stage (radix h, length m, stride 1) from the row src (interleaved; null: from the
   blocks xb, m a multiple of CW^2, h = CW) into the blocks y. h = CW: one line; h = CW / 2: a pair
   of lines, the second at src + db (db ELT on; the lanes from h on). When h does not divide the m /
   h butterflies, the last group's lanes past them are padding: read from the row's next points (the
   last input from a copy of the row's end: nothing past the row is read), written to blocks past
   the line's (y has room for them), never read. */
static inline __attribute__((always_inline)) void EM_T(em_fftk_first)(const ELT *src, int64_t db, const CZ *xb, CZ *y,
                                                                      int64_t m, const CZ *tv, ELT sg, const int h) {
    const int64_t n1 = m / h;
    int64_t p0 = 0;
    for (; p0 + h <= n1; p0 += h) {
        CZ v[CW];
        EM_FFTK_UNROLL16 for (int k = 0; k < h; ++k)  /* (no arithmetic on a null src) */
            v[k] = src ? EM_T(em_fftk_deal2)(src + 2 * (p0 + k * n1), src + 2 * (p0 + k * n1) + db)
                       : xb[(p0 + k * n1) / CW];
        EM_T(em_fftk_group)(v, y, p0, tv, sg, h);
    }
    if (p0 < n1) {  /* (src only) */
        CZ v[CW];
        ELT e[2 * CW] = {0};
        for (int k = 0; k < h - 1; ++k) {
            const ELT *a = src + 2 * (p0 + k * n1);
            v[k] = EM_T(em_fftk_deal2)(a, a + db);
        }
        const ELT *a = src + 2 * (p0 + (h - 1) * n1);
        const size_t nbytes = (size_t)(2 * (n1 - p0)) * sizeof(ELT);
        memcpy(e, a, nbytes);
        if (h < CW) memcpy(e + CW, a + db, nbytes);
        v[h - 1] = EM_T(em_fftk_deal)(e);
        EM_T(em_fftk_group)(v, y, p0, tv, sg, h);
    }
}
/* the transform of one line (first stage from src or xb into b1, the rest on b1 / b0: a power of
   two's (rad null) or the stages rad[0 .. nr) of a 2-3-5 length) down to the stage at length nend
   (1: all of them; else that last stage's radix, left to em_fftk_last): returns the buffer of
   blocks holding it */
static inline __attribute__((always_inline)) CZ *EM_T(em_fftk_line)(const ELT *src, int64_t db, const CZ *xb, CZ *b0,
                                                                     CZ *b1, int64_t m, const SZ *tw, const CZ *tv, ELT sg,
                                                                     int64_t nend, const int8_t *rad, int nr, const int h) {
    EM_T(em_fftk_first)(src, db, xb, b1, m, tv, sg, h);
    if (rad) return EM_T(em_fftp_stages)(b1, b0, m, m / h, 1, rad, nr - (nend > 1), tw, sg);
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
   stride), the upper half of each block's lanes db ELT after the lower (CW: adjacent; a pair
   block: the second line) */
static inline __attribute__((always_inline)) void EM_T(em_fftk_last2)(const CZ *x, int64_t nb, const int r, ELT *d,
                                                                      int64_t os, int64_t db, ELT scale, ELT sg) {
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
        for (int k = 0; k < r; ++k) {
            ELT *a = d + os * (q + s * k);
            EM_T(em_fftk_undeal2)(a, a + db, o[k].re * scale, o[k].im * scale);
        }
    }
}
static inline __attribute__((always_inline)) void EM_T(em_fftk_last)(const CZ *x, int64_t nb, const int r, ELT *d,
                                                                     int64_t os, ELT scale, ELT sg) {
    EM_T(em_fftk_last2)(x, nb, r, d, os, CW, scale, sg);
}
/* one line (h = CW) or a pair (h = CW / 2: the second line db ELT after src, its result dd after d)
   from src or xb through the last stage into d (interleaved) times scale */
static inline __attribute__((always_inline)) void EM_T(em_fftk_line_out)(const ELT *src, int64_t db, const CZ *xb, CZ *b0,
                                                                         CZ *b1, int64_t m, const SZ *tw, const CZ *tv,
                                                                         ELT sg, ELT *d, int64_t dd, ELT scale,
                                                                         const int8_t *rad, int nr, const int h) {
    const int64_t nb = m / h, r = EM_T(em_fftk_lastr)(nb, rad, nr), os = 2 * h;
    const CZ *x = EM_T(em_fftk_line)(src, db, xb, b0, b1, m, tw, tv, sg, r, rad, nr, h);
    if (r == 8) EM_T(em_fftk_last2)(x, nb, 8, d, os, dd, scale, sg);
    else if (r == 4) EM_T(em_fftk_last2)(x, nb, 4, d, os, dd, scale, sg);
    else if (r == 5) EM_T(em_fftk_last2)(x, nb, 5, d, os, dd, scale, sg);
    else if (r == 3) EM_T(em_fftk_last2)(x, nb, 3, d, os, dd, scale, sg);
    else EM_T(em_fftk_last2)(x, nb, 2, d, os, dd, scale, sg);
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
    int pair;  /* lines go through two at a time in pair blocks (em_fftk_fits returned 2) */
    int64_t lines;
    /* tvd[tid]: thread tid's first-stage twiddles are in its scratch already (built by its first
       chunk of this call: a job runs 4 chunks per thread, and the twiddles cost about as much as
       a line's transform at 1024 points) */
    volatile int8_t tvd[64];
} EM_T(em_fftk_job);
/* whether the line kernel takes a job of (half-)length m (fac: its factors, null for a power of
   two): 1 for a multiple of CW (whole blocks) from CW^2 (a power of two: the first stage's
   butterflies fill whole CW x CW blocks; other lengths pad the last group) to EM_FFTK_MAX points
   whose odd factors are 3s and 5s, rows of a complex last axis or a real one through the
   half-length line; 2 (pair blocks: two lines at once, CW / 2 points of each per block) for those
   rows (not the inverse real transform's) whose 2-3-5 length from CW^2 / 2 is a multiple of CW / 2
   but not of CW (CW >= 8); else 0 */
static inline int EM_T(em_fftk_fits)(const EM_T(em_fft_job) *j, int64_t m, const int32_t *fac) {
    const int pair = m % CW != 0;
    if (m > EM_FFTK_MAX || !(j->kind == 0 ? j->inner == 1 : j->half)) return 0;
    if (pair ? (!fac || CW < 8 || j->kind == 2 || m % (CW / 2) || 2 * m < CW * CW) : m < CW * CW) return 0;
    if (fac)
        for (int64_t q = m, i = 0; q > 1; q /= fac[i++])
            if (fac[i] > 5) return 0;
    return 1 + pair;
}
/* the real transform's spectrum from its half-length line z (nb blocks of h bins; h = CW / 2: a pair,
   the second line's bins from lane h on): bins k of 2 X = E + W^k O (em_fftc_split), halved, to d
   (m + 1 bins, interleaved; the pair's second line dd ELT after it), rt[k] = exp(-i pi k / m) */
static inline __attribute__((always_inline)) void EM_T(em_fftk_split)(const CZ *z, int64_t nb, int64_t m, const SZ *rt,
                                                                      ELT *d, int64_t dd, const int h) {
    const ELT half = (ELT)0.5;
    for (int64_t b = 0; b < nb; ++b) {
        const CZ a = z[b], na = z[b ? nb - b : 0], nbm = z[nb - b - 1];
        CV br, bi;
        EM_T(em_fftk_mirror)(&na.re, &nbm.re, &br, h);
        EM_T(em_fftk_mirror)(&na.im, &nbm.im, &bi, h);
        const ELT *tp = (const ELT *)(rt + b * h);
        const CZ t = EM_T(em_fftk_deal2)(tp, h < CW ? tp : tp + CW);
        const CV er = a.re + br, ei = a.im - bi, orr = a.im + bi, oi = br - a.re;
        ELT *o = d + 2 * h * b;
        EM_T(em_fftk_undeal2)(o, o + dd, half * (er + orr * t.re - oi * t.im), half * (ei + orr * t.im + oi * t.re));
    }
    for (int c = 0; c < CW; c += h) {  /* X_m = Re Z_0 - Im Z_0 */
        ELT *o = d + (c ? dd : 0);
        o[2 * m] = z[0].re[c] - z[0].im[c];
        o[2 * m + 1] = 0;
    }
}
/* lines [lo, hi) of the job (h = CW), or the pairs of lines 2 l, 2 l + 1 (h = CW / 2; an odd count's
   last line is paired with itself); thread tid's scratch: two line buffers and the first stage's
   twiddles (m / h blocks each, the second and third rounded up to whole groups of h; a fourth for
   the inverse real transform's merged line: blocks, or interleaved when the groups are padded) */
static inline __attribute__((always_inline)) void EM_T(em_fftk_lines)(void *c, int64_t lo, int64_t hi, int64_t tid,
                                                                      const int h) {
    const EM_T(em_fftk_job) *kj = (const EM_T(em_fftk_job) *)c;
    const EM_T(em_fft_job) *j = kj->j;
    const int64_t m = kj->m, nb = m / h, nbp = (nb + h - 1) / h * h;  /* (nbp: the padded groups) */
    const ELT sg = (j->kind == 2 || (j->kind == 0 && j->p->inv)) ? (ELT)-1 : (ELT)1;
    CZ *b0 = (CZ *)(j->scratch + tid * j->stride), *b1 = b0 + nb, *tv = b1 + nbp, *xb = tv + nbp;
    const SZ *rt = kj->tw + m;
    if (tid >= 64 || !kj->tvd[tid]) {  /* (no two chunks of one tid run at once: em_par) */
        EM_T(em_fftk_twv)(tv, m, kj->tw, sg, h);
        if (tid < 64) ((EM_T(em_fftk_job) *)c)->tvd[tid] = 1;
    }
    if (h < CW) {  /* pairs (kinds 0 and 1) */
        const ELT scale = (ELT)j->scale;
        for (int64_t l = lo; l < hi; ++l) {
            const int64_t la = 2 * l, two = la + 1 < kj->lines, off = 2 * m * two;  /* (ELT from line la to its partner) */
            if (j->kind == 0)
                EM_T(em_fftk_line_out)(j->src + 2 * la * m, off, 0, b0, b1, m, kj->tw, tv, sg, j->dst + 2 * la * m, off,
                                       scale, kj->rad, kj->nr, h);
            else
                EM_T(em_fftk_split)(EM_T(em_fftk_line)(j->src + 2 * la * m, off, 0, b0, b1, m, kj->tw, tv, sg, 1, kj->rad,
                                                       kj->nr, h),
                                    nb, m, rt, j->dst + 2 * la * (m + 1), 2 * (m + 1) * two, h);
        }
        return;
    }
    for (int64_t l = lo; l < hi; ++l) {
        if (j->kind == 0) {
            const ELT scale = (ELT)j->scale;
            EM_T(em_fftk_line_out)(j->src + 2 * l * m, CW, 0, b0, b1, m, kj->tw, tv, sg, j->dst + 2 * l * m, CW, scale,
                                   kj->rad, kj->nr, CW);
        } else if (j->kind == 1) {
            EM_T(em_fftk_split)(EM_T(em_fftk_line)(j->src + 2 * l * m, CW, 0, b0, b1, m, kj->tw, tv, sg, 1, kj->rad,
                                                   kj->nr, CW),
                                nb, m, rt, j->dst + 2 * l * (m + 1), CW, CW);
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
            if (nbp == nb)
                EM_T(em_fftk_line_out)(0, CW, xb, b0, b1, m, kj->tw, tv, sg, j->dst + 2 * l * m, CW, scale, kj->rad, kj->nr,
                                       CW);
            else
                EM_T(em_fftk_line_out)((const ELT *)xb, CW, 0, b0, b1, m, kj->tw, tv, sg, j->dst + 2 * l * m, CW, scale,
                                       kj->rad, kj->nr, CW);
        }
    }
}
static EM_TASK_ATTR void EM_T(em_fftk_task)(void *c, int64_t lo, int64_t hi, int64_t tid) {
    EM_T(em_fftk_lines)(c, lo, hi, tid, CW);
}
static EM_TASK_ATTR void EM_T(em_fftk_task2)(void *c, int64_t lo, int64_t hi, int64_t tid) {
    EM_T(em_fftk_lines)(c, lo, hi, tid, CW / 2);
}
/* run job j (em_fftk_fits gave fit: 2 in pairs of lines; fac as there) over its lines with table tw,
   on the pool when par */
static void EM_T(em_fftk_run)(const EM_T(em_fft_job) *j, int64_t m, const SZ *tw, const int32_t *fac, int64_t lines,
                              int par, int64_t nt, int fit) {
    int8_t rad[64];
    int lg = 0;
    while ((1 << lg) < (fit == 2 ? CW / 2 : CW)) ++lg;
    EM_T(em_fftk_job) kj = {j, tw, m, fac ? rad : 0, fac ? em_fftp_merge15(rad, em_fftp_radices(fac, m, lg, rad)) : 0,
                            fit == 2, lines, {0}};
    const int64_t units = fit == 2 ? (lines + 1) / 2 : lines;
    void (*task)(void *, int64_t, int64_t, int64_t) = fit == 2 ? EM_T(em_fftk_task2) : EM_T(em_fftk_task);
    if (par && nt > 1 && units > 1) em_par(task, &kj, units, nt, nt, -4);
    else task(&kj, 0, units, 0);
}
#undef CW
#undef CV
#undef CI
#undef CZ
#undef SZ
