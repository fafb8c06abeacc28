/* A program's fft steps run their jobs in a shared FFT kernel library (fft_block.h, built and
   loaded with its symbols global before the program: native/emit/fft_blocks.py), whose entry
   EM_FFTB_SYM (defined in front of this file, with ELT and EM_T) is looked up once. A missing entry
   or a job the library declines stops the program (never a wrong result): both are bugs. */
typedef int (*EM_T(em_fftb_fn))(EM_T(em_fft_job) *, int64_t, int, int64_t);
static void EM_T(em_fft_run)(EM_T(em_fft_job) *j, int64_t lines, int par, int64_t nt) {
    extern void *dlsym(void *handle, const char *name);
    static EM_T(em_fftb_fn) fn_;
    EM_T(em_fftb_fn) fn = __atomic_load_n(&fn_, __ATOMIC_ACQUIRE);
    if (!fn) {
        fn = (EM_T(em_fftb_fn))dlsym((void *)0, EM_FFTB_SYM);
        __atomic_store_n(&fn_, fn, __ATOMIC_RELEASE);
    }
    if (!fn || !fn(j, lines, par, nt)) __builtin_trap();
}
