/* Ragged batches (native/emit/ragged.py; semantics in prims/ragged.py), included after the
   thread-pool helpers (em_par) with ELT (the C element type), IDX (the table's integer type) and
   EM_T(name) (a unique suffix) defined, and either
   - EM_RAG_OP(a, b): the row-wise binary op of two ragged batches under zero extension (the
     ragged_binary call step), or
   - EM_RAG_ACC (the accumulator type): the sum of each row and its transpose, the broadcast of one
     value per row over the row (the ragged_rowsum and ragged_rowbroadcast call steps).

   A batch is a flat array of rows stored back to back from 0, each a C-ordered block of R axes. The
   table is an IDX (rows, k) matrix; c[i] is the first of the R columns holding the row shapes of
   operand i (-1: absent, rows empty). A row's offset is the sum of the sizes before it: one serial
   pass over the table (em_rag_layout) writes offsets, sizes and shapes into the workspace, then the
   rows run (on the pool when they hold at least par_min elements), reading each stored element
   once and writing each result element once. */
#ifndef EM_RAG_ONCE
#define EM_RAG_ONCE
#define EM_RAG_MAXR 8
/* For row r and operand i, lay + (r n + i) (R + 2) holds the offset, the size and the R axes of
   the row: column c[i] + a of the table (-1: all 0; a negative size counts as 0), the leading axis
   cut so the row ends within cap[i] elements (a table that does not fit its buffers never reads or
   writes outside them), and every axis 0 for an empty row; *work = the elements of operand n - 1 */
static inline void em_rag_layout(const void *tab, int wide, int64_t k, int64_t rows, const int64_t *c,
                                 const int64_t *cap, int n, int64_t R, int64_t *lay, int64_t *work) {
    int64_t run[3] = {0, 0, 0};
    for (int64_t r = 0; r < rows; ++r)
        for (int i = 0; i < n; ++i) {
            int64_t *l = lay + (r * n + i) * (R + 2), d[EM_RAG_MAXR], rest = 1, size;
            for (int64_t a = 0; a < R; ++a) {
                int64_t v = 0;
                if (c[i] >= 0)
                    v = wide ? ((const int64_t *)tab)[r * k + c[i] + a] : ((const int32_t *)tab)[r * k + c[i] + a];
                d[a] = v < 0 ? 0 : v;
            }
            for (int64_t a = 1; a < R && rest > 0; ++a) /* saturates above cap: nothing then fits */
                rest = d[a] == 0 ? 0 : (rest > (cap[i] + 1) / d[a] ? cap[i] + 1 : rest * d[a]);
            if (rest > 0 && d[0] > (cap[i] - run[i]) / rest) d[0] = (cap[i] - run[i]) / rest;
            size = d[0] * rest;
            l[0] = run[i];
            l[1] = size;
            for (int64_t a = 0; a < R; ++a) l[2 + a] = size ? d[a] : 0;
            run[i] += size;
        }
    *work = run[n - 1];
}
#endif

#ifdef EM_RAG_OP
typedef struct {
    const ELT *x, *y;
    ELT *o;
    const IDX *tab;
    int64_t k, rows, R;
    int64_t c[3], cap[3];
    int64_t *lay;
} EM_T(em_rag_job);

/* one line of the result: n elements, x inside for lx of them, y for ly (zero extension) */
static inline void EM_T(em_rag_line)(const ELT *restrict x, int64_t lx, const ELT *restrict y, int64_t ly,
                                     ELT *restrict o, int64_t n) {
    if (lx > n) lx = n;
    if (ly > n) ly = n;
    const int64_t both = lx < ly ? lx : ly;
    for (int64_t p = 0; p < both; ++p) o[p] = EM_RAG_OP(x[p], y[p]);
    for (int64_t p = both; p < lx; ++p) o[p] = EM_RAG_OP(x[p], (ELT)0);
    for (int64_t p = both; p < ly; ++p) o[p] = EM_RAG_OP((ELT)0, y[p]);
    for (int64_t p = (lx > ly ? lx : ly); p < n; ++p) o[p] = (ELT)0;
}

