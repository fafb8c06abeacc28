/* The fft step's lines in the operand's own precision, CW at a time (native/emit/fft.py): the one
   FFT kernel of every fft step. Included per precision with ELT, ELTI and EM_T(name) defined, after
   fft_passes.h (the Stockham passes: em_fftp_fft for powers of two, em_fftp_mixed over a plan's
   factors), fft_conv.h (register transposes em_fftc_load / em_fftc_store, real split and merge,
   and the twiddle cache by log2 length) and fft_typed.h (the job). CW lines per vector (16 floats
   or 8 doubles with AVX-512, else 8 or 4): a power of two by em_fftp_fft, other lengths whose prime
   factors are at most EM_FFT_PMAX (64) by em_fftp_mixed (radix 8, 4, 2, 3, 5 and odd primes), any
   other length by Bluestein over those (its convolution length is 2-3-5-smooth); few long
   power-of-two lines by the four-step path below. Twiddles are computed in double and rounded
   once. */
#define CW EM_T(em_cw)
#define CV EM_T(em_cv)
#define CI EM_T(em_ci)
#define CZ EM_T(em_cz)
#define SZ EM_T(em_fftc_sz)
_Static_assert(sizeof(CZ) <= sizeof(em_vz), "a lane line fits the double path's scratch");
typedef struct {
    const EM_T(em_fft_job) *j;
    const SZ *tw, *rt;  /* twiddles exp(-2 pi i j / m), j < m; the real split's exp(-i pi k / m), k <= m */
    int64_t m;          /* the transform length */
    const int32_t *fac;  /* mixed radix: the plan's factors (4, 2, 3, 5); null: a power of two */
    int64_t m2;          /* Bluestein: the convolution length (factors fac), else 0 */
    const SZ *chirp, *bf;  /* Bluestein: the chirp (m entries) and the filter's transform (m2) */
    int64_t buf;         /* CZ entries of each line buffer (the second at b0 + buf) */
    int64_t rl;          /* complex rows (kind 0, inner 1; a mixed length: kind 2 too): the radix of the
                            last stage em_fftl_clast fuses into the store, or 1 */
    int8_t rad[64];      /* mixed radix: the stage radices in order (em_fftl_order) */
    int nr;              /* ... and their count */
    int rf;              /* mixed radix: the first stage (rad[0]) reads the rows (em_fftl_first) */
} EM_T(em_fftl_job);
/* the job's transform of x[0..m) (y scratch; both of lj->buf entries): a power of two by em_fftp_fft,
   else mixed radix, else Bluestein (the chirp carries the direction: sg unused) as the cyclic
   convolution of length m2 of x times the chirp with the chirp filter, by two mixed-radix
   transforms */
static CZ *EM_T(em_fftl_line)(const EM_T(em_fftl_job) *lj, CZ *x, CZ *y, ELT sg) {
    if (!EM_FFTG_ON(EM_FFTG_MIXED | EM_FFTG_BLUE) || (EM_FFTG_ON(EM_FFTG_P2) && !lj->fac))
        return EM_T(em_fftp_fft)(x, y, lj->m, lj->tw, sg, 0);
    if (!EM_FFTG_ON(EM_FFTG_BLUE) || !lj->m2) return EM_T(em_fftp_stages)(x, y, lj->m, lj->m, 1, lj->rad, lj->nr, lj->tw, sg);
    const int64_t m = lj->m, m2 = lj->m2;
    const CV zero = {0};
    for (int64_t k = 0; k < m; ++k) x[k] = EM_T(em_czmul)(x[k], lj->chirp[k]);
    for (int64_t k = m; k < m2; ++k) { x[k].re = zero; x[k].im = zero; }
    CZ *z = EM_T(em_fftp_mixed)(x, y, m2, lj->fac, lj->tw, 1);
    for (int64_t k = 0; k < m2; ++k) z[k] = EM_T(em_czmul)(z[k], lj->bf[k]);
    CZ *r = EM_T(em_fftp_mixed)(z, z == x ? y : x, m2, lj->fac, lj->tw, -1);
    const ELT s = (ELT)(1.0 / (double)m2);
    for (int64_t k = 0; k < m; ++k) {
        SZ c = lj->chirp[k];
        c.re *= s; c.im *= s;
        r[k] = EM_T(em_czmul)(r[k], c);
    }
    return r;
}
/* the first Stockham stage (radix r: 8, 5, 4, 3 or 2; length m, stride 1) read from the CW rows
   (complex elements, rows[r] + 2j; none null) into y: the r tiles p0 + k m / r of hb = CW / 2
   butterflies each (m / r a multiple of hb) through register transposes, so no loaded line goes
   through memory */
static inline __attribute__((always_inline)) void EM_T(em_fftl_first)(const ELT *const *rows, int64_t m, CZ *y,
                                                                      const SZ *tw, const int r, ELT sg) {
    enum { hb = CW / 2 };
    const int64_t n1 = m / r;
    for (int64_t p0 = 0; p0 < n1; p0 += hb) {
        CZ lb[8][hb];
        for (int k = 0; k < r; ++k) EM_T(em_fftc_tile_in)(rows, p0 + k * n1, lb[k], 1);
        for (int jj = 0; jj < hb; ++jj) {
            const int64_t p = p0 + jj;
            SZ w[8];
            for (int k = 1; k < r; ++k) { w[k] = tw[k * p]; w[k].im *= sg; }
            if (r == 8) {
                EM_T(em_fftp_bf8)(&lb[0][jj], hb, y + 8 * p, 1, w, p != 0, sg, 0);
                continue;
            }
            CZ v[5];
            for (int k = 0; k < r; ++k) v[k] = lb[k][jj];
            EM_DFT_SMALL(v, r, sg, CV, ELT);
            y[r * p] = v[0];
            for (int k = 1; k < r; ++k) y[r * p + k] = p ? EM_T(em_czmul)(v[k], w[k]) : v[k];
        }
    }
}
/* the job's transform of the CW rows' lines (complex elements, rows[r] + 2j, c values a row; no
   row null: a partial group's lanes past its rows repeat its first row, transformed and never
   stored -- lanes do not mix) into b0 / b1 (returns the one holding it), stopping before the
   stage at length nend (1: none left; else the last stage's radix, left to the caller: see
   em_fftl_clast, em_fftl_rlast). A power of two m >= 4 CW, and a mixed length whose plan says so
   (rf), read the rows straight into the first stage (em_fftl_first); other lengths (nend 1 unless
   mixed) load the line, then transform. */
