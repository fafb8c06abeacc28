/* Products with bfloat16 weights: C[m x n] = A[m x k] (float32) @ B[k x n] (bfloat16), float32 sums.

   B is stored as bfloat16 bits (uint16_t, [k, n] or, with trans, [n, k]) and packed once into column
   panels of EM_BF16_NR (32) columns: panel j holds kps rows of 32 32-bit words (kp = ceil(k / 2)
   pairs of k rounded up to a multiple of 16), word (p, c) = B[2p][c] in its low half and B[2p + 1][c]
   in its high half (zero past k and past n). That is the operand layout of AVX512-BF16's vdpbf16ps
   and of AMX's tdpbf16ps (pairs of k interleaved; a 16-pair x 16-column B tile is 16 rows of 64
   bytes 128 bytes apart), and a word shifted left by 16 (low) or masked to its high half is the
   float32 of either element, so one layout serves every path.

   EM_BF16_PATH (defined by the emitter, from the CPU the program is compiled for):
     4  AMX-BF16: as 3, with 32 x 32 blocks of C in four tiles, 16 pairs of k per tdpbf16ps (the
        process asks the kernel for the tile state once; where it is refused, path 3 runs);
     3  AVX512-BF16: A rounded to bfloat16 (to nearest even) into pairs once per call, then per
        pair one vdpbf16ps per accumulator (two products summed in float32);
     2  AVX-512F, 1  AVX2: the words converted to float32 on the fly, float32 FMAs of A as it is;
     0  plain C (any target).
   Work is split into tasks of (a block of EM_BF16_MC rows, a group of EM_BF16_G panels), rows-major,
   so the tasks a thread claims in a row share that block of A in cache; on the AMX path a task runs
   32 rows against each panel of its group in turn (those rows of A stay in L1, the group's panels
   in L2). */

#ifndef EM_GEMM_BF16_H
#define EM_GEMM_BF16_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EM_BF16_NR 32
#define EM_BF16_MC 192
#define EM_BF16_G 8  /* panels per task */

typedef struct {
    int64_t m, n, k, kp, kps, npan, nrb;  /* kp pairs of k, kps of them rounded up to 16 */
    const float *a; int64_t lda;      /* A: rows of lda floats */
    const uint32_t *ab;               /* paths 3, 4: A as bfloat16 pairs, rows of kps words (zero past kp) */
    const uint32_t *bp;               /* packed B: npan panels of kps * 32 words */
    float *c; int64_t ldc;
    const float *bias;                /* n floats or null */
} em_bf16_ctx;

/* a packed B for one call (where no buffer lives as long as the program), and its release */
static inline uint32_t *em_bf16_alloc(int64_t words) { return (uint32_t *)malloc((size_t)(words > 0 ? words : 1) * 4); }
static inline void em_bf16_free(uint32_t *p) { free(p); }

/* the packed panels' size in 32-bit words */
static inline int64_t em_bf16_pairs(int64_t k) { return ((k + 1) / 2 + 15) / 16 * 16; }
static inline int64_t em_bf16_packed_words(int64_t k, int64_t n) {
    return ((n + EM_BF16_NR - 1) / EM_BF16_NR) * em_bf16_pairs(k) * EM_BF16_NR;
}

/* B (bfloat16 bits; [k, n] row-major, or [n, k] when trans) into the panel layout above */
static void em_bf16_pack(const uint16_t *src, int trans, int64_t k, int64_t n, uint32_t *dst) {
    const int64_t kps = em_bf16_pairs(k), npan = (n + EM_BF16_NR - 1) / EM_BF16_NR;
    for (int64_t j = 0; j < npan; ++j) {
        uint32_t *pan = dst + j * kps * EM_BF16_NR;
        for (int64_t p = 0; p < kps; ++p) {
            for (int64_t c = 0; c < EM_BF16_NR; ++c) {
                const int64_t col = j * EM_BF16_NR + c, k0 = 2 * p, k1 = 2 * p + 1;
                uint32_t lo = 0, hi = 0;
                if (col < n && k0 < k) {
                    lo = trans ? src[col * k + k0] : src[k0 * n + col];
                    if (k1 < k) hi = trans ? src[col * k + k1] : src[k1 * n + col];
                }
                pan[p * EM_BF16_NR + c] = lo | (hi << 16);
            }
        }
    }
}

