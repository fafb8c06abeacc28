/* em_gk_rows (see native/emit/group_kernel.py): included with EM_GK_MR defined. */
/* C[i, j] = alpha * sum_p A(i, p) Bp[p, j] for rows i < mr (mr <= MR) and columns j < n, with
   A(i, p) at a[i * rsa + p * csa], Bp packed by em_gk_pack (np columns), C rows ldc apart. */
static void em_gk_rows(int64_t mr, int64_t n, int64_t np, int64_t k, float alpha, const float *a,
                       int64_t rsa, int64_t csa, const float *bp, float *c, int64_t ldc) {
    const float *ar[EM_GK_MR];
    for (int64_t r = 0; r < EM_GK_MR; ++r) ar[r] = a + (r < mr ? r : 0) * rsa;
    for (int64_t j0 = 0; j0 < np; j0 += 16) {
        const int64_t w = np - j0 >= 16 ? 16 : 8, cols = n - j0 < w ? n - j0 : w;
        if (w == 16) em_gk_tile16(k, ar, csa, bp + j0, np, alpha, mr, cols, c + j0, ldc);
        else em_gk_tile8(k, ar, csa, bp + j0, np, alpha, mr, cols, c + j0, ldc);
    }
}