static CZ *EM_T(em_fftl_load_line)(const EM_T(em_fftl_job) *lj, const ELT *const *rows, int64_t c, CZ *b0, CZ *b1,
                                   ELT sg, int64_t nend) {
    const int64_t m = lj->m;
    if (EM_FFTG_ON(EM_FFTG_MIXED) && lj->fac && !lj->m2) {
        const int last = nend > 1;
        if (!lj->rf) {
            EM_T(em_fftc_load)(rows, c, m, b0, 1);
            return EM_T(em_fftp_stages)(b0, b1, m, m, 1, lj->rad, lj->nr - last, lj->tw, sg);
        }
        const int r = lj->rad[0];
        if (r == 8) EM_T(em_fftl_first)(rows, m, b1, lj->tw, 8, sg);
        else if (r == 5) EM_T(em_fftl_first)(rows, m, b1, lj->tw, 5, sg);
        else if (r == 4) EM_T(em_fftl_first)(rows, m, b1, lj->tw, 4, sg);
        else if (r == 3) EM_T(em_fftl_first)(rows, m, b1, lj->tw, 3, sg);
        else EM_T(em_fftl_first)(rows, m, b1, lj->tw, 2, sg);
        return EM_T(em_fftp_stages)(b1, b0, m, m / r, r, lj->rad + 1, lj->nr - 1 - last, lj->tw, sg);
    }
    if (!EM_FFTG_ON(EM_FFTG_P2R) || lj->fac || m < 4 * CW) {  /* (nend 1 only) */
        EM_T(em_fftc_load)(rows, c, m, b0, 1);
        return EM_T(em_fftl_line)(lj, b0, b1, sg);
    }
    EM_T(em_fftl_first)(rows, m, b1, lj->tw, 8, sg);
    return EM_T(em_fftp_fft_to)(b1, b0, m, m / 8, 8, lj->tw, sg, 0, nend);
}
static inline __attribute__((always_inline)) void EM_T(em_fftl_clast)(const CZ *x, int64_t m, const int r, ELT *out,
                                                                      int w, int64_t co, ELT scale, ELT sg);
/* the fused last stage's store of the lines x (radix r = lj->rl: 8 or 4, and 5, 3 or 2 for a
   mixed length) to rows i < w of out (stride co) times scale */
static void EM_T(em_fftl_store_last)(const EM_T(em_fftl_job) *lj, const CZ *x, ELT *out, int w, int64_t co, ELT scale,
                                     ELT sg) {
    const int64_t m = lj->m, r = lj->rl;
    if (r == 8) EM_T(em_fftl_clast)(x, m, 8, out, w, co, scale, sg);
    else if (r == 4) EM_T(em_fftl_clast)(x, m, 4, out, w, co, scale, sg);
    else if (EM_FFTG_ON(EM_FFTG_MIXED) && r == 5) EM_T(em_fftl_clast)(x, m, 5, out, w, co, scale, sg);
    else if (EM_FFTG_ON(EM_FFTG_MIXED) && r == 3) EM_T(em_fftl_clast)(x, m, 3, out, w, co, scale, sg);
    else if (EM_FFTG_ON(EM_FFTG_MIXED) && r == 2) EM_T(em_fftl_clast)(x, m, 2, out, w, co, scale, sg);
    else EM_FFTG_MISSED();
}
/* kind 0: groups [g0, g1) of CW lines along the middle axis of a complex (outer, m, inner) array */
static void EM_T(em_fftl_axis)(const EM_T(em_fftl_job) *lj, CZ *b0, CZ *b1, int64_t g0, int64_t g1) {
    const EM_T(em_fft_job) *j = lj->j;
    const int64_t m = lj->m, inner = j->inner, lines = j->outer * inner;
    const ELT sg = j->p->inv ? (ELT)-1 : (ELT)1, scale = (ELT)j->scale;
    const CV zero = {0};
    for (int64_t g = g0; g < g1; ++g) {
        const int64_t l0 = g * CW;
        const int w = lines - l0 < CW ? (int)(lines - l0) : CW;
        if (inner == 1) {
            const ELT *rows[CW];
            for (int r = 0; r < CW; ++r) rows[r] = j->src + 2 * (l0 + (r < w ? r : 0)) * m;  /* (em_fftc_tile_in) */
            const int64_t rl = EM_FFTG_ON(EM_FFTG_P2R | EM_FFTG_MIXED) ? lj->rl : 1;
            const CZ *res = EM_T(em_fftl_load_line)(lj, rows, 2 * m, b0, b1, sg, rl);
            if (rl != 1) EM_T(em_fftl_store_last)(lj, res, j->dst + 2 * l0 * m, w, 2 * m, scale, sg);
            else EM_T(em_fftc_store)(res, j->dst + 2 * l0 * m, w, 2 * m, scale);
            continue;
        }
        /* columns: line l0 + r starts at complex (l / inner) * m * inner + l % inner, stride inner */
        const int64_t o = l0 / inner, i0 = l0 % inner, st = 2 * inner;
        const int adj = w == CW && i0 + CW <= inner;  /* CW adjacent columns of one block */
        const ELT *s0 = j->src + 2 * (o * m * inner + i0);
        if (adj && EM_FFTG_ON(EM_FFTG_P2) && !lj->fac && !lj->m2 && m >= 32) {
            /* CW adjacent power-of-two columns: the first radix-8 stage reads them, the last stage
               (em_fftk_last) writes them: no pass over a loaded or a transformed line */
            const int64_t n1 = m / 8, rl = EM_T(em_fftk_lastr)(n1, 0, 0);
            for (int64_t p = 0; p < n1; ++p) {
                CZ lb[8];
                SZ w[8];
                for (int k = 0; k < 8; ++k) lb[k] = EM_T(em_fftk_deal)(s0 + (p + k * n1) * st);
                for (int k = 1; k < 8; ++k) { w[k] = lj->tw[k * p]; w[k].im *= sg; }
                EM_T(em_fftp_bf8)(lb, 1, b1 + 8 * p, 1, w, p != 0, sg, 0);
            }
            const CZ *x = EM_T(em_fftp_fft_to)(b1, b0, m, n1, 8, lj->tw, sg, 0, rl);
            ELT *d0 = j->dst + 2 * (o * m * inner + i0);
            if (rl == 8) EM_T(em_fftk_last)(x, m, 8, d0, st, scale, sg);
            else EM_T(em_fftk_last)(x, m, 4, d0, st, scale, sg);
            continue;
        }
        if (adj) {
            for (int64_t k = 0; k < m; ++k) b0[k] = EM_T(em_fftk_deal)(s0 + k * st);
        } else {
            for (int64_t k = 0; k < m; ++k) { b0[k].re = zero; b0[k].im = zero; }
            for (int r = 0; r < w; ++r) {
                const int64_t l = l0 + r;
                const ELT *s = j->src + 2 * ((l / inner) * m * inner + l % inner);
                for (int64_t k = 0; k < m; ++k) { b0[k].re[r] = s[k * st]; b0[k].im[r] = s[k * st + 1]; }
            }
        }
        const CZ *res = EM_T(em_fftl_line)(lj, b0, b1, sg);
        if (adj) {
            ELT *d0 = j->dst + 2 * (o * m * inner + i0);
            for (int64_t k = 0; k < m; ++k) EM_T(em_fftk_undeal)(d0 + k * st, res[k].re * scale, res[k].im * scale);
        } else {
            for (int r = 0; r < w; ++r) {
                const int64_t l = l0 + r;
                ELT *d = j->dst + 2 * ((l / inner) * m * inner + l % inner);
                for (int64_t k = 0; k < m; ++k) { d[k * st] = res[k].re[r] * scale; d[k * st + 1] = res[k].im[r] * scale; }
            }
        }
    }
}
/* the last Stockham stage of column q (radix r = 8 or 4; 5, 3 or 2 for a mixed length; stride s = m / r, no twiddles): y[j os] = Z_(q + s j),
   the r-point DFT of x[q + s k] */
