"""A register-blocked AVX2/FMA float32 matrix product for the small and mid-sized shapes where a
BLAS call loses to its own packing overhead (``C = alpha * op(A) @ op(B) + beta * C``, row-major).

Why: OpenBLAS's ``sgemm`` packs both operands into its own buffers on every call; for a batch of
32 rows against a 512 x 512 weight that copy, and the cold caches of the buffers, cost about a
third of the call. This kernel packs only ``B``, one ``KC x W`` panel at a time into a small stack
buffer (``W`` = 8, 16 or 24 columns) that stays in L1 while every row block of ``A`` runs over it,
so ``B`` is read exactly once per call and never written back to memory. ``A`` is read in place
(any row/column strides: a transposed operand costs nothing extra).

Micro-kernels: ``MR x W`` accumulator tiles held in ``ymm`` registers, ``W / 8`` vector loads of
the packed panel and ``MR`` broadcasts of ``A`` per step of the contraction: 4 x 24 (12
accumulators), 6 x 16 (12) and 8 x 8 (8). The column count picks the widest panel that is not
mostly padding. Rows past ``m`` in the last row block read row 0 again (results discarded), so the
inner loop has no edge branches; partial tiles go through a small buffer in the epilogue.

:func:`c_source` renders the helper (``em_sgemm_small``) for the generated translation unit; it
needs ``__AVX2__`` and ``__FMA__`` (``-march=native`` on such a CPU): :func:`use_small_sgemm` is
the size rule, and the caller emits a BLAS fallback under ``#if`` for other targets.
"""

from __future__ import annotations

__all__ = ["KC", "c_source", "use_small_sgemm"]

KC = 256  # contraction block: a 256 x 24 panel is 24 KiB, within a 32 KiB L1 data cache
# (MR, vectors per row) for each micro-kernel, widest first
_KERNELS = ((4, 3), (6, 2), (8, 1))

# Size rule (float32, one thread), measured against OpenBLAS 0.3.30 (SciPy's) on AVX2 (Zen, 512 KiB
# L2) for m in 8..1000, n, k in 8..4096: the kernel wins by 10-50% while A, re-read once per
# 24-column panel, stays in L2 (m * k floats) and B, read once in strided 96-byte row pieces, is
# not so large that DRAM/TLB misses dominate (k * n floats); beyond either, OpenBLAS's own
# blocking wins (a 64 x 2048 x 2048 product ran 1.28x slower here).
MAX_M = 1024
MAX_A_FLOATS = 128 * 1024  # 512 KiB of A
MAX_B_FLOATS = 1024 * 1024  # 4 MiB of B


def use_small_sgemm(m: int, n: int, k: int) -> bool:
    """Whether a static-shape float32 product ``m x k @ k x n`` goes to :func:`c_source`'s kernel
    rather than BLAS ``sgemm`` (single rows/columns stay with BLAS ``sgemv``)."""
    return 2 <= m <= MAX_M and n >= 2 and k >= 1 and m * k <= MAX_A_FLOATS and k * n <= MAX_B_FLOATS


def _micro_kernel(mr: int, nv: int) -> str:
    w = 8 * nv
    acc = [[f"c{r}_{v}" for v in range(nv)] for r in range(mr)]
    lines = [
        f"static inline __attribute__((always_inline)) void em_sk_{mr}x{w}(int64_t kc,",
        "        const float *const *ar, int64_t csa, const float *restrict bp, float *restrict t) {",
        "    __m256 " + ", ".join(f"{x} = _mm256_setzero_ps()" for row in acc for x in row) + ";",
        *(f"    const float *a{r} = ar[{r}];" for r in range(mr)),
        "    #pragma GCC unroll 2",
        "    for (int64_t p = 0; p < kc; ++p) {",
        *(f"        const __m256 b{v} = _mm256_load_ps(bp + p * {w} + {8 * v});" for v in range(nv)),
    ]
    for r in range(mr):
        lines.append(f"        {{ const __m256 a = _mm256_broadcast_ss(a{r} + p * csa);")
        lines.extend(f"          {acc[r][v]} = _mm256_fmadd_ps(a, b{v}, {acc[r][v]});" for v in range(nv))
        lines.append("        }")
    lines.append("    }")
    lines.extend(f"    _mm256_store_ps(t + {r * w + 8 * v}, {acc[r][v]});"
                 for r in range(mr) for v in range(nv))
    lines.append("}")
    return "\n".join(lines) + "\n"


