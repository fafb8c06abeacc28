/* FFT entry points for one precision (see native/fft.py): included with ELT (float or
   double) and EM_T(name) (the name with the precision's suffix) defined. Lines go through the
   transforms EM_FW at a time (one per vector lane); a last group's unused lanes are zeros. */
/* transform every line along the middle axis of a complex (outer, n, inner) array; src may be dst */
static void EM_T(em_fft_axis)(const ELT *src, ELT *dst, int64_t outer, int64_t n, int64_t inner,
                          const em_fft_plan *p, em_vz *line, em_vz *res, double scale) {
    const int64_t lines = outer * inner, st = 2 * inner;
    const em_v zero = {0};
    for (int64_t l0 = 0; l0 < lines; l0 += EM_FW) {
        const int w = lines - l0 < EM_FW ? (int)(lines - l0) : EM_FW;
        int64_t base[EM_FW];
        for (int r = 0; r < w; ++r) base[r] = 2 * (((l0 + r) / inner) * n * inner + (l0 + r) % inner);
        for (int64_t j = 0; j < n; ++j) {
            em_vz z = {zero, zero};
            for (int r = 0; r < w; ++r) { z.re[r] = src[base[r] + j * st]; z.im[r] = src[base[r] + j * st + 1]; }
            line[j] = z;
        }
        em_fft_line(p, line, res);
        for (int64_t j = 0; j < n; ++j) for (int r = 0; r < w; ++r) {
            dst[base[r] + j * st] = (ELT)(res[j].re[r] * scale);
            dst[base[r] + j * st + 1] = (ELT)(res[j].im[r] * scale);
        }
    }
}
/* real (outer, n) -> complex (outer, n/2 + 1). half: p is the plan of length n/2 (n even), whose
   transform of z_j = x_2j + i x_2j+1 splits into the spectrum; else p has length n. */
static void EM_T(em_rfft_last)(const ELT *x, ELT *out, int64_t outer, int64_t n, const em_fft_plan *p,
                           int half, em_vz *line, em_vz *res) {
    const int64_t nh = n / 2 + 1, m = p->n;
    const em_v zero = {0};
    for (int64_t o0 = 0; o0 < outer; o0 += EM_FW) {
        const int w = outer - o0 < EM_FW ? (int)(outer - o0) : EM_FW;
        for (int64_t j = 0; j < m; ++j) {
            em_vz z = {zero, zero};
            for (int r = 0; r < w; ++r) {
                const ELT *xr = x + (o0 + r) * n;
                if (half) { z.re[r] = xr[2 * j]; z.im[r] = xr[2 * j + 1]; } else z.re[r] = xr[j];
            }
            line[j] = z;
        }
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
        for (int64_t j = 0; j < nh; ++j) for (int r = 0; r < w; ++r) {
            ELT *or_ = out + 2 * (o0 + r) * nh;
            or_[2 * j] = (ELT)y[j].re[r]; or_[2 * j + 1] = (ELT)y[j].im[r];
        }
    }
}
/* complex (outer, n/2 + 1) Hermitian half-spectra -> real (outer, n), inverse, times scale. half: p
   is the inverse plan of length n/2 (n even): the even and odd samples' spectra are merged into
   one half-length spectrum whose inverse holds x_2j + i x_2j+1; else p has length n. The imaginary
   parts of the DC and Nyquist bins are ignored (NumPy's irfft does the same). */
static void EM_T(em_irfft_last)(const ELT *h, ELT *out, int64_t outer, int64_t n, const em_fft_plan *p,
                            int half, em_vz *line, em_vz *res, double scale) {
    const int64_t nh = n / 2 + 1, m = p->n;
    const em_v zero = {0};
    for (int64_t o0 = 0; o0 < outer; o0 += EM_FW) {
        const int w = outer - o0 < EM_FW ? (int)(outer - o0) : EM_FW;
        for (int64_t j = 0; j < nh; ++j) {
            em_vz z = {zero, zero};
            for (int r = 0; r < w; ++r) {
                const ELT *hr = h + 2 * (o0 + r) * nh;
                z.re[r] = hr[2 * j]; z.im[r] = hr[2 * j + 1];
            }
            res[j] = z;
        }
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
        for (int64_t j = 0; j < m; ++j) for (int r = 0; r < w; ++r) {
            ELT *or_ = out + (o0 + r) * n;
            if (half) { or_[2 * j] = (ELT)(res[j].re[r] * scale); or_[2 * j + 1] = (ELT)(res[j].im[r] * scale); }
            else or_[j] = (ELT)(res[j].re[r] * scale);
        }
    }
}