static inline __attribute__((always_inline)) void EM_T(em_fftl_last_col)(const CZ *x, int64_t q, int64_t s, const int r,
                                                                          CZ *y, int64_t os, ELT sg) {
    if (r == 8) {
        const SZ w[8] = {{0, 0}};
        EM_T(em_fftp_bf8)(x + q, s, y, os, w, 0, sg, 0);
    } else if (r == 4) {
        CZ v[4] = {x[q], x[q + s], x[q + 2 * s], x[q + 3 * s]};
        EM_T(em_fftp_dft4)(&v[0], &v[1], &v[2], &v[3], sg);
        for (int k = 0; k < 4; ++k) y[k * os] = v[k];
    } else {  /* 5, 3, 2 (a mixed length) */
        CZ v[5];
        for (int k = 0; k < r; ++k) v[k] = x[q + k * s];
        EM_DFT_SMALL(v, r, sg, CV, ELT);
        for (int k = 0; k < r; ++k) y[k * os] = v[k];
    }
}
/* rows i < w of out (stride co) from bins k0 .. k0 + CW / 2 - 1 in t: one register transpose */
static inline __attribute__((always_inline)) void EM_T(em_fftl_tile_out)(const CZ *t, ELT *out, int w, int64_t co) {
    CV v[CW];
    for (int i = 0; i < CW / 2; ++i) { v[2 * i] = t[i].re; v[2 * i + 1] = t[i].im; }
    EM_T(em_fftc_transpose)(v);
    for (int i = 0; i < w; ++i) *(EM_T(em_cvu) *)(out + i * co) = v[i];
}
/* The complex rows' last Stockham stage fused into their store (as em_fftl_rlast without the real
   split): x holds the lines before that stage (radix r = 8 or 4, stride s = m / r >= CW / 2); blocks
   of hb = CW / 2 columns q0 .. q0 + hb - 1 go through it into r hb vectors (L1) and out as r tiles of
   hb bins q0 + s j (register transposes) to rows i < w of out (stride co = 2m) times scale: no pass
   over the transformed lines in memory. */
static inline __attribute__((always_inline)) void EM_T(em_fftl_clast)(const CZ *x, int64_t m, const int r, ELT *out,
                                                                      int w, int64_t co, ELT scale, ELT sg) {
    enum { hb = CW / 2 };
    const int64_t s = m / r;
    CZ lc[8][hb];
    for (int64_t q0 = 0; q0 < s; q0 += hb) {
        for (int i = 0; i < hb; ++i) EM_T(em_fftl_last_col)(x, q0 + i, s, r, &lc[0][i], hb, sg);
        for (int j = 0; j < r; ++j) {
            for (int i = 0; i < hb; ++i) { lc[j][i].re *= scale; lc[j][i].im *= scale; }
            EM_T(em_fftl_tile_out)(lc[j], out + 2 * (q0 + s * j), w, co);
        }
    }
}
/* staging rows for the fused stage's tiles: rows of co ELT spaced rs = co rounded up past a whole
   vector (whole cache lines, so rows a power of two long end a line apart and a block's tiles spread
   over the L1 sets), CW of them after the thread's two line buffers (its scratch: stride CZ from
   b0), or null when the scratch does not hold them (then the tiles go straight to the rows) */
static inline ELT *EM_T(em_fftl_staging)(const EM_T(em_fftl_job) *lj, CZ *b0, int64_t co, int64_t *rs) {
    *rs = (co + CW) / CW * CW;
    const int64_t need = 2 * lj->buf + (CW * *rs * (int64_t)sizeof(ELT) + (int64_t)sizeof(CZ) - 1) / (int64_t)sizeof(CZ);
    return need <= lj->j->stride ? (ELT *)(b0 + 2 * lj->buf) : 0;
}
/* The real split fused into the half-length transform's last stage (radix r, stride s = m / r >= CW):
   x holds the lines before that stage; rows i < w of out (row stride co = 2 (m + 1)) get the m + 1
   bins scale * em_fftc_split(Z, k). Bins k and m - k lie in columns q and s - q (q > 0), so blocks of
   hb = CW / 2 columns c0 .. c0 + hb - 1 (c0 = 1, 1 + hb, .. up to s / 2) and their mirrors s - c0 -
   hb + 1 .. s - c0 go through the last stage into 2 r hb vectors (L1), are split there in pairs and
   stored as 2 r tiles of hb bins (register transposes); the self-mirrored column s / 2 is in both
   blocks of the last pair (its bins stored twice, equal), column 0 (bins s j, j <= r) goes alone.
   The split of the mirror bin m - k reuses k's products: W^(m-k) = -conj W^k. r is 8 or 4 (the
   stages from m / 8 >= 4 on never end in a radix 2). */
