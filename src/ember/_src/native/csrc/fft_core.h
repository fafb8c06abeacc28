/* FFT plans shared by both precisions (see native/emit/fft.py): a length's factors and tables
   (twiddles; Bluestein's chirp, convolution twiddles and chirp filter transform; the real split's
   twiddles), computed in double and cached across calls. The transforms of the lines are
   fft_lanes.h's; em_fft_work here only builds Bluestein's filter transform, EM_FW lanes at a time
   (an em_vz holds element j of EM_FW lines, GCC/clang vector types: 8 doubles with AVX-512, else
   4), with the small DFTs of dft_small.h (included in front of this file). */
#if defined(__AVX512F__)
#define EM_FW 8
#else
#define EM_FW 4
#endif
/* Tables a library allocates with malloc (the runtime-length plan cache, fft_runtime.h; fft_conv.h's
   twiddles): em_fft_live counts them; ember_fft_release() frees them all (the runtime calls it when
   the last executable of the library is dropped, native/runtime/fft_tables.py; no transform may run
   then), and so does unloading the library. Each cache registers its release with em_fft_on_release
   from a constructor. */
static int em_fft_live;
typedef void (*em_fft_free_t)(void);
static em_fft_free_t em_fft_frees[8];
static int em_fft_nfrees;
static __attribute__((unused)) void em_fft_on_release(em_fft_free_t f) {
    if (em_fft_nfrees < 8) em_fft_frees[em_fft_nfrees++] = f;
}
/* EM_FFT_API: how the two entries are exported -- a program's for native/runtime/fft_tables.py; the
   shared FFT kernel library (fft_block.h) defines it static and exports its own names instead, so
   its copies never interpose on a program's */
#ifndef EM_FFT_API
#define EM_FFT_API __attribute__((visibility("default")))
#endif
EM_FFT_API int ember_fft_tables_live(void) {
    return __atomic_load_n(&em_fft_live, __ATOMIC_ACQUIRE);
}
EM_FFT_API void ember_fft_release(void) {
    for (int i = 0; i < em_fft_nfrees; ++i) em_fft_frees[i]();
}
__attribute__((destructor)) static void em_fft_unload(void) { ember_fft_release(); }
/* the largest prime factor a length's direct plan takes (fft_passes.h's em_fftp_rodd; fft.py's
   BLUESTEIN_PRIME): a larger one switches the length to Bluestein */
