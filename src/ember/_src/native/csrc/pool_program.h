/* The thread pool's program side (native/runtime/threadpool.py), included by a generated program
   with pooled loops: em_par runs a chunk function over [0, n) on the pool, whose entry is looked up
   with dlsym until it resolves (EM_PAR_LOOKUP, defined in front of this file: the lookup, or 0 where
   the pool is off); before that, or where the pool cannot be built, in an OpenMP parallel region
   (one range per thread, like schedule(static)) or, without OpenMP, on the calling thread. */
typedef void (*em_task_t)(void *, int64_t, int64_t, int64_t);
typedef void (*em_par_fn_t)(em_task_t, void *, int64_t, int64_t, int64_t);
typedef struct { void **bufs; char *arena; const int64_t *dims; void **fns; volatile int *intr; } em_main_ctx;
/* a loop body's pooled loops: its arena, tables, dims, and its in/out pointers in order */
typedef struct { char *arena; void **fns; const int64_t *dims; char **io; volatile int *intr; } em_body_ctx;
static inline __attribute__((unused)) em_par_fn_t em_par_fn(void) {
    extern void *dlsym(void *handle, const char *name);
    static em_par_fn_t fn;
    if (!fn) fn = (em_par_fn_t)EM_PAR_LOOKUP;
    return fn;
}
/* the threads a step runs on: nt (jit's num_threads) where given, else the process's default -- the
   OpenMP one, which follows OMP_NUM_THREADS, omp_set_num_threads and the affinity mask (without
   OpenMP: cap) -- at most cap (the per-thread scratch the step was planned for), at least 1 */
static inline __attribute__((unused)) int64_t em_threads(int64_t nt, int64_t cap) {
#ifdef _OPENMP
    if (nt <= 0) nt = omp_get_max_threads();
#else
    if (nt <= 0) nt = cap;
#endif
    return nt > cap ? cap : nt < 1 ? 1 : nt;
}
/* fn over [0, n) on up to nt threads (0: the OpenMP default), at most cap (0: no cap), in chunks
   chunks per thread claimed first come, first served, or for chunks < 0 in -chunks chunks per thread
   dealt in blocks (the same rows to the same thread each call: threadpool.c) */
static __attribute__((unused)) void em_par(em_task_t fn, void *ctx, int64_t n, int64_t nt, int64_t cap,
                                           int64_t chunks) {
#ifdef _OPENMP
    if (nt <= 0) nt = omp_get_max_threads();
#else
    if (nt <= 0) nt = 1;
#endif
    if (cap > 0 && nt > cap) nt = cap;
    em_par_fn_t p = em_par_fn();
    if (p) { p(fn, ctx, n, nt, chunks); return; }
#ifdef _OPENMP
    if (nt > 1 && n > 1 && !omp_in_parallel()) {
        #pragma omp parallel num_threads(nt)
        {
            const int64_t t = omp_get_thread_num(), tn = omp_get_num_threads();
            fn(ctx, n * t / tn, n * (t + 1) / tn, t);
        }
        return;
    }
#endif
    fn(ctx, 0, n, 0);
}
/* Chunk functions are opaque to GCC's interprocedural analyses: GCC 12 at -O1..-O3 was seen to
   drop a direct call of one (on the serial path) whose writes all go through pointers it loads
   from the context, as if they had no effect; noipa keeps every such call. */
#if defined(__GNUC__) && !defined(__clang__)
#define EM_TASK_ATTR __attribute__((noipa))
#else
#define EM_TASK_ATTR __attribute__((noinline))
#endif
#define EM_MAIN_UNPACK(c_) \
    void **bufs = ((em_main_ctx *)(c_))->bufs; char *arena = ((em_main_ctx *)(c_))->arena; \
    const int64_t *dims = ((em_main_ctx *)(c_))->dims; void **fns = ((em_main_ctx *)(c_))->fns; \
    (void)bufs; (void)arena; (void)dims; (void)fns;
#define EM_BODY_UNPACK(c_) \
    char *arena = ((em_body_ctx *)(c_))->arena; void **fns = ((em_body_ctx *)(c_))->fns; \
    const int64_t *dims = ((em_body_ctx *)(c_))->dims; char **io_ = ((em_body_ctx *)(c_))->io; \
    (void)arena; (void)dims; (void)fns; (void)io_;