static inline __attribute__((always_inline)) void EM_T(em_fftl_rlast)(const CZ *x, int64_t m, const int r, ELT *out,
                                                                      int w, int64_t co, ELT scale, const SZ *rt,
                                                                      ELT sg) {
    enum { hb = CW / 2 };
    const int64_t s = m / r;
    CZ lc[8][hb], lm[8][hb];
    for (int64_t c0 = 1; c0 + hb - 1 <= s / 2; c0 += hb) {
        const int64_t d0 = s - c0 - hb + 1;
        for (int i = 0; i < hb; ++i) {
            EM_T(em_fftl_last_col)(x, c0 + i, s, r, &lc[0][i], hb, sg);
            EM_T(em_fftl_last_col)(x, d0 + i, s, r, &lm[0][i], hb, sg);
        }
        for (int j = 0; j < r; ++j)
            for (int i = 0; i < hb; ++i) {  /* k = c0 + i + s j and m - k (lm[r - 1 - j][hb - 1 - i]) */
                CZ *pa = &lc[j][i], *pb = &lm[r - 1 - j][hb - 1 - i];
                const CZ a = *pa, b = *pb;
                const SZ t = rt[c0 + i + s * j];
                const CV er = a.re + b.re, ei = a.im - b.im, orr = a.im + b.im, oi = b.re - a.re;
                const CV pr = orr * t.re - oi * t.im, pi = orr * t.im + oi * t.re;
                pa->re = scale * (er + pr); pa->im = scale * (ei + pi);
                pb->re = scale * (er - pr); pb->im = scale * (pi - ei);
            }
        for (int j = 0; j < r; ++j) {
            EM_T(em_fftl_tile_out)(lc[j], out + 2 * (c0 + s * j), w, co);
            EM_T(em_fftl_tile_out)(lm[j], out + 2 * (d0 + s * j), w, co);
        }
    }
    CZ o[8];
    EM_T(em_fftl_last_col)(x, 0, s, r, o, 1, sg);
    for (int j = 0; j <= r; ++j) {
        const CZ z = EM_T(em_fftc_split)(o, j, r, rt[s * j]);
        for (int i = 0; i < w; ++i) {
            out[i * co + 2 * s * j] = scale * z.re[i];
            out[i * co + 2 * s * j + 1] = scale * z.im[i];
        }
    }
}
/* kind 1: real (outer, 2m) -> complex (outer, m + 1): the half-length transform of
   z_k = x_2k + i x_2k+1, split as it is stored (em_fftc_split gives 2 X_k): with its last stage
   (em_fftl_rlast) when the line is read into its first stage, that stage's stride is at least CW
   and a row's spectrum spans at most EM_FFTL_WAY bytes. Past that a block's r tiles, s bins apart
   in each row, fall into the same few L1 sets (rows a power of two apart too), and their partly
   written lines are evicted before the next block completes them: measured 12-14% slower than the
   staged store at n = 2048..16384, 5-7% faster at n = 512..1024. */
#ifndef EM_FFTL_CWAY
#define EM_FFTL_CWAY 8192  /* em_fftl_clast: complex rows up to this many bytes */
#endif
#ifndef EM_FFTL_MWAY
#define EM_FFTL_MWAY 8192  /* a mixed length's fused last stage (em_fftl_order): rows up to this many bytes */
#endif
#ifndef EM_FFTL_WAY
#define EM_FFTL_WAY 4096  /* one L1 way: tiles less than this apart map to different sets */
#endif
static void EM_T(em_fftl_rfft)(const EM_T(em_fftl_job) *lj, CZ *b0, CZ *b1, int64_t g0, int64_t g1) {
    const EM_T(em_fft_job) *j = lj->j;
    const int64_t m = lj->m, n = 2 * m;
    const SZ *rt = lj->rt;
    int64_t rl = 1;  /* the fused last stage's radix, or 1 */
    if (EM_FFTG_ON(EM_FFTG_P2R) && !lj->fac && m >= 4 * CW && 2 * m * (int64_t)sizeof(ELT) <= EM_FFTL_WAY) {
        int64_t q = m / 8;
        while (em_fftp_radix(q) != q) q /= em_fftp_radix(q);
        if (m / q >= CW && q > 2) rl = q;
    }
    int64_t rs;  /* (the staged store: the partly written lines of a block's tiles in misaligned rows
                    were evicted before the next block completed them: 45 -> 40 us at 64x1024) */
    ELT *stg = EM_T(em_fftl_staging)(lj, b0, 2 * (m + 1), &rs);
    for (int64_t g = g0; g < g1; ++g) {
        const int64_t r0 = g * CW;
        const int w = j->outer - r0 < CW ? (int)(j->outer - r0) : CW;
        const ELT *rows[CW];
        for (int r = 0; r < CW; ++r) rows[r] = j->src + (r0 + (r < w ? r : 0)) * n;  /* lanes past w: row r0's copies */
        const CZ *z = EM_T(em_fftl_load_line)(lj, rows, n, b0, b1, 1, rl);
        ELT *out = j->dst + r0 * 2 * (m + 1);
        if (rl != 1 && stg) {  /* the fused stage's tiles into the staging rows, then each row whole */
            if (EM_FFTG_ON(EM_FFTG_RL8) && rl == 8) EM_T(em_fftl_rlast)(z, m, 8, stg, CW, rs, (ELT)0.5, rt, 1);
            else if (EM_FFTG_ON(EM_FFTG_RL4) && rl == 4) EM_T(em_fftl_rlast)(z, m, 4, stg, CW, rs, (ELT)0.5, rt, 1);
            else EM_FFTG_MISSED();
            for (int i = 0; i < w; ++i) memcpy(out + i * 2 * (m + 1), stg + i * rs, (size_t)(2 * (m + 1)) * sizeof(ELT));
        }
        else if (EM_FFTG_ON(EM_FFTG_RL8) && rl == 8) EM_T(em_fftl_rlast)(z, m, 8, out, w, 2 * (m + 1), (ELT)0.5, rt, 1);
        else if (EM_FFTG_ON(EM_FFTG_RL4) && rl == 4) EM_T(em_fftl_rlast)(z, m, 4, out, w, 2 * (m + 1), (ELT)0.5, rt, 1);
        else if (EM_FFTG_ON(EM_FFTG_RSG) && rl == 1) EM_T(em_fftc_store_gen)(z, out, w, 2 * (m + 1), (ELT)0.5, rt, m);
        else EM_FFTG_MISSED();
    }
}
/* entry k of the CW rows (complex, rows[r] + 2k) */
static inline CZ EM_T(em_fftl_entry)(const ELT *const *rows, int64_t k) {
    CZ z;
    for (int r = 0; r < CW; ++r) { z.re[r] = rows[r][2 * k]; z.im[r] = rows[r][2 * k + 1]; }
    return z;
}
/* the inverse real transform's merged half-length spectrum z[k] = em_fftc_merge(h_k, h_(m-k), W^k),
   k < m, of the CW half-spectra rows (m + 1 complex entries; the imaginary parts of h_0 and h_m
   taken as zero), read from the rows as it is merged: blocks of CW / 2 entries k0 .. and their
   mirrors m - k0 - CW / 2 + 1 .. m - k0 through register transposes (em_fftc_tile_in), the few
   middle entries one at a time (no loaded copy of the spectrum, no pass over it) */
