/* The float32 GEMM kernel's drivers (native/emit/gemm_kernel.py): packing, the tile store with its
   fused bias/ReLU epilogue, the per-panel loops of the small-product path, the blocked path for
   large products (A packed) and the prepacked-B entry, with their splits over ember's thread pool.
   Included after the generated head (the ISA's vector type em_vf, EM_FMA and the tile-shape
   macros EM_SK_*) and micro-kernels (em_sk_t3, em_sk_t2, em_sk_t1 and their shorter variants, which
   em_sk_block_short runs through em_sk_t*_short and the tables em_sk_t*_rows; em_sk_row; em_sk_pa3,
   em_sk_pa2, em_sk_pa1 on packed A);
   EM_SK_POOL_SYMBOL names the thread pool's entry (a string). */
/* Pack B[p0 .. p0+kc, j0 .. j0+nr) (element (p, j) at b[p * rsb + j * csb]) as kc rows of w
   floats (w = W1, W2 or W3), zero-padded past nr. */
static __attribute__((noinline)) void em_sk_pack(int64_t kc, int64_t nr, int64_t w, const float *b,
                                                 int64_t rsb, int64_t csb, float *restrict bp) {
    const int64_t nv = w / EM_SK_VW;
    if (csb == 1 && nr == w) {
        for (int64_t p = 0; p < kc; ++p)
            for (int64_t v = 0; v < nv; ++v)
                *(em_vf *)(bp + p * w + EM_SK_VW * v) = *(const em_vfu *)(b + p * rsb + EM_SK_VW * v);
    } else if (csb == 1) {  /* a partial panel: masked loads read the nr columns, zero the rest */
#if EM_SK_VW == 8
        em_vi mask[3];
        for (int64_t v = 0; v < nv; ++v)
            for (int l = 0; l < 8; ++l) mask[v][l] = 8 * v + l < nr ? -1 : 0;
        for (int64_t p = 0; p < kc; ++p)
            for (int64_t v = 0; v < nv; ++v)
                *(em_vf *)(bp + p * w + 8 * v) =
                    __builtin_ia32_maskloadps256((const em_vf *)(b + p * rsb + 8 * v), mask[v]);
#else
        const em_vf zero = {0};
        for (int64_t p = 0; p < kc; ++p)
            for (int64_t v = 0; v < nv; ++v) {
                const int64_t left = nr - EM_SK_VW * v;
                const short mask = left >= EM_SK_VW ? (short)-1 : left <= 0 ? 0 : (short)((1 << left) - 1);
                *(em_vf *)(bp + p * w + EM_SK_VW * v) =
                    __builtin_ia32_loadups512_mask(b + p * rsb + EM_SK_VW * v, zero, mask);
            }
#endif
    } else {  /* B transposed: read each column of the panel contiguously */
        for (int64_t j = 0; j < nr; ++j) {
            const float *src = b + j * csb;
            for (int64_t p = 0; p < kc; ++p) bp[p * w + j] = src[p * rsb];
        }
        for (int64_t p = 0; p < kc; ++p)
            for (int64_t j = nr; j < w; ++j) bp[p * w + j] = 0.0f;
    }
}

/* One row of the epilogue: cr[j] = EXPR (j in [0, nr)), then on the last contraction block
   (post) + bias[j] and/or the ReLU max(v, 0) that keeps NaN (v > 0 || v != v ? v : 0). */
#define EM_SK_ROW(EXPR) do { \
    if (!post) { \
        _Pragma("omp simd") for (int64_t j = 0; j < nr; ++j) cr[j] = (EXPR); \
    } else if (bias && relu) { \
        _Pragma("omp simd") for (int64_t j = 0; j < nr; ++j) { \
            const float v_ = (EXPR) + bias[j]; cr[j] = v_ > 0.0f || v_ != v_ ? v_ : 0.0f; } \
    } else if (bias) { \
        _Pragma("omp simd") for (int64_t j = 0; j < nr; ++j) cr[j] = (EXPR) + bias[j]; \
    } else { \
        _Pragma("omp simd") for (int64_t j = 0; j < nr; ++j) { \
            const float v_ = (EXPR); cr[j] = v_ > 0.0f || v_ != v_ ? v_ : 0.0f; } \
    } } while (0)

/* C[i0 .. i0+mr, j0 .. j0+nr) from the tile t (rows of w floats): the first contraction block
   applies beta (beta == 0 does not read C), later ones accumulate; the last one also applies the
   fused epilogue (bias: the columns' bias vector from j0, or null; relu). */
static inline void em_sk_store(const float *restrict t, int64_t w, int64_t mr, int64_t nr, float alpha,
                               float beta, int first, int last, const float *restrict bias, int relu,
                               float *restrict c, int64_t ldc) {
    const int post = last && (bias || relu);
    for (int64_t r = 0; r < mr; ++r) {
        float *restrict cr = c + r * ldc;
        const float *restrict tr = t + r * w;
        if (!first || beta == 1.0f) EM_SK_ROW(cr[j] + alpha * tr[j]);
        else if (beta == 0.0f) EM_SK_ROW(alpha * tr[j]);
        else EM_SK_ROW(alpha * tr[j] + beta * cr[j]);
    }
}

/* A narrow product: C[0 .. m, 0 .. nr) (all of its nr <= EM_SK_NARROW columns: one panel, so
   whatever the thread count its sums are the same) on the dot kernels (em_sk_dot: vectorised along
   the contraction, A's rows read in place, csa == 1, the whole contraction in one block, vw <= k <=
   EM_SK_DOT_MAXK) from op(B) transposed, bt: row j (column j of op(B)) at bt + j * ldbt, zero-padded
   to a whole vector (em_sk_dot_ld; prepack_b's layout for such a B); then beta, bias and ReLU as
   em_sk_store applies them. Taken for any number of rows (a row's sums do not depend on m). */
#define EM_SK_DOT_MAXK 1024
static inline int em_sk_use_dot(int64_t n, int64_t k, int64_t csa) {
    return n <= EM_SK_NARROW && csa == 1 && k >= EM_SK_VW && k <= EM_SK_DOT_MAXK;
}
/* rows a whole number of vectors plus one cache line apart (not a multiple of 4 KiB: the kernel's
   loads of one step then fall in different L1 sets) */
static inline int64_t em_sk_dot_ld(int64_t k) { return (k + EM_SK_VW - 1) / EM_SK_VW * EM_SK_VW + 16; }
static void em_sk_dot_all(int64_t m, int64_t k, float alpha, const float *a, int64_t rsa, const float *bt,
                          int64_t ldbt, float beta, float *c, int64_t ldc, const float *bias, int relu,
                          int64_t nr) {
    float t[EM_SK_DOT_MAXROWS * EM_SK_NARROW];
    const int64_t rows = em_sk_dot_rows[nr];
    for (int64_t i0 = 0; i0 < m; i0 += rows) {
        const int64_t mr = m - i0 < rows ? m - i0 : rows;
        const float *ar[EM_SK_DOT_MAXROWS];
        for (int64_t r = 0; r < rows; ++r) ar[r] = a + (i0 + (r < mr ? r : 0)) * rsa;
        em_sk_dot(nr, k, ar, bt, ldbt, t);
        em_sk_store(t, nr, mr, nr, alpha, beta, 1, 1, bias, relu, c + i0 * ldc, ldc);
    }
}
/* em_sk_dot_all on op(B) (element (p, j) at b[p * rsb + j * csb]), transposed into a stack buffer
   first. */
