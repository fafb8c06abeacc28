/* The GEMM kernel's program side (native/emit/gemm_kernel.py): the entry points' types and their
   dlsym lookups, EM_SK_LOOKUP / EM_SKP_LOOKUP (defined in front of this file; 0 where programs
   must not call the kernel), so a program calls the kernel library once it is loaded. */
typedef void (*em_sk_fn_t)(int64_t, int64_t, int64_t, float, const float *, int64_t, int64_t,
                           const float *, int64_t, int64_t, float, float *, int64_t, const float *, int,
                           int);
typedef void (*em_skp_fn_t)(int64_t, int64_t, int64_t, float, const float *, int64_t, int64_t,
                            const float *, float, float *, int64_t, const float *, int, int);
/* the kernel's entry, once its library is loaded (looked up again until it resolves) */
static inline __attribute__((unused)) em_sk_fn_t em_sk_fn(void) {
    /* dlsym declared here, not by <dlfcn.h> (its parsing costs); RTLD_DEFAULT is the null handle */
    extern void *dlsym(void *handle, const char *name);
    static em_sk_fn_t fn;
    if (!fn) fn = (em_sk_fn_t)EM_SK_LOOKUP;
    return fn;
}
/* its entry for a prepacked B (prepack_b) */
static inline __attribute__((unused)) em_skp_fn_t em_skp_fn(void) {
    extern void *dlsym(void *handle, const char *name);
    static em_skp_fn_t fn;
    if (!fn) fn = (em_skp_fn_t)EM_SKP_LOOKUP;
    return fn;
}
