/* Ragged batches (native/emit/ragged.py; semantics in prims/ragged.py), included after the
   thread-pool helpers (em_par) with ELT (the C element type), IDX (the table's integer type) and
   EM_T(name) (a unique suffix) defined, and either
   - EM_RAG_OP(a, b): the row-wise binary op of two ragged batches under zero extension (the
     ragged_binary call step), or
   - EM_RAG_ACC (the accumulator type): the sum of each row and its transpose, the broadcast of one
     value per row over the row (the ragged_rowsum and ragged_rowbroadcast call steps).

   Binary op:

   A batch is a flat array of rows stored back to back. The table is an IDX (rows, k) matrix;
   c[0..6) are the columns holding the offset and length of each row of x, of y and of the result
   (-1: absent, a row of length 0). Row r of the result, at positions p < lo, is
   EM_RAG_OP(xe[p], ye[p]) with xe[p] = x[ox + p] for p < lx and 0 past it (ye likewise): one pass
   over the rows, reading each stored element once and writing each result element once. */
#ifdef EM_RAG_OP
typedef struct {
    const ELT *x, *y;
    ELT *o;
    const IDX *tab;
    int64_t k, rows;
    int64_t c[6];
} EM_T(em_rag_job);

static inline void EM_T(em_rag_col)(const EM_T(em_rag_job) *j, const IDX *t, int i, int64_t *off,
                                    int64_t *len) {
    if (j->c[i] < 0) { *off = 0; *len = 0; return; }
    *off = t[j->c[i]];
    *len = t[j->c[i + 1]] < 0 ? 0 : t[j->c[i + 1]];
}

static EM_TASK_ATTR void EM_T(em_rag_task)(void *ctx, int64_t lo, int64_t hi, int64_t tid) {
    (void)tid;
    const EM_T(em_rag_job) *j = (const EM_T(em_rag_job) *)ctx;
    for (int64_t r = lo; r < hi; ++r) {
        const IDX *t = j->tab + r * j->k;
        int64_t ox, lx, oy, ly, oo, n;
        EM_T(em_rag_col)(j, t, 0, &ox, &lx);
        EM_T(em_rag_col)(j, t, 2, &oy, &ly);
        EM_T(em_rag_col)(j, t, 4, &oo, &n);
        const ELT *restrict x = j->x + ox, *restrict y = j->y + oy;
        ELT *restrict o = j->o + oo;
        if (lx > n) lx = n;
        if (ly > n) ly = n;
        const int64_t both = lx < ly ? lx : ly;
        for (int64_t p = 0; p < both; ++p) o[p] = EM_RAG_OP(x[p], y[p]);
        for (int64_t p = both; p < lx; ++p) o[p] = EM_RAG_OP(x[p], (ELT)0);
        for (int64_t p = both; p < ly; ++p) o[p] = EM_RAG_OP((ELT)0, y[p]);
        for (int64_t p = (lx > ly ? lx : ly); p < n; ++p) o[p] = (ELT)0;
    }
}

/* the whole batch; on the pool (up to nt threads) when par */
static void EM_T(em_rag_run)(EM_T(em_rag_job) *j, int par, int64_t nt) {
    if (j->rows <= 0) return;
    if (par && nt > 1 && j->rows > 1) em_par(EM_T(em_rag_task), j, j->rows, nt, nt, 4 * nt);
    else EM_T(em_rag_task)(j, 0, j->rows, 0);
}
#endif

#ifdef EM_RAG_ACC
/* o[r] = the sum of row r of x (rows at table columns c[0], c[1]), or, for the broadcast, every
   element of row r of o = x[r]; one pass over the rows either way */
typedef struct {
    const ELT *x;
    ELT *o;
    const IDX *tab;
    int64_t k, rows;
    int64_t c[2];
} EM_T(em_rags_job);

static EM_TASK_ATTR void EM_T(em_rags_sum)(void *ctx, int64_t lo, int64_t hi, int64_t tid) {
    (void)tid;
    const EM_T(em_rags_job) *j = (const EM_T(em_rags_job) *)ctx;
    for (int64_t r = lo; r < hi; ++r) {
        const IDX *t = j->tab + r * j->k;
        const ELT *restrict x = j->x + t[j->c[0]];
        const int64_t n = t[j->c[1]];
        EM_RAG_ACC acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int64_t p = 0;
        for (; p + 8 <= n; p += 8)
            for (int q = 0; q < 8; ++q) acc[q] += (EM_RAG_ACC)x[p + q];
        for (; p < n; ++p) acc[0] += (EM_RAG_ACC)x[p];
        j->o[r] = (ELT)(((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])));
    }
}

static EM_TASK_ATTR void EM_T(em_rags_bcast)(void *ctx, int64_t lo, int64_t hi, int64_t tid) {
    (void)tid;
    const EM_T(em_rags_job) *j = (const EM_T(em_rags_job) *)ctx;
    for (int64_t r = lo; r < hi; ++r) {
        const IDX *t = j->tab + r * j->k;
        ELT *restrict o = j->o + t[j->c[0]];
        const int64_t n = t[j->c[1]];
        const ELT v = j->x[r];
        for (int64_t p = 0; p < n; ++p) o[p] = v;
    }
}

static void EM_T(em_rags_run)(EM_T(em_rags_job) *j, int bcast, int par, int64_t nt) {
    em_task_t fn = bcast ? EM_T(em_rags_bcast) : EM_T(em_rags_sum);
    if (j->rows <= 0) return;
    if (par && nt > 1 && j->rows > 1) em_par(fn, j, j->rows, nt, nt, 4 * nt);
    else fn(j, 0, j->rows, 0);
}
#endif