static void EM_T(em_fftl_load_merge)(const ELT *const *rows, int64_t m, const SZ *rt, CZ *z) {
    enum { hb = CW / 2 };
    const CV zero = {0};
    int64_t k0 = 0;
    for (; 2 * (k0 + hb - 1) < m; k0 += hb) {  /* every k of the block below its mirror m - k */
        CZ a[hb], b[hb];
        EM_T(em_fftc_tile_in)(rows, k0, a, 1);
        EM_T(em_fftc_tile_in)(rows, m - k0 - hb + 1, b, 1);
        if (k0 == 0) { a[0].im = zero; b[hb - 1].im = zero; }
        for (int i = 0; i < hb; ++i) {
            const int64_t k = k0 + i;
            z[k] = EM_T(em_fftc_merge)(a[i], b[hb - 1 - i], rt[k]);
            if (k) z[m - k] = EM_T(em_fftc_merge)(b[hb - 1 - i], a[i], rt[m - k]);
        }
    }
    for (int64_t k = k0; 2 * k <= m; ++k) {
        CZ a = EM_T(em_fftl_entry)(rows, k), b = EM_T(em_fftl_entry)(rows, m - k);
        if (k == 0) { a.im = zero; b.im = zero; }
        z[k] = EM_T(em_fftc_merge)(a, b, rt[k]);
        if (k && m - k != k) z[m - k] = EM_T(em_fftc_merge)(b, a, rt[m - k]);
    }
}
/* kind 2: Hermitian half-spectra (outer, m + 1) -> real (outer, 2m) times scale: the merged
   half-length spectrum's inverse holds x_2k + i x_2k+1; the imaginary parts of the DC and Nyquist
   bins are ignored (as NumPy's irfft) */
static void EM_T(em_fftl_irfft)(const EM_T(em_fftl_job) *lj, CZ *b0, CZ *b1, int64_t g0, int64_t g1) {
    const EM_T(em_fft_job) *j = lj->j;
    const int64_t m = lj->m, n = 2 * m;
    const SZ *rt = lj->rt;
    for (int64_t g = g0; g < g1; ++g) {
        const int64_t r0 = g * CW;
        const int w = j->outer - r0 < CW ? (int)(j->outer - r0) : CW;
        const ELT *rows[CW];
        for (int r = 0; r < CW; ++r) rows[r] = j->src + (r0 + (r < w ? r : 0)) * 2 * (m + 1);  /* (as em_fftl_rfft) */
        EM_T(em_fftl_load_merge)(rows, m, rt, b1);
        if (EM_FFTG_ON(EM_FFTG_MIXED) && lj->rl != 1) {  /* a mixed length: its last stage in the store */
            const CZ *res = EM_T(em_fftp_stages)(b1, b0, m, m, 1, lj->rad, lj->nr - 1, lj->tw, -1);
            EM_T(em_fftl_store_last)(lj, res, j->dst + r0 * n, w, n, (ELT)j->scale, -1);
            continue;
        }
        const CZ *res = EM_T(em_fftl_line)(lj, b1, b0, -1);
        EM_T(em_fftc_store)(res, j->dst + r0 * n, w, n, (ELT)j->scale);
    }
}
/* kinds 1 and 2 without the half-length split (an odd length m, or 2): the full complex transform
   of each real line (imaginary parts zero), its first m / 2 + 1 bins stored; the inverse extends
   each half-spectrum to its Hermitian line (the imaginary parts of bin 0 and, m even, bin m / 2
   ignored, as NumPy's irfft), transforms it and stores the real parts times scale. Rows past w
   repeat row r0 (as em_fftl_rfft), never stored. */
static void EM_T(em_fftl_full)(const EM_T(em_fftl_job) *lj, CZ *b0, CZ *b1, int64_t g0, int64_t g1) {
    const EM_T(em_fft_job) *j = lj->j;
    const int64_t m = lj->m, nh = m / 2 + 1;
    const CV zero = {0};
    for (int64_t g = g0; g < g1; ++g) {
        const int64_t r0 = g * CW;
        const int w = j->outer - r0 < CW ? (int)(j->outer - r0) : CW;
        if (j->kind == 1) {
            for (int64_t k = 0; k < m; ++k) b0[k].im = zero;
            for (int r = 0; r < CW; ++r) {
                const ELT *x = j->src + (r0 + (r < w ? r : 0)) * m;
                for (int64_t k = 0; k < m; ++k) b0[k].re[r] = x[k];
            }
            const CZ *z = m > 1 ? EM_T(em_fftl_line)(lj, b0, b1, 1) : b0;
            for (int r = 0; r < w; ++r) {
                ELT *o = j->dst + (r0 + r) * 2 * nh;
                for (int64_t k = 0; k < nh; ++k) { o[2 * k] = z[k].re[r]; o[2 * k + 1] = z[k].im[r]; }
            }
        } else {
            for (int r = 0; r < CW; ++r) {
                const ELT *h = j->src + (r0 + (r < w ? r : 0)) * 2 * nh;
                for (int64_t k = 0; k < nh; ++k) { b0[k].re[r] = h[2 * k]; b0[k].im[r] = h[2 * k + 1]; }
            }
            b0[0].im = zero;
            if (!(m & 1)) b0[nh - 1].im = zero;
            for (int64_t k = nh; k < m; ++k) { b0[k].re = b0[m - k].re; b0[k].im = -b0[m - k].im; }
            const CZ *z = m > 1 ? EM_T(em_fftl_line)(lj, b0, b1, -1) : b0;
            const ELT scale = (ELT)j->scale;
            for (int r = 0; r < w; ++r) {
                ELT *o = j->dst + (r0 + r) * m;
                for (int64_t k = 0; k < m; ++k) o[k] = z[k].re[r] * scale;
            }
        }
    }
}
static EM_TASK_ATTR void EM_T(em_fftl_task)(void *c, int64_t lo, int64_t hi, int64_t tid) {
    const EM_T(em_fftl_job) *lj = (const EM_T(em_fftl_job) *)c;
    const EM_T(em_fft_job) *j = lj->j;
    CZ *b0 = (CZ *)(j->scratch + tid * j->stride), *b1 = b0 + lj->buf;
    if (EM_FFTG_ON(EM_FFTG_AXIS) && j->kind == 0) EM_T(em_fftl_axis)(lj, b0, b1, lo, hi);
    else if (EM_FFTG_ON(EM_FFTG_FULL) && j->kind != 0 && !j->half) EM_T(em_fftl_full)(lj, b0, b1, lo, hi);
    else if (EM_FFTG_ON(EM_FFTG_RFFT) && j->kind == 1) EM_T(em_fftl_rfft)(lj, b0, b1, lo, hi);
    else if (EM_FFTG_ON(EM_FFTG_IRFFT) && j->kind == 2) EM_T(em_fftl_irfft)(lj, b0, b1, lo, hi);
    else EM_FFTG_MISSED();
}
/* Few lines (a power of two m = N1 N2 >= EM_FFTL_LONG, at most half as many lines as lanes, or
   fewer lines than lanes from m = 4096 on): the
   lanes hold columns of one line instead of CW lines (four-step FFT). Line x viewed as the N1 x N2
   matrix A[n1][n2] = x[N2 n1 + n2]: (1) the length-N1 transforms of its columns, CW adjacent columns
   per vector, each output times W_m^(n2 k1), into the N1 x N2 matrix T (row k1) in the scratch;
   (2) the length-N2 transforms of T's rows, CW rows per vector (register transposes in), give
   X[k1 + N1 k2]: CW adjacent outputs per vector, stored straight to the line. Both passes work on
   lines of at most N2 vectors (in L1/L2), not on one line of m vectors that would spread a single
   line's work over all CW lanes' worth of memory. */
