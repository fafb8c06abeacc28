/* The entry of a shared FFT kernel library (native/emit/fft_blocks.py): one precision's fft_lanes.h
   (ELT, EM_T and EM_FFTG defined as in a program), compiled once per precision and reachable paths
   and called by every program whose fft steps reach those paths (fft_block_call.h). EM_FFTB_ENTRY,
   EM_FFTB_RELEASE and EM_FFTB_LIVE are the exported names (the symbol carries a hash of the
   sources). 1: the job ran; 0: its path is not in this library (fft.py's reach and fft_lanes.h
   disagree: a bug, the caller stops). */
__attribute__((visibility("default"))) int EM_FFTB_ENTRY(EM_T(em_fft_job) *j, int64_t lines, int par,
                                                        int64_t nt) {
    return EM_T(em_fftl_run)(j, lines, par, nt);
}
/* the library's own table caches (fft_conv.h's twiddles): freed when no executable uses it
   (native/runtime/fft_tables.py), counted like a program's */
__attribute__((visibility("default"))) void EM_FFTB_RELEASE(void) { ember_fft_release(); }
__attribute__((visibility("default"))) int EM_FFTB_LIVE(void) { return ember_fft_tables_live(); }
