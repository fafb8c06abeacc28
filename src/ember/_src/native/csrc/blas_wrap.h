/* The BLAS product wrappers of a generated program (native/emit/gemm.py), one element type at a
   time. Instantiated by the defines in front of a section: ELT (the C element type), EM_P(name)
   (the BLAS routine's pointer type, em_sgemm_t ... em_zgemv_t), EM_GEMM_SLOT / EM_GEMV_SLOT (the
   routines' ABI slots, native/abi.py) and, for a wrapper, EM_FN (its name, em_gemm_f32 ...).
   A program includes the typedefs of each element type it uses and only the wrappers it calls. */
/*@ types */
typedef void (*EM_P(gemm_t))(char *, char *, int *, int *, int *, ELT *, const ELT *, int *,
                           const ELT *, int *, ELT *, ELT *, int *);
typedef void (*EM_P(gemv_t))(char *, int *, int *, ELT *, const ELT *, int *, const ELT *, int *,
                           ELT *, ELT *, int *);
/*@ gemm after types */
/* Row-major C[m,n] = alpha op(A) op(B) + beta C for nb batches, as the column-major product
   C^T = op(B)^T op(A)^T (no data movement). A single row or column goes to ?gemv, which BLAS
   libraries run much faster than a degenerate ?gemm. */
static void EM_FN(void **fns, int ta, int tb, int64_t nb, int m, int n, int k, ELT alpha,
                      ELT beta, const ELT *a, const ELT *b, ELT *c) {
    if (m == 0 || n == 0) return;
    int one = 1;
    for (int64_t i = 0; i < nb; ++i) {
        const ELT *ai = a + i * (int64_t)m * k, *bi = b + i * (int64_t)k * n;
        ELT *ci = c + i * (int64_t)m * n;
        if (m == 1 && k > 0) {  /* c[n] = op(B)^T a: B as column-major is n x k ('N') or k x n ('T') */
            char tr = tb ? 'T' : 'N';
            int rows = tb ? k : n, cols = tb ? n : k;
            ((EM_P(gemv_t))fns[EM_GEMV_SLOT])(&tr, &rows, &cols, &alpha, bi, &rows, ai, &one, &beta, ci, &one);
        } else if (n == 1 && k > 0) {  /* c[m] = op(A) b: A as column-major is k x m or m x k */
            char tr = ta ? 'N' : 'T';
            int rows = ta ? m : k, cols = ta ? k : m;
            ((EM_P(gemv_t))fns[EM_GEMV_SLOT])(&tr, &rows, &cols, &alpha, ai, &rows, bi, &one, &beta, ci, &one);
        } else {
            char tra = tb ? 'T' : 'N', trb = ta ? 'T' : 'N';
            int lda = tb ? k : n, ldb = ta ? m : k, ldc = n;
            lda = lda < 1 ? 1 : lda; ldb = ldb < 1 ? 1 : ldb;
            ((EM_P(gemm_t))fns[EM_GEMM_SLOT])(&tra, &trb, &n, &m, &k, &alpha, bi, &lda, ai, &ldb, &beta, ci, &ldc);
        }
    }
}
/*@ gemm_sv after types */
/* Row-major C[m,n] (row stride ldc) = alpha A B + beta C with A(i, p) at a[i*rsa + p*csa] and
   B(p, j) at b[p*rsb + j*csb], one of each pair of strides 1 (the views of a gemm step that reads
   or writes a transposed value in place): the column-major product C^T = B^T A^T. A leading
   dimension along an axis of size 1 is any stride the view had (a reshape's, often 1); BLAS
   requires at least the stored rows (e.g. LDA >= n for B not transposed, "parameter number 8 had
   an illegal value" and a skipped product otherwise), so each is raised to that minimum, which
   addresses the same elements. */
static void EM_FN(void **fns, int m, int n, int k, ELT alpha, ELT beta, const ELT *a,
                      int64_t rsa, int64_t csa, const ELT *b, int64_t rsb, int64_t csb, ELT *c, int64_t ldc) {
    if (m == 0 || n == 0) return;
    char tra = csb == 1 ? 'N' : 'T', trb = csa == 1 ? 'N' : 'T';
    int lda = (int)(csb == 1 ? rsb : csb), ldb = (int)(csa == 1 ? rsa : csa), ldc_ = (int)ldc;
    const int mina = tra == 'N' ? n : k, minb = trb == 'N' ? k : m;
    lda = lda < mina ? mina : lda; ldb = ldb < minb ? minb : ldb; ldc_ = ldc_ < n ? n : ldc_;
    lda = lda < 1 ? 1 : lda; ldb = ldb < 1 ? 1 : ldb; ldc_ = ldc_ < 1 ? 1 : ldc_;
    ((EM_P(gemm_t))fns[EM_GEMM_SLOT])(&tra, &trb, &n, &m, &k, &alpha, b, &lda, a, &ldb, &beta, c, &ldc_);
}
