/* Ragged batches (native/emit/ragged.py; semantics in prims/ragged.py), included after the
   thread-pool helpers (em_par) with ELT (the C element type), IDX (the table's integer type) and
   EM_T(name) (a unique suffix) defined, and either
   - EM_RAG_OP(a, b): the row-wise binary op of two ragged batches under zero extension (the
     ragged_binary call step), or
   - EM_RAG_ACC (the accumulator type): the sum of each row and its transpose, the broadcast of one
     value per row over the row (the ragged_rowsum and ragged_rowbroadcast call steps).

   A batch is a flat array of rows stored back to back from 0. The table is an IDX (rows, k) matrix;
   c[i] is the column holding the row lengths of operand i (-1: absent, rows of length 0). A row's
   offset is the sum of the lengths before it: one serial pass over the table writes the offsets
   into the workspace (off: rows * n int64), then the rows run (on the pool when they hold at least par_min elements), reading each
   stored element once and writing each result element once. */
#ifndef EM_RAG_ONCE
#define EM_RAG_ONCE
/* off[r * n + i] = the sum of column c[i] over the rows before r (a negative length counts as 0);
   work = the sum of the last column (the elements the step writes) */
#define EM_RAG_PREFIX(tab, k, rows, c, n, off, work)                                     \
    do {                                                                                 \
        int64_t run_[3] = {0, 0, 0};                                                     \
        for (int64_t r_ = 0; r_ < (rows); ++r_)                                          \
            for (int i_ = 0; i_ < (n); ++i_) {                                           \
                (off)[r_ * (n) + i_] = run_[i_];                                         \
                const int64_t l_ = (c)[i_] < 0 ? 0 : (int64_t)(tab)[r_ * (k) + (c)[i_]]; \
                run_[i_] += l_ < 0 ? 0 : l_;                                             \
            }                                                                            \
        (work) = run_[(n) - 1];                                                          \
    } while (0)
#endif

#ifdef EM_RAG_OP
typedef struct {
    const ELT *x, *y;
    ELT *o;
    const IDX *tab;
    int64_t k, rows;
    int64_t c[3];
    int64_t *off;
} EM_T(em_rag_job);

static inline int64_t EM_T(em_rag_len)(const EM_T(em_rag_job) *j, const IDX *t, int i) {
    if (j->c[i] < 0) return 0;
    return t[j->c[i]] < 0 ? 0 : (int64_t)t[j->c[i]];
}

/* row r of the result at p < n: EM_RAG_OP(xe[p], ye[p]), xe[p] = x[p] for p < lx, else 0 (ye alike) */
static EM_TASK_ATTR void EM_T(em_rag_task)(void *ctx, int64_t lo, int64_t hi, int64_t tid) {
    (void)tid;
    const EM_T(em_rag_job) *j = (const EM_T(em_rag_job) *)ctx;
    for (int64_t r = lo; r < hi; ++r) {
        const IDX *t = j->tab + r * j->k;
        int64_t lx = EM_T(em_rag_len)(j, t, 0), ly = EM_T(em_rag_len)(j, t, 1);
        const int64_t n = EM_T(em_rag_len)(j, t, 2);
        const ELT *restrict x = j->x + j->off[3 * r], *restrict y = j->y + j->off[3 * r + 1];
        ELT *restrict o = j->o + j->off[3 * r + 2];
        if (lx > n) lx = n;
        if (ly > n) ly = n;
        const int64_t both = lx < ly ? lx : ly;
        for (int64_t p = 0; p < both; ++p) o[p] = EM_RAG_OP(x[p], y[p]);
        for (int64_t p = both; p < lx; ++p) o[p] = EM_RAG_OP(x[p], (ELT)0);
        for (int64_t p = both; p < ly; ++p) o[p] = EM_RAG_OP((ELT)0, y[p]);
        for (int64_t p = (lx > ly ? lx : ly); p < n; ++p) o[p] = (ELT)0;
    }
}

/* the whole batch; on the pool (up to nt threads) when it writes at least par_min elements (-1: never) */
static void EM_T(em_rag_run)(EM_T(em_rag_job) *j, int64_t par_min, int64_t nt) {
    int64_t work;
    if (j->rows <= 0) return;
    EM_RAG_PREFIX(j->tab, j->k, j->rows, j->c, 3, j->off, work);
    const int par = par_min >= 0 && work >= par_min;
    if (par && nt > 1 && j->rows > 1) em_par(EM_T(em_rag_task), j, j->rows, nt, nt, 4 * nt);
    else EM_T(em_rag_task)(j, 0, j->rows, 0);
}
#endif

#ifdef EM_RAG_ACC
/* o[r] = the sum of row r of x, or, for the broadcast, every element of row r of o = x[r] */
typedef struct {
    const ELT *x;
    ELT *o;
    const IDX *tab;
    int64_t k, rows;
    int64_t c[1];
    int64_t *off;
} EM_T(em_rags_job);

static inline int64_t EM_T(em_rags_len)(const EM_T(em_rags_job) *j, int64_t r) {
    const IDX l = j->tab[r * j->k + j->c[0]];
    return l < 0 ? 0 : (int64_t)l;
}

static EM_TASK_ATTR void EM_T(em_rags_sum)(void *ctx, int64_t lo, int64_t hi, int64_t tid) {
    (void)tid;
    const EM_T(em_rags_job) *j = (const EM_T(em_rags_job) *)ctx;
    for (int64_t r = lo; r < hi; ++r) {
        const ELT *restrict x = j->x + j->off[r];
        const int64_t n = EM_T(em_rags_len)(j, r);
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
        ELT *restrict o = j->o + j->off[r];
        const int64_t n = EM_T(em_rags_len)(j, r);
        const ELT v = j->x[r];
        for (int64_t p = 0; p < n; ++p) o[p] = v;
    }
}

static void EM_T(em_rags_run)(EM_T(em_rags_job) *j, int bcast, int64_t par_min, int64_t nt) {
    em_task_t fn = bcast ? EM_T(em_rags_bcast) : EM_T(em_rags_sum);
    int64_t work;
    if (j->rows <= 0) return;
    EM_RAG_PREFIX(j->tab, j->k, j->rows, j->c, 1, j->off, work);
    const int par = par_min >= 0 && work >= par_min;
    if (par && nt > 1 && j->rows > 1) em_par(fn, j, j->rows, nt, nt, 4 * nt);
    else fn(j, 0, j->rows, 0);
}
#endif