#ifndef EM_FFTL_LONG
#define EM_FFTL_LONG 256  /* N1 >= 16 >= CW */
#endif
typedef struct {
    const EM_T(em_fft_job) *j;
    int lg1, lg2;
    const SZ *tw, *t1, *t2;  /* the tables of lengths m, N1, N2 (fft_conv's cache) */
    int64_t pl;  /* > 1: each line on this many threads (em_fftl_long_line_par) */
} EM_T(em_fftl_long_job);
/* lane l of lw[k1] = W^(l k1) */
static void EM_T(em_fftl_long_lw)(const EM_T(em_fftl_long_job) *lj, CZ *lw) {
    const int64_t n1 = (int64_t)1 << lj->lg1, mask = ((int64_t)1 << (lj->lg1 + lj->lg2)) - 1;
    const ELT sg = lj->j->p->inv ? (ELT)-1 : (ELT)1;
    for (int64_t k = 0; k < n1; ++k)
        for (int l = 0; l < CW; ++l) {
            const SZ w = lj->tw[(l * k) & mask];
            lw[k].re[l] = w.re; lw[k].im[l] = sg * w.im;
        }
}
/* step (1) for the column groups [g0, g1) (CW columns each) of line src into the matrix t */
static void EM_T(em_fftl_long_cols)(const EM_T(em_fftl_long_job) *lj, const ELT *src, CZ *b0, CZ *b1,
                                    const CZ *lw, ELT *t, int64_t g0, int64_t g1) {
    const int64_t n1 = (int64_t)1 << lj->lg1, n2 = (int64_t)1 << lj->lg2, mask = n1 * n2 - 1;
    const ELT sg = lj->j->p->inv ? (ELT)-1 : (ELT)1;
    const SZ *tw = lj->tw;
    for (int64_t c0 = g0 * CW; c0 < g1 * CW; c0 += CW) {
        for (int64_t k = 0; k < n1; ++k) b0[k] = EM_T(em_fftk_deal)(src + 2 * (n2 * k + c0));
        const CZ *r = EM_T(em_fftp_fft)(b0, b1, n1, lj->t1, sg, 0);
        for (int64_t k = 0; k < n1; ++k) {  /* times W^((c0 + l) k1) = W^(c0 k1) W^(l k1) */
            SZ w = tw[(c0 * k) & mask];
            w.im *= sg;
            const CZ v = EM_T(em_czmulv)(r[k], EM_T(em_czmul)(lw[k], w));
            EM_T(em_fftk_undeal)(t + 2 * (k * n2 + c0), v.re, v.im);
        }
    }
}
/* step (2) for the row groups [g0, g1) (CW rows of t each), stored to line dst */
static void EM_T(em_fftl_long_rows)(const EM_T(em_fftl_long_job) *lj, const ELT *t, ELT *dst, CZ *b0, CZ *b1,
                                    int64_t g0, int64_t g1) {
    const int64_t n1 = (int64_t)1 << lj->lg1, n2 = (int64_t)1 << lj->lg2;
    const ELT sg = lj->j->p->inv ? (ELT)-1 : (ELT)1, scale = (ELT)lj->j->scale;
    for (int64_t k0 = g0 * CW; k0 < g1 * CW; k0 += CW) {
        const ELT *rows[CW];
        for (int l = 0; l < CW; ++l) rows[l] = t + 2 * (k0 + l) * n2;
        EM_T(em_fftc_load)(rows, 2 * n2, n2, b0, 1);
        const CZ *r = EM_T(em_fftp_fft)(b0, b1, n2, lj->t2, sg, 0);
        for (int64_t k = 0; k < n2; ++k) EM_T(em_fftk_undeal)(dst + 2 * (k0 + n1 * k), r[k].re * scale, r[k].im * scale);
    }
}
static void EM_T(em_fftl_long_line)(const EM_T(em_fftl_long_job) *lj, const ELT *src, ELT *dst, CZ *b0, CZ *b1,
                                    CZ *lw, ELT *t) {
    EM_T(em_fftl_long_lw)(lj, lw);
    EM_T(em_fftl_long_cols)(lj, src, b0, b1, lw, t, 0, ((int64_t)1 << lj->lg2) / CW);
    EM_T(em_fftl_long_rows)(lj, t, dst, b0, b1, 0, ((int64_t)1 << lj->lg1) / CW);
}
/* One line on several threads (fewer lines than threads): each step's groups split between the
   threads, the matrix and the lane twiddles shared (thread 0's scratch), each thread's two line
   buffers its own; the pool's return is the barrier between the steps. */
