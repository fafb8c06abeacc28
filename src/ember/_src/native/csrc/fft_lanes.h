/* The fft step's lines in the operand's own precision, CW at a time (native/emit/fft.py): included
   per precision (float only, today) with EM_FFT_LANES, ELT, ELTI and EM_T(name) defined, after
   fft_conv.h (its Stockham radix-8/4 transform em_fftc_fft, register transposes em_fftc_load /
   em_fftc_store, real split and merge, and its twiddle cache by log2 length) and fft_typed.h (the
   job). A step whose transform length is a power of two m >= 2 (a complex axis of length m, or a
   real last axis of length 2m through its half-length transform), not Bluestein, goes through here
   instead of em_fft_line: CW lines per vector (16 floats with AVX-512, else 8; twice the double
   path's EM_FW), float twiddles computed in double and rounded once. Every other length keeps the
   double-precision mixed-radix / Bluestein path. */
#define CW EM_T(em_cw)
#define CV EM_T(em_cv)
#define CI EM_T(em_ci)
#define CZ EM_T(em_cz)
#define SZ EM_T(em_fftc_sz)
_Static_assert(sizeof(CZ) <= sizeof(em_vz), "a lane line fits the double path's scratch");
typedef struct {
    const EM_T(em_fft_job) *j;
    const SZ *tw;  /* em_fftc_tables of length m: twiddles, then the real split's rt */
    int64_t m;     /* the transform length */
} EM_T(em_fftl_job);
/* element jj of CW adjacent complex columns at p (2 CW ELT) -> lanes (re, im), and back */
static inline __attribute__((always_inline)) CZ EM_T(em_fftl_deal)(const ELT *p) {
    CV a, b;
    memcpy(&a, p, sizeof a); memcpy(&b, p + CW, sizeof b);
    CZ z;
#if defined(__GNUC__) && !defined(__clang__)
    CI ev, od;
    for (int i = 0; i < CW; ++i) { ev[i] = 2 * i; od[i] = 2 * i + 1; }
    z.re = __builtin_shuffle(a, b, ev); z.im = __builtin_shuffle(a, b, od);
#else
    for (int i = 0; i < CW / 2; ++i) {
        z.re[i] = a[2 * i]; z.im[i] = a[2 * i + 1]; z.re[i + CW / 2] = b[2 * i]; z.im[i + CW / 2] = b[2 * i + 1];
    }
#endif
    return z;
}
static inline __attribute__((always_inline)) void EM_T(em_fftl_undeal)(ELT *p, CV re, CV im) {
    CV a, b;
#if defined(__GNUC__) && !defined(__clang__)
    CI lo, hi;
    for (int i = 0; i < CW / 2; ++i) { lo[2 * i] = i; lo[2 * i + 1] = i + CW; hi[2 * i] = i + CW / 2; hi[2 * i + 1] = i + CW + CW / 2; }
    a = __builtin_shuffle(re, im, lo); b = __builtin_shuffle(re, im, hi);
#else
    for (int i = 0; i < CW / 2; ++i) {
        a[2 * i] = re[i]; a[2 * i + 1] = im[i]; b[2 * i] = re[i + CW / 2]; b[2 * i + 1] = im[i + CW / 2];
    }
#endif
    memcpy(p, &a, sizeof a); memcpy(p + CW, &b, sizeof b);
}
/* kind 0: groups [g0, g1) of CW lines along the middle axis of a complex (outer, m, inner) array */
static void EM_T(em_fftl_axis)(const EM_T(em_fftl_job) *lj, CZ *b0, CZ *b1, int64_t g0, int64_t g1) {
    const EM_T(em_fft_job) *j = lj->j;
    const int64_t m = lj->m, inner = j->inner, lines = j->outer * inner;
    const ELT sg = j->p->inv ? (ELT)-1 : (ELT)1, scale = (ELT)j->scale;
    const CV zero = {0};
    for (int64_t g = g0; g < g1; ++g) {
        const int64_t l0 = g * CW;
        const int w = lines - l0 < CW ? (int)(lines - l0) : CW;
        if (inner == 1) {
            const ELT *rows[CW];
            for (int r = 0; r < CW; ++r) rows[r] = r < w ? j->src + 2 * (l0 + r) * m : 0;
            EM_T(em_fftc_load)(rows, 2 * m, m, b0);
            const CZ *res = EM_T(em_fftc_fft)(b0, b1, m, lj->tw, sg, 0);
            EM_T(em_fftc_store)(res, j->dst + 2 * l0 * m, w, 2 * m, scale);
            continue;
        }
        /* columns: line l0 + r starts at complex (l / inner) * m * inner + l % inner, stride inner */
        const int64_t o = l0 / inner, i0 = l0 % inner, st = 2 * inner;
        const int adj = w == CW && i0 + CW <= inner;  /* CW adjacent columns of one block */
        const ELT *s0 = j->src + 2 * (o * m * inner + i0);
        if (adj) {
            for (int64_t k = 0; k < m; ++k) b0[k] = EM_T(em_fftl_deal)(s0 + k * st);
        } else {
            for (int64_t k = 0; k < m; ++k) { b0[k].re = zero; b0[k].im = zero; }
            for (int r = 0; r < w; ++r) {
                const int64_t l = l0 + r;
                const ELT *s = j->src + 2 * ((l / inner) * m * inner + l % inner);
                for (int64_t k = 0; k < m; ++k) { b0[k].re[r] = s[k * st]; b0[k].im[r] = s[k * st + 1]; }
            }
        }
        const CZ *res = EM_T(em_fftc_fft)(b0, b1, m, lj->tw, sg, 0);
        if (adj) {
            ELT *d0 = j->dst + 2 * (o * m * inner + i0);
            for (int64_t k = 0; k < m; ++k) EM_T(em_fftl_undeal)(d0 + k * st, res[k].re * scale, res[k].im * scale);
        } else {
            for (int r = 0; r < w; ++r) {
                const int64_t l = l0 + r;
                ELT *d = j->dst + 2 * ((l / inner) * m * inner + l % inner);
                for (int64_t k = 0; k < m; ++k) { d[k * st] = res[k].re[r] * scale; d[k * st + 1] = res[k].im[r] * scale; }
            }
        }
    }
}
/* kind 1: real (outer, 2m) -> complex (outer, m + 1): the half-length transform of
   z_k = x_2k + i x_2k+1, split (em_fftc_split gives 2 X_k) */
