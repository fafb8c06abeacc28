"""ember's thread pool: parallel loops that never wait for a thread that has not started.

Why: an OpenMP ``parallel for`` ends at a barrier that every thread of the team must reach. On a
shared virtual machine a thread's vCPU is taken away for milliseconds at a time (steal time), and
a region whose second thread is descheduled waits for it even when the first thread could have
done all the work; ember's two-thread transformer block was slower than its one-thread run on such
a host. This pool's loops are claimed chunk by chunk, and the calling thread claims chunks too: it
returns as soon as every chunk has *finished*, so work a late thread never started is done by the
caller, and a thread that wakes up after the loop finds nothing to do. (ONNX Runtime's thread pool
works the same way.)

C interface (one process-wide pool, in its own shared object built once per machine):

``void SYMBOL(em_task_t fn, void *ctx, int64_t n, int64_t nthreads, int64_t chunks_per_thread)``
    runs ``fn(ctx, lo, hi, tid)`` over consecutive ranges ``[lo, hi)`` covering ``[0, n)``
    (``min(n, nthreads * chunks_per_thread)`` chunks of near-equal size), on at most ``nthreads``
    threads, the caller included (``nthreads <= 0``: the number of online CPUs). ``tid`` is in
    ``[0, nthreads)`` and no two threads run chunks with the same ``tid`` at once (per-thread
    scratch is indexed by it). A call from inside a chunk, from a second thread while the pool is
    busy, or with one thread or one chunk, runs ``fn(ctx, 0, n, 0)`` on the calling thread.

How a chunk is claimed: one 64-bit word holds the job's generation, thread limit, next chunk and
chunk count; a thread claims chunk ``i`` by a compare-and-swap from ``next = i`` to ``i + 1`` and
only then reads the job's function, context and size (which cannot change before chunk ``i`` is
done: the caller publishes the next job only after counting every chunk finished). A stale thread's
swap fails, so it never runs a chunk of a job it did not see. Idle workers spin briefly (a program
runs its parallel loops back to back), then sleep on a futex; the caller wakes them only when some
sleep. ``pthread_atfork`` resets the pool in a child process.

Generated programs find the entry with ``dlsym`` (:func:`c_helpers`) and, until this library is
loaded (it builds in a background thread, like the GEMM kernel's) or where it cannot be built, run
the same chunk function under an OpenMP ``parallel`` region, or serially without OpenMP.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging

from ember._src.native.background import BackgroundLibrary

__all__ = ["c_helpers", "load", "symbol"]

logger = logging.getLogger(__name__)

_SOURCE = r"""
#define _GNU_SOURCE
#include <stdint.h>
#include <stdatomic.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#define EM_RELAX() __builtin_ia32_pause()
#else
#define EM_RELAX() ((void)0)
#endif

typedef void (*em_task_t)(void *, int64_t, int64_t, int64_t);

/* state: generation (20 bits) | thread limit (6) | next chunk (19) | chunk count (19) */
#define EM_CH_BITS 19
#define EM_CH_MASK ((UINT64_C(1) << EM_CH_BITS) - 1)
#define EM_NEXT_SHIFT 19
#define EM_NTHR_SHIFT 38
#define EM_GEN_SHIFT 44
#define EM_MAX_THREADS 63
#define EM_MAX_CHUNKS 4096
#define EM_SPIN 4000        /* pause loops an idle worker spins before it sleeps (~50-100 us) */
#define EM_CALLER_SPIN 256  /* pause loops the caller spins between yields while chunks finish */

static _Atomic uint64_t em_state;
static _Atomic int64_t em_done;
static _Atomic uint32_t em_seq;     /* futex word: bumped with every job */
static _Atomic int em_sleepers;
static em_task_t em_job_fn;         /* the job; stable until every chunk of it has finished */
static void *em_job_ctx;
static int64_t em_job_n;
static int em_nworkers;
static pthread_mutex_t em_grow_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t em_use_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t em_once = PTHREAD_ONCE_INIT;
static __thread int em_in_task;

static void em_futex_wait(_Atomic uint32_t *addr, uint32_t value) {
#ifdef __linux__
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, value, (void *)0, (void *)0, 0);
#else
    if (atomic_load(addr) == value) usleep(50);
#endif
}

static void em_futex_wake_all(_Atomic uint32_t *addr) {
#ifdef __linux__
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, 0x7fffffff, (void *)0, (void *)0, 0);
#else
    (void)addr;
