/* The fft step's job for one precision (see native/emit/fft.py): included with ELT (float or
   double) and EM_T(name) (the name with the precision's suffix) defined, in front of fft_lanes.h,
   which runs every job (em_fftl_run: CW lines in the lanes of ELT vectors, or the four-step for
   few long lines). EM_FFTG, when defined, is the mask of what the program's fft steps can reach
   (fft.py's reach): the job kinds and the paths of fft_lanes.h; the others are constant-false
   branches, so the compiler drops their code. Undefined: everything (runtime lengths, tests). */
#ifndef EM_FFTG_ONCE
#define EM_FFTG_ONCE
enum {
    EM_FFTG_AXIS = 1, EM_FFTG_RFFT = 2, EM_FFTG_IRFFT = 4,  /* job kinds 0, 1, 2 */
    EM_FFTG_P2 = 8,        /* power-of-two lines in lanes */
    EM_FFTG_LONG = 16,     /* the four-step path for few long lines */
    EM_FFTG_MIXED = 32,    /* other lengths with prime factors up to EM_FFT_PMAX in lanes */
    EM_FFTG_BLUE = 64,     /* Bluestein in lanes (a prime factor above EM_FFT_PMAX) */
    EM_FFTG_FULL = 128,    /* a real transform of odd length (or 2) as the full complex line */
    EM_FFTG_RL8 = 256, EM_FFTG_RL4 = 512,  /* the RFFT: its last stage of radix 8 / 4 fused */
    EM_FFTG_RSG = 1024,    /* the RFFT: the split as the spectrum is stored (no fused stage) */
    EM_FFTG_P2R = 2048,    /* power-of-two rows read straight into the first stage */
    EM_FFTG_LINE = 4096,   /* power-of-two rows one line at a time (fft_line.h) */
};
#endif
#ifdef EM_FFTG
#define EM_FFTG_ON(bits) ((EM_FFTG) & (bits))
#else
#define EM_FFTG_ON(bits) 1
#endif
/* a branch the gates left out: fft.py's reach and this code disagree (a bug) -- stop, never compute
   a wrong result */
#define EM_FFTG_MISSED() __builtin_trap()
/* One transform step: kind 0 the lines along the middle axis of a complex (outer, n, inner) array,
   1 the real last axis of length n (RFFT; half: through the half-length transform, n even and at
   least 4), 2 the inverse (IRFFT), times scale. Thread tid works in its own scratch (scratch + tid
   * stride em_vz); the plan's tables are shared, read only. */
typedef struct {
    int kind, half;
    const ELT *src; ELT *dst;
    int64_t outer, n, inner;
    const em_fft_plan *p;
    em_vz *scratch; int64_t stride;
    double scale;
    void *wtab;  /* the step's table workspace (fft_lanes.h builds its tables there when uncached) */
} EM_T(em_fft_job);
