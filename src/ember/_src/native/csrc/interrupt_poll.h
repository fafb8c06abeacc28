/* The program side of ember's interrupt runtime (native/interrupt.c, native/interrupt.py).
   Prepended by EM_INTR_NAME, the runtime's exported table. A program that polls finds the table
   with dlsym (the runtime is loaded RTLD_GLOBAL before programs are); until it is found, the flag
   read is a local zero and nothing is polled. EM_POLL() is one load and a predicted branch: the
   slow path (is this the main thread's call?) runs only once a SIGINT has set the flag. */
typedef struct {
    volatile int *flag;
    void (*enter)(void);
    int (*leave)(void);
    int (*stop)(void);
} em_intr_api;
static volatile int em_intr_never_;
static const em_intr_api *em_intr_;
static volatile int *em_intr_flag_ = &em_intr_never_;
static inline void em_intr_find(void) {
    extern void *dlsym(void *handle, const char *name);
    if (!em_intr_) {
        const em_intr_api *api = (const em_intr_api *)dlsym((void *)0, EM_INTR_NAME);
        if (api) {  /* the table first: a thread that sees the flag pointer finds the table */
            __atomic_store_n(&em_intr_, api, __ATOMIC_RELEASE);
            __atomic_store_n(&em_intr_flag_, api->flag, __ATOMIC_RELEASE);
        }
    }
}
#define EM_POLL() (__builtin_expect(*em_intr_flag_ != 0, 0) && em_intr_->stop())
/* ember_main of a polling program: enter/leave the runtime around the program's body */
typedef int (*em_main_body_t)(void **, char *, const int64_t *, void **);
static inline int em_intr_call(em_main_body_t body, void **bufs, char *arena, const int64_t *dims,
                               void **fns) {
    em_intr_find();
    if (!em_intr_) return body(bufs, arena, dims, fns);
    em_intr_->enter();
    int rc = body(bufs, arena, dims, fns);
    if (em_intr_->leave() && rc == 0) rc = EM_INTERRUPTED;
    return rc;
}
