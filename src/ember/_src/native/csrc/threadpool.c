/* ember's thread pool (see native/runtime/threadpool.py). Built with EMBER_POOL_SYMBOL defined to
   the exported entry's name, which carries a hash of this file. */
#define _GNU_SOURCE
#ifndef EMBER_POOL_SYMBOL
#define EMBER_POOL_SYMBOL ember_par_for
#endif
#include <stdint.h>
#include <stdatomic.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
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

/* state: generation (20 bits) | thread limit (6) | blocks (1) | next chunk (18) | chunk count (19).
   A job's chunks are claimed first come, first served (the next-chunk counter), or, for a job in
   blocks, dealt in nthr contiguous blocks, block t to thread t (the caller is thread 0): a thread
   runs its own block from the front, then steals from the back of the others'. In blocks a thread
   gets the same chunks from one call to the next while every thread is awake, so the data it read
   and wrote last time is still in its own caches (a 64 x 1024 FFT at two threads: 40 us first come,
   first served, 28 us in blocks, 52 us at one thread), and the work still finishes when one is
   late. Jobs whose chunks share data as they go (the GEMM's packed panels) stay first come, first
   served. */
#define EM_CH_BITS 19
#define EM_CH_MASK ((UINT64_C(1) << EM_CH_BITS) - 1)
#define EM_NEXT_SHIFT 19
#define EM_NEXT_MASK ((UINT64_C(1) << 18) - 1)
#define EM_BLOCKS_BIT (UINT64_C(1) << 37)
#define EM_NTHR_SHIFT 38
#define EM_GEN_SHIFT 44
#define EM_MAX_THREADS 63
#define EM_MAX_CHUNKS 4096
#define EM_SPIN 4000        /* pause loops an idle worker spins before it yields (~40-100 us) */
#define EM_YIELD_NS 2000000 /* then how long it polls between sched_yield calls before it sleeps */
#define EM_CALLER_SPIN 256  /* pause loops the caller spins between yields while chunks finish */

static _Atomic uint64_t em_state;
/* block t of the current job in blocks: generation (20 bits) | next chunk (19) | end (19), a cache
   line each */
#define EM_BLK_NEXT 19
#define EM_BLK_GEN 38
static struct { _Alignas(64) _Atomic uint64_t w; } em_blk[EM_MAX_THREADS];
static _Atomic int64_t em_done;
static _Atomic uint32_t em_seq;     /* futex word: bumped with every job */
static _Atomic int em_caller_cpu = -1; /* the CPU the current job's caller published it from */
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

/* Run chunk i of the current job (nch chunks) as thread tid. */
static void em_run_chunk(uint64_t nch, uint64_t i, int64_t tid) {
    const int64_t n = em_job_n, base = n / (int64_t)nch, rem = n % (int64_t)nch;
    const int64_t lo = (int64_t)i * base + ((int64_t)i < rem ? (int64_t)i : rem);
    const int64_t hi = lo + base + ((int64_t)i < rem ? 1 : 0);
    em_job_fn(em_job_ctx, lo, hi, tid);
    atomic_fetch_add_explicit(&em_done, 1, memory_order_release);
}

/* The chunks of the job in blocks of state s as thread tid: its own block from the front, then the
   other blocks from their backs. A claim is a compare-and-swap of the block's word, which carries
   the job's generation, so a thread still looking at a finished job claims nothing of the next. */
static void em_claim_blocks(uint64_t s, int64_t tid) {
    const uint64_t nch = s & EM_CH_MASK, gen = s >> EM_GEN_SHIFT, nthr = (s >> EM_NTHR_SHIFT) & 63;
    for (uint64_t k = 0; k < nthr; ++k) {
        const uint64_t b = ((uint64_t)tid + k) % nthr;
        for (;;) {
            uint64_t w = atomic_load_explicit(&em_blk[b].w, memory_order_acquire);
            if (w >> EM_BLK_GEN != gen) return;  /* (the job is over) */
            const uint64_t next = (w >> EM_BLK_NEXT) & EM_CH_MASK, end = w & EM_CH_MASK;
            if (next >= end) break;
            const uint64_t claim = k ? w - 1 : w + (UINT64_C(1) << EM_BLK_NEXT);
            if (atomic_compare_exchange_weak_explicit(&em_blk[b].w, &w, claim, memory_order_acq_rel,
                                                      memory_order_acquire))
                em_run_chunk(nch, k ? end - 1 : next, tid);
        }
    }
}

/* Claim and run chunks of the current job as thread tid until none is left (or tid is beyond
   the job's thread limit). */
static void em_claim_and_run(int64_t tid) {
    for (;;) {
        uint64_t s = atomic_load_explicit(&em_state, memory_order_acquire);
        const uint64_t nch = s & EM_CH_MASK, next = (s >> EM_NEXT_SHIFT) & EM_NEXT_MASK;
        const uint64_t nthr = (s >> EM_NTHR_SHIFT) & 63;
        if ((uint64_t)tid >= nthr) return;
        if (s & EM_BLOCKS_BIT) { em_claim_blocks(s, tid); return; }
        if (next >= nch) return;
        if (atomic_compare_exchange_weak_explicit(&em_state, &s, s + (UINT64_C(1) << EM_NEXT_SHIFT),
                                                  memory_order_acq_rel, memory_order_acquire))
            em_run_chunk(nch, next, tid);
    }
}