typedef struct {
    const EM_T(em_fftl_long_job) *lj;
    const ELT *src; ELT *dst; const CZ *lw; ELT *t;
} EM_T(em_fftl_long_par);
static EM_TASK_ATTR void EM_T(em_fftl_long_cols_task)(void *c, int64_t lo, int64_t hi, int64_t tid) {
    const EM_T(em_fftl_long_par) *q = (const EM_T(em_fftl_long_par) *)c;
    const EM_T(em_fft_job) *j = q->lj->j;
    CZ *b0 = (CZ *)(j->scratch + tid * j->stride), *b1 = b0 + ((int64_t)1 << q->lj->lg2);
    EM_T(em_fftl_long_cols)(q->lj, q->src, b0, b1, q->lw, q->t, lo, hi);
}
static EM_TASK_ATTR void EM_T(em_fftl_long_rows_task)(void *c, int64_t lo, int64_t hi, int64_t tid) {
    const EM_T(em_fftl_long_par) *q = (const EM_T(em_fftl_long_par) *)c;
    const EM_T(em_fft_job) *j = q->lj->j;
    CZ *b0 = (CZ *)(j->scratch + tid * j->stride), *b1 = b0 + ((int64_t)1 << q->lj->lg2);
    EM_T(em_fftl_long_rows)(q->lj, q->t, q->dst, b0, b1, lo, hi);
}
static void EM_T(em_fftl_long_line_par)(const EM_T(em_fftl_long_job) *lj, const ELT *src, ELT *dst, CZ *lw,
                                        ELT *t, int64_t nt) {
    EM_T(em_fftl_long_lw)(lj, lw);
    EM_T(em_fftl_long_par) q = {lj, src, dst, lw, t};
    em_par(EM_T(em_fftl_long_cols_task), &q, ((int64_t)1 << lj->lg2) / CW, nt, nt, 1);
    em_par(EM_T(em_fftl_long_rows_task), &q, ((int64_t)1 << lj->lg1) / CW, nt, nt, 1);
}
/* lines [lo, hi) of the job, four-step; thread tid's scratch: two line buffers of N2 vectors, N1
   lane twiddles, the N1 x N2 complex matrix, then (real transforms) the half-length line. A real
   line (kind 1, length 2m) is the complex line z_k = x_2k + i x_2k+1 of length m, whose transform
   is split (em_fftc_split, one line's scalars) into the m + 1 bins; the inverse (kind 2) merges
   the half-spectrum first (the imaginary parts of its first and last bins ignored) */
/* one line, on lj->pl threads where that is more than one */
static void EM_T(em_fftl_long_one)(const EM_T(em_fftl_long_job) *lj, const ELT *src, ELT *dst, CZ *b0, CZ *b1,
                                   CZ *lw, ELT *t) {
    if (lj->pl > 1) EM_T(em_fftl_long_line_par)(lj, src, dst, lw, t, lj->pl);
    else EM_T(em_fftl_long_line)(lj, src, dst, b0, b1, lw, t);
}
static EM_TASK_ATTR void EM_T(em_fftl_long_task)(void *c, int64_t lo, int64_t hi, int64_t tid) {
    const EM_T(em_fftl_long_job) *lj = (const EM_T(em_fftl_long_job) *)c;
    const EM_T(em_fft_job) *j = lj->j;
    const int64_t n1 = (int64_t)1 << lj->lg1, n2 = (int64_t)1 << lj->lg2, m = n1 * n2;
    CZ *b0 = (CZ *)(j->scratch + tid * j->stride), *b1 = b0 + n2, *lw = b1 + n2;
    ELT *t = (ELT *)(lw + n1);
    SZ *z = (SZ *)(t + 2 * m);
    const SZ *rt = lj->tw + m;
    for (int64_t l = lo; l < hi; ++l) {
        if (EM_FFTG_ON(EM_FFTG_AXIS) && j->kind == 0) {
            EM_T(em_fftl_long_one)(lj, j->src + 2 * l * m, j->dst + 2 * l * m, b0, b1, lw, t);
        } else if (EM_FFTG_ON(EM_FFTG_RFFT) && j->kind == 1) {
            EM_T(em_fftl_long_one)(lj, j->src + 2 * l * m, (ELT *)z, b0, b1, lw, t);
            SZ *x = (SZ *)(j->dst + 2 * l * (m + 1));
            for (int64_t k = 0; k <= m; ++k) {  /* X_k = E_k + W^k O_k (em_fftc_split, halved) */
                const SZ a = z[k == m ? 0 : k], b = z[k == 0 ? 0 : m - k], w = rt[k];
                const ELT er = a.re + b.re, ei = a.im - b.im, orr = a.im + b.im, oi = b.re - a.re;
                x[k].re = (ELT)0.5 * (er + orr * w.re - oi * w.im); x[k].im = (ELT)0.5 * (ei + orr * w.im + oi * w.re);
            }
        } else if (EM_FFTG_ON(EM_FFTG_IRFFT) && j->kind == 2) {
            const SZ *h = (const SZ *)(j->src + 2 * l * (m + 1));
            for (int64_t k = 0; k < m; ++k) {  /* Z_k = E_k + i O_k (em_fftc_merge) */
                SZ a = h[k], b = h[m - k];
                const SZ w = rt[k];
                if (k == 0) { a.im = 0; b.im = 0; }
                const ELT er = a.re + b.re, ei = a.im - b.im, dr = a.re - b.re, di = a.im + b.im;
                const ELT orr = dr * w.re + di * w.im, oi = di * w.re - dr * w.im;
                z[k].re = er - oi; z[k].im = ei + orr;
            }
            EM_T(em_fftl_long_one)(lj, (const ELT *)z, j->dst + 2 * l * m, b0, b1, lw, t);
        } else {
            EM_FFTG_MISSED();
        }
    }
}
/* run a job of power-of-two (half-)length m = 2^lg (an axis: inner 1; few lines) four-step; 0 when
   a table is not in the cache (the lane path runs, building its table in the job's wtab) */
static int EM_T(em_fftl_long)(EM_T(em_fft_job) *j, int64_t lines, int lg, int par, int64_t nt) {
    EM_T(em_fftl_long_job) lj = {j, lg / 2, lg - lg / 2, 0, 0, 0};
    SZ *ws = (SZ *)j->wtab;
    lj.tw = EM_T(em_fftc_tables)(lg, ws);
    lj.t1 = EM_T(em_fftc_tables)(lj.lg1, ws);
    lj.t2 = EM_T(em_fftc_tables)(lj.lg2, ws);
    if (lj.tw == ws || lj.t1 == ws || lj.t2 == ws) return 0;
    if (par && nt > 1 && lines >= nt) em_par(EM_T(em_fftl_long_task), &lj, lines, nt, nt, -1);
    else {  /* fewer lines than threads: each line's groups split between them */
        lj.pl = par && nt > 1 ? nt : 1;
        EM_T(em_fftl_long_task)(&lj, 0, lines, 0);
    }
    return 1;
}
/* the stage radices of a mixed length m into lj->rad (em_fftp_radices). A stage of radix 8, 5, 4,
   3 or 2 (not 7: em_fftl_first and em_fftl_last_col have no 7-point DFT) whose stride m / r holds
   whole tiles of hb = CW / 2 columns can read the rows (moved to the front: rf) or, another one, be
   fused into the store (moved to the end: rl = its radix, when fuse) -- the order of a Stockham
   transform's stages is free. */