static void EM_T(em_fftl_rfft)(const EM_T(em_fftl_job) *lj, CZ *b0, CZ *b1, int64_t g0, int64_t g1) {
    const EM_T(em_fft_job) *j = lj->j;
    const int64_t m = lj->m, n = 2 * m;
    const SZ *rt = lj->tw + m;
    for (int64_t g = g0; g < g1; ++g) {
        const int64_t r0 = g * CW;
        const int w = j->outer - r0 < CW ? (int)(j->outer - r0) : CW;
        const ELT *rows[CW];
        for (int r = 0; r < CW; ++r) rows[r] = r < w ? j->src + (r0 + r) * n : 0;
        EM_T(em_fftc_load)(rows, n, m, b0);
        const CZ *z = EM_T(em_fftc_fft)(b0, b1, m, lj->tw, 1, 0);
        CZ *y = z == b0 ? b1 : b0;
        for (int64_t k = 0; k <= m; ++k) y[k] = EM_T(em_fftc_split)(z, k, m, rt[k]);
        EM_T(em_fftc_store)(y, j->dst + r0 * 2 * (m + 1), w, 2 * (m + 1), (ELT)0.5);
    }
}
/* kind 2: Hermitian half-spectra (outer, m + 1) -> real (outer, 2m) times scale: the merged
   half-length spectrum's inverse holds x_2k + i x_2k+1; the imaginary parts of the DC and Nyquist
   bins are ignored (as NumPy's irfft) */
static void EM_T(em_fftl_irfft)(const EM_T(em_fftl_job) *lj, CZ *b0, CZ *b1, int64_t g0, int64_t g1) {
    const EM_T(em_fft_job) *j = lj->j;
    const int64_t m = lj->m, n = 2 * m;
    const SZ *rt = lj->tw + m;
    const CV zero = {0};
    for (int64_t g = g0; g < g1; ++g) {
        const int64_t r0 = g * CW;
        const int w = j->outer - r0 < CW ? (int)(j->outer - r0) : CW;
        const ELT *rows[CW];
        for (int r = 0; r < CW; ++r) rows[r] = r < w ? j->src + (r0 + r) * 2 * (m + 1) : 0;
        EM_T(em_fftc_load)(rows, 2 * (m + 1), m + 1, b0);
        b0[0].im = zero; b0[m].im = zero;
        for (int64_t k = 0; k < m; ++k) b1[k] = EM_T(em_fftc_merge)(b0[k], b0[m - k], rt[k]);
        const CZ *res = EM_T(em_fftc_fft)(b1, b0, m, lj->tw, -1, 0);
        EM_T(em_fftc_store)(res, j->dst + r0 * n, w, n, (ELT)j->scale);
    }
}
static EM_TASK_ATTR void EM_T(em_fftl_task)(void *c, int64_t lo, int64_t hi, int64_t tid) {
    const EM_T(em_fftl_job) *lj = (const EM_T(em_fftl_job) *)c;
    const EM_T(em_fft_job) *j = lj->j;
    CZ *b0 = (CZ *)(j->scratch + tid * j->stride), *b1 = b0 + lj->m + (j->kind != 0);
    if (j->kind == 0) EM_T(em_fftl_axis)(lj, b0, b1, lo, hi);
    else if (j->kind == 1) EM_T(em_fftl_rfft)(lj, b0, b1, lo, hi);
    else EM_T(em_fftl_irfft)(lj, b0, b1, lo, hi);
}
/* run job j here when its transform length is a power of two m >= 2 without Bluestein (returns 1),
   else return 0 (the double path runs it). Tables come from fft_conv's cache (or are built in the
   job's wtab, 2m + 1 SZ) before the threads start; thread t's two line buffers (m + 1 CZ each) are
   its em_vz scratch. */
static int EM_T(em_fftl_run)(EM_T(em_fft_job) *j, int64_t lines, int par, int64_t nt) {
    const int64_t m = j->kind == 0 ? j->n : j->p->n;
    if (j->p->m2 || (j->kind != 0 && !j->half) || m < 2 || (m & (m - 1))) return 0;
    int lg = 0;
    while (((int64_t)1 << lg) < m) ++lg;
    EM_T(em_fftl_job) lj = {j, EM_T(em_fftc_tables)(lg, (SZ *)j->wtab), m};
    const int64_t groups = (lines + CW - 1) / CW;
    if (par && nt > 1 && groups > 1) em_par(EM_T(em_fftl_task), &lj, groups, nt, nt, 4);
    else EM_T(em_fftl_task)(&lj, 0, groups, 0);
    return 1;
}
#undef CW
#undef CV
#undef CI
#undef CZ
#undef SZ