static EM_TASK_ATTR void EM_T(em_rag_task)(void *ctx, int64_t lo, int64_t hi, int64_t tid) {
    (void)tid;
    const EM_T(em_rag_job) *j = (const EM_T(em_rag_job) *)ctx;
    const int64_t R = j->R, W = R + 2;
    for (int64_t r = lo; r < hi; ++r) {
        const int64_t *lx = j->lay + 3 * W * r, *ly = lx + W, *lo_ = ly + W;
        const int64_t *dx = lx + 2, *dy = ly + 2, *dn = lo_ + 2, n = dn[R - 1];
        const ELT *x = j->x + lx[0], *y = j->y + ly[0];
        ELT *o = j->o + lo_[0];
        if (R == 1) {
            EM_T(em_rag_line)(x, dx[0], y, dy[0], o, n);
            continue;
        }
        /* the leading axes of the result, odometer-style: each line reads x and y when the index
           lies inside their shapes on every leading axis */
        int64_t idx[EM_RAG_MAXR] = {0}, sx[EM_RAG_MAXR], sy[EM_RAG_MAXR], lines = 1;
        sx[R - 1] = sy[R - 1] = 1;
        for (int64_t a = R - 2; a >= 0; --a) {
            sx[a] = sx[a + 1] * dx[a + 1];
            sy[a] = sy[a + 1] * dy[a + 1];
            lines *= dn[a];
        }
        for (int64_t q = 0; q < lines; ++q) {
            int inx = 1, iny = 1;
            int64_t bx = 0, by = 0;
            for (int64_t a = 0; a < R - 1; ++a) {
                inx &= idx[a] < dx[a];
                iny &= idx[a] < dy[a];
                bx += idx[a] * sx[a];
                by += idx[a] * sy[a];
            }
            EM_T(em_rag_line)(x + (inx ? bx : 0), inx ? dx[R - 1] : 0, y + (iny ? by : 0), iny ? dy[R - 1] : 0,
                              o + q * n, n);
            for (int64_t a = R - 2; a >= 0; --a) {
                if (++idx[a] < dn[a]) break;
                idx[a] = 0;
            }
        }
    }
}

/* the whole batch; on the pool (up to nt threads) when it writes at least par_min elements (-1: never) */
static void EM_T(em_rag_run)(EM_T(em_rag_job) *j, int64_t par_min, int64_t nt) {
    int64_t work;
    if (j->rows <= 0) return;
    em_rag_layout(j->tab, sizeof(IDX) == 8, j->k, j->rows, j->c, j->cap, 3, j->R, j->lay, &work);
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
    int64_t k, rows, R;
    int64_t c[1], cap[1];
    int64_t *lay;
} EM_T(em_rags_job);

static EM_TASK_ATTR void EM_T(em_rags_sum)(void *ctx, int64_t lo, int64_t hi, int64_t tid) {
    (void)tid;
    const EM_T(em_rags_job) *j = (const EM_T(em_rags_job) *)ctx;
    for (int64_t r = lo; r < hi; ++r) {
        const int64_t *l = j->lay + (j->R + 2) * r;
        const ELT *restrict x = j->x + l[0];
        const int64_t n = l[1];
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
        const int64_t *l = j->lay + (j->R + 2) * r;
        ELT *restrict o = j->o + l[0];
        const int64_t n = l[1];
        const ELT v = j->x[r];
        for (int64_t p = 0; p < n; ++p) o[p] = v;
    }
}

static void EM_T(em_rags_run)(EM_T(em_rags_job) *j, int bcast, int64_t par_min, int64_t nt) {
    em_task_t fn = bcast ? EM_T(em_rags_bcast) : EM_T(em_rags_sum);
    int64_t work;
    if (j->rows <= 0) return;
    em_rag_layout(j->tab, sizeof(IDX) == 8, j->k, j->rows, j->c, j->cap, 1, j->R, j->lay, &work);
    const int par = par_min >= 0 && work >= par_min;
    if (par && nt > 1 && j->rows > 1) em_par(fn, j, j->rows, nt, nt, 4 * nt);
    else fn(j, 0, j->rows, 0);
}
#endif
