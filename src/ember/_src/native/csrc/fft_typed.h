/* FFT entry points for one precision (see native/fft.py): included with ELT (float or
   double) and EM_T(name) (the name with the precision's suffix) defined. */
/* transform every line along the middle axis of a complex (outer, n, inner) array; src may be dst */
static void EM_T(em_fft_axis)(const ELT *src, ELT *dst, int64_t outer, int64_t n, int64_t inner,
                          const em_fft_plan *p, em_z *line, em_z *res, double scale) {
    for (int64_t o = 0; o < outer; ++o) for (int64_t i = 0; i < inner; ++i) {
        const int64_t base = 2 * (o * n * inner + i), st = 2 * inner;
        for (int64_t j = 0; j < n; ++j) {
            line[j].re = src[base + j * st]; line[j].im = src[base + j * st + 1];
        }
        em_fft_line(p, line, res);
        for (int64_t j = 0; j < n; ++j) {
            dst[base + j * st] = (ELT)(res[j].re * scale); dst[base + j * st + 1] = (ELT)(res[j].im * scale);
        }
    }
}
/* real (outer, n) -> complex (outer, n/2 + 1) */
static void EM_T(em_rfft_last)(const ELT *x, ELT *out, int64_t outer, int64_t n, const em_fft_plan *p, em_z *line,
                           em_z *res) {
    const int64_t nh = n / 2 + 1;
    for (int64_t o = 0; o < outer; ++o) {
        for (int64_t j = 0; j < n; ++j) { line[j].re = x[o * n + j]; line[j].im = 0; }
        em_fft_line(p, line, res);
        for (int64_t j = 0; j < nh; ++j) {
            out[2 * (o * nh + j)] = (ELT)res[j].re; out[2 * (o * nh + j) + 1] = (ELT)res[j].im;
        }
    }
}
/* complex (outer, n/2 + 1) Hermitian half-spectra -> real (outer, n), inverse, times scale */
static void EM_T(em_irfft_last)(const ELT *h, ELT *out, int64_t outer, int64_t n, const em_fft_plan *p,
                            em_z *line,
                            em_z *res, double scale) {
    const int64_t nh = n / 2 + 1;
    for (int64_t o = 0; o < outer; ++o) {
        const ELT *ho = h + 2 * o * nh;
        for (int64_t j = 0; j < nh; ++j) { line[j].re = ho[2 * j]; line[j].im = ho[2 * j + 1]; }
        for (int64_t j = nh; j < n; ++j) { line[j].re = ho[2 * (n - j)]; line[j].im = -ho[2 * (n - j) + 1]; }
        em_fft_line(p, line, res);
        for (int64_t j = 0; j < n; ++j) out[o * n + j] = (ELT)(res[j].re * scale);
    }
}