#endif
}

/* Claim and run chunks of the current job as thread tid until none is left (or tid is beyond
   the job's thread limit). */
static void em_claim_and_run(int64_t tid) {
    for (;;) {
        uint64_t s = atomic_load_explicit(&em_state, memory_order_acquire);
        const uint64_t nch = s & EM_CH_MASK, next = (s >> EM_NEXT_SHIFT) & EM_CH_MASK;
        const uint64_t nthr = (s >> EM_NTHR_SHIFT) & 63;
        if (next >= nch || (uint64_t)tid >= nthr) return;
        if (!atomic_compare_exchange_weak_explicit(&em_state, &s, s + (UINT64_C(1) << EM_NEXT_SHIFT),
                                                   memory_order_acq_rel, memory_order_acquire))
            continue;
        const int64_t n = em_job_n, base = n / (int64_t)nch, rem = n % (int64_t)nch;
        const int64_t i = (int64_t)next;
        const int64_t lo = i * base + (i < rem ? i : rem);
        const int64_t hi = lo + base + (i < rem ? 1 : 0);
        em_job_fn(em_job_ctx, lo, hi, tid);
        atomic_fetch_add_explicit(&em_done, 1, memory_order_release);
    }
}

static void *em_worker(void *arg) {
    const int64_t tid = (int64_t)(intptr_t)arg;
    em_in_task = 1;
    uint64_t seen = atomic_load(&em_state) >> EM_GEN_SHIFT;
    for (;;) {
        for (int spins = 0;;) {
            const uint64_t gen = atomic_load_explicit(&em_state, memory_order_acquire) >> EM_GEN_SHIFT;
            if (gen != seen) { seen = gen; break; }
            if (++spins < EM_SPIN) { EM_RELAX(); continue; }
            const uint32_t v = atomic_load(&em_seq);
            atomic_fetch_add(&em_sleepers, 1);
            if ((atomic_load(&em_state) >> EM_GEN_SHIFT) == seen) em_futex_wait(&em_seq, v);
            atomic_fetch_sub(&em_sleepers, 1);
            spins = 0;
        }
        em_claim_and_run(tid);
    }
    return 0;
}

static void em_after_fork_child(void) {
    /* the workers did not survive the fork: start over with none */
    em_nworkers = 0;
    atomic_store(&em_state, 0);
    atomic_store(&em_done, 0);
    atomic_store(&em_sleepers, 0);
    pthread_mutex_init(&em_grow_lock, 0);
    pthread_mutex_init(&em_use_lock, 0);
}

static void em_init(void) { pthread_atfork(0, 0, em_after_fork_child); }

static int em_default_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > EM_MAX_THREADS ? EM_MAX_THREADS : (int)n;
}

/* start workers 1 .. want - 1 that do not exist yet; returns how many threads can take part */
static int em_grow(int want) {
    if (want - 1 <= em_nworkers) return want;
    pthread_mutex_lock(&em_grow_lock);
    while (em_nworkers < want - 1) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        const int rc = pthread_create(&t, &attr, em_worker, (void *)(intptr_t)(em_nworkers + 1));
        pthread_attr_destroy(&attr);
        if (rc != 0) break;
        ++em_nworkers;
    }
    const int have = em_nworkers + 1;
    pthread_mutex_unlock(&em_grow_lock);
    return want < have ? want : have;
}

int SYMBOL_workers(void) { return em_nworkers; }