_DRIVER = """\
/* Pack B[p0 .. p0+kc, j0 .. j0+nr) (element (p, j) at b[p * rsb + j * csb]) as kc rows of w
   floats, zero-padded past nr. */
static inline __attribute__((always_inline)) void em_sk_pack(int64_t kc, int64_t nr, int64_t w,
        const float *b, int64_t rsb, int64_t csb, float *restrict bp) {
    if (csb == 1 && nr == w) {
        for (int64_t p = 0; p < kc; ++p) {
            const float *src = b + p * rsb;
            #pragma omp simd
            for (int64_t j = 0; j < w; ++j) bp[p * w + j] = src[j];
        }
    } else if (csb == 1) {  /* a partial panel: masked loads read the nr columns, zero the rest */
        __m256i mask[3];
        for (int64_t v = 0; v < w / 8; ++v) {
            const int64_t left = nr - 8 * v;
            const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            mask[v] = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(left < 0 ? 0 : left > 8 ? 8 : left)), lane);
        }
        for (int64_t p = 0; p < kc; ++p)
            for (int64_t v = 0; v < w / 8; ++v)
                _mm256_store_ps(bp + p * w + 8 * v, _mm256_maskload_ps(b + p * rsb + 8 * v, mask[v]));
    } else {  /* B transposed: read each column of the panel contiguously */
        for (int64_t j = 0; j < nr; ++j) {
            const float *src = b + j * csb;
            for (int64_t p = 0; p < kc; ++p) bp[p * w + j] = src[p * rsb];
        }
        for (int64_t p = 0; p < kc; ++p)
            for (int64_t j = nr; j < w; ++j) bp[p * w + j] = 0.0f;
    }
}

/* C[i0 .. i0+mr, j0 .. j0+nr) from the tile t (rows of w floats): the first contraction block
   applies beta (beta == 0 does not read C), later ones accumulate. */
static inline void em_sk_store(const float *restrict t, int64_t w, int64_t mr, int64_t nr, float alpha,
                               float beta, int first, float *restrict c, int64_t ldc) {
    for (int64_t r = 0; r < mr; ++r) {
        float *cr = c + r * ldc;
        const float *tr = t + r * w;
        if (!first || beta == 1.0f) {
            #pragma omp simd
            for (int64_t j = 0; j < nr; ++j) cr[j] += alpha * tr[j];
        } else if (beta == 0.0f) {
            #pragma omp simd
            for (int64_t j = 0; j < nr; ++j) cr[j] = alpha * tr[j];
        } else {
            #pragma omp simd
            for (int64_t j = 0; j < nr; ++j) cr[j] = alpha * tr[j] + beta * cr[j];
        }
    }
}

#define EM_SK_PANEL(MR, W)                                                                       \\
    for (int64_t i0 = 0; i0 < m; i0 += MR) {                                                     \\
        const int64_t mr = m - i0 < MR ? m - i0 : MR;                                            \\
        const float *ar[MR];                                                                     \\
        for (int64_t r = 0; r < MR; ++r) ar[r] = a + (r < mr ? i0 + r : 0) * rsa + p0 * csa;     \\
        if (csa == 1) em_sk_##MR##x##W(kc, ar, 1, bp, t);                                        \\
        else em_sk_##MR##x##W(kc, ar, csa, bp, t);                                               \\
        em_sk_store(t, W, mr, nr, alpha, beta, p0 == 0, c + i0 * ldc + j0, ldc);                  \\
    }

/* Row-major C[m, n] (row stride ldc) = alpha * A B + beta * C with A(i, p) at a[i * rsa + p * csa]
   and B(p, j) at b[p * rsb + j * csb]; the column panels [j_begin, j_end) only (a thread's share). */
static void em_sgemm_small_cols(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t rsa,
                                int64_t csa, const float *b, int64_t rsb, int64_t csb, float beta, float *c,
                                int64_t ldc, int64_t j_begin, int64_t j_end) {
    float bp[EM_SK_KC * 24] __attribute__((aligned(64)));
    float t[8 * 24] __attribute__((aligned(64)));
    if (k == 0) {
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = j_begin; j < j_end; ++j)
                c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
        return;
    }
    (void)n;
    for (int64_t j0 = j_begin; j0 < j_end;) {
        const int64_t left = j_end - j0;
        /* 24-wide panels; a 25..32-column remainder as two 16-wide ones (not 24 + a slow 8) */
        const int64_t w = left > 32 || (left > 16 && left <= 24) ? 24 : left > 8 ? 16 : 8;
        const int64_t nr = left < w ? left : w;
        for (int64_t p0 = 0; p0 < k; p0 += EM_SK_KC) {
            const int64_t kc = k - p0 < EM_SK_KC ? k - p0 : EM_SK_KC;
            const float *bpan = b + p0 * rsb + j0 * csb;
            /* each width its own constant-w copy of the packing loop (a runtime w left gcc with a
               slow generic copy loop, doubling the time of small products) */
            if (w == 24) { em_sk_pack(kc, nr, 24, bpan, rsb, csb, bp); EM_SK_PANEL(4, 24) }
            else if (w == 16) { em_sk_pack(kc, nr, 16, bpan, rsb, csb, bp); EM_SK_PANEL(6, 16) }
            else { em_sk_pack(kc, nr, 8, bpan, rsb, csb, bp); EM_SK_PANEL(8, 8) }
        }
        j0 += nr;
    }
}

/* The whole product; with OpenMP and nthreads > 1 (0: the OpenMP default) the column panels are
   split among threads. */
static void em_sgemm_small(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t rsa,
                           int64_t csa, const float *b, int64_t rsb, int64_t csb, float beta, float *c,
                           int64_t ldc, int nthreads) {
    const int64_t panels = (n + 23) / 24;
#ifdef _OPENMP
    if (nthreads == 0) nthreads = omp_get_max_threads();
    if (nthreads > 1 && panels > 1 && !omp_in_parallel()) {
        const int64_t nt = nthreads < panels ? nthreads : panels;
        #pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t q = 0; q < nt; ++q) {
            const int64_t lo = panels * q / nt * 24, hi = panels * (q + 1) / nt * 24;
            em_sgemm_small_cols(m, n, k, alpha, a, rsa, csa, b, rsb, csb, beta, c, ldc, lo, hi < n ? hi : n);
        }
        return;
    }
#endif
    (void)nthreads; (void)panels;
    em_sgemm_small_cols(m, n, k, alpha, a, rsa, csa, b, rsb, csb, beta, c, ldc, 0, n);
}
"""


def c_source() -> str:
    """The C helpers defining ``em_sgemm_small`` (inside ``#if defined(__AVX2__) && defined(__FMA__)``,
    with ``EM_SGEMM_SMALL`` defined to 1 there, to 0 otherwise)."""
    kernels = "".join(_micro_kernel(mr, nv) for mr, nv in _KERNELS)
    return ("#if defined(__AVX2__) && defined(__FMA__)\n#include <immintrin.h>\n#define EM_SGEMM_SMALL 1\n"
            f"#define EM_SK_KC {KC}\n" + kernels + _DRIVER + "#else\n#define EM_SGEMM_SMALL 0\n#endif\n")
