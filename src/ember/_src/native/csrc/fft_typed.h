/* FFT entry points for one precision (see native/emit/fft.py): included with ELT (float or
   double) and EM_T(name) (the name with the precision's suffix) defined. Lines go through the
   transforms EM_FW at a time (one per vector lane); a last group's unused lanes are zeros.
   EM_FFTG, when defined, is the mask of what the program's fft steps can reach (fft.py's reach):
   the job kinds and the paths of this header and fft_lanes.h; the others are constant-false
   branches, so the compiler drops their code. Undefined: everything (runtime lengths, tests). */
#ifndef EM_FFTG_ONCE
#define EM_FFTG_ONCE
enum {
    EM_FFTG_AXIS = 1, EM_FFTG_RFFT = 2, EM_FFTG_IRFFT = 4,  /* job kinds 0, 1, 2 */
    EM_FFTG_P2 = 8,        /* fft_lanes.h: power-of-two lines in lanes */
    EM_FFTG_LONG = 16,     /* fft_lanes.h: the four-step path for few long lines */
    EM_FFTG_MIXED = 32,    /* fft_lanes.h: 2-3-5 lengths in lanes */
    EM_FFTG_BLUE = 64,     /* fft_lanes.h: Bluestein in lanes */
    EM_FFTG_DOUBLE = 128,  /* this header's mixed-radix / Bluestein path (EM_FW lines) */
    EM_FFTG_RL8 = 256, EM_FFTG_RL4 = 512,  /* fft_lanes.h's RFFT: its last stage of radix 8 / 4 fused */
    EM_FFTG_RSG = 1024,    /* fft_lanes.h's RFFT: the split as the spectrum is stored (no fused stage) */
    EM_FFTG_P2R = 2048,    /* fft_lanes.h: power-of-two rows read straight into the first stage */
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
/* line[j] lane r = complex element j of the row at src + base[r] (n elements, w rows; the other
   lanes are left as they are): 8-element tiles of a full group of rows transposed in registers */
static void EM_T(em_rows_in)(const ELT *src, const int64_t *base, int w, int64_t n, em_vz *line) {
    int64_t j0 = 0;
    if (w == EM_FW) for (; j0 + 8 <= n; j0 += 8) {
        ELT t[EM_FW][16];
        for (int r = 0; r < EM_FW; ++r) memcpy(t[r], src + base[r] + 2 * j0, sizeof t[r]);
        for (int jj = 0; jj < 8; ++jj) {
            em_vz z;
            for (int r = 0; r < EM_FW; ++r) { z.re[r] = t[r][2 * jj]; z.im[r] = t[r][2 * jj + 1]; }
            line[j0 + jj] = z;
        }
    }
    for (int r = 0; r < w; ++r) {
        const ELT *sr = src + base[r];
        for (int64_t j = j0; j < n; ++j) { line[j].re[r] = sr[2 * j]; line[j].im[r] = sr[2 * j + 1]; }
    }
}
/* the rows at dst + base[r] (n complex elements, r < w) = lane r of res times scale */
static void EM_T(em_rows_out)(ELT *dst, const int64_t *base, int w, int64_t n, const em_vz *res, double scale) {
    int64_t j0 = 0;
    if (w == EM_FW) for (; j0 + 8 <= n; j0 += 8) {
        ELT t[EM_FW][16];
        for (int jj = 0; jj < 8; ++jj) {
            const em_v re = res[j0 + jj].re * scale, im = res[j0 + jj].im * scale;
            for (int r = 0; r < EM_FW; ++r) { t[r][2 * jj] = (ELT)re[r]; t[r][2 * jj + 1] = (ELT)im[r]; }
        }
        for (int r = 0; r < EM_FW; ++r) memcpy(dst + base[r] + 2 * j0, t[r], sizeof t[r]);
    }
    for (int r = 0; r < w; ++r) {
        ELT *dr = dst + base[r];
        for (int64_t j = j0; j < n; ++j) {
            dr[2 * j] = (ELT)(res[j].re[r] * scale); dr[2 * j + 1] = (ELT)(res[j].im[r] * scale);
        }
    }
}
/* transform the lines along the middle axis of a complex (outer, n, inner) array, groups [g0, g1) of
   EM_FW lines; src may be dst */
static void EM_T(em_fft_axis)(const ELT *src, ELT *dst, int64_t outer, int64_t n, int64_t inner,
                          const em_fft_plan *p, em_vz *line, em_vz *res, double scale, int64_t g0, int64_t g1) {
    const int64_t lines = outer * inner, st = 2 * inner;
    const em_v zero = {0};
    for (int64_t l0 = g0 * EM_FW; l0 < lines && l0 < g1 * EM_FW; l0 += EM_FW) {
        const int w = lines - l0 < EM_FW ? (int)(lines - l0) : EM_FW;
        int64_t base[EM_FW];
        for (int r = 0; r < w; ++r) base[r] = 2 * (((l0 + r) / inner) * n * inner + (l0 + r) % inner);
        if (w < EM_FW) for (int64_t j = 0; j < n; ++j) { line[j].re = zero; line[j].im = zero; }
        /* a full group of adjacent columns: element j of the lines is EM_FW consecutive complex */
        const int adj = w == EM_FW && base[EM_FW - 1] == base[0] + 2 * (EM_FW - 1);
        if (inner == 1) {
            EM_T(em_rows_in)(src, base, w, n, line);
        } else if (adj) {
            for (int64_t j = 0; j < n; ++j) {
                ELT t[2 * EM_FW];
                memcpy(t, src + base[0] + j * st, sizeof t);
                for (int r = 0; r < EM_FW; ++r) { line[j].re[r] = t[2 * r]; line[j].im[r] = t[2 * r + 1]; }
            }
        } else {
            for (int64_t j = 0; j < n; ++j) for (int r = 0; r < w; ++r) {
                line[j].re[r] = src[base[r] + j * st]; line[j].im[r] = src[base[r] + j * st + 1];
            }
        }
        em_fft_line(p, line, res);
        if (inner == 1) {
            EM_T(em_rows_out)(dst, base, w, n, res, scale);
        } else if (adj) {
            for (int64_t j = 0; j < n; ++j) {
                ELT t[2 * EM_FW];
                const em_v re = res[j].re * scale, im = res[j].im * scale;
                for (int r = 0; r < EM_FW; ++r) { t[2 * r] = (ELT)re[r]; t[2 * r + 1] = (ELT)im[r]; }
                memcpy(dst + base[0] + j * st, t, sizeof t);
            }
        } else {
            for (int64_t j = 0; j < n; ++j) for (int r = 0; r < w; ++r) {
                dst[base[r] + j * st] = (ELT)(res[j].re[r] * scale);
                dst[base[r] + j * st + 1] = (ELT)(res[j].im[r] * scale);
            }
        }
    }
}
/* real (outer, n) -> complex (outer, n/2 + 1). half: p is the plan of length n/2 (n even), whose
   transform of z_j = x_2j + i x_2j+1 splits into the spectrum; else p has length n. */
static void EM_T(em_rfft_last)(const ELT *x, ELT *out, int64_t outer, int64_t n, const em_fft_plan *p,
                           int half, em_vz *line, em_vz *res, int64_t g0, int64_t g1) {
    const int64_t nh = n / 2 + 1, m = p->n;
    const em_v zero = {0};
    for (int64_t o0 = g0 * EM_FW; o0 < outer && o0 < g1 * EM_FW; o0 += EM_FW) {
        const int w = outer - o0 < EM_FW ? (int)(outer - o0) : EM_FW;
        int64_t base[EM_FW], obase[EM_FW];
        for (int r = 0; r < w; ++r) { base[r] = (o0 + r) * n; obase[r] = 2 * (o0 + r) * nh; }
        if (w < EM_FW || !half) for (int64_t j = 0; j < m; ++j) { line[j].re = zero; line[j].im = zero; }
        if (half) EM_T(em_rows_in)(x, base, w, m, line);
        else for (int r = 0; r < w; ++r) for (int64_t j = 0; j < m; ++j) line[j].re[r] = x[base[r] + j];
        em_fft_line(p, line, res);
        const em_vz *y = res;
        if (half) {  /* X_k = E_k + W^k O_k: E = (Z_k + conj Z_(m-k)) / 2, O = -i (Z_k - conj Z_(m-k)) / 2 */
            for (int64_t k = 0; k <= m; ++k) {
                const em_vz a = res[k == m ? 0 : k], b = res[k == 0 ? 0 : m - k];
                const em_v er = (a.re + b.re) * 0.5, ei = (a.im - b.im) * 0.5;
                const em_v orr = (a.im + b.im) * 0.5, oi = (b.re - a.re) * 0.5;
                const em_z t = p->rt[k];
                line[k].re = er + orr * t.re - oi * t.im; line[k].im = ei + orr * t.im + oi * t.re;
            }
            y = line;
        }
        EM_T(em_rows_out)(out, obase, w, nh, y, 1.0);
    }
}
/* complex (outer, n/2 + 1) Hermitian half-spectra -> real (outer, n), inverse, times scale. half: p
   is the inverse plan of length n/2 (n even): the even and odd samples' spectra are merged into
   one half-length spectrum whose inverse holds x_2j + i x_2j+1; else p has length n. The imaginary
   parts of the DC and Nyquist bins are ignored (NumPy's irfft does the same). */
static void EM_T(em_irfft_last)(const ELT *h, ELT *out, int64_t outer, int64_t n, const em_fft_plan *p,
                            int half, em_vz *line, em_vz *res, double scale, int64_t g0, int64_t g1) {
    const int64_t nh = n / 2 + 1, m = p->n;
    const em_v zero = {0};
    for (int64_t o0 = g0 * EM_FW; o0 < outer && o0 < g1 * EM_FW; o0 += EM_FW) {
        const int w = outer - o0 < EM_FW ? (int)(outer - o0) : EM_FW;
        int64_t base[EM_FW], obase[EM_FW];
        for (int r = 0; r < w; ++r) { base[r] = 2 * (o0 + r) * nh; obase[r] = (o0 + r) * n; }
        if (w < EM_FW) for (int64_t j = 0; j < nh; ++j) { res[j].re = zero; res[j].im = zero; }
        EM_T(em_rows_in)(h, base, w, nh, res);
        res[0].im = zero;
        if (!(n & 1)) res[nh - 1].im = zero;
        if (half) {  /* Z_k = E_k + i O_k: E = X_k + conj X_(m-k), O = (X_k - conj X_(m-k)) conj(W^k) */
            for (int64_t k = 0; k < m; ++k) {
                const em_vz a = res[k], b = res[m - k];
                const em_v er = a.re + b.re, ei = a.im - b.im, dr = a.re - b.re, di = a.im + b.im;
                const em_z t = p->rt[k];  /* the inverse of W^k: conj(t) */
                const em_v orr = dr * t.re + di * t.im, oi = di * t.re - dr * t.im;
                line[k].re = er - oi; line[k].im = ei + orr;
            }
        } else {
            for (int64_t j = 0; j < nh; ++j) line[j] = res[j];
            for (int64_t j = nh; j < n; ++j) { line[j].re = res[n - j].re; line[j].im = -res[n - j].im; }
        }
        em_fft_line(p, line, res);
        if (half) EM_T(em_rows_out)(out, obase, w, m, res, scale);
        else for (int r = 0; r < w; ++r) for (int64_t j = 0; j < m; ++j) out[obase[r] + j] = (ELT)(res[j].re[r] * scale);
    }
}
/* One transform step over groups of EM_FW lines, as a chunk function of ember's thread pool
   (em_par): kind 0 em_fft_axis, 1 em_rfft_last, 2 em_irfft_last. Thread tid works in its own
   scratch (scratch + tid * stride em_vz: Bluestein's two buffers, then the line and result
   buffers) with a copy of the plan pointing there; the tables are shared, read only. */
typedef struct {
    int kind, half;
    const ELT *src; ELT *dst;
    int64_t outer, n, inner;
    const em_fft_plan *p;
    em_vz *scratch; int64_t stride;
    double scale;
    void *wtab;  /* the step's table workspace (fft_lanes.h builds its tables there when uncached) */
} EM_T(em_fft_job);
#ifdef EM_FFT_LANES
static int EM_T(em_fftl_run)(EM_T(em_fft_job) *j, int64_t lines, int par, int64_t nt);  /* fft_lanes.h */
#endif
static EM_TASK_ATTR void EM_T(em_fft_task)(void *c, int64_t lo, int64_t hi, int64_t tid) {
    const EM_T(em_fft_job) *j = (const EM_T(em_fft_job) *)c;
    em_fft_plan p = *j->p;
    em_vz *s = j->scratch + tid * j->stride;
    p.a = s; p.c = s + p.m2;
    em_vz *line = s + 2 * p.m2, *res = line + j->n;
    if (EM_FFTG_ON(EM_FFTG_AXIS) && j->kind == 0)
        EM_T(em_fft_axis)(j->src, j->dst, j->outer, j->n, j->inner, &p, line, res, j->scale, lo, hi);
    else if (EM_FFTG_ON(EM_FFTG_RFFT) && j->kind == 1)
        EM_T(em_rfft_last)(j->src, j->dst, j->outer, j->n, &p, j->half, line, res, lo, hi);
    else if (EM_FFTG_ON(EM_FFTG_IRFFT) && j->kind == 2)
        EM_T(em_irfft_last)(j->src, j->dst, j->outer, j->n, &p, j->half, line, res, j->scale, lo, hi);
    else EM_FFTG_MISSED();
}
/* run a job over all its line groups (with EM_FFT_LANES, a power-of-two length in fft_lanes.h): on the pool when there are at least two groups and `par`
   (the work is above the parallel threshold), on at most nt threads (the scratch's copies) */
static void EM_T(em_fft_run)(EM_T(em_fft_job) *j, int64_t lines, int par, int64_t nt) {
#ifdef EM_FFT_LANES
    if (EM_T(em_fftl_run)(j, lines, par, nt)) return;  /* a power-of-two length: lanes of ELT */
#endif
    if (!EM_FFTG_ON(EM_FFTG_DOUBLE)) EM_FFTG_MISSED();
    const int64_t groups = (lines + EM_FW - 1) / EM_FW;
    if (par && nt > 1 && groups > 1) em_par(EM_T(em_fft_task), j, groups, nt, nt, 4);
    else EM_T(em_fft_task)(j, 0, groups, 0);
}