static __attribute__((noinline)) void em_sk_narrow(int64_t m, int64_t k, float alpha, const float *a, int64_t rsa,
                                                   const float *b, int64_t rsb, int64_t csb, float beta,
                                                   float *c, int64_t ldc, const float *bias, int relu,
                                                   int64_t nr) {
    float bt[EM_SK_NARROW * (EM_SK_DOT_MAXK + 16)] __attribute__((aligned(64)));
    const int64_t ldbt = em_sk_dot_ld(k);
    if (csb == 1) {  /* MR3 x MR3 blocks transposed in registers (as em_sk_pack_a), the rest copied */
        const em_vri lo = EM_SK_ZIP_LO, hi = EM_SK_ZIP_HI;
        const int64_t jv = nr / EM_SK_MR3 * EM_SK_MR3, pv = k / EM_SK_MR3 * EM_SK_MR3;
        for (int64_t j0 = 0; j0 < jv; j0 += EM_SK_MR3)
            for (int64_t p0 = 0; p0 < pv; p0 += EM_SK_MR3) {
                em_vr x[EM_SK_MR3], y[EM_SK_MR3];
                #pragma GCC unroll 16
                for (int64_t r = 0; r < EM_SK_MR3; ++r) x[r] = *(const em_vru *)(b + (p0 + r) * rsb + j0);
                EM_ZIP_TRANSPOSE(x, y, EM_SK_MR3, lo, hi);
                #pragma GCC unroll 16
                for (int64_t r = 0; r < EM_SK_MR3; ++r) *(em_vru *)(bt + (j0 + r) * ldbt + p0) = x[r];
            }
        for (int64_t p = 0; p < k; ++p)
            for (int64_t j = p < pv ? jv : 0; j < nr; ++j) bt[j * ldbt + p] = b[p * rsb + j];
    } else {
        for (int64_t j = 0; j < nr; ++j)
            for (int64_t p = 0; p < k; ++p) bt[j * ldbt + p] = b[p * rsb + j * csb];
    }
    for (int64_t j = 0; j < nr; ++j)
        for (int64_t p = k; p < ldbt; ++p) bt[j * ldbt + p] = 0.0f;
    em_sk_dot_all(m, k, alpha, a, rsa, bt, ldbt, beta, c, ldc, bias, relu, nr);
}

/* The width of the next column panel when `left` columns remain: W3-wide panels; a remainder of
   W3 + 1 .. W3 + W1 columns as two W2-wide ones (not W3 + a slow W1). */
static inline int64_t em_sk_panel_width(int64_t left) {
    return left > 4 * EM_SK_VW || (left > EM_SK_W2 && left <= EM_SK_W3) ? EM_SK_W3
           : left > EM_SK_W1 ? EM_SK_W2 : EM_SK_W1;
}

/* A short last row block (rows [i0, i0 + mr), mr below the panel's tile height, not em_sk_row's
   case) on the shortest variant that covers its rows (em_sk_t*_short; rows past mr read row 0 again
   and are not stored). Apart from em_sk_block, so the full tiles' path stays as it was (with the
   variants' dispatch inlined there, a profile of the training step counted 2% more time in this
   library). */
static __attribute__((noinline)) void em_sk_block_short(
    int64_t kc, int64_t w, int64_t mr, float alpha, const float *a, int64_t rsa, int64_t csa, const float *bp,
    float *t, const char *pf, int64_t pfs, int64_t npf, const float *bs, int64_t rsb, float beta, int first,
    int last, const float *bias, int relu, int64_t nr, float *c, int64_t ldc) {
    const int64_t mk = (w == EM_SK_W3 ? em_sk_t3_rows : w == EM_SK_W2 ? em_sk_t2_rows : em_sk_t1_rows)[mr];
    const float *ar[EM_SK_MRMAX];
    for (int64_t r = 0; r < mk; ++r) ar[r] = a + (r < mr ? r : 0) * rsa;
    const int direct = first && last && alpha == 1.0f && (beta == 0.0f || beta == 1.0f) && mr == mk && nr == w;
    float *td = direct ? c : t;
    const int64_t ldt = direct ? ldc : w;
    const float *db = direct ? bias : 0;
    const int dr = direct ? (relu ? 1 : 0) | (beta == 1.0f ? 2 : 0) : 0;  /* flags: ReLU, C += */
    if (w == EM_SK_W3) em_sk_t3_short(mk, kc, ar, csa, bp, td, ldt, pf, pfs, npf, bs, rsb, db, dr);
    else if (w == EM_SK_W2) em_sk_t2_short(mk, kc, ar, csa, bp, td, ldt, pf, pfs, npf, bs, rsb, db, dr);
    else em_sk_t1_short(mk, kc, ar, csa, bp, td, ldt, pf, pfs, npf, bs, rsb, db, dr);
    if (!direct) em_sk_store(t, w, mr, nr, alpha, beta, first, last, bias, relu, c, ldc);
}

/* One row block (rows [i0, i0 + mr), mr <= mrw, the panel's tile height) against one kc x w block
   of a packed panel bp; a short one whose rows a shorter tile covers goes to em_sk_block_short. */
static inline void em_sk_block(int64_t kc, int64_t w, int64_t mrw, int64_t mr, float alpha,
                               const float *a, int64_t rsa, int64_t csa, const float *bp, float *t,
                               const char *pf, int64_t pfs, int64_t npf, const float *bs, int64_t rsb,
                               float beta, int first, int last, const float *bias, int relu, int64_t nr,
                               float *c, int64_t ldc) {
    if (mr < mrw && !(w == EM_SK_W3 && mr == 1 && !bs)
        && (w == EM_SK_W3 ? em_sk_t3_rows : w == EM_SK_W2 ? em_sk_t2_rows : em_sk_t1_rows)[mr] < mrw) {
        em_sk_block_short(kc, w, mr, alpha, a, rsa, csa, bp, t, pf, pfs, npf, bs, rsb, beta, first, last,
                          bias, relu, nr, c, ldc);
        return;
    }
    const float *ar[EM_SK_MRMAX];
    for (int64_t r = 0; r < mrw; ++r) ar[r] = a + (r < mr ? r : 0) * rsa;
    /* a whole tile of a product in one contraction block without scaling (beta 0, or beta 1: C added
       in registers first, a residual) is stored from the accumulators straight into C, its bias and
       ReLU applied in registers; otherwise through t and em_sk_store */
    const int direct = first && last && alpha == 1.0f && (beta == 0.0f || beta == 1.0f) && mr == mrw
                       && nr == w;
    float *td = direct ? c : t;
    const int64_t ldt = direct ? ldc : w;
    const float *db = direct ? bias : 0;
    const int dr = direct ? (relu ? 1 : 0) | (beta == 1.0f ? 2 : 0) : 0;  /* flags: ReLU, C += */
    if (w == EM_SK_W3 && mr == 1 && !bs) em_sk_row(kc, ar, csa, bp, td, ldt, pf, pfs, npf, bs, rsb, db, dr);
    else if (w == EM_SK_W3) em_sk_t3(kc, ar, csa, bp, td, ldt, pf, pfs, npf, bs, rsb, db, dr);
    else if (w == EM_SK_W2) em_sk_t2(kc, ar, csa, bp, td, ldt, pf, pfs, npf, bs, rsb, db, dr);
    else em_sk_t1(kc, ar, csa, bp, td, ldt, pf, pfs, npf, bs, rsb, db, dr);
    if (!direct) em_sk_store(t, w, mr, nr, alpha, beta, first, last, bias, relu, c, ldc);
}