void SYMBOL(em_task_t fn, void *ctx, int64_t n, int64_t nthreads, int64_t chunks_per_thread) {
    if (n <= 0) return;
    if (nthreads <= 0) nthreads = em_default_threads();
    if (nthreads > EM_MAX_THREADS) nthreads = EM_MAX_THREADS;
    if (chunks_per_thread < 1) chunks_per_thread = 1;
    int64_t nch = nthreads * chunks_per_thread;
    if (nch > n) nch = n;
    if (nch > EM_MAX_CHUNKS) nch = EM_MAX_CHUNKS;
    if (nthreads <= 1 || nch <= 1 || em_in_task) { fn(ctx, 0, n, 0); return; }
    pthread_once(&em_once, em_init);
    if (pthread_mutex_trylock(&em_use_lock) != 0) { fn(ctx, 0, n, 0); return; }
    nthreads = em_grow((int)nthreads);
    if (nthreads <= 1) { pthread_mutex_unlock(&em_use_lock); fn(ctx, 0, n, 0); return; }
    em_job_fn = fn; em_job_ctx = ctx; em_job_n = n;
    atomic_store_explicit(&em_done, 0, memory_order_relaxed);
    const uint64_t gen = ((atomic_load_explicit(&em_state, memory_order_relaxed) >> EM_GEN_SHIFT) + 1)
                         & ((UINT64_C(1) << 20) - 1);
    atomic_store_explicit(&em_state, (gen << EM_GEN_SHIFT) | ((uint64_t)nthreads << EM_NTHR_SHIFT)
                          | (uint64_t)nch, memory_order_seq_cst);
    atomic_fetch_add(&em_seq, 1);
    if (atomic_load(&em_sleepers) > 0) em_futex_wake_all(&em_seq);
    em_in_task = 1;
    em_claim_and_run(0);
    em_in_task = 0;
    for (int spins = 0; atomic_load_explicit(&em_done, memory_order_acquire) < nch;) {
        if (++spins < EM_CALLER_SPIN) { EM_RELAX(); continue; }
        sched_yield();
        spins = 0;
    }
    pthread_mutex_unlock(&em_use_lock);
}
"""


@functools.cache
def _library_source() -> tuple[str, str]:
    """(the pool library's C source, its exported symbol: the name carries a hash of the source)."""
    name = "ember_par_for_" + hashlib.sha256(_SOURCE.encode()).hexdigest()[:12]
    return _SOURCE.replace("SYMBOL", name), name


def symbol() -> str:
    """The pool entry's exported name (whether or not the library is loaded yet)."""
    return _library_source()[1]


def _build_and_load() -> ctypes.CDLL:
    from ember._src.native import compiler

    source, _ = _library_source()
    return ctypes.CDLL(compiler.build_library(source, name_hint="threadpool"), mode=ctypes.RTLD_GLOBAL)


_library: BackgroundLibrary[ctypes.CDLL] = BackgroundLibrary(
    "ember-threadpool", _build_and_load,
    on_failure=lambda reason: logger.warning(
        "ember: building the thread pool library failed (OpenMP regions are used): %s", reason))


def load(wait: bool = False) -> bool | None:
    """Start building and loading the pool library (once per process, in a background thread);
    with ``wait``, block until done. True once loaded, False when the build failed, None while
    it runs."""
    if _library.get(wait) is not None:
        return True
    return False if _library.failure is not None else None


def workers() -> int:
    """How many worker threads the loaded pool has started (0 before its first parallel loop, or
    when the library is not loaded)."""
    lib = _library.get() if _library.done else None
    if lib is None:
        return 0
    return int(getattr(lib, symbol() + "_workers")())


# The program-side helpers: the entry looked up with dlsym until it resolves; before that (or
# where the pool cannot be built) the chunk function runs in an OpenMP parallel region (one range
# per thread, like schedule(static)) or, without OpenMP, on the calling thread.
_HELPERS = """\
typedef void (*em_task_t)(void *, int64_t, int64_t, int64_t);
typedef void (*em_par_fn_t)(em_task_t, void *, int64_t, int64_t, int64_t);
typedef struct { void **bufs; char *arena; const int64_t *dims; void **fns; } em_main_ctx;
static inline __attribute__((unused)) em_par_fn_t em_par_fn(void) {
    extern void *dlsym(void *handle, const char *name);
    static em_par_fn_t fn;
    if (!fn) fn = (em_par_fn_t)LOOKUP;
    return fn;
}
/* fn over [0, n) on up to nt threads (0: the OpenMP default), at most cap (0: no cap) */
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
#define EM_MAIN_UNPACK(c_) \\
    void **bufs = ((em_main_ctx *)(c_))->bufs; char *arena = ((em_main_ctx *)(c_))->arena; \\
    const int64_t *dims = ((em_main_ctx *)(c_))->dims; void **fns = ((em_main_ctx *)(c_))->fns; \\
    (void)bufs; (void)arena; (void)dims; (void)fns;
"""

# set by tests: programs generated while this is set never find the pool (the fallback runs)
POOL_OFF = False


def c_helpers() -> str:
    """The C declarations a program with pooled loops needs (``em_par``, ``em_main_ctx``,
    ``EM_MAIN_UNPACK``); starts loading the library."""
    if POOL_OFF:
        return _HELPERS.replace("LOOKUP", "0")
    load()
    return _HELPERS.replace("LOOKUP", f'dlsym((void *)0, "{symbol()}")')
