/* FFT plans and radix passes shared by both precisions (see native/emit/fft.py).

   The passes transform EM_FW lines at once: an em_vz holds element j of EM_FW lines, one line per
   vector lane (GCC/clang vector types, so the butterflies are SIMD over lines on the instruction set
   the program is compiled for: 8 doubles with AVX-512, else 4). Twiddles stay scalar (broadcast). */
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
__attribute__((visibility("default"))) int ember_fft_tables_live(void) {
    return __atomic_load_n(&em_fft_live, __ATOMIC_ACQUIRE);
}
__attribute__((visibility("default"))) void ember_fft_release(void) {
    for (int i = 0; i < em_fft_nfrees; ++i) em_fft_frees[i]();
}
__attribute__((destructor)) static void em_fft_unload(void) { ember_fft_release(); }
typedef double em_v __attribute__((vector_size(EM_FW * sizeof(double))));
typedef struct { double re, im; } em_z;
typedef struct { em_v re, im; } em_vz;
#define EM_FFT_TMP 64  /* the largest odd radix (fft.py's BLUESTEIN_PRIME) */
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
/* one radix-4 butterfly on o[0], o[m], o[2m], o[3m]; twiddled: times w^1, w^2, w^3 (w = tw[0],
   tw[step], tw[2 step], conjugated when sg < 0) first */
static inline __attribute__((always_inline)) void em_fft_r4(em_vz *o, int64_t m, int twiddled,
                                                             const em_z *tw, int64_t step, double sg) {
    em_vz f0 = o[0], b1 = o[m], b2 = o[2 * m], b3 = o[3 * m];
    if (twiddled) {
        em_z w1 = tw[0], w2 = tw[step], w3 = tw[2 * step];
        w1.im *= sg; w2.im *= sg; w3.im *= sg;
        b1 = em_vzmul(b1, w1); b2 = em_vzmul(b2, w2); b3 = em_vzmul(b3, w3);
    }
    em_vz s0 = {f0.re + b2.re, f0.im + b2.im}, s1 = {f0.re - b2.re, f0.im - b2.im};
    em_vz s2 = {b1.re + b3.re, b1.im + b3.im}, s3 = {b1.re - b3.re, b1.im - b3.im};
    o[0].re = s0.re + s2.re; o[0].im = s0.im + s2.im;
    o[2 * m].re = s0.re - s2.re; o[2 * m].im = s0.im - s2.im;
    o[m].re = s1.re + sg * s3.im; o[m].im = s1.im - sg * s3.re;
    o[3 * m].re = s1.re - sg * s3.im; o[3 * m].im = s1.im + sg * s3.re;
}
/* the radix-p pass (odd p <= EM_FFT_TMP) over out[0..p m): outputs u and p - u share the sums over
   the pairs (q, p - q), since W^(qu) t_q + W^(-qu) t_(p-q) = c (t_q + t_(p-q)) + i s (t_q - t_(p-q))
   with W^(qu) = c + i s. Inlined with p = 3 and 5 as constants, so their loops unroll. */
static inline __attribute__((always_inline)) void em_fft_odd(em_vz *out, int64_t m, const int64_t p,
                                                              const em_z *tw, int64_t ts, double sg) {
    const int64_t h = (p - 1) / 2;
    double cs[EM_FFT_TMP / 2][EM_FFT_TMP / 2], sn[EM_FFT_TMP / 2][EM_FFT_TMP / 2];
    for (int64_t u = 1; u <= h; ++u)
        for (int64_t q = 1, r = u; q <= h; ++q, r = r + u >= p ? r + u - p : r + u) {
            cs[u - 1][q - 1] = tw[r * m * ts].re; sn[u - 1][q - 1] = tw[r * m * ts].im * sg;
        }
    em_vz t[EM_FFT_TMP];
    for (int64_t k = 0; k < m; ++k) {
        t[0] = out[k];
        for (int64_t q = 1; q < p; ++q) {
            em_z w = tw[q * k * ts]; w.im *= sg;
            t[q] = k ? em_vzmul(out[q * m + k], w) : out[q * m];
        }
        const em_vz x0 = t[0];
        em_vz s0 = x0;
        for (int64_t q = 1; q < p; ++q) { s0.re += t[q].re; s0.im += t[q].im; }
        out[k] = s0;
        for (int64_t u = 1; u <= h; ++u) {
            em_v ar = {0}, ai = ar, br = ar, bi = ar;
            for (int64_t q = 1; q <= h; ++q) {
                const double c = cs[u - 1][q - 1], s = sn[u - 1][q - 1];
                ar += (t[q].re + t[p - q].re) * c; ai += (t[q].im + t[p - q].im) * c;
                br += (t[q].re - t[p - q].re) * s; bi += (t[q].im - t[p - q].im) * s;
            }
            out[u * m + k].re = x0.re + ar - bi; out[u * m + k].im = x0.im + ai + br;
            out[(p - u) * m + k].re = x0.re + ar + bi; out[(p - u) * m + k].im = x0.im + ai - br;
        }
    }
}
/* out[0..n) = DFT of in[0], in[is], ..., by decimation in time over the factors fac; the
   twiddle table tw has n * ts entries (stride ts at this level); inv conjugates every twiddle. */
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
    if (p == 4) {  /* radix 4: W_4 = -i forward, +i inverse; k = 0 has unit twiddles */
        em_fft_r4(out, m, 0, tw, 0, sg);
        for (int64_t k = 1; k < m; ++k) em_fft_r4(out + k, m, 1, tw + k * ts, k * ts, sg);
        return;
    }
    if (p == 2) {
        for (int64_t k = 0; k < m; ++k) {
            em_vz a = out[k], b = out[m + k];
            if (k) { em_z w = tw[k * ts]; w.im *= sg; b = em_vzmul(b, w); }
            out[k].re = a.re + b.re; out[k].im = a.im + b.im;
            out[m + k].re = a.re - b.re; out[m + k].im = a.im - b.im;
        }
        return;
    }
    if (p == 3) em_fft_odd(out, m, 3, tw, ts, sg);
    else if (p == 5) em_fft_odd(out, m, 5, tw, ts, sg);
    else em_fft_odd(out, m, p, tw, ts, sg);
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
/* out[0..n) = the plan's transform of the EM_FW lines in[0..n) (out and in distinct). */
static void em_fft_line(const em_fft_plan *p, const em_vz *in, em_vz *out) {
    if (!p->m2) { em_fft_work(out, in, 1, p->fac, p->n, p->tw, 1, p->inv); return; }
    const int64_t n = p->n, m2 = p->m2;
    em_vz *a = p->a, *c = p->c;
    for (int64_t k = 0; k < n; ++k) a[k] = em_vzmul(in[k], p->chirp[k]);
    const em_v zero = {0};
    for (int64_t k = n; k < m2; ++k) { a[k].re = zero; a[k].im = zero; }
    em_fft_work(c, a, 1, p->fac2, m2, p->tw2, 1, 0);
    for (int64_t j = 0; j < m2; ++j) c[j] = em_vzmul(c[j], p->bf[j]);
    em_fft_work(a, c, 1, p->fac2, m2, p->tw2, 1, 1);
    const double s = 1.0 / (double)m2;
    for (int64_t k = 0; k < n; ++k) {
        em_vz r = em_vzmul(a[k], p->chirp[k]);
        out[k].re = r.re * s; out[k].im = r.im * s;
    }
}
