/* The wide_matmul call step (native/emit/wide_dot.py; semantics in prims/wide_dot.py): row-major
   C[m,n] = A[m,k] B[k,n] for nb batch matrices, every sum of products formed in double and rounded
   once to the operands' type. Included with ELT (the C element type: float or double) and
   EM_T(name) (a unique suffix) defined. For float operands each matrix pair is converted to double
   in the workspace (m k + k n + m n doubles), dgemm forms the product and the result is rounded
   once; double operands go to dgemm as they are. dgemm is SciPy's BLAS (the program's fns slot):
   the row-major product is the column-major C^T = B^T A^T, so no data moves. */
typedef void (*EM_T(em_wdg_t))(char *, char *, int *, int *, int *, double *, const double *, int *,
                               const double *, int *, double *, double *, int *);

static void EM_T(em_wide_matmul)(void *dgemm, int64_t nb, int64_t m, int64_t n, int64_t k,
                                 const ELT *a, const ELT *b, ELT *c, double *ws) {
    if (m <= 0 || n <= 0 || nb <= 0) return;
    char no = 'N';
    int mi = (int)m, ni = (int)n, ki = (int)k, lda = ki < 1 ? 1 : ki, ldb = ni, ldc = ni;
    double one = 1.0, zero = 0.0;
    for (int64_t q = 0; q < nb; ++q) {
        const ELT *aq = a + q * m * k, *bq = b + q * k * n;
        ELT *cq = c + q * m * n;
        if (k <= 0) {
            for (int64_t i = 0; i < m * n; ++i) cq[i] = 0;
            continue;
        }
        const double *da, *db;
        double *dc;
        if (sizeof(ELT) == sizeof(double)) {
            da = (const double *)aq; db = (const double *)bq; dc = (double *)cq;
        } else {
            double *wa = ws, *wb = ws + m * k;
            for (int64_t i = 0; i < m * k; ++i) wa[i] = (double)aq[i];
            for (int64_t i = 0; i < k * n; ++i) wb[i] = (double)bq[i];
            da = wa; db = wb; dc = wb + k * n;
        }
        ((EM_T(em_wdg_t))dgemm)(&no, &no, &ni, &mi, &ki, &one, db, &ldb, da, &lda, &zero, dc, &ldc);
        if (sizeof(ELT) != sizeof(double))
            for (int64_t i = 0; i < m * n; ++i) cq[i] = (ELT)dc[i];
    }
}