/* Row-major C[m, n] (row stride ldc) = alpha * A B + beta * C with A(i, p) at a[i * rsa + p * csa]
   and B(p, j) at b[p * rsb + j * csb], then + bias[j] (bias non-null) and max(., 0) (relu, NaN
   kept); the column panels [j_begin, j_end) only (a thread's share). */
static void em_sgemm_small_cols(int64_t m, int64_t k, float alpha, const float *a, int64_t rsa, int64_t csa,
                                const float *b, int64_t rsb, int64_t csb, float beta, float *c, int64_t ldc,
                                const float *bias, int relu, int64_t j_begin, int64_t j_end) {
    float bp[2 * EM_SK_KC * EM_SK_W3] __attribute__((aligned(64)));
    float t[EM_SK_TILE] __attribute__((aligned(64)));
    if (k == 0) {
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = j_begin; j < j_end; ++j) {
                float v = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
                if (bias) v += bias[j];
                c[i * ldc + j] = relu && !(v > 0.0f || v != v) ? 0.0f : v;
            }
        return;
    }
    /* the whole contraction as one block up to 2 KC (one pass over C); beyond, KC at a time */
    const int64_t KCB = k <= 2 * EM_SK_KC ? k : EM_SK_KC;
    for (int64_t j0 = j_begin; j0 < j_end;) {
        const int64_t left = j_end - j0, w = em_sk_panel_width(left);
        const int64_t nr = left < w ? left : w, mrw = EM_SK_MRW(w);
        if (j_begin == 0 && em_sk_use_dot(j_end, k, csa)) {
            em_sk_narrow(m, k, alpha, a, rsa, b + j0 * csb, rsb, csb, beta, c + j0, ldc, bias ? bias + j0 : 0, relu,
                         nr);
            j0 += nr;
            continue;
        }
        for (int64_t p0 = 0; p0 < k; p0 += KCB) {
            const int64_t kc = k - p0 < KCB ? k - p0 : KCB;
            /* a full panel of row-major B is packed by the first row block's micro-kernel */
            const int fused = csb == 1 && nr == w;
            if (!fused) em_sk_pack(kc, nr, w, b + p0 * rsb + j0 * csb, rsb, csb, bp);
            /* the next panel packed: (p0 + KC, j0), else (0, j0 + nr) while within [j_begin, j_end);
               the row blocks share out prefetching its rows (block ib of nb: [npf0 ib / nb,
               npf0 (ib + 1) / nb)) */
            const int64_t p0n = p0 + KCB < k ? p0 + KCB : 0, j0n = p0n ? j0 : j0 + nr;
            const int64_t kcn = k - p0n < KCB ? k - p0n : KCB;
            const int64_t npf0 = csb == 1 && j0n < j_end ? (kc < kcn ? kc : kcn) : 0;
            const char *pf = (const char *)(b + p0n * rsb + j0n * csb);
            const int64_t pfs = rsb * (int64_t)sizeof(float), nb = (m + mrw - 1) / mrw;
            for (int64_t i0 = 0, ib = 0; i0 < m; i0 += mrw, ++ib) {
                const int64_t mr = m - i0 < mrw ? m - i0 : mrw;
                const int64_t q0 = npf0 * ib / nb, npf = npf0 * (ib + 1) / nb - q0;
                em_sk_block(kc, w, mrw, mr, alpha, a + i0 * rsa + p0 * csa, rsa, csa, bp, t, pf + q0 * pfs,
                            pfs, npf, fused && ib == 0 ? b + p0 * rsb + j0 : 0, rsb, beta, p0 == 0,
                            p0 + kc == k, bias ? bias + j0 : 0, relu, nr, c + i0 * ldc + j0, ldc);
            }
        }
        j0 += nr;
    }
}

/* The number of column panels over [0, n). */
static int64_t em_sk_panels(int64_t n) {
    int64_t panels = 0;
    for (int64_t j0 = 0; j0 < n; ++panels) {
        const int64_t w = em_sk_panel_width(n - j0);
        j0 += n - j0 < w ? n - j0 : w;
    }
    return panels;
}

/* The first column of panel q of [0, n) (n for q past the last), and the panel that starts at
   column j (the number of panels for j = n). */
static int64_t em_sk_panel_col(int64_t n, int64_t q) {
    int64_t j0 = 0;
    for (; j0 < n && q > 0; --q) {
        const int64_t w = em_sk_panel_width(n - j0);
        j0 += n - j0 < w ? n - j0 : w;
    }
    return j0;
}
static int64_t em_sk_panel_index(int64_t n, int64_t j) {
    int64_t q = 0;
    for (int64_t j0 = 0; j0 < j; ++q) {
        const int64_t w = em_sk_panel_width(n - j0);
        j0 += n - j0 < w ? n - j0 : w;
    }
    return q;
}

/* A[i0 .. i0+mc, p0 .. p0+kc) (element (i, p) at a[i * rsa + p * csa]) packed as slivers of MR3 rows:
   row i at ap + (i / MR3) * MR3 * kc + i % MR3, its kc elements MR3 floats apart; rows past mc of
   the last sliver are zero. */
static void em_sk_pack_a(int64_t mc, int64_t kc, const float *a, int64_t rsa, int64_t csa,
                         float *restrict ap) {
    for (int64_t i0 = 0; i0 < mc; i0 += EM_SK_MR3) {
        float *restrict dst = ap + i0 * kc;
        const int64_t mr = mc - i0 < EM_SK_MR3 ? mc - i0 : EM_SK_MR3;
        if (csa == 1 && mr == EM_SK_MR3) {  /* MR3 x MR3 blocks, transposed in registers */
            const em_vri lo = EM_SK_ZIP_LO, hi = EM_SK_ZIP_HI;
            int64_t p0 = 0;
            for (; p0 + EM_SK_MR3 <= kc; p0 += EM_SK_MR3) {
                em_vr x[EM_SK_MR3], y[EM_SK_MR3];
                #pragma GCC unroll 16
                for (int64_t r = 0; r < EM_SK_MR3; ++r) x[r] = *(const em_vru *)(a + (i0 + r) * rsa + p0);
                EM_ZIP_TRANSPOSE(x, y, EM_SK_MR3, lo, hi);
                #pragma GCC unroll 16
                for (int64_t r = 0; r < EM_SK_MR3; ++r) *(em_vru *)(dst + (p0 + r) * EM_SK_MR3) = x[r];
            }
            for (; p0 < kc; ++p0)
                for (int64_t r = 0; r < EM_SK_MR3; ++r) dst[p0 * EM_SK_MR3 + r] = a[(i0 + r) * rsa + p0];
            continue;
        }
        if (rsa == 1 && mr == EM_SK_MR3) {  /* A transposed: the sliver's rows are contiguous per p */
            for (int64_t p = 0; p < kc; ++p)
                for (int64_t r = 0; r < EM_SK_MR3; ++r) dst[p * EM_SK_MR3 + r] = a[p * csa + i0 + r];
            continue;
        }
        for (int64_t p = 0; p < kc; ++p)
            for (int64_t r = 0; r < EM_SK_MR3; ++r)
                dst[p * EM_SK_MR3 + r] = r < mr ? a[(i0 + r) * rsa + p * csa] : 0.0f;
    }
}

/* A 64-byte aligned buffer of n floats (aligned_alloc wants a multiple of the alignment), or null. */
static float *em_sk_alloc(int64_t n) {
    return (float *)aligned_alloc(64, ((size_t)n * sizeof(float) + 63) & ~(size_t)63);
}

