/* Linear convolution of real rows by FFT, in one pass (the fft_conv call step, native/emit/fft.py).
   Included once per precision with ELT (float or double), ELTI (int32_t or int64_t: an integer
   of its size) and EM_T(name) defined, after fft_core.h (the table release), fft_passes.h (the
   vector types and the transform) and the thread-pool helpers (em_par). Also holds what the fft
   step's lanes (fft_lanes.h) share with it: the twiddle cache by log2 length (em_fftc_tables), the
   register transposes between rows and lanes (em_fftc_load, em_fftc_store) and the real split and
   merge.

   out[r, k] = sum_j x[r, j] y[r, k - j] for k < valid, 0 for valid <= k < ca + cb - 1, over the rows r of the output's leading
   shape; a row past an operand's leading shape (per axis) reads as zeros (zero extension). A group
   of EM_CW rows (one per vector lane: 16 floats or 8 doubles with AVX-512, else 8 or 4) is read
   straight from the operands, transformed, multiplied and transformed back, and only the
   ca + cb - 1 results are written: no padded copies, no spectra in memory. The transform length is
   L = next_pow2(ca + cb - 1) (any L >= the result's length gives the linear convolution); each real
   line of length L is a complex line of length m = L / 2 (z_j = x_2j + i x_2j+1), transformed by
   fft_passes.h's power-of-two Stockham transform (em_fftp_fft, the fft step's own) in the operands'
   precision, then split into the real spectrum, multiplied, merged and inverse transformed. Twiddles are computed
   in double and rounded once to ELT. Short results (L < 16) are summed directly. */
#ifndef EM_FFTC_ONCE
#define EM_FFTC_ONCE
#include <stdlib.h>
#define EM_FFTC_ST 8  /* tiles per row piece of em_fftc_store_gen */
#define EM_FFTC_SLOTS 40 /* tables per precision, by log2 m (counted in fft_core.h's em_fft_live) */
#endif
#define CW EM_T(em_cw)
#define CV EM_T(em_cv)
#define CZ EM_T(em_cz)
#define SZ EM_T(em_fftc_sz)
/* tables of length m (a power of two): tw[j] = exp(-2 pi i j / m), j < m, then
   rt[k] = exp(-i pi k / m), k <= m (the real split) */