#define EM_FFT_PMAX 64
typedef double em_v __attribute__((vector_size(EM_FW * sizeof(double))));
typedef struct { double re, im; } em_z;
typedef struct { em_v re, im; } em_vz;
static inline em_z em_zmul(em_z a, em_z b) {
    em_z r = {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
    return r;
}
static inline em_vz em_vzmul(em_vz a, em_z w) {  /* lines times a scalar twiddle */
    em_vz r = {a.re * w.re - a.im * w.im, a.re * w.im + a.im * w.re};
    return r;
}
typedef struct {
    int64_t n, m2;              /* length; Bluestein's power-of-two length (0: direct) */
    const int32_t *fac, *fac2;  /* prime factors of n (direct) or of m2 (Bluestein) */
    int inv;
    const em_z *tw, *chirp, *tw2, *bf, *rt;  /* tables (cached across calls, see em_fft_make) */
    em_vz *a, *c;                            /* per-call scratch (Bluestein) */
} em_fft_plan;
static void em_fft_twiddles(em_z *tw, int64_t n, int64_t den) {  /* tw[j] = exp(-2 pi i j / den) */
    for (int64_t j = 0; j < n; ++j) {
        double ang = -6.283185307179586476925286766559 * (double)j / (double)den;
        tw[j].re = cos(ang); tw[j].im = sin(ang);
    }
}
/* out[0..n) = DFT of in[0], in[is], ..., by decimation in time over the factors fac (2, 3, 4 and
   5: Bluestein's 2-3-5-smooth convolution length); the twiddle table tw has n * ts entries (stride
   ts at this level); inv conjugates every twiddle. Only for the plan's tables (the chirp filter's
   transform, in double; fft_lanes.h transforms the lines), so it is written for brevity. */
static void em_fft_work(em_vz *out, const em_vz *in, int64_t is, const int32_t *fac, int64_t n,
                        const em_z *tw, int64_t ts, int inv) {
    const int64_t p = fac[0], m = n / p;
    const double sg = inv ? -1.0 : 1.0;
    if (m == 1) {
        for (int64_t q = 0; q < p; ++q) out[q] = in[q * is];
    } else {
        for (int64_t q = 0; q < p; ++q)
            em_fft_work(out + q * m, in + q * is, is * p, fac + 1, m, tw, ts * p, inv);
    }
    for (int64_t k = 0; k < m; ++k) {  /* X_(k + u m) = the p-point DFT over q of W_n^(q k) Y_q[k] */
        em_vz t[5];
        for (int64_t q = 0; q < p; ++q) {
            t[q] = out[q * m + k];
            if (q && k) { em_z w = tw[q * k * ts]; w.im *= sg; t[q] = em_vzmul(t[q], w); }
        }
        EM_DFT_SMALL(t, p, sg, em_v, double);
        for (int64_t q = 0; q < p; ++q) out[q * m + k] = t[q];
    }
}
/* Bluestein's tables at t (the chirp, the convolution's twiddles and the chirp filter's transform)
   laid out and, with fill, computed; returns their end */
static em_z *em_fft_blue_tables(em_fft_plan *p, em_z *t, int fill) {
    const int64_t n = p->n, m2 = p->m2;
    em_z *chirp = t, *tw2 = t + n, *bf = tw2 + m2;
    p->chirp = chirp; p->tw2 = tw2; p->bf = bf;
    if (fill) {
        for (int64_t k = 0; k < n; ++k) {  /* chirp_k = exp(-+ i pi k^2 / n), k^2 reduced mod 2n */
            double ang = 3.14159265358979323846264338327950288 * (double)((k * k) % (2 * n)) / (double)n;
            chirp[k].re = cos(ang); chirp[k].im = p->inv ? sin(ang) : -sin(ang);
        }
        em_fft_twiddles(tw2, m2, m2);
        em_vz *a = p->a, *c = p->c;
        const em_v zero = {0};
        for (int64_t j = 0; j < m2; ++j) { a[j].re = zero; a[j].im = zero; }
        for (int64_t k = 0; k < n; ++k) {
            em_vz b = {zero + chirp[k].re, zero - chirp[k].im};
            a[k] = b;
            if (k) a[m2 - k] = b;
        }
        em_fft_work(c, a, 1, p->fac2, m2, tw2, 1, 0);
        for (int64_t j = 0; j < m2; ++j) { bf[j].re = c[j].re[0]; bf[j].im = c[j].im[0]; }
    }
    return bf + m2;
}
/* Lay out the tables at tab and, with fill, compute them: twiddles (direct), or Bluestein's
   (em_fft_blue_tables); with half, the real-FFT split twiddles exp(-i pi k / n), k = 0..n. Inlined,
   so a call site whose plan is direct (m2 a constant 0, fft.py's static plans) has no Bluestein
   code (nor em_fft_work, unless the double path needs it). */
static inline __attribute__((always_inline)) void em_fft_tables(em_fft_plan *p, em_z *tab, int half, int fill) {
    const int64_t n = p->n;
    em_z *t = tab;
    if (!p->m2) {
        if (fill) em_fft_twiddles(t, n, n);
        p->tw = t; t += n;
    } else {
        t = em_fft_blue_tables(p, t, fill);
    }
    p->rt = t;
    if (half && fill) em_fft_twiddles(t, n + 1, 2 * n);
}
/* Set up a plan of length n. The tables are built once per call site and kept in its static
   storage tab (*state: 0 empty, 1 being filled, 2 ready); a call that finds another thread filling
   them builds its own copy in the workspace wtab instead. scratch: 2 * m2 em_vz. */
static inline __attribute__((always_inline)) void em_fft_make(em_fft_plan *p, int64_t n, const int32_t *fac,
        int64_t m2, const int32_t *fac2, int inv, int half, em_z *tab, int *state, em_z *wtab, em_vz *scratch) {
    int s = __atomic_load_n(state, __ATOMIC_ACQUIRE), zero = 0, own = 0;
    em_z *t = tab;
    if (s != 2) {
        if (s == 0 && __atomic_compare_exchange_n(state, &zero, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) own = 1;
        else t = wtab;
    }
    /* (set after the atomics, so the inlined em_fft_tables sees the constant m2) */
    p->n = n; p->m2 = m2; p->fac = fac; p->fac2 = fac2; p->inv = inv;
    p->a = scratch; p->c = scratch + m2;
    em_fft_tables(p, t, half, s != 2);
    if (own) __atomic_store_n(state, 2, __ATOMIC_RELEASE);
}