static void em_sgemm_small_cols(int64_t m, int64_t k, float alpha, const float *a, int64_t rsa, int64_t csa,
                                const float *b, int64_t rsb, int64_t csb, float beta, float *c, int64_t ldc,
                                const float *bias, int relu, int64_t j_begin, int64_t j_end);
static void em_sgemm_packed_cols(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t rsa,
                                 int64_t csa, const float *bpk, float beta, float *c, int64_t ldc,
                                 const float *bias, int relu, int64_t q_begin, int64_t q_end);

/* A prepacked narrow B (n <= EM_SK_NARROW: prepack_b packs op(B) transposed, em_sk_dot_ld floats per
   column): em_sk_dot_all where its rule holds, else the packing path reading it through strides (the
   same sums as the packing entry on the original B either way). */
static void em_sgemm_packed_narrow(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t rsa,
                                   int64_t csa, const float *bpk, float beta, float *c, int64_t ldc,
                                   const float *bias, int relu) {
    const int64_t ld = em_sk_dot_ld(k);
    if (em_sk_use_dot(n, k, csa)) em_sk_dot_all(m, k, alpha, a, rsa, bpk, ld, beta, c, ldc, bias, relu, n);
    else em_sgemm_small_cols(m, k, alpha, a, rsa, csa, bpk, 1, ld, beta, c, ldc, bias, relu, 0, n);
}

/* A packed once for every part of a product split by columns (each part needs all of A): block
   (kb, ib), the rows [ib MC, ib MC + MC) of contraction block kb (kcb steps), at
   buf + (kb nmc + ib) MC kcb, with its state (0 not packed, 1 being packed, 2 ready). */
struct em_sk_apk { float *buf; int *state; int64_t nmc, kcb; };
#ifndef EM_SK_APK_INIT  /* every block's state at the start (tests set 1: each part packs its own) */
#define EM_SK_APK_INIT 0
#endif
/* The packed block (kb, ib) of A: the shared one when it is ready, else packed into the shared
   buffer by the first part to need it; a part that finds it being packed by another thread packs
   its own copy into priv rather than wait (no part ever waits on another). */
