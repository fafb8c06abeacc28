/* ember's interrupt runtime (see native/runtime/interrupt.py): one flag shared by every generated
   program, set by a SIGINT handler that chains to the handler it replaced. Built with
   EMBER_INTERRUPT_SYMBOL defined to the exported table's name, which carries a hash of this file.

   The handler is installed lazily, by the first native call on the main thread that polls, and
   then stays: installing and restoring it around every call costs two sigaction system calls
   (about 0.5 us on a virtual machine), more than a small call. Because it chains to the handler
   it found (Python's, normally), Python still sees every SIGINT: its own handler trips, and the
   Python-level handler (KeyboardInterrupt by default, or the user's) runs when the call returns.
   A later signal.signal(SIGINT, ...) replaces this handler at the OS level; a call on the main
   thread checks (one sigaction query, at most every EM_VERIFY_NS) and installs it again, chaining
   to the new one. A SIGINT that is ignored (SIG_IGN) or has its default action (SIG_DFL) is left
   alone: nothing is installed over it. */
#define _GNU_SOURCE
#ifndef EMBER_INTERRUPT_SYMBOL
#define EMBER_INTERRUPT_SYMBOL ember_interrupt
#endif
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#define EM_VERIFY_NS 10000000  /* re-check that the handler is still installed at most every 10 ms */

/* the program side reads the flag as a volatile int (native/csrc/interrupt_poll.h) */
_Static_assert(sizeof(sig_atomic_t) == sizeof(int), "sig_atomic_t must be an int");

typedef struct {
    volatile sig_atomic_t *flag;  /* set by a SIGINT while the main thread is in a native call */
    int (*enter)(void);           /* a polling program's call begins: 1 on the main thread */
    int (*leave)(void);           /* it ends: 1 when it was interrupted (main thread only) */
} em_intr_api;

static volatile sig_atomic_t em_flag;
static volatile sig_atomic_t em_depth;      /* native calls of the main thread in progress */
static volatile sig_atomic_t em_in_handler;
static pthread_t em_main;
static int em_have_main;
static struct sigaction em_prev;            /* the handler this one chains to */
static int em_installed;
static int em_checked;                      /* whether the installation was checked at all */
static int64_t em_checked_ns;               /* when the installation was last checked */
static long em_installs;                    /* how many times the handler was (re)installed */

static void em_on_sigint(int sig, siginfo_t *info, void *uc) {
    if (em_in_handler) return;  /* a handler that chains back to this one: do not loop */
    em_in_handler = 1;
    if (em_depth > 0) em_flag = 1;
    if (em_prev.sa_flags & SA_SIGINFO) {
        em_prev.sa_sigaction(sig, info, uc);
    } else if (em_prev.sa_handler == SIG_DFL) {  /* (not installed over SIG_DFL; kept for safety) */
        signal(sig, SIG_DFL);
        raise(sig);  /* blocked until this handler returns, then the default action */
    } else if (em_prev.sa_handler != SIG_IGN) {
        em_prev.sa_handler(sig);
    }
    em_in_handler = 0;
}

static int em_is_main(void) { return em_have_main && pthread_equal(pthread_self(), em_main); }

static int em_is_ours(const struct sigaction *sa) {
    return (sa->sa_flags & SA_SIGINFO) && sa->sa_sigaction == em_on_sigint;
}

/* install the handler unless it is in place, or SIGINT is ignored or has its default action */
static void em_install(void) {
    struct sigaction cur, ours;
    if (sigaction(SIGINT, 0, &cur) != 0 || em_is_ours(&cur)) return;
    if (!(cur.sa_flags & SA_SIGINFO) && (cur.sa_handler == SIG_IGN || cur.sa_handler == SIG_DFL)) {
        em_installed = 0;
        return;
    }
    memset(&ours, 0, sizeof ours);
    ours.sa_sigaction = em_on_sigint;
    ours.sa_mask = cur.sa_mask;
    ours.sa_flags = (cur.sa_flags | SA_SIGINFO) & ~SA_RESETHAND;
    em_prev = cur;
    if (sigaction(SIGINT, &ours, 0) == 0) {
        em_installed = 1;
        ++em_installs;
    }
}

static int64_t em_now_ns(void) {
    struct timespec t;
#ifdef CLOCK_MONOTONIC_COARSE
    clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
#else
    clock_gettime(CLOCK_MONOTONIC, &t);
#endif
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Only the main thread's calls poll the flag (the program arms a thread-local pointer to it when
   this returns 1): a call on another thread, and pool workers (which finish the chunk they hold
   while the caller skips the rest), keep going. */
static int em_enter(void) {
    if (!em_is_main()) return 0;
    if (em_depth++ != 0) return 1;  /* a nested call (from a fallback step's Python code) */
    em_flag = 0;                   /* a SIGINT seen outside a call was Python's alone */
    const int64_t now = em_now_ns();
    if (!em_checked || now - em_checked_ns >= EM_VERIFY_NS) {
        em_checked = 1;
        em_checked_ns = now;
        em_install();
    }
    return 1;
}

static int em_leave(void) {
    if (!em_is_main()) return 0;
    const int hit = em_flag != 0;
    if (--em_depth == 0) em_flag = 0;
    return hit;
}

const em_intr_api EMBER_INTERRUPT_SYMBOL = {&em_flag, em_enter, em_leave};

#define EM_INTR_CAT2(a, b) a##b
#define EM_INTR_CAT(a, b) EM_INTR_CAT2(a, b)

/* Python's main thread (threading.main_thread().ident, a pthread_t on POSIX) */
void EM_INTR_CAT(EMBER_INTERRUPT_SYMBOL, _init)(unsigned long main_ident) {
    em_main = (pthread_t)main_ident;
    em_have_main = 1;
}

/* 1 while this runtime's handler is the installed SIGINT handler (a system call; for tests) */
int EM_INTR_CAT(EMBER_INTERRUPT_SYMBOL, _installed)(void) {
    struct sigaction cur;
    return sigaction(SIGINT, 0, &cur) == 0 && em_is_ours(&cur);
}

/* how many times the handler was installed (for tests and diagnostics) */
long EM_INTR_CAT(EMBER_INTERRUPT_SYMBOL, _installs)(void) { return em_installs; }

/* nanoseconds per install-and-restore pair of sigaction calls (what installing a handler around
   every call would cost), timed over n pairs that re-install the current handler (benchmarks) */
double EM_INTR_CAT(EMBER_INTERRUPT_SYMBOL, _install_pair_ns)(int n) {
    struct sigaction cur, old;
    if (n < 1 || sigaction(SIGINT, 0, &cur) != 0) return -1.0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < n; ++i) {
        sigaction(SIGINT, &cur, &old);
        sigaction(SIGINT, &old, 0);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / n;
}
