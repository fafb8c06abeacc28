/* The program side of ember's interrupt runtime (native/csrc/interrupt.c, native/runtime/interrupt.py).
   Prepended by EM_INTR_NAME (the runtime's exported table) and EM_INTERRUPTED (ember_main's
   result when stopped). A polling program finds the table with dlsym: the runtime is loaded
   RTLD_GLOBAL before programs that poll are; until it is found, nothing is polled.

   EM_POLL() reads the flag through a thread-local pointer: the runtime's flag on the main thread
   while its call runs, a local zero on every other thread (pool workers, calls on other threads),
   so a poll is one load and a predicted branch with no call in the loop (GCC hoists the pointer
   out of it, and a loop's carries stay in registers). */
typedef struct {
    volatile int *flag;
    int (*enter)(void);
    int (*leave)(void);
} em_intr_api;
static volatile int em_intr_never_;
static const em_intr_api *em_intr_;
static __thread volatile int *em_intr_flag_ = &em_intr_never_;
#define EM_POLL() (__builtin_expect(*em_intr_flag_ != 0, 0))

/* ember_main of a polling program: enter/leave the runtime around the program's body */
typedef int (*em_main_body_t)(void **, char *, const int64_t *, void **);
static inline int em_intr_call(em_main_body_t body, void **bufs, char *arena, const int64_t *dims,
                               void **fns) {
    extern void *dlsym(void *handle, const char *name);
    if (!em_intr_) em_intr_ = (const em_intr_api *)dlsym((void *)0, EM_INTR_NAME);
    if (!em_intr_) return body(bufs, arena, dims, fns);
    volatile int *const outer = em_intr_flag_;  /* a nested call restores its caller's */
    if (em_intr_->enter()) em_intr_flag_ = em_intr_->flag;
    int rc = body(bufs, arena, dims, fns);
    em_intr_flag_ = outer;
    if (em_intr_->leave() && rc == 0) rc = EM_INTERRUPTED;
    return rc;
}
