/* Winograd on the stride phases of a 3x3 stride-2 convolution (see native/emit/conv_winograd.py),
   for one element type. Included after conv.h's instantiation for the same type (it uses em_cv_geo,
   em_cv_ctx, em_cv_tile and the vector types); ELT and EM_T as there.

   Along one axis, outputs 2 i and 2 i + 1 (one tile) read the five padded inputs p0..p4 =
   x[4 i - lo .. 4 i - lo + 4] with the taps w0, w1, w2:

       y0 = p0 w0 + p1 w1 + p2 w2,   y1 = p2 w0 + p3 w1 + p4 w2.

   The even taps meet the even inputs (the stride phase with two taps: F(2, 2), three products),
   the odd tap the odd inputs (one tap: direct), so with three transform points

       M0 = (p0 - p2) w0 + p1 w1,   M1 = p2 (w0 + w2),   M2 = (p4 - p2) w2 + p3 w1,
       y0 = M0 + M1,                y1 = M1 + M2,

   five products for two outputs instead of six: the input features [p0 - p2, p1 | p2 | p4 - p2, p3]
   against the kernel features [w0, w1 | w0 + w2 | w2, w1], grouped by point. In two dimensions the
   tensor product: 3 x 3 points (alpha, beta), point (alpha, beta) a sum over n_alpha n_beta feature
   pairs (n = 2, 1, 2) times C channels, 25 C products per output tile and feature instead of 36 C,
   each point one GEMM of (MR tiles x K) by (K x NR features) with K = 4C, 2C or C on em_cv_tile's
   register tiles, and y[i][j] = sum of M[alpha][beta] over alpha in {i, i+1}, beta in {j, j+1}.

   An output reads exactly the inputs its points read (point 0 only p0..p2, point 2 only p2..p4), so
   a NaN or an Inf reaches the same outputs as in the direct sum, but the subtractions can turn an
   Inf into a NaN: the transform sums x * 0 over its inputs and the kernel pass over the kernel, and
   the step reruns the direct kernel when either is not zero. */

#ifndef EM_CW_COMMON
#define EM_CW_COMMON
#define EM_CW_NF 5  /* features per axis: [p0 - p2, p1 | p2 | p4 - p2, p3] */
/* Point a's features along one axis: em_cw_f0[a] .. em_cw_f0[a] + em_cw_nf[a]. */
static const int em_cw_f0[3] = {0, 2, 3}, em_cw_nf[3] = {2, 1, 2};
/* The feature pairs (in units of C) before point (alpha, beta) = pt, points row-major: 25 in all. */
static const int em_cw_koff[10] = {0, 4, 6, 10, 12, 13, 15, 19, 21, 25};
#endif

/* Kernel panel t (NR = 2 VL features): wp[t][pair][c][NR], pair = koff(pt) + ra nb + rb, and the
   pass's x * 0 sum over the panel's kernel values into bad[0]. */
static inline __attribute__((always_inline)) void EM_T(em_cw_packw)(const EM_T(em_cv_ctx) *c, const em_cv_geo g,
                                                                   int64_t t, ELT *bad) {
    enum { NR = 2 * EM_CV_BYTES / sizeof(ELT) };
    const int64_t p = t, nv = em_cv_min(NR, g.Og - p * NR);
    int64_t pair[EM_CW_NF][EM_CW_NF];  /* the pair of features (fa, fb) */
    for (int pt = 0; pt < 9; ++pt)
        for (int ra = 0; ra < em_cw_nf[pt / 3]; ++ra)
            for (int rb = 0; rb < em_cw_nf[pt % 3]; ++rb)
                pair[em_cw_f0[pt / 3] + ra][em_cw_f0[pt % 3] + rb] = em_cw_koff[pt] + ra * em_cw_nf[pt % 3] + rb;
    ELT *dst = c->wp + p * 25 * g.C * NR, s = 0;
    for (int64_t ci = 0; ci < g.C; ++ci) {
        ELT w[3][3][NR] __attribute__((aligned(64))), r[EM_CW_NF][3][NR] __attribute__((aligned(64)));
        for (int a = 0; a < 3; ++a)
            for (int b = 0; b < 3; ++b) {
                const ELT *src = c->w + p * NR * g.wso + ci * g.wsi + a * g.wsh + b * g.wsw;
                for (int64_t j = 0; j < NR; ++j) w[a][b][j] = j < nv ? src[j * g.wso] : 0;
#pragma omp simd reduction(+ : s)
                for (int64_t j = 0; j < NR; ++j) s += w[a][b][j] * (ELT)0;
            }
        for (int b = 0; b < 3; ++b)  /* along the rows: kernel features [w0, w1, w0 + w2, w2, w1] */
#pragma omp simd
            for (int64_t j = 0; j < NR; ++j) {
                r[0][b][j] = w[0][b][j];
                r[1][b][j] = w[1][b][j];
                r[2][b][j] = w[0][b][j] + w[2][b][j];
                r[3][b][j] = w[2][b][j];
                r[4][b][j] = w[1][b][j];
            }
        for (int fa = 0; fa < EM_CW_NF; ++fa) {  /* along the columns */
            ELT *d[EM_CW_NF];
            for (int fb = 0; fb < EM_CW_NF; ++fb) d[fb] = dst + (pair[fa][fb] * g.C + ci) * NR;
#pragma omp simd
            for (int64_t j = 0; j < NR; ++j) {
                d[0][j] = r[fa][0][j];
                d[1][j] = r[fa][1][j];
                d[2][j] = r[fa][0][j] + r[fa][2][j];
                d[3][j] = r[fa][2][j];
                d[4][j] = r[fa][1][j];
            }
        }
    }
    bad[0] += s;
}