static void EM_T(em_fftc_fill)(SZ *t, int64_t m) {
    EM_T(em_fftp_twiddles)(t, m);
    for (int64_t k = 0; k <= m; ++k) {
        double a = -3.14159265358979323846264338327950288 * (double)k / (double)m;
        t[m + k].re = (ELT)cos(a); t[m + k].im = (ELT)sin(a);
    }
}
static SZ *EM_T(em_fftc_tabs)[EM_FFTC_SLOTS];
static int EM_T(em_fftc_state)[EM_FFTC_SLOTS];  /* 0 empty, 1 being filled, 2 ready, 3 unusable */
/* the tables of length m = 2^lg: cached (malloc once, lock free), else built in ws (2m + 1 SZ) */
static const SZ *EM_T(em_fftc_tables)(int lg, SZ *ws) {
    const int64_t m = (int64_t)1 << lg;
    if (lg < EM_FFTC_SLOTS) {
        int *st = &EM_T(em_fftc_state)[lg], zero = 0;
        if (__atomic_load_n(st, __ATOMIC_ACQUIRE) == 2) return EM_T(em_fftc_tabs)[lg];
        if (__atomic_compare_exchange_n(st, &zero, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            SZ *t = (SZ *)malloc((size_t)(2 * m + 1) * sizeof(SZ));
            if (t) {
                EM_T(em_fftc_fill)(t, m);
                EM_T(em_fftc_tabs)[lg] = t;
                __atomic_add_fetch(&em_fft_live, 1, __ATOMIC_ACQ_REL);
                __atomic_store_n(st, 2, __ATOMIC_RELEASE);
                return t;
            }
            __atomic_store_n(st, 3, __ATOMIC_RELEASE);
        }
    }
    EM_T(em_fftc_fill)(ws, m);
    return ws;
}
static void EM_T(em_fftc_free)(void) {  /* ember_fft_release: no transform is running */
    for (int i = 0; i < EM_FFTC_SLOTS; ++i) {
        if (__atomic_load_n(&EM_T(em_fftc_state)[i], __ATOMIC_ACQUIRE) == 2) {
            free(EM_T(em_fftc_tabs)[i]);
            EM_T(em_fftc_tabs)[i] = 0;
            __atomic_sub_fetch(&em_fft_live, 1, __ATOMIC_ACQ_REL);
        }
        __atomic_store_n(&EM_T(em_fftc_state)[i], 0, __ATOMIC_RELEASE);
    }
}
__attribute__((constructor)) static void EM_T(em_fftc_init)(void) { em_fft_on_release(EM_T(em_fftc_free)); }
/* the h x h transposes of v[0 .. h) in place, one per run of h lanes (h a power of two dividing CW;
   v[r][c h + k] -> v[k][c h + r]): swaps of the off-diagonal b x b blocks for b = h/2 .. 1, two-operand
   shuffles (GCC; scalar otherwise). The lane masks test bits below h only, so every run of h lanes
   is transposed on its own. */
static inline __attribute__((always_inline)) void EM_T(em_fftc_transpose_h)(CV *v, const int h) {
#if defined(__GNUC__) && !defined(__clang__)
    typedef EM_T(em_ci) CI;
    CI k;
    for (int i = 0; i < CW; ++i) k[i] = i;
    _Pragma("GCC unroll 8") for (int b = h / 2; b >= 1; b /= 2) {
        const CI t = (k & b) != 0;
        const CI m1 = k + (t & (CW - b)), m2 = k + ((t & CW) | (~t & b));
        _Pragma("GCC unroll 16") for (int r = 0; r < h; ++r)
            if (!(r & b)) {
                const CV a = v[r], c = v[r + b];
                v[r] = __builtin_shuffle(a, c, m1);
                v[r + b] = __builtin_shuffle(a, c, m2);
            }
    }
#else
    for (int c0 = 0; c0 < CW; c0 += h)
        for (int r = 0; r < h; ++r)
            for (int c = r + 1; c < h; ++c) { ELT t = v[r][c0 + c]; v[r][c0 + c] = v[c][c0 + r]; v[c][c0 + r] = t; }
#endif
}
/* the CW x CW transpose of v in place (v[r][k] -> v[k][r]) */
static inline __attribute__((always_inline)) void EM_T(em_fftc_transpose)(CV *v) { EM_T(em_fftc_transpose_h)(v, CW); }
/* out[jj] lane r = complex element j0 + jj of row r (rows[r] + 2 (j0 + jj)), jj < CW / 2; a null
   row is zeros (nn: no row is null, none tested -- the branches kept the tile out of registers: the
   fft step's lanes pad a partial group with its first row instead, 6% of a 64x1024 transform): one
   CW x CW register transpose */
static inline __attribute__((always_inline)) void EM_T(em_fftc_tile_in)(const ELT *const *rows, int64_t j0, CZ *out,
                                                                         const int nn) {
    const CV zero = {0};
    CV v[CW];
    for (int r = 0; r < CW; ++r) {
        if (nn || rows[r]) v[r] = *(const EM_T(em_cvu) *)(rows[r] + 2 * j0);
        else v[r] = zero;
    }
    EM_T(em_fftc_transpose)(v);
    for (int jj = 0; jj < CW / 2; ++jj) { out[jj].re = v[2 * jj]; out[jj].im = v[2 * jj + 1]; }
}
/* line[j] lane r = (row r [2j], row r [2j + 1]) (0 past c), j < m (the entries written: the
   caller passes half its length when the rest is never read); a null row is zeros (nn: none is,
   see em_fftc_tile_in). Blocks of CW / 2 complex elements of all CW rows go through
   em_fftc_transpose. */
static void EM_T(em_fftc_load)(const ELT *const *rows, int64_t c, int64_t m, CZ *line, const int nn) {
    const CV zero = {0};
    const int64_t h = c / 2, hb = CW / 2;
    int64_t j0 = 0;
    if (nn) for (; j0 + hb <= h; j0 += hb) EM_T(em_fftc_tile_in)(rows, j0, line + j0, 1);
    else for (; j0 + hb <= h; j0 += hb) EM_T(em_fftc_tile_in)(rows, j0, line + j0, 0);
    for (int64_t j = j0; j < m; ++j) { line[j].re = zero; line[j].im = zero; }
    for (int r = 0; r < CW; ++r) {
        const ELT *x = rows[r];
        if (!x) continue;
        for (int64_t j = j0; j < h; ++j) { line[j].re[r] = x[2 * j]; line[j].im[r] = x[2 * j + 1]; }
        if (c & 1) line[h].re[r] = x[c - 1];
    }
}
/* the spectrum's half-length transform z -> 2 X_k for k <= m (X the real line's spectrum):
   X_k = E_k + W^k O_k, E = (Z_k + conj Z_(m-k)) / 2, O = -i (Z_k - conj Z_(m-k)) / 2 */
static inline CZ EM_T(em_fftc_split)(const CZ *z, int64_t k, int64_t m, SZ t) {
    const CZ a = z[k == m ? 0 : k], b = z[k == 0 ? 0 : m - k];
    const CV er = a.re + b.re, ei = a.im - b.im, orr = a.im + b.im, oi = b.re - a.re;
    CZ r = {er + orr * t.re - oi * t.im, ei + orr * t.im + oi * t.re};
    return r;
}
/* entries j0 .. j0 + nt CW / 2 of the rows r < w of out (row stride co) from res (or its real split,
   see below): nt tiles transposed into a staging block, then each row's nt CW values at once (rows
   a power of two apart, plus a few bytes, map to the same few cache sets: 64-byte pieces of CW rows
   there would evict partly written lines) */
static inline __attribute__((always_inline)) void EM_T(em_fftc_store_piece)(const CZ *res, ELT *out, int w, int64_t co,
                                                                             ELT scale, const SZ *rt, int64_t m,
                                                                             int64_t j0, const int nt) {
    CV st[CW][EM_FFTC_ST];
    for (int t = 0; t < nt; ++t) {
        CV v[CW];
        for (int jj = 0; jj < CW / 2; ++jj) {
            const int64_t q = j0 + t * (CW / 2) + jj;
            const CZ z = rt ? EM_T(em_fftc_split)(res, q, m, rt[q]) : res[q];
            v[2 * jj] = z.re * scale; v[2 * jj + 1] = z.im * scale;
        }
        EM_T(em_fftc_transpose)(v);
        for (int r = 0; r < CW; ++r) st[r][t] = v[r];
    }
    for (int r = 0; r < w; ++r) memcpy(out + r * co + 2 * j0, st[r], nt * sizeof(CV));
}
/* rows r < w of out (co values each, row stride co) = lanes of res (x_2j + i x_2j+1) times scale; with
   rt, entry j is instead the real split em_fftc_split(res, j, m, rt[j]) of the half-length transform
   res (the split fused into the store: no pass over a split spectrum) */
static inline __attribute__((always_inline)) void EM_T(em_fftc_store_gen)(const CZ *res, ELT *out, int w, int64_t co,
                                                                           ELT scale, const SZ *rt, int64_t m) {
    const int64_t h = co / 2, hb = CW / 2;
    int64_t j0 = 0;
    for (; j0 + EM_FFTC_ST * hb <= h; j0 += EM_FFTC_ST * hb)
        EM_T(em_fftc_store_piece)(res, out, w, co, scale, rt, m, j0, EM_FFTC_ST);
    for (; j0 + hb <= h; j0 += hb) EM_T(em_fftc_store_piece)(res, out, w, co, scale, rt, m, j0, 1);
    for (int64_t q = j0; q < h + (co & 1); ++q) {
        const CZ z = rt ? EM_T(em_fftc_split)(res, q, m, rt[q]) : res[q];
        for (int r = 0; r < w; ++r) {
            ELT *o = out + r * co;
            o[2 * q] = z.re[r] * scale;
            if (q < h) o[2 * q + 1] = z.im[r] * scale;
        }
    }
}
static void EM_T(em_fftc_store)(const CZ *res, ELT *out, int w, int64_t co, ELT scale) {
    EM_T(em_fftc_store_gen)(res, out, w, co, scale, 0, 0);
}
/* the inverse's merge of the product spectrum: Z_k = E_k + i O_k, E = a + conj b,
   O = (a - conj b) conj(t), for a = P_k, b = P_(m-k), t = W^k */
static inline CZ EM_T(em_fftc_merge)(CZ a, CZ b, SZ t) {
    const CV er = a.re + b.re, ei = a.im - b.im, dr = a.re - b.re, di = a.im + b.im;
    const CV orr = dr * t.re + di * t.im, oi = di * t.re - dr * t.im;
    CZ r = {er - oi, ei + orr};
    return r;
}
typedef struct {
    const ELT *x, *y;
    ELT *out;
    int nb;                     /* leading axes */
    const int64_t *bo, *bx, *by;  /* leading shapes of out, x and y */
    int64_t ca, cb, rows;
    int64_t valid;                  /* results from this column on are written as zeros */
    char *scratch; int64_t stride;  /* per-thread scratch: thread t at scratch + t * stride */
    SZ *wtab;                       /* tables when the cache cannot hold them */
} EM_T(em_fftc_job);
/* the operand row of output row r (its leading index unravelled against bo), or null past it */
static const ELT *EM_T(em_fftc_row)(const EM_T(em_fftc_job) *j, const ELT *base, const int64_t *bs,
                                     int64_t c, int64_t r) {
    int64_t off = 0, mul = 1;
    for (int a = j->nb - 1; a >= 0; --a) {
        const int64_t i = r % j->bo[a];
        r /= j->bo[a];
        if (i >= bs[a]) return 0;
        off += i * mul; mul *= bs[a];
    }
    return base + off * c;
}
static EM_TASK_ATTR void EM_T(em_fftc_task)(void *ctx, int64_t g0, int64_t g1, int64_t tid) {
    const EM_T(em_fftc_job) *j = (const EM_T(em_fftc_job) *)ctx;
    const int64_t ca = j->ca, cb = j->cb, co = ca + cb - 1;
    int lg = 0;
    while (((int64_t)1 << lg) < co) ++lg;
    for (int64_t g = g0; g < g1; ++g) {
        const int64_t r0 = g * CW;
        const int w = j->rows - r0 < CW ? (int)(j->rows - r0) : CW;
        const ELT *px[CW], *py[CW];
        for (int r = 0; r < CW; ++r) {
            px[r] = r < w ? EM_T(em_fftc_row)(j, j->x, j->bx, ca, r0 + r) : 0;
            py[r] = r < w ? EM_T(em_fftc_row)(j, j->y, j->by, cb, r0 + r) : 0;
        }
        if (lg < 4) {  /* short: direct sums */
            for (int r = 0; r < w; ++r) {
                ELT *o = j->out + (r0 + r) * co;
                for (int64_t k = 0; k < co; ++k) {
                    ELT acc = 0;
                    if (px[r] && py[r])
                        for (int64_t i = k - cb + 1 > 0 ? k - cb + 1 : 0; i < ca && i <= k; ++i)
                            acc += px[r][i] * py[r][k - i];
                    o[k] = k < j->valid ? acc : 0;
                }
            }
            continue;
        }
        const int64_t m = (int64_t)1 << (lg - 1);
        const SZ *tw = EM_T(em_fftc_tables)(lg - 1, j->wtab), *rt = tw + m;
        CZ *b0 = (CZ *)(j->scratch + tid * j->stride), *b1 = b0 + m + 1, *b2 = b1 + m + 1, *b3 = b2 + m + 1;
        const int hx = (ca + 1) / 2 <= m / 2, hy = (cb + 1) / 2 <= m / 2;  /* upper halves zero */
        EM_T(em_fftc_load)(px, ca, hx ? m / 2 : m, b0, 0);
        CZ *fx = EM_T(em_fftp_fft)(b0, b1, m, tw, 1, hx);
        EM_T(em_fftc_load)(py, cb, hy ? m / 2 : m, b2, 0);
        CZ *fy = EM_T(em_fftp_fft)(b2, b3, m, tw, 1, hy);
        /* product and merge for the pairs (k, m - k) at once, in place in fx: 4 P_k = (2 X_k)(2 Y_k),
           Z_k = E_k + i O_k with E = P_k + conj P_(m-k), O = (P_k - conj P_(m-k)) conj(W^k) */
        CZ *zz = fx, *tmp = fx == b0 ? b1 : b0;
        for (int64_t k = 0; k <= m / 2; ++k) {
            const int64_t k2 = m - k;
            const CZ pk = EM_T(em_czmulv)(EM_T(em_fftc_split)(fx, k, m, rt[k]), EM_T(em_fftc_split)(fy, k, m, rt[k]));
            const CZ pm = EM_T(em_czmulv)(EM_T(em_fftc_split)(fx, k2, m, rt[k2]),
                                          EM_T(em_fftc_split)(fy, k2, m, rt[k2]));
            zz[k] = EM_T(em_fftc_merge)(pk, pm, rt[k]);
            if (k2 < m && k2 != k) zz[k2] = EM_T(em_fftc_merge)(pm, pk, rt[k2]);
        }
        const CZ *res = EM_T(em_fftp_fft)(zz, tmp, m, tw, -1, 0);
        EM_T(em_fftc_store)(res, j->out + r0 * co, w, co, (ELT)(1.0 / (8.0 * (double)m)));
        if (j->valid < co) {
            const int64_t v = j->valid < 0 ? 0 : j->valid;
            for (int r = 0; r < w; ++r) memset(j->out + (r0 + r) * co + v, 0, (size_t)(co - v) * sizeof(ELT));
        }
    }
}
/* out = the convolution of x and y (see the top of this file); scratch: nt * stride bytes, 64-byte
   aligned, stride >= 4 (m + 1) CZ; wtab: 2m + 1 SZ; on the pool when par */
static void EM_T(em_fftc_run)(EM_T(em_fftc_job) *j, int par, int64_t nt) {
    const int64_t groups = (j->rows + CW - 1) / CW;
    if (groups == 0) return;
    if (par && nt > 1 && groups > 1) em_par(EM_T(em_fftc_task), j, groups, nt, nt, -16);
    else EM_T(em_fftc_task)(j, 0, groups, 0);
}
#undef CW
#undef CV
#undef CZ
#undef SZ
