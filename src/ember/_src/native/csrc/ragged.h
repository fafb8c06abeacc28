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
   and lengths into the workspace (em_rag_layout: rows * n * 2 int64), then the rows run (on the pool when they hold at least par_min elements), reading each
   stored element once and writing each result element once. */
#ifndef EM_RAG_ONCE
#define EM_RAG_ONCE
/* lay[2 (r n + i)] = the offset of row r of operand i (the sum of the lengths before it), lay[2 (r n
   + i) + 1] its length: column c[i] of the table (-1: 0; a negative length counts as 0), cut so the
   row ends within cap[i] elements (a table that does not fit its buffers never reads or writes
   outside them); *work = the elements of the last operand (the result: what the step writes) */
static inline void em_rag_layout(const void *tab, int wide, int64_t k, int64_t rows, const int64_t *c,
                                 const int64_t *cap, int n, int64_t *lay, int64_t *work) {
    int64_t run[3] = {0, 0, 0};
    for (int64_t r = 0; r < rows; ++r)
        for (int i = 0; i < n; ++i) {
            int64_t l = 0;
            if (c[i] >= 0) l = wide ? ((const int64_t *)tab)[r * k + c[i]] : ((const int32_t *)tab)[r * k + c[i]];
            if (l < 0) l = 0;
            if (l > cap[i] - run[i]) l = cap[i] - run[i];
            lay[2 * (r * n + i)] = run[i];
            lay[2 * (r * n + i) + 1] = l;
            run[i] += l;
        }
    *work = run[n - 1];
}
#endif

#ifdef EM_RAG_OP
typedef struct {
    const ELT *x, *y;
    ELT *o;
    const IDX *tab;
    int64_t k, rows;
    int64_t c[3], cap[3];
    int64_t *lay;
} EM_T(em_rag_job);

/* row r of the result at p < n: EM_RAG_OP(xe[p], ye[p]), xe[p] = x[p] for p < lx, else 0 (ye alike) */
static EM_TASK_ATTR void EM_T(em_rag_task)(void *ctx, int64_t lo, int64_t hi, int64_t tid) {
    (void)tid;
    const EM_T(em_rag_job) *j = (const EM_T(em_rag_job) *)ctx;
    for (int64_t r = lo; r < hi; ++r) {
        const int64_t *l = j->lay + 6 * r;
        int64_t lx = l[1], ly = l[3];
        const int64_t n = l[5];
        const ELT *restrict x = j->x + l[0], *restrict y = j->y + l[2];
        ELT *restrict o = j->o + l[4];
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
    em_rag_layout(j->tab, sizeof(IDX) == 8, j->k, j->rows, j->c, j->cap, 3, j->lay, &work);
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
    int64_t c[1], cap[1];
    int64_t *lay;
} EM_T(em_rags_job);

static EM_TASK_ATTR void EM_T(em_rags_sum)(void *ctx, int64_t lo, int64_t hi, int64_t tid) {
    (void)tid;
    const EM_T(em_rags_job) *j = (const EM_T(em_rags_job) *)ctx;
    for (int64_t r = lo; r < hi; ++r) {
        const ELT *restrict x = j->x + j->lay[2 * r];
        const int64_t n = j->lay[2 * r + 1];
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
        ELT *restrict o = j->o + j->lay[2 * r];
        const int64_t n = j->lay[2 * r + 1];
        const ELT v = j->x[r];
        for (int64_t p = 0; p < n; ++p) o[p] = v;
    }
}

static void EM_T(em_rags_run)(EM_T(em_rags_job) *j, int bcast, int64_t par_min, int64_t nt) {
    em_task_t fn = bcast ? EM_T(em_rags_bcast) : EM_T(em_rags_sum);
    int64_t work;
    if (j->rows <= 0) return;
    em_rag_layout(j->tab, sizeof(IDX) == 8, j->k, j->rows, j->c, j->cap, 1, j->lay, &work);
    const int par = par_min >= 0 && work >= par_min;
    if (par && nt > 1 && j->rows > 1) em_par(fn, j, j->rows, nt, nt, 4 * nt);
    else fn(j, 0, j->rows, 0);
}
#endif