/* The five features along one axis of the five values v[0..4] (one vector of channels each). */
#define EM_CW_FEAT(f, v) do { (f)[0] = (v)[0] - (v)[2]; (f)[1] = (v)[1]; (f)[2] = (v)[2]; \
                              (f)[3] = (v)[4] - (v)[2]; (f)[4] = (v)[3]; } while (0)

/* Task t: tiles [t MR, t MR + MR) of the NT = N ceil(OH / 2) ceil(OW / 2) output tiles (image-major,
   then row-major), every feature panel. The thread's tile (TS elements from tiles + tid TS) holds
   V[pair][m][c] grouped by point (point pt: MR rows of koff-sized K), and its x * 0 sum at offset BAD.
   Input strides (of c->x) xs[4] (n, c, h, w), output strides (of c->out; ys[1] = 1) ys[4]. */
static inline __attribute__((always_inline)) void EM_T(em_cw_run)(const EM_T(em_cv_ctx) *c, const em_cv_geo g,
                                                                 int64_t t, int64_t tid, int64_t NT, int64_t TS,
                                                                 int64_t BAD, const int64_t xs[4],
                                                                 const int64_t ys[4]) {
    enum { VL = EM_CV_BYTES / sizeof(ELT) };
    const int64_t NR = 2 * VL, MR = EM_CV_MR, C = g.C;
    const int64_t TW = (g.OW + 1) / 2, TH = (g.OH + 1) / 2;
    const int64_t b0 = t * MR, mv = em_cv_min(MR, NT - b0);
    ELT *v = c->tiles + tid * TS;
    EM_T(em_cv_v) bad = {0};
    for (int64_t m = 0; m < MR; ++m) {
        const int64_t q = b0 + m;
        if (m >= mv) {  /* zero rows past the last tile */
            for (int pt = 0; pt < 9; ++pt) {
                const int64_t K = em_cw_nf[pt / 3] * em_cw_nf[pt % 3] * C;
                ELT *o = v + em_cw_koff[pt] * C * MR + m * K;
                for (int64_t k = 0; k < K; ++k) o[k] = 0;
            }
            continue;
        }
        const int64_t n = q / (TH * TW), ty = q % (TH * TW) / TW, tx = q % TW;
        const int64_t ih0 = 4 * ty - g.hlo, iw0 = 4 * tx - g.wlo;
        const ELT *xn = c->x + n * xs[0];
        for (int64_t c0 = 0; c0 < C; c0 += VL) {
            const int64_t cn = em_cv_min(VL, C - c0);
            EM_T(em_cv_v) p[5][5], r[5][5], f[5][5];
            for (int a = 0; a < 5; ++a)
                for (int b = 0; b < 5; ++b) {
                    const int64_t ih = ih0 + a, iw = iw0 + b;
                    p[a][b] = (EM_T(em_cv_v)){0};
                    if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) continue;
                    const ELT *s = xn + ih * xs[2] + iw * xs[3] + c0 * xs[1];
                    if (xs[1] == 1 && cn == VL) {
                        p[a][b] = *(const EM_T(em_cv_u) *)s;
                    } else {
                        for (int64_t k = 0; k < cn; ++k) p[a][b][k] = s[k * xs[1]];
                    }
                    bad += p[a][b] * (ELT)0;
                }
            for (int b = 0; b < 5; ++b) {  /* along the rows: r[fa][b] */
                EM_T(em_cv_v) col[5] = {p[0][b], p[1][b], p[2][b], p[3][b], p[4][b]}, fc[5];
                EM_CW_FEAT(fc, col);
                for (int fa = 0; fa < 5; ++fa) r[fa][b] = fc[fa];
            }
            for (int fa = 0; fa < 5; ++fa) EM_CW_FEAT(f[fa], r[fa]);  /* along the columns */
#pragma GCC unroll 9
            for (int pt = 0; pt < 9; ++pt) {
                const int al = pt / 3, be = pt % 3, nb = em_cw_nf[be];
                const int64_t K = em_cw_nf[al] * nb * C;
                ELT *o = v + em_cw_koff[pt] * C * MR + m * K + c0;
#pragma GCC unroll 2
                for (int ra = 0; ra < em_cw_nf[al]; ++ra)
#pragma GCC unroll 2
                    for (int rb = 0; rb < nb; ++rb) {
                        ELT *d = o + (ra * nb + rb) * C;
                        const EM_T(em_cv_v) x = f[em_cw_f0[al] + ra][em_cw_f0[be] + rb];
                        if (cn == VL) {
                            *(EM_T(em_cv_u) *)d = x;
                        } else {
                            for (int64_t k = 0; k < cn; ++k) d[k] = x[k];
                        }
                    }
            }
        }
    }
    ELT sb = 0;
    for (int k = 0; k < VL; ++k) sb += bad[k];
    v[BAD] += sb;
    ELT mb[9][EM_CV_MR * 2 * EM_T(EM_CV_VL)] __attribute__((aligned(64)));
    for (int64_t p = 0; p < g.P; ++p) {
        const int64_t nv = em_cv_min(NR, g.Og - p * NR);
        ELT pb[2 * EM_T(EM_CV_VL)] __attribute__((aligned(64)));
        const ELT *bias = EM_T(em_cv_pbias)(c, p * NR, nv, pb);
#pragma GCC unroll 9
        for (int pt = 0; pt < 9; ++pt) {
            const int64_t K = em_cw_nf[pt / 3] * em_cw_nf[pt % 3] * C, ko = em_cw_koff[pt];
            EM_T(em_cv_tile)(v + ko * C * MR, K, 1, 0, 1, 0, K, c->wp + (p * 25 + ko) * C * NR, mb[pt], NR, 1,
                             MR, nv <= VL ? VL : NR, 0, 0);
        }
        for (int64_t m = 0; m < mv; ++m) {
            const int64_t q = b0 + m;
            const int64_t n = q / (TH * TW), ty = q % (TH * TW) / TW, tx = q % TW;
            ELT *o = c->out + n * ys[0] + 2 * ty * ys[2] + 2 * tx * ys[3] + p * NR;  /* features contiguous */
            const int row1 = 2 * ty + 1 < g.OH, col1 = 2 * tx + 1 < g.OW;
#pragma GCC unroll 2
            for (int64_t j0 = 0; j0 < NR; j0 += VL) {
                if (j0 >= nv) break;
                EM_T(em_cv_v) mm[9], y[2][2];
#pragma GCC unroll 9
                for (int e = 0; e < 9; ++e) mm[e] = *(const EM_T(em_cv_v) *)&mb[e][m * NR + j0];
                const EM_T(em_cv_v) s00 = mm[0] + mm[1], s01 = mm[1] + mm[2];  /* M A */
                const EM_T(em_cv_v) s10 = mm[3] + mm[4], s11 = mm[4] + mm[5];
                const EM_T(em_cv_v) s20 = mm[6] + mm[7], s21 = mm[7] + mm[8];
                y[0][0] = s00 + s10;  /* A^T (M A) */
                y[0][1] = s01 + s11;
                y[1][0] = s10 + s20;
                y[1][1] = s11 + s21;
                for (int a = 0; a < 2; ++a)  /* the fused epilogue (em_cv_epi's) */
                    for (int b = 0; b < 2; ++b) {
                        if (bias) y[a][b] += *(const EM_T(em_cv_v) *)(bias + j0);
                        if (g.relu)
                            y[a][b] = (EM_T(em_cv_v))((EM_T(em_cv_i))y[a][b]
                                                      & ((y[a][b] > (EM_T(em_cv_v)){0}) | (y[a][b] != y[a][b])));
                    }
                for (int a = 0; a <= row1; ++a)
                    for (int b = 0; b <= col1; ++b) {
                        ELT *d = o + a * ys[2] + b * ys[3] + j0;
                        if (nv - j0 >= VL) {
                            *(EM_T(em_cv_u) *)d = y[a][b];
                        } else {
                            for (int64_t j = 0; j < nv - j0; ++j) d[j] = y[a][b][j];
                        }
                    }
            }
        }
    }
}

/* An input with pixels contiguous per channel (NCHW): row t = n H + h into channels-last order at
   c->xt (register transposes). */
static inline __attribute__((always_inline)) void EM_T(em_cw_copy)(const EM_T(em_cv_ctx) *c, const em_cv_geo g,
                                                                  int64_t t) {
    const int64_t n = t / g.H, h = t % g.H;
    EM_T(em_cv_tr)(c->xsrc + n * g.xsn + h * g.xsh, g.xsc, c->xt + t * g.W * g.C, g.C, g.C, g.W);
}

#undef EM_CW_FEAT