static int64_t em_now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Linux may wake a sleeping worker on its waker's CPU (a wakeup it judges cache-friendly), where
   it time-shares that CPU with the caller while another one idles, until the load balancer moves one
   of the two: on the 2-vCPU VMs the calls after a pause ran at one thread's speed or slower for
   milliseconds (an LSTM at batch 8, second call after a 0.2 s pause: 3.4-3.6 ms, 2.5 with the worker
   kept off the caller's CPU). So a worker that starts a job on the CPU its caller published moves
   itself to the other CPUs of the set it started with (a syscall only then; the check is one read
   of the CPU number). */
#ifdef __linux__
static void em_step_aside(const cpu_set_t *home, int have_home) {
    const int caller = atomic_load_explicit(&em_caller_cpu, memory_order_relaxed);
    if (!have_home || caller < 0 || caller >= CPU_SETSIZE || sched_getcpu() != caller) return;
    cpu_set_t others = *home;
    CPU_CLR(caller, &others);
    if (CPU_COUNT(&others) > 0) pthread_setaffinity_np(pthread_self(), sizeof others, &others);
}
#endif

static void *em_worker(void *arg) {
    const int64_t tid = (int64_t)(intptr_t)arg;
    em_in_task = 1;
#ifdef __linux__  /* (cpu_set_t and the affinity calls are Linux's) */
    cpu_set_t home;
    CPU_ZERO(&home);
    const int have_home = pthread_getaffinity_np(pthread_self(), sizeof home, &home) == 0;
#endif
    uint64_t seen = atomic_load(&em_state) >> EM_GEN_SHIFT;
    for (;;) {
        int64_t until = 0;
        for (int spins = 0;;) {
            const uint64_t gen = atomic_load_explicit(&em_state, memory_order_acquire) >> EM_GEN_SHIFT;
            if (gen != seen) { seen = gen; break; }
            if (++spins < EM_SPIN) { EM_RELAX(); continue; }
            if (!until) until = em_now_ns() + EM_YIELD_NS;
            if (em_now_ns() < until) {
                sched_yield();
                spins = EM_SPIN - 64;
                continue;
            }
            const uint32_t v = atomic_load(&em_seq);
            atomic_fetch_add(&em_sleepers, 1);
            if ((atomic_load(&em_state) >> EM_GEN_SHIFT) == seen) em_futex_wait(&em_seq, v);
            atomic_fetch_sub(&em_sleepers, 1);
            spins = 0;
            until = 0;
        }
#ifdef __linux__
        em_step_aside(&home, have_home);
#endif
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

/* the CPUs this process may run on (its affinity mask: a container or taskset pinned to 2 cores
   of a 16-core host gets 2 threads, not 16 time-sharing 2 cores), else the CPUs online */
static int em_default_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
#ifdef __linux__
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        const int c = CPU_COUNT(&set);
        if (c > 0 && c < n) n = c;
    }
#endif
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
#ifdef __linux__  /* (named here, not by the worker, so the name is there once the pool grew) */
        pthread_setname_np(t, "ember-pool");
#endif
        ++em_nworkers;
    }
    const int have = em_nworkers + 1;
    pthread_mutex_unlock(&em_grow_lock);
    return want < have ? want : have;
}

#define EM_POOL_CAT2(a, b) a##b
#define EM_POOL_CAT(a, b) EM_POOL_CAT2(a, b)
int EM_POOL_CAT(EMBER_POOL_SYMBOL, _workers)(void) { return em_nworkers; }

/* fn over [0, n) in chunks_per_thread chunks per thread on up to nthreads threads (0: the default),
   the caller working too; chunks_per_thread < 0: -chunks_per_thread chunks per thread in blocks
   (see the state above) */
void EMBER_POOL_SYMBOL(em_task_t fn, void *ctx, int64_t n, int64_t nthreads, int64_t chunks_per_thread) {
    if (n <= 0) return;
    const int blocks = chunks_per_thread < 0;
    if (blocks) chunks_per_thread = -chunks_per_thread;
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
#ifdef __linux__
    atomic_store_explicit(&em_caller_cpu, sched_getcpu(), memory_order_relaxed);
#endif
    const uint64_t gen = ((atomic_load_explicit(&em_state, memory_order_relaxed) >> EM_GEN_SHIFT) + 1)
                         & ((UINT64_C(1) << 20) - 1);
    if (blocks)  /* (before the state: a worker that sees the new generation finds its block) */
        for (int64_t b = 0; b < nthreads; ++b)
            atomic_store_explicit(&em_blk[b].w, (gen << EM_BLK_GEN) | ((uint64_t)(b * nch / nthreads) << EM_BLK_NEXT)
                                                    | (uint64_t)((b + 1) * nch / nthreads), memory_order_relaxed);
    atomic_store_explicit(&em_state, (gen << EM_GEN_SHIFT) | ((uint64_t)nthreads << EM_NTHR_SHIFT)
                          | (blocks ? EM_BLOCKS_BIT : 0) | (uint64_t)nch, memory_order_seq_cst);
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