static const float *em_sk_a_block(struct em_sk_apk *sa, int64_t kb, int64_t ib, int64_t mc, int64_t kc,
                                  const float *a, int64_t rsa, int64_t csa, float *priv) {
    if (sa) {
        int *st = sa->state + kb * sa->nmc + ib;
        float *dst = sa->buf + (kb * sa->nmc + ib) * EM_SK_BIG_MC * sa->kcb;
        int want = 0;
        if (__atomic_load_n(st, __ATOMIC_ACQUIRE) == 2) return dst;
        if (__atomic_compare_exchange_n(st, &want, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            em_sk_pack_a(mc, kc, a, rsa, csa, dst);
            __atomic_store_n(st, 2, __ATOMIC_RELEASE);
            return dst;
        }
    }
    em_sk_pack_a(mc, kc, a, rsa, csa, priv);
    return priv;
}

/* The contraction block of em_sgemm_big: k in equal blocks of at most EM_SK_BIG_KC steps. */
static inline int64_t em_sk_big_kcb(int64_t k) {
    const int64_t nkb = (k + EM_SK_BIG_KC - 1) / EM_SK_BIG_KC;
    return (k + nkb - 1) / nkb;
}
/* Panels of B per block of em_sgemm_big (of `parts` panels, contraction k): EM_SK_BIG_NP, or where
   EM_SK_BIG_L2 is set as many kc x W3 panels as that many bytes hold (the block stays in L2 while
   every sliver of A runs over it), the parts cut into equal blocks (24 panels of 512 steps at 1 MiB:
   three blocks of 8, not 10, 10 and 4); all the parts as one block where they take at most 1.5
   times that (1576 x 3072 x 768: 16 panels of 512 steps, 1.5 MiB, ran about 5% faster as one block
   than as two of 8, with A then packed twice). */
/* The bytes of a block of B panels: EM_SK_BIG_L2, at most half this machine's L2 where the C
   library reports its size (a 1 MiB L2, as Zen 4's, gets 512 KiB: unmeasured there; on Sapphire
   Rapids, 2 MiB, 512 KiB ran level with 1 MiB). It changes no sums. */
static int64_t em_sk_l2_budget(void) {
    static int64_t cached;
    int64_t v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (!v) {
#ifdef _SC_LEVEL2_CACHE_SIZE
        const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
#else
        const long l2 = 0;
#endif
        v = l2 >= (64L << 10) && l2 / 2 < EM_SK_BIG_L2 ? l2 / 2 : EM_SK_BIG_L2;
        __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
    }
    return v;
}
static inline int64_t em_sk_big_np(int64_t k, int64_t parts) {
    if (!EM_SK_BIG_L2) return EM_SK_BIG_NP;
    const int64_t panel = em_sk_big_kcb(k) * EM_SK_W3 * (int64_t)sizeof(float), budget = em_sk_l2_budget();
    if (parts <= EM_SK_BIG_NP && 2 * parts * panel <= 3 * budget) return parts;
    const int64_t npl = budget / panel;
    const int64_t cap = npl < 1 ? 1 : npl < EM_SK_BIG_NP ? npl : EM_SK_BIG_NP;
    const int64_t blocks = (parts + cap - 1) / cap;
    return blocks < 1 ? cap : (parts + blocks - 1) / blocks;
}

/* One MR3-row sliver of packed A (mr rows left in its row block) against one packed kc x w panel
   (nr columns) of em_sgemm_big, into C at cc: a whole tile whose block needs no scaling goes
   straight from the accumulators to C, stored (the first block, beta 0) or added, the last block's
   bias and ReLU applied in registers (the same sums as em_sk_store's: ViT-B/16's products all have
   a bias); otherwise through t and em_sk_store. */
static inline void em_sk_big_tile(int64_t kc, const float *ap, const float *bp, int64_t w, int64_t nr,
                                  int64_t mr, float alpha, float beta, int first, int last, const float *bias,
                                  int relu, float *cc, int64_t ldc, float *t) {
    if (mr > EM_SK_MR3) mr = EM_SK_MR3;
    const int add = !first || beta == 1.0f;
    const int direct = alpha == 1.0f && (add || beta == 0.0f) && mr == EM_SK_MR3 && nr == w;
    float *td = direct ? cc : t;
    const int64_t ldt = direct ? ldc : w;
    const float *db = direct && last ? bias : 0;
    const int dr = direct && last && relu;
    /* the tile of C, needed after the kernel's kc steps: fetched meanwhile */
    for (int64_t r = 0; r < mr; ++r)
        for (int64_t j = 0; j < nr; j += 16) __builtin_prefetch(cc + r * ldc + j, 1, 3);
    if (w == EM_SK_W3) em_sk_pa3(kc, ap, bp, td, ldt, direct && add, db, dr);
    else if (w == EM_SK_W2) em_sk_pa2(kc, ap, bp, td, ldt, direct && add, db, dr);
    else em_sk_pa1(kc, ap, bp, td, ldt, direct && add, db, dr);
    if (!direct) em_sk_store(t, w, mr, nr, alpha, beta, first, last, bias, relu, cc, ldc);
}

/* Large products, the columns [j_begin, j_end) of [0, n) (whole prepacked panels where bpk is
   given; same result as em_sgemm_small_cols up to summation order): GotoBLAS/BLIS-style blocking.
   Per block of panels (em_sk_big_np: sized for L2 where EM_SK_BIG_L2 is set, else EM_SK_BIG_NP
   panels) and block of contraction steps (em_sk_big_kcb), B is packed once (bpk null; else the
   prepacked panels are read in place) into panels that sit in L2 together; per block of
   EM_SK_BIG_MC rows, A is packed into slivers of MR3 rows (em_sk_pack_a; or read from sa, packed
   once for every part of a product, em_sk_a_block); then each sliver (in L1) runs over every panel
   of the block, or (one block of panels, or EM_SK_BIG_L2 unset) every sliver over each panel in
   turn. Packing A makes its rows contiguous: the small
   kernel reads MR3 rows of A in place, whose strides (e.g. 4 KiB) alias in L1 and the TLB, once
   per panel. Buffers come from the heap (the small kernel's path when that fails). */
static void em_sgemm_big(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t rsa,
                         int64_t csa, const float *b, int64_t rsb, int64_t csb, const float *bpk, float beta,
                         float *c, int64_t ldc, const float *bias, int relu, int64_t j_begin, int64_t j_end,
                         struct em_sk_apk *sa) {
    enum { MC = EM_SK_BIG_MC, NP = EM_SK_BIG_NP };
    /* prepacked panels follow prepack_b's layout over [0, n); B packed here is cut into panels of
       this part of the columns alone (a part of 256 columns: four of 48 and two of 32) */
    const int64_t pend = bpk ? n : j_end;
    int64_t parts = 0;
    for (int64_t j = j_begin; j < j_end; ++parts) {
        const int64_t w = em_sk_panel_width(pend - j);
        j += pend - j < w ? pend - j : w;
    }
    /* the contraction in equal blocks of at most EM_SK_BIG_KC steps (no short last block) */
    const int64_t kcb = em_sk_big_kcb(k);
    const int64_t NPB = em_sk_big_np(k, parts);
    const int64_t nbp = parts < NPB ? parts : NPB;  /* panels of B packed at once */
    const int by_sliver = EM_SK_BIG_L2 && nbp < parts;
    float *ap = em_sk_alloc(MC * kcb);
    float *bb = bpk ? 0 : em_sk_alloc(nbp * EM_SK_W3 * kcb);
    if (!ap || (!bpk && !bb)) {
        free(ap);
        free(bb);
        if (bpk) {
            em_sgemm_packed_cols(m, n, k, alpha, a, rsa, csa, bpk, beta, c, ldc, bias, relu,
                                 em_sk_panel_index(n, j_begin), em_sk_panel_index(n, j_end));
            return;
        }
        em_sgemm_small_cols(m, k, alpha, a, rsa, csa, b, rsb, csb, beta, c, ldc, bias, relu, j_begin, j_end);
        return;
    }
    int64_t j0 = j_begin;
    /* row blocks of MC; parts sharing A start at row blocks spread as their columns are (the first
       of two concurrent parts packs blocks 0, 1, .. while the second packs from a later one on, so
       each mostly finds the other's blocks ready, rather than both packing the same ones) */
    const int64_t nmc = (m + MC - 1) / MC, rot = sa ? nmc * j_begin / n : 0;
    float t[EM_SK_TILE] __attribute__((aligned(64)));
    for (int64_t qc = 0; qc < parts; qc += NPB) {
        const int64_t np = parts - qc < NPB ? parts - qc : NPB;
        int64_t pj[NP], pw[NP], pn[NP];  /* each panel's first column, width and columns */
        for (int64_t i = 0; i < np; ++i) {
            pj[i] = j0;
            pw[i] = em_sk_panel_width(pend - j0);
            pn[i] = pend - j0 < pw[i] ? pend - j0 : pw[i];
            j0 += pn[i];
        }
        for (int64_t p0 = 0; p0 < k; p0 += kcb) {
            const int64_t kc = k - p0 < kcb ? k - p0 : kcb;
            const int first = p0 == 0, last = p0 + kc == k;
            const float *pb[NP];
            for (int64_t i = 0, off = 0; i < np; ++i) {
                if (bpk) {
                    pb[i] = bpk + pj[i] * k + p0 * pw[i];
                } else {
                    em_sk_pack(kc, pn[i], pw[i], b + p0 * rsb + pj[i] * csb, rsb, csb, bb + off);
                    pb[i] = bb + off;
                    off += kc * pw[i];
                }
            }
            for (int64_t s = 0; s < nmc; ++s) {
                const int64_t ib = (s + rot) % nmc, ic = ib * MC, mc = m - ic < MC ? m - ic : MC;
                const float *apb = em_sk_a_block(sa, p0 / kcb, ib, mc, kc, a + ic * rsa + p0 * csa, rsa, csa, ap);
                /* more than one block of panels (EM_SK_BIG_L2): a sliver (in L1) over every panel of
                   the block (in L2); else every sliver of the row block (in L2) over a panel (1576 x
                   768 x 3072: 148-152 -> 170 GFLOP/s by sliver, Sapphire Rapids, one thread) */
                if (by_sliver) {
                    for (int64_t i0 = 0; i0 < mc; i0 += EM_SK_MR3)
                        for (int64_t i = 0; i < np; ++i)
                            em_sk_big_tile(kc, apb + i0 * kc, pb[i], pw[i], pn[i], mc - i0, alpha, beta, first,
                                           last, bias ? bias + pj[i] : 0, relu, c + (ic + i0) * ldc + pj[i], ldc, t);
                } else {
                    for (int64_t i = 0; i < np; ++i)
                        for (int64_t i0 = 0; i0 < mc; i0 += EM_SK_MR3)
                            em_sk_big_tile(kc, apb + i0 * kc, pb[i], pw[i], pn[i], mc - i0, alpha, beta, first,
                                           last, bias ? bias + pj[i] : 0, relu, c + (ic + i0) * ldc + pj[i], ldc, t);
                }
            }
        }
    }
    free(ap);
    free(bb);
}

/* ember's thread pool (threadpool.py), found once its library is loaded: a product's column panels
   are claimed in chunks, the calling thread taking over those a late thread has not started */
typedef void (*em_sk_task_t)(void *, int64_t, int64_t, int64_t);
typedef void (*em_sk_par_t)(em_sk_task_t, void *, int64_t, int64_t, int64_t);
static em_sk_par_t em_sk_pool(void) {
    extern void *dlsym(void *handle, const char *name);
    static em_sk_par_t fn;
    if (!fn) fn = (em_sk_par_t)dlsym((void *)0, EM_SK_POOL_SYMBOL);
    return fn;
}
struct em_sk_job {
    int64_t m, n, k; float alpha; const float *a; int64_t rsa, csa; const float *b; int64_t rsb, csb;
    float beta; float *c; int64_t ldc; const float *bias; int relu; const float *bpk;
    int64_t nrow, ncol, panels;  /* em_sgemm_big_all's grid of row parts x column parts (nrow > 1) */
    struct em_sk_apk *sa;        /* A packed once for all column parts, or null */
};
static void em_sk_task(void *p, int64_t lo, int64_t hi, int64_t tid) {
    const struct em_sk_job *j = (const struct em_sk_job *)p;
    (void)tid;
    /* columns in pairs of vectors: equal parts, each cut into panels of its own (512 columns in four
       parts of whole 48-column panels held 144, 144, 144 and 80); a part is wider than EM_SK_NARROW,
       so only a whole product that narrow takes the dot kernels (their sums are ordered otherwise) */
    const int64_t u = 2 * EM_SK_VW;
    em_sgemm_small_cols(j->m, j->k, j->alpha, j->a, j->rsa, j->csa, j->b, j->rsb, j->csb, j->beta, j->c,
                        j->ldc, j->bias, j->relu, lo * u, hi * u < j->n ? hi * u : j->n);
}
/* Cell t of the grid (row part t / ncol, column part t % ncol): rows split in whole MR3 slivers,
   column panels evenly; em_sgemm_big on that block (each element summed as over the whole). */
static void em_sk_big_cell(const struct em_sk_job *j, int64_t t) {
    const int64_t r = t / j->ncol, q = t % j->ncol, sl = (j->m + EM_SK_MR3 - 1) / EM_SK_MR3;
    const int64_t i0 = sl * r / j->nrow * EM_SK_MR3, e = sl * (r + 1) / j->nrow * EM_SK_MR3;
    const int64_t i1 = e < j->m ? e : j->m;
    const int64_t q0 = j->panels * q / j->ncol, q1 = j->panels * (q + 1) / j->ncol;
    if (i0 < i1 && q0 < q1)
        em_sgemm_big(i1 - i0, j->n, j->k, j->alpha, j->a + i0 * j->rsa, j->rsa, j->csa, j->b, j->rsb, j->csb,
                     j->bpk, j->beta, j->c + i0 * j->ldc, j->ldc, j->bias, j->relu, em_sk_panel_col(j->n, q0),
                     em_sk_panel_col(j->n, q1), 0);
}
static void em_sk_task_big(void *p, int64_t lo, int64_t hi, int64_t tid) {
    const struct em_sk_job *j = (const struct em_sk_job *)p;
    (void)tid;
    if (j->nrow > 1) {
        for (int64_t t = lo; t < hi; ++t) em_sk_big_cell(j, t);
        return;
    }
    /* prepacked: panels lo .. hi; else columns in whole vectors (equal parts of the columns, each
       cut into its own panels: 1024 columns in four chunks ran 5 and 6 panels, 240 to 288 columns) */
    const int64_t j0 = j->bpk ? em_sk_panel_col(j->n, lo) : lo * EM_SK_VW;
    const int64_t j1 = j->bpk ? em_sk_panel_col(j->n, hi) : hi * EM_SK_VW < j->n ? hi * EM_SK_VW : j->n;
    em_sgemm_big(j->m, j->n, j->k, j->alpha, j->a, j->rsa, j->csa, j->b, j->rsb, j->csb, j->bpk, j->beta,
                 j->c, j->ldc, j->bias, j->relu, j0, j1, j->sa);
}
/* Whether a product goes to em_sgemm_big: enough rows to amortize packing A, and an A that the
   small kernel would re-read from beyond L2 once per panel (measurements: gemm_kernel.py). */
static inline int em_sk_use_big(int64_t m, int64_t n, int64_t k) {
    return m >= EM_SK_BIG_MIN_M && n >= EM_SK_W3 && k >= EM_SK_BIG_MIN_K
           && (m >= EM_SK_BIG_ALWAYS_M || m * k >= EM_SK_BIG_MIN_A || m * k * n >= EM_SK_BIG_MIN_MNK);
}
/* em_sgemm_big over all columns, shared out on the pool where there is one and nthreads > 1: two
   chunks per thread, so that the caller takes over a chunk a descheduled thread has not started.
   The chunks are column parts (equal parts in whole vectors, or whole prepacked panels) that read
   one packed copy of A (struct em_sk_apk: 1024^3 on two threads 10.7 -> 10.1-10.7 ms, 1.00x -> 0.94x
   JAX in run_all, where each of the four parts had packed all of A). With a prepacked B (read in
   place, by any number of parts) of fewer blocks of EM_SK_BIG_NP panels than chunks and more rows
   than columns to spare, the chunks are a grid instead: one column part per block of panels, the
   rows (whole MR3 slivers) cut into as many parts as make up the chunks, each packing its own rows
   of A (1024 x 768 products: 6-13% less CPU time on two threads than parts each packing all of A,
   still 4-5% less than parts sharing one; 512 x 3072 ones, where B is the larger operand, keep the
   column split). Every element is summed as on one thread, whatever the split. */
static void em_sgemm_big_all(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t rsa,
                             int64_t csa, const float *b, int64_t rsb, int64_t csb, const float *bpk,
                             float beta, float *c, int64_t ldc, const float *bias, int relu, int nthreads) {
    if (bpk && n <= EM_SK_NARROW) {  /* not panels: prepack_b's narrow layout */
        em_sgemm_packed_narrow(m, n, k, alpha, a, rsa, csa, bpk, beta, c, ldc, bias, relu);
        return;
    }
    const int64_t panels = em_sk_panels(n);
#ifdef _OPENMP
    if (nthreads == 0) nthreads = omp_get_max_threads();
#endif
    const int64_t chunks = 2 * (int64_t)nthreads;
    const int64_t pg = panels > EM_SK_BIG_NP ? (panels + EM_SK_BIG_NP - 1) / EM_SK_BIG_NP : 1;
    const int64_t sl = (m + EM_SK_MR3 - 1) / EM_SK_MR3, rows = (chunks + pg - 1) / pg;
    struct em_sk_job j = {m, n, k, alpha, a, rsa, csa, b, rsb, csb, beta, c, ldc, bias, relu, bpk,
                          rows < sl ? rows : sl, pg, panels};
    /* the grid trades the extra packings of A (chunks - pg of them, m k floats each) for extra
       reads of B by the row parts (nrow - 1, k n floats each): taken where it saves copies */
    if (nthreads > 1 && bpk && pg < chunks && j.nrow > 1 && (chunks - pg) * m > (j.nrow - 1) * n) {
        const int64_t cells = j.nrow * j.ncol;
        if (em_sk_pool()) {  /* one cell per chunk */
            em_sk_pool()(em_sk_task_big, &j, cells, nthreads, (cells + nthreads - 1) / nthreads);
            return;
        }
#ifdef _OPENMP
        if (!omp_in_parallel()) {
            #pragma omp parallel for num_threads(nthreads) schedule(dynamic, 1)
            for (int64_t t = 0; t < cells; ++t) em_sk_big_cell(&j, t);
            return;
        }
#endif
    }
    j.nrow = 1;
    /* the pool's items: panels of a prepacked B, else vectors of columns */
    const int64_t items = bpk ? panels : (n + EM_SK_VW - 1) / EM_SK_VW;
    const int split = nthreads > 1 && panels > 1;
    /* every column part (and every block of EM_SK_BIG_NP panels) needs all of A: packed once for
       all of them where A is at most 64 MiB and the buffer can be had (four parts of 1024 columns
       packed A four times: 0.9 ms of a one-thread 19.5 ms product) */
    struct em_sk_apk sa = {0, 0, 0, 0};
    if ((split || panels > em_sk_big_np(k, panels)) && m * k <= (INT64_C(16) << 20)) {
        const int64_t nkb = (k + EM_SK_BIG_KC - 1) / EM_SK_BIG_KC;
        sa.kcb = (k + nkb - 1) / nkb;
        sa.nmc = (m + EM_SK_BIG_MC - 1) / EM_SK_BIG_MC;
        sa.buf = em_sk_alloc(nkb * sa.nmc * EM_SK_BIG_MC * sa.kcb);
        sa.state = (int *)calloc((size_t)(nkb * sa.nmc), sizeof(int));
        if (sa.buf && sa.state) j.sa = &sa;
        for (int64_t i = 0; EM_SK_APK_INIT && sa.state && i < nkb * sa.nmc; ++i) sa.state[i] = EM_SK_APK_INIT;
    }
    if (split && em_sk_pool()) {
        em_sk_pool()(em_sk_task_big, &j, items, nthreads, 2);
    } else {
#ifdef _OPENMP
        if (split && !omp_in_parallel()) {
            const int64_t nt = nthreads < panels ? nthreads : panels;
            #pragma omp parallel for num_threads(nt) schedule(static)
            for (int64_t q = 0; q < nt; ++q) em_sk_task_big(&j, items * q / nt, items * (q + 1) / nt, q);
        } else
#endif
            em_sgemm_big(m, n, k, alpha, a, rsa, csa, b, rsb, csb, bpk, beta, c, ldc, bias, relu, 0, n, j.sa);
    }
    free(sa.buf);
    free(sa.state);
}
static void em_sk_task_packed(void *p, int64_t lo, int64_t hi, int64_t tid) {
    const struct em_sk_job *j = (const struct em_sk_job *)p;
    (void)tid;
    em_sgemm_packed_cols(j->m, j->n, j->k, j->alpha, j->a, j->rsa, j->csa, j->b, j->beta, j->c, j->ldc,
                         j->bias, j->relu, lo, hi);
}

/* rows [lo MR3, hi MR3) of a product with a prepacked B, all its panels */
static void em_sk_task_packed_rows(void *p, int64_t lo, int64_t hi, int64_t tid) {
    const struct em_sk_job *j = (const struct em_sk_job *)p;
    (void)tid;
    const int64_t i0 = lo * EM_SK_MR3, i1 = hi * EM_SK_MR3 < j->m ? hi * EM_SK_MR3 : j->m;
    em_sgemm_packed_cols(i1 - i0, j->n, j->k, j->alpha, j->a + i0 * j->rsa, j->rsa, j->csa, j->b, j->beta,
                         j->c + i0 * j->ldc, j->ldc, j->bias, j->relu, 0, em_sk_panels(j->n));
}

/* The whole product (with the epilogue of em_sgemm_small_cols); with OpenMP and nthreads > 1 (0:
   the OpenMP default) the column panels are split among threads. */
static void em_sgemm_small(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t rsa,
                           int64_t csa, const float *b, int64_t rsb, int64_t csb, float beta, float *c,
                           int64_t ldc, const float *bias, int relu, int nthreads) {
    if (k > 0 && em_sk_use_big(m, n, k)) {
        em_sgemm_big_all(m, n, k, alpha, a, rsa, csa, b, rsb, csb, 0, beta, c, ldc, bias, relu, nthreads);
        return;
    }
    const int64_t panels = (n + EM_SK_W3 - 1) / EM_SK_W3, items = (n + 2 * EM_SK_VW - 1) / (2 * EM_SK_VW);
#ifdef _OPENMP
    if (nthreads == 0) nthreads = omp_get_max_threads();
#endif
    struct em_sk_job j = {m, n, k, alpha, a, rsa, csa, b, rsb, csb, beta, c, ldc, bias, relu};
    if (nthreads > 1 && panels > 1 && em_sk_pool()) {
        em_sk_pool()(em_sk_task, &j, items, nthreads, 2);
        return;
    }
#ifdef _OPENMP
    if (nthreads > 1 && panels > 1 && !omp_in_parallel()) {
        const int64_t nt = nthreads < panels ? nthreads : panels;
        #pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t q = 0; q < nt; ++q) em_sk_task(&j, items * q / nt, items * (q + 1) / nt, q);
        return;
    }
#endif
    (void)nthreads; (void)panels; (void)items; (void)j;
    em_sgemm_small_cols(m, k, alpha, a, rsa, csa, b, rsb, csb, beta, c, ldc, bias, relu, 0, n);
}

/* em_sgemm_small with B already packed (prepack_b's layout for more than EM_SK_NARROW columns:
   column panels of em_sk_panel_width over [0, n), panel j0 as k rows of w floats at bpk + j0 * k, zero-padded, 64-byte aligned),
   for the column panels [q_begin, q_end) only (k >= 1). The leading W3-wide panels go in blocks
   of EM_SK_NBP: each MR3-row block of A runs over all the block's panels while its rows are in L1,
   so A is read from L2/L3 once per block of columns rather than once per panel (the block's packed
   B, at most 4 x 512 x W3 floats, stays in L2). The rest (at most two narrower panels) go one at
   a time. Every element is summed in the same order either way. */
#define EM_SK_NBP 4
#ifndef EM_SK_ROW2  /* 0: a single row runs em_sk_row per panel (tests compare the two) */
#define EM_SK_ROW2 1
#endif
/* One row of A times two adjacent full panels of a prepacked B (2 W3 columns of C), the contraction in
   blocks of kcb steps as em_sgemm_packed_cols runs them: each block summed from zero by FMAs in step
   order, the blocks added to the result in order (C first where flags bit 1 is set: beta 1), then
   the bias and the ReLU that keeps NaN (flags bit 0). The same sums as em_sk_row's on each panel,
   with six independent accumulators instead of three: a single row's FMA chains were bound by the
   FMA latency (an LSTM step's 1 x 256 x 1024 product ran at about a third of the FMA rate). */
static __attribute__((noinline)) void em_sk_row2(int64_t k, int64_t kcb, const float *a, int64_t csa,
                                                 const float *restrict bp, int64_t ps, float *restrict c,
                                                 const float *bias, int flags) {
    em_vf s[6] = {{0}};  /* (every element set by the first block: k >= 1) */
    for (int64_t p0 = 0; p0 < k; p0 += kcb) {
        const int64_t pe = p0 + kcb < k ? p0 + kcb : k;
        em_vf c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0}, c4 = {0}, c5 = {0};
        const float *b0 = bp + p0 * EM_SK_W3, *b1 = b0 + ps;
        for (int64_t p = p0; p < pe; ++p, b0 += EM_SK_W3, b1 += EM_SK_W3) {
            const em_vf x = (em_vf){0} + a[p * csa];
            c0 = EM_FMA(x, *(const em_vf *)b0, c0);
            c1 = EM_FMA(x, *(const em_vf *)(b0 + EM_SK_VW), c1);
            c2 = EM_FMA(x, *(const em_vf *)(b0 + 2 * EM_SK_VW), c2);
            c3 = EM_FMA(x, *(const em_vf *)b1, c3);
            c4 = EM_FMA(x, *(const em_vf *)(b1 + EM_SK_VW), c4);
            c5 = EM_FMA(x, *(const em_vf *)(b1 + 2 * EM_SK_VW), c5);
        }
        const em_vf blk[6] = {c0, c1, c2, c3, c4, c5};
        for (int v = 0; v < 6; ++v) {
            if (p0 > 0) s[v] = s[v] + blk[v];
            else if (flags & 2) s[v] = *(const em_vfu *)(c + v * EM_SK_VW) + blk[v];  /* em_sk_store: C + t */
            else s[v] = blk[v];
        }
    }
    for (int v = 0; v < 6; ++v) {
        em_vf x = s[v];
        if (bias) x = x + *(const em_vfu *)(bias + v * EM_SK_VW);
        if (flags & 1) {
            const em_vf z = {0};
            x = (em_vf)((em_vi)x & ((x > z) | (x != x)));
        }
        *(em_vfu *)(c + v * EM_SK_VW) = x;
    }
}

