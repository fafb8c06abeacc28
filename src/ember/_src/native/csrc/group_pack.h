/* Row-block products of batch-interleaved groups (group_kernel.py): AVX2/FMA register tiles. */
typedef float em_gv8 __attribute__((vector_size(32)));
typedef float em_gv8u __attribute__((vector_size(32), aligned(4)));
#define EM_GFMA(a, b, c) __builtin_ia32_vfmaddps256((a), (b), (c))
/* bp[p * np + j0 + i] = B(p, j0 + i) for p in [p0, p0 + 8), i < 8, where row j0 + i of B^T (B's
   column, 8 contiguous floats from p0) starts at src + i * csb: an 8 x 8 transpose in registers */
static inline void em_gk_t8x8(const float *src, int64_t csb, float *dst, int64_t np) {
    em_gv8 r0 = *(const em_gv8u *)(src), r1 = *(const em_gv8u *)(src + csb),
           r2 = *(const em_gv8u *)(src + 2 * csb), r3 = *(const em_gv8u *)(src + 3 * csb),
           r4 = *(const em_gv8u *)(src + 4 * csb), r5 = *(const em_gv8u *)(src + 5 * csb),
           r6 = *(const em_gv8u *)(src + 6 * csb), r7 = *(const em_gv8u *)(src + 7 * csb);
    em_gv8 t0 = __builtin_ia32_unpcklps256(r0, r1), t1 = __builtin_ia32_unpckhps256(r0, r1),
           t2 = __builtin_ia32_unpcklps256(r2, r3), t3 = __builtin_ia32_unpckhps256(r2, r3),
           t4 = __builtin_ia32_unpcklps256(r4, r5), t5 = __builtin_ia32_unpckhps256(r4, r5),
           t6 = __builtin_ia32_unpcklps256(r6, r7), t7 = __builtin_ia32_unpckhps256(r6, r7);
    em_gv8 u0 = __builtin_ia32_shufps256(t0, t2, 0x44), u1 = __builtin_ia32_shufps256(t0, t2, 0xEE),
           u2 = __builtin_ia32_shufps256(t1, t3, 0x44), u3 = __builtin_ia32_shufps256(t1, t3, 0xEE),
           u4 = __builtin_ia32_shufps256(t4, t6, 0x44), u5 = __builtin_ia32_shufps256(t4, t6, 0xEE),
           u6 = __builtin_ia32_shufps256(t5, t7, 0x44), u7 = __builtin_ia32_shufps256(t5, t7, 0xEE);
    *(em_gv8u *)(dst) = __builtin_ia32_vperm2f128_ps256(u0, u4, 0x20);
    *(em_gv8u *)(dst + np) = __builtin_ia32_vperm2f128_ps256(u1, u5, 0x20);
    *(em_gv8u *)(dst + 2 * np) = __builtin_ia32_vperm2f128_ps256(u2, u6, 0x20);
    *(em_gv8u *)(dst + 3 * np) = __builtin_ia32_vperm2f128_ps256(u3, u7, 0x20);
    *(em_gv8u *)(dst + 4 * np) = __builtin_ia32_vperm2f128_ps256(u0, u4, 0x31);
    *(em_gv8u *)(dst + 5 * np) = __builtin_ia32_vperm2f128_ps256(u1, u5, 0x31);
    *(em_gv8u *)(dst + 6 * np) = __builtin_ia32_vperm2f128_ps256(u2, u6, 0x31);
    *(em_gv8u *)(dst + 7 * np) = __builtin_ia32_vperm2f128_ps256(u3, u7, 0x31);
}
/* B(p, j) (p < k, j < n) at b[p * rsb + j * csb] into bp[p * np + j], zero past n (np % 8 == 0) */
static void em_gk_pack(int64_t k, int64_t n, int64_t np, const float *b, int64_t rsb, int64_t csb,
                       float *restrict bp) {
    if (rsb == 1 && csb != 1 && k % 8 == 0) {  /* B^T rows contiguous (K of attention): 8 x 8 blocks */
        const int64_t n8 = n / 8 * 8;
        for (int64_t j = 0; j < n8; j += 8)
            for (int64_t p = 0; p < k; p += 8) em_gk_t8x8(b + j * csb + p, csb, bp + p * np + j, np);
        for (int64_t j = n8; j < n; ++j)
            for (int64_t p = 0; p < k; ++p) bp[p * np + j] = b[j * csb + p];
        for (int64_t p = 0; p < k; ++p)
            for (int64_t j = n; j < np; ++j) bp[p * np + j] = 0.0f;
    } else if (csb == 1) {
        for (int64_t p = 0; p < k; ++p) {
            for (int64_t j = 0; j < n; ++j) bp[p * np + j] = b[p * rsb + j];
            for (int64_t j = n; j < np; ++j) bp[p * np + j] = 0.0f;
        }
    } else {  /* columns of B are contiguous runs (rsb == 1 when B is a transposed operand) */
        for (int64_t j = 0; j < n; ++j) {
            const float *src = b + j * csb;
            for (int64_t p = 0; p < k; ++p) bp[p * np + j] = src[p * rsb];
        }
        for (int64_t p = 0; p < k; ++p)
            for (int64_t j = n; j < np; ++j) bp[p * np + j] = 0.0f;
    }
}