static void EM_T(em_fftl_order)(EM_T(em_fftl_job) *lj, int fuse) {
    const int64_t m = lj->m, hb = CW / 2;
    int8_t *rad = lj->rad;
    const int nr = em_fftp_radices(lj->fac, m, 0, rad);
    int fi = -1, li = -1;
    for (int i = 0; i < nr; ++i)
        if ((rad[i] <= 5 || rad[i] == 8) && (m / rad[i]) % hb == 0) {
            if (fi < 0) fi = i;
            else li = i;
        }
    int8_t t;
    if (fi > 0) { t = rad[0]; rad[0] = rad[fi]; rad[fi] = t; }
    if (li >= 0) { t = rad[nr - 1]; rad[nr - 1] = rad[li]; rad[li] = t; }
    lj->nr = nr;
    lj->rf = fi >= 0;
    lj->rl = fuse && li >= 0 ? rad[nr - 1] : 1;
}
/* run job j (returns 1; 0 only where fft.py's reach left the path out). A power of two takes
   fft_conv's cached tables (or builds them in the job's wtab, 2m + 1 SZ); other lengths round the
   plan's double tables to ELT in wtab each call (at most 2 m2 + 2m + 1 SZ, a few thousand
   conversions: small beside the lines' work; fft.py gives wtab room of its own, apart from the
   plan's tables). Both before the threads start; thread t's two line buffers (lj.buf CZ each) are
   its em_vz scratch. */
static int EM_T(em_fftl_run)(EM_T(em_fft_job) *j, int64_t lines, int par, int64_t nt) {
    const em_fft_plan *p = j->p;
    const int64_t m = j->kind == 0 ? j->n : p->n;
    const int split = j->kind != 0 && j->half;  /* the real split's table rt */
    /* line buffers: Bluestein's m2, else m, and one more for the real split's m + 1 (kinds 1 and 2
       through the half-length line): two fit the step's per-thread scratch (2 m2 + 2n em_vz for an
       axis of length n; n = 2m with the split, n = m without it -- one more there overran it) */
    EM_T(em_fftl_job) lj = {j, 0, 0, m, 0, p->m2, 0, 0, (p->m2 > m ? p->m2 : m) + split, 1};
    if (p->m2) {  /* Bluestein: tw2, bf, chirp (and rt) rounded from the plan's into wtab */
        if (!EM_FFTG_ON(EM_FFTG_BLUE)) return 0;  /* not reached (fft.py's reach) */
        const int64_t m2 = p->m2;
        SZ *t = (SZ *)j->wtab, *bf = t + m2, *ch = bf + m2, *rt = ch + m;
        for (int64_t k = 0; k < m2; ++k) {
            t[k].re = (ELT)p->tw2[k].re; t[k].im = (ELT)p->tw2[k].im;
            bf[k].re = (ELT)p->bf[k].re; bf[k].im = (ELT)p->bf[k].im;
        }
        for (int64_t k = 0; k < m; ++k) { ch[k].re = (ELT)p->chirp[k].re; ch[k].im = (ELT)p->chirp[k].im; }
        if (split)
            for (int64_t k = 0; k <= m; ++k) { rt[k].re = (ELT)p->rt[k].re; rt[k].im = (ELT)p->rt[k].im; }
        lj.tw = t; lj.bf = bf; lj.chirp = ch; lj.rt = rt; lj.fac = p->fac2;
    } else if (!(m & (m - 1))) {
        int lg = 0;
        while (((int64_t)1 << lg) < m) ++lg;
        /* four-step when a line group would leave lanes idle: at most half of them used, or (long
           lines, whose CW-lane buffers outgrow the caches) any unused, or threads (fewer groups
           than threads: the four-step splits the lines between them) */
        const int64_t groups = (lines + CW - 1) / CW;
        const int few = 2 * lines <= CW || (m >= 4096 && (lines < CW || (par && nt > 1 && groups < nt)));
        if (EM_FFTG_ON(EM_FFTG_LONG) && (split || (j->kind == 0 && j->inner == 1)) && m >= EM_FFTL_LONG && few
            && EM_T(em_fftl_long)(j, lines, lg, par, nt))
            return 1;
        lj.tw = EM_T(em_fftc_tables)(lg, (SZ *)j->wtab);
        if (EM_FFTG_ON(EM_FFTG_LINE) && EM_T(em_fftk_fits)(j, m, 0)) {  /* many rows: one line at a time */
            EM_T(em_fftk_run)(j, m, lj.tw, 0, lines, par, nt, 1);
            return 1;
        }
        if (!EM_FFTG_ON(EM_FFTG_P2)) return 0;  /* not reached (fft.py's reach) */
        lj.rt = lj.tw + m;
        lj.rl = 1;
        if (j->kind == 0 && j->inner == 1 && m >= 4 * CW && 2 * m * (int64_t)sizeof(ELT) <= EM_FFTL_CWAY) {
            int64_t q = m / 8;
            while (em_fftp_radix(q) != q) q /= em_fftp_radix(q);
            if (m / q >= CW && q > 2) lj.rl = q;
        }
    } else {
        if (!EM_FFTG_ON(EM_FFTG_MIXED)) return 0;  /* not reached (fft.py's reach) */
        SZ *t = (SZ *)j->wtab;
        for (int64_t k = 0; k < m; ++k) { t[k].re = (ELT)p->tw[k].re; t[k].im = (ELT)p->tw[k].im; }
        if (split)
            for (int64_t k = 0; k <= m; ++k) { t[m + k].re = (ELT)p->rt[k].re; t[m + k].im = (ELT)p->rt[k].im; }
        lj.tw = t; lj.rt = t + m; lj.fac = p->fac;
        int fit;
        if (EM_FFTG_ON(EM_FFTG_LINE) && (fit = EM_T(em_fftk_fits)(j, m, p->fac))) {
            EM_T(em_fftk_run)(j, m, t, p->fac, lines, par, nt, fit);  /* rows of a 2-3-5 length, one line (or pair) at a time */
            return 1;
        }
        EM_T(em_fftl_order)(&lj, ((j->kind == 0 && j->inner == 1) || (j->kind == 2 && j->half))
                                      && 2 * m * (int64_t)sizeof(ELT) <= EM_FFTL_MWAY);
    }
    const int64_t groups = (lines + CW - 1) / CW;
    if (par && nt > 1 && groups > 1) em_par(EM_T(em_fftl_task), &lj, groups, nt, nt, -4);
    else EM_T(em_fftl_task)(&lj, 0, groups, 0);
    return 1;
}
#undef CW
#undef CV
#undef CI
#undef CZ
#undef SZ