static void em_sgemm_packed_cols(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t rsa,
                                 int64_t csa, const float *bpk, float beta, float *c, int64_t ldc,
                                 const float *bias, int relu, int64_t q_begin, int64_t q_end) {
    float t[EM_SK_TILE] __attribute__((aligned(64)));
    const int64_t KCB = k <= 2 * EM_SK_KC ? k : 2 * EM_SK_KC;  /* 512 x 4 W3 floats of B, in L2 */
    int64_t nfull = 0;  /* panels [0, nfull) are W3 wide */
    while (nfull * EM_SK_W3 < n && em_sk_panel_width(n - nfull * EM_SK_W3) == EM_SK_W3
           && n - nfull * EM_SK_W3 >= EM_SK_W3) ++nfull;
    if (m == 1 && alpha == 1.0f && (beta == 0.0f || beta == 1.0f) && EM_SK_ROW2) {  /* pairs of panels */
        const int64_t fe = q_end < nfull ? q_end : nfull;
        for (; q_begin + 1 < fe; q_begin += 2)
            em_sk_row2(k, KCB, a, csa, bpk + q_begin * EM_SK_W3 * k, EM_SK_W3 * k, c + q_begin * EM_SK_W3,
                       bias ? bias + q_begin * EM_SK_W3 : 0, (relu ? 1 : 0) | (beta == 1.0f ? 2 : 0));
    }
    const int64_t fe = q_end < nfull ? q_end : nfull;
    for (int64_t qb = q_begin; qb < fe; qb += EM_SK_NBP) {
        const int64_t qe = qb + EM_SK_NBP < fe ? qb + EM_SK_NBP : fe;
        for (int64_t p0 = 0; p0 < k; p0 += KCB) {
            const int64_t kc = k - p0 < KCB ? k - p0 : KCB;
            /* the rows of B each panel reads next (its next contraction block, or after its last the
               same panel of the next group), prefetched a share per row sliver: B is read from memory
               once per call (a model's weights do not stay cached between calls). The share's rows
               are contiguous, so where it has no more cache lines than the block has steps, each step
               brings one new line (the kernel's window of a row's bytes moved one line per step)
               rather than a row: the requests spread over the block instead of a burst at its start
               (ResNet-50's 7x7 stage, weights read from memory, 49 x 2048 x 512 with bias and ReLU
               1000 -> 880-920 us a product in a chain of eight) */
            const int64_t nsl = (m + EM_SK_MR3 - 1) / EM_SK_MR3;
            const int64_t kn = p0 + kc < k ? (k - p0 - kc < KCB ? k - p0 - kc : KCB)
                                           : (qe + (qe - qb) <= fe ? (k < KCB ? k : KCB) : 0);
            const int64_t share = (kn + nsl - 1) / nsl;
            for (int64_t i0 = 0, sl = 0; i0 < m; i0 += EM_SK_MR3, ++sl)
                for (int64_t q = qb; q < qe; ++q) {
                    const float *bp = bpk + q * EM_SK_W3 * k + p0 * EM_SK_W3;
                    const float *nx = !kn ? bp : p0 + kc < k ? bp + kc * EM_SK_W3
                                                            : bpk + (q + qe - qb) * EM_SK_W3 * k;
                    const int64_t r0 = sl * share < kn ? sl * share : kn;
                    const int64_t npf = kn - r0 < share ? kn - r0 : share;
                    const int64_t nl = (npf * EM_SK_W3 * 4 + 63) / 64;
                    const int lines = (share * EM_SK_W3 * 4 + 63) / 64 <= kc;
                    em_sk_block(kc, EM_SK_W3, EM_SK_MR3, m - i0 < EM_SK_MR3 ? m - i0 : EM_SK_MR3, alpha,
                                a + i0 * rsa + p0 * csa, rsa, csa, bp, t, (const char *)(nx + r0 * EM_SK_W3),
                                lines ? 64 : EM_SK_W3 * 4, lines ? nl : npf < kc ? npf : kc, 0, 0, beta,
                                p0 == 0, p0 + kc == k, bias ? bias + q * EM_SK_W3 : 0, relu, EM_SK_W3,
                                c + i0 * ldc + q * EM_SK_W3, ldc);
                }
        }
    }
    if (q_begin < nfull) q_begin = nfull;
    for (int64_t j0 = nfull * EM_SK_W3, q = nfull; j0 < n && q < q_end; ++q) {
        const int64_t left = n - j0, w = em_sk_panel_width(left);
        const int64_t nr = left < w ? left : w, mrw = EM_SK_MRW(w);
        for (int64_t p0 = 0; q >= q_begin && p0 < k; p0 += KCB) {
            const int64_t kc = k - p0 < KCB ? k - p0 : KCB;
            const float *bp = bpk + j0 * k + p0 * w;
            for (int64_t i0 = 0; i0 < m; i0 += mrw)
                em_sk_block(kc, w, mrw, m - i0 < mrw ? m - i0 : mrw, alpha, a + i0 * rsa + p0 * csa, rsa, csa,
                            bp, t, (const char *)bp, 0, 0, 0, 0, beta, p0 == 0, p0 + kc == k,
                            bias ? bias + j0 : 0, relu, nr, c + i0 * ldc + j0, ldc);
        }
        j0 += nr;
    }
}