/* float32 -> bfloat16 bits, rounded to nearest even (a NaN stays a quiet NaN) */
static inline uint32_t em_bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

/* rows [r0, r1) of A as bfloat16 pairs (rows of kps words; an odd k's last pair has a zero high
   half, the words past kp are zero) */
static void em_bf16_round_a(const em_bf16_ctx *x, int64_t r0, int64_t r1, uint32_t *ab) {
    const int64_t k = x->k, kp = x->kp, kps = x->kps;
    for (int64_t r = r0; r < r1; ++r) {
        const float *ar = x->a + r * x->lda;
        uint32_t *o = ab + r * kps;
        for (int64_t p = 0; p < k / 2; ++p)
            o[p] = em_bf16_round(ar[2 * p]) | (em_bf16_round(ar[2 * p + 1]) << 16);
        if (k & 1) o[kp - 1] = em_bf16_round(ar[k - 1]);
        for (int64_t p = kp; p < kps; ++p) o[p] = 0;
    }
}

/* the tile's results (rows [0, rows), columns [0, cols)) from t (rows of 32) into C, plus bias */
static inline void em_bf16_store(const float *t, int64_t rows, int64_t cols, float *c, int64_t ldc,
                                 const float *bias) {
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t q = 0; q < cols; ++q)
            c[r * ldc + q] = t[r * EM_BF16_NR + q] + (bias ? bias[q] : 0.0f);
}

#if EM_BF16_PATH >= 3
/* ---- AVX512-BF16: 12 x 32 tiles, 24 zmm accumulators, one vdpbf16ps per pair of k ---- */
#include <immintrin.h>
#define EM_BF16_MR 12
static __attribute__((noinline)) void em_bf16_tile(const em_bf16_ctx *x, int64_t r0, int64_t rows,
                                                   const uint32_t *bp, float *t) {
    const int64_t kp = x->kp;
    const uint32_t *ar[EM_BF16_MR];
    for (int r = 0; r < EM_BF16_MR; ++r) ar[r] = x->ab + (r0 + (r < rows ? r : 0)) * x->kps;
    __m512 acc[EM_BF16_MR][2];
#pragma GCC unroll 12
    for (int r = 0; r < EM_BF16_MR; ++r) { acc[r][0] = _mm512_setzero_ps(); acc[r][1] = _mm512_setzero_ps(); }
    for (int64_t p = 0; p < kp; ++p) {
        const __m512i b0 = _mm512_loadu_si512((const void *)(bp + p * EM_BF16_NR));
        const __m512i b1 = _mm512_loadu_si512((const void *)(bp + p * EM_BF16_NR + 16));
#pragma GCC unroll 12
        for (int r = 0; r < EM_BF16_MR; ++r) {
            const __m512i a = _mm512_set1_epi32((int)ar[r][p]);
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], (__m512bh)a, (__m512bh)b0);
            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], (__m512bh)a, (__m512bh)b1);
        }
    }
#pragma GCC unroll 12
    for (int r = 0; r < EM_BF16_MR; ++r) {
        _mm512_storeu_ps(t + r * EM_BF16_NR, acc[r][0]);
        _mm512_storeu_ps(t + r * EM_BF16_NR + 16, acc[r][1]);
    }
}

#if EM_BF16_PATH == 4
/* ---- AMX-BF16: blocks of 32 rows x one panel, C in tiles 0-3, A in 4-5, B in 6-7 ---- */
#include <sys/syscall.h>
extern long syscall(long number, ...);  /* <unistd.h> declares it only outside strict C11 */
#ifndef SYS_arch_prctl
#define SYS_arch_prctl 158
#endif
typedef struct { uint8_t palette, start; uint8_t reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; } em_bf16_tilecfg;
/* whether this process may use the AMX tile state (asked of the kernel once: ARCH_REQ_XCOMP_PERM) */
static int em_bf16_amx_ok(void) {
    static int state;  /* 0: not asked yet, 1: granted, -1: refused */
    int s = __atomic_load_n(&state, __ATOMIC_ACQUIRE);
    if (!s) {
        s = syscall(SYS_arch_prctl, 0x1023, 18) == 0 ? 1 : -1;
        __atomic_store_n(&state, s, __ATOMIC_RELEASE);
    }
    return s > 0;
}
/* rows [r0, r1) against panels [j0, j1); A's pairs (x->ab) cover the rows up to r1 rounded up to 32
   (rows past m: results discarded) */