/* The prepacked entry: a narrow B on em_sgemm_packed_narrow, wider ones on em_sgemm_packed_cols'
   panels (or em_sgemm_big). */
static void em_sgemm_packed(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t rsa,
                            int64_t csa, const float *bpk, float beta, float *c, int64_t ldc,
                            const float *bias, int relu, int nthreads) {
    if (n <= EM_SK_NARROW) {
        em_sgemm_packed_narrow(m, n, k, alpha, a, rsa, csa, bpk, beta, c, ldc, bias, relu);
        return;
    }
    if (em_sk_use_big(m, n, k)) {
        em_sgemm_big_all(m, n, k, alpha, a, rsa, csa, 0, 0, 0, bpk, beta, c, ldc, bias, relu, nthreads);
        return;
    }
    const int64_t panels = em_sk_panels(n);
#ifdef _OPENMP
    if (nthreads == 0) nthreads = omp_get_max_threads();
#endif
    const int64_t slivers = (m + EM_SK_MR3 - 1) / EM_SK_MR3;
    if (nthreads > 1 && m > n && slivers >= 4 * (int64_t)nthreads && em_sk_pool()) {
        /* more rows than columns: row parts (whole MR3 slivers), each reading its own rows of A and
           all of B, rather than column parts each reading all of A; and the column parts of a
           narrow B are few and uneven (64 columns: panels of 48 and 16) */
        struct em_sk_job j = {m, n, k, alpha, a, rsa, csa, bpk, 0, 0, beta, c, ldc, bias, relu};
        em_sk_pool()(em_sk_task_packed_rows, &j, slivers, nthreads, 4);
        return;
    }
    if (nthreads > 1 && panels > 1 && em_sk_pool()) {
        struct em_sk_job j = {m, n, k, alpha, a, rsa, csa, bpk, 0, 0, beta, c, ldc, bias, relu};
        em_sk_pool()(em_sk_task_packed, &j, panels, nthreads, 2);
        return;
    }
#ifdef _OPENMP
    if (nthreads > 1 && panels > 1 && !omp_in_parallel()) {
        const int64_t nt = nthreads < panels ? nthreads : panels;
        #pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t q = 0; q < nt; ++q)
            em_sgemm_packed_cols(m, n, k, alpha, a, rsa, csa, bpk, beta, c, ldc, bias, relu, panels * q / nt,
                                 panels * (q + 1) / nt);
        return;
    }
#endif
    (void)nthreads;
    em_sgemm_packed_cols(m, n, k, alpha, a, rsa, csa, bpk, beta, c, ldc, bias, relu, 0, panels);
}