static __attribute__((noinline)) void em_bf16_amx_block(const em_bf16_ctx *x, int64_t r0, int64_t r1,
                                                        int64_t j0, int64_t j1) {
    em_bf16_tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 8; ++i) { cfg.colsb[i] = 64; cfg.rows[i] = 16; }
    _tile_loadconfig(&cfg);
    const int64_t kps = x->kps, lda = 4 * kps;
    float t[32 * EM_BF16_NR] __attribute__((aligned(64)));
    for (int64_t r = r0; r < r1; r += 32) for (int64_t j = j0; j < j1; ++j) {
        const int64_t c0 = j * EM_BF16_NR, cols = x->n - c0 < EM_BF16_NR ? x->n - c0 : EM_BF16_NR;
        const uint32_t *bp = x->bp + j * kps * EM_BF16_NR;
        const uint32_t *a0 = x->ab + r * kps, *a1 = a0 + 16 * kps;
        _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
        for (int64_t p = 0; p < kps; p += 16) {
            _tile_loadd(4, a0 + p, lda);
            _tile_loadd(5, a1 + p, lda);
            _tile_loadd(6, bp + p * EM_BF16_NR, 4 * EM_BF16_NR);
            _tile_loadd(7, bp + p * EM_BF16_NR + 16, 4 * EM_BF16_NR);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
        _tile_stored(0, t, 4 * EM_BF16_NR);
        _tile_stored(1, t + 16, 4 * EM_BF16_NR);
        _tile_stored(2, t + 16 * EM_BF16_NR, 4 * EM_BF16_NR);
        _tile_stored(3, t + 16 * EM_BF16_NR + 16, 4 * EM_BF16_NR);
        em_bf16_store(t, r1 - r < 32 ? r1 - r : 32, cols, x->c + r * x->ldc + c0, x->ldc,
                      x->bias ? x->bias + c0 : 0);
    }
    _tile_release();
}
#endif
#elif EM_BF16_PATH == 2 || EM_BF16_PATH == 1
/* ---- AVX-512F / AVX2: the packed words widened to float32 on the fly, float32 FMAs ---- */
/* explicit FMAs: strict C11 (-std=c11) does not contract a * b + c */
#if EM_BF16_PATH == 2
#define EM_BF16_VW 16
#define EM_BF16_MR 8
#define EM_BF16_FMA(a, b, c) __builtin_ia32_vfmaddps512_mask((a), (b), (c), (short)-1, 4)
#else
#define EM_BF16_VW 8
#define EM_BF16_MR 3
#define EM_BF16_FMA(a, b, c) __builtin_ia32_vfmaddps256((a), (b), (c))
#endif
#define EM_BF16_NV (EM_BF16_NR / EM_BF16_VW)
typedef float em_bf16_vf __attribute__((vector_size(4 * EM_BF16_VW)));
typedef uint32_t em_bf16_vu __attribute__((vector_size(4 * EM_BF16_VW)));
typedef uint32_t em_bf16_vuu __attribute__((vector_size(4 * EM_BF16_VW), aligned(4)));
static __attribute__((noinline)) void em_bf16_tile(const em_bf16_ctx *x, int64_t r0, int64_t rows,
                                                   const uint32_t *bp, float *t) {
    const int64_t k = x->k, kp = x->kp, full = k / 2;
    const float *ar[EM_BF16_MR];
    for (int r = 0; r < EM_BF16_MR; ++r) ar[r] = x->a + (r0 + (r < rows ? r : 0)) * x->lda;
    em_bf16_vf acc[EM_BF16_MR][EM_BF16_NV];
    memset(acc, 0, sizeof acc);
    const em_bf16_vu himask = (em_bf16_vu){0} + 0xffff0000u;
    for (int64_t p = 0; p < kp; ++p) {
        em_bf16_vf lo[EM_BF16_NV], hi[EM_BF16_NV];
#pragma GCC unroll 4
        for (int v = 0; v < EM_BF16_NV; ++v) {
            const em_bf16_vu w = *(const em_bf16_vuu *)(bp + p * EM_BF16_NR + v * EM_BF16_VW);
            lo[v] = (em_bf16_vf)(w << 16);
            hi[v] = (em_bf16_vf)(w & himask);
        }
        const int two = p < full;
#pragma GCC unroll 8
        for (int r = 0; r < EM_BF16_MR; ++r) {
            const float x0 = ar[r][2 * p], x1 = two ? ar[r][2 * p + 1] : 0.0f;
            const em_bf16_vf a0 = (em_bf16_vf){0} + x0, a1 = (em_bf16_vf){0} + x1;
#pragma GCC unroll 4
            for (int v = 0; v < EM_BF16_NV; ++v) acc[r][v] = EM_BF16_FMA(a1, hi[v], EM_BF16_FMA(a0, lo[v], acc[r][v]));
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < EM_BF16_MR; ++r)
#pragma GCC unroll 4
        for (int v = 0; v < EM_BF16_NV; ++v) memcpy(t + r * EM_BF16_NR + v * EM_BF16_VW, &acc[r][v], 4 * EM_BF16_VW);
}
#else
/* ---- plain C ---- */
#define EM_BF16_MR 4
static void em_bf16_tile(const em_bf16_ctx *x, int64_t r0, int64_t rows, const uint32_t *bp, float *t) {
    const int64_t k = x->k, kp = x->kp;
    memset(t, 0, sizeof(float) * EM_BF16_MR * EM_BF16_NR);
    for (int64_t r = 0; r < rows; ++r) {
        const float *ar = x->a + (r0 + r) * x->lda;
        for (int64_t p = 0; p < kp; ++p) {
            const float x0 = ar[2 * p], x1 = 2 * p + 1 < k ? ar[2 * p + 1] : 0.0f;
            for (int64_t c = 0; c < EM_BF16_NR; ++c) {
                const uint32_t w = bp[p * EM_BF16_NR + c], l = w << 16, h = w & 0xffff0000u;
                float fl, fh;
                memcpy(&fl, &l, 4);
                memcpy(&fh, &h, 4);
                t[r * EM_BF16_NR + c] += x0 * fl + x1 * fh;
            }
        }
    }
}
#endif

/* the tasks of a product: row blocks x groups of panels */
static inline int64_t em_bf16_tasks(const em_bf16_ctx *x) { return x->nrb * ((x->npan + EM_BF16_G - 1) / EM_BF16_G); }

/* task t: the rows of block t / groups against the panels of group t % groups */
static void em_bf16_task(const em_bf16_ctx *x, int64_t t) {
    const int64_t groups = (x->npan + EM_BF16_G - 1) / EM_BF16_G, rb = t / groups, g = t % groups;
    const int64_t r1 = rb * EM_BF16_MC + EM_BF16_MC < x->m ? rb * EM_BF16_MC + EM_BF16_MC : x->m;
    const int64_t j0 = g * EM_BF16_G, j1 = j0 + EM_BF16_G < x->npan ? j0 + EM_BF16_G : x->npan;
#if EM_BF16_PATH == 4
    if (em_bf16_amx_ok()) {
        em_bf16_amx_block(x, rb * EM_BF16_MC, r1, j0, j1);
        return;
    }
#endif
    float tile[EM_BF16_MR * EM_BF16_NR] __attribute__((aligned(64)));
    for (int64_t j = j0; j < j1; ++j) {
        const int64_t c0 = j * EM_BF16_NR, cols = x->n - c0 < EM_BF16_NR ? x->n - c0 : EM_BF16_NR;
        const uint32_t *bp = x->bp + j * x->kps * EM_BF16_NR;
        for (int64_t r = rb * EM_BF16_MC; r < r1; r += EM_BF16_MR) {
            const int64_t rows = r1 - r < EM_BF16_MR ? r1 - r : EM_BF16_MR;
            em_bf16_tile(x, r, rows, bp, tile);
            em_bf16_store(tile, rows, cols, x->c + r * x->ldc + c0, x->ldc, x->bias ? x->bias + c0 : 0);
        }
    }
}

/* task t of the rounding pass (path 3): rows of block t */
static void em_bf16_round_task(const em_bf16_ctx *x, int64_t t) {
    const int64_t r0 = t * EM_BF16_MC, r1 = r0 + EM_BF16_MC < x->m ? r0 + EM_BF16_MC : x->m;
    em_bf16_round_a(x, r0, r1, (uint32_t *)x->ab);
}

#endif
