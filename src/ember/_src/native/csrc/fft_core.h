/* FFT plans and radix passes shared by both precisions (see native/fft.py). */
typedef struct { double re, im; } em_z;
static inline em_z em_zmul(em_z a, em_z b) {
    em_z r = {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
    return r;
}
typedef struct {
    int64_t n, m2;              /* length; Bluestein's power-of-two length (0: direct) */
    const int32_t *fac, *fac2;  /* prime factors of n (direct) or of m2 (Bluestein) */
    int inv;
    em_z *tw, *tmp, *chirp, *tw2, *bf, *a, *c;
} em_fft_plan;
static void em_fft_twiddles(em_z *tw, int64_t n) {
    for (int64_t j = 0; j < n; ++j) {
        double ang = -6.283185307179586476925286766559 * (double)j / (double)n;
        tw[j].re = cos(ang); tw[j].im = sin(ang);
    }
}
/* out[0..n) = DFT of in[0], in[is], ..., by decimation in time over the factors fac; the
   twiddle table tw has n * ts entries (stride ts at this level); inv conjugates every twiddle. */
static void em_fft_work(em_z *out, const em_z *in, int64_t is, const int32_t *fac, int64_t n,
                        const em_z *tw, int64_t ts, int inv, em_z *tmp) {
    const int64_t p = fac[0], m = n / p;
    const double sg = inv ? -1.0 : 1.0;
    if (m == 1) {
        for (int64_t q = 0; q < p; ++q) out[q] = in[q * is];
    } else {
        for (int64_t q = 0; q < p; ++q)
            em_fft_work(out + q * m, in + q * is, is * p, fac + 1, m, tw, ts * p, inv, tmp);
    }
    if (p == 4) {  /* radix 4: W_4 = -i forward, +i inverse */
        for (int64_t k = 0; k < m; ++k) {
            em_z w1 = tw[k * ts], w2 = tw[2 * k * ts], w3 = tw[3 * k * ts];
            w1.im *= sg; w2.im *= sg; w3.im *= sg;
            em_z f0 = out[k], b1 = em_zmul(out[m + k], w1), b2 = em_zmul(out[2 * m + k], w2),
                 b3 = em_zmul(out[3 * m + k], w3);
            em_z s0 = {f0.re + b2.re, f0.im + b2.im}, s1 = {f0.re - b2.re, f0.im - b2.im};
            em_z s2 = {b1.re + b3.re, b1.im + b3.im}, s3 = {b1.re - b3.re, b1.im - b3.im};
            out[k].re = s0.re + s2.re; out[k].im = s0.im + s2.im;
            out[2 * m + k].re = s0.re - s2.re; out[2 * m + k].im = s0.im - s2.im;
            out[m + k].re = s1.re + sg * s3.im; out[m + k].im = s1.im - sg * s3.re;
            out[3 * m + k].re = s1.re - sg * s3.im; out[3 * m + k].im = s1.im + sg * s3.re;
        }
        return;
    }
    if (p == 2) {
        for (int64_t k = 0; k < m; ++k) {
            em_z w = tw[k * ts]; w.im *= sg;
            em_z a = out[k], b = em_zmul(out[m + k], w);
            out[k].re = a.re + b.re; out[k].im = a.im + b.im;
            out[m + k].re = a.re - b.re; out[m + k].im = a.im - b.im;
        }
        return;
    }
    /* odd p: outputs u and p - u share the sums over the pairs (q, p - q), since
       W^(qu) t_q + W^(-qu) t_(p-q) = c (t_q + t_(p-q)) + i s (t_q - t_(p-q)) with W^(qu) = c + i s */
    const int64_t h = (p - 1) / 2;
    for (int64_t k = 0; k < m; ++k) {
        tmp[0] = out[k];
        for (int64_t q = 1; q < p; ++q) {
            em_z w = tw[q * k * ts]; w.im *= sg;
            tmp[q] = em_zmul(out[q * m + k], w);
        }
        const em_z x0 = tmp[0];
        em_z s0 = x0;
        for (int64_t q = 1; q < p; ++q) { s0.re += tmp[q].re; s0.im += tmp[q].im; }
        out[k] = s0;
        for (int64_t u = 1; u <= h; ++u) {
            double ar = 0, ai = 0, br = 0, bi = 0;
            for (int64_t q = 1, r = u; q <= h; ++q, r = r + u >= p ? r + u - p : r + u) {
                const double c = tw[r * m * ts].re, s = tw[r * m * ts].im * sg;
                ar += (tmp[q].re + tmp[p - q].re) * c; ai += (tmp[q].im + tmp[p - q].im) * c;
                br += (tmp[q].re - tmp[p - q].re) * s; bi += (tmp[q].im - tmp[p - q].im) * s;
            }
            out[u * m + k].re = x0.re + ar - bi; out[u * m + k].im = x0.im + ai + br;
            out[(p - u) * m + k].re = x0.re + ar + bi; out[(p - u) * m + k].im = x0.im + ai - br;
        }
    }
}
/* Fill a plan's tables in ws; returns the first em_z of ws after them. */
static em_z *em_fft_make(em_fft_plan *p, int64_t n, const int32_t *fac, int64_t m2, const int32_t *fac2,
                         int inv, em_z *ws) {
    p->n = n; p->m2 = m2; p->fac = fac; p->fac2 = fac2; p->inv = inv;
    if (!m2) {
        p->tw = ws; p->tmp = ws + n;
        em_fft_twiddles(p->tw, n);
        return ws + 2 * n;
    }
    p->chirp = ws; p->tw2 = ws + n; p->bf = p->tw2 + m2; p->a = p->bf + m2; p->c = p->a + m2;
    p->tmp = p->c + m2;
    for (int64_t k = 0; k < n; ++k) {  /* chirp_k = exp(-+ i pi k^2 / n), k^2 reduced mod 2n */
        double ang = 3.14159265358979323846264338327950288 * (double)((k * k) % (2 * n)) / (double)n;
        p->chirp[k].re = cos(ang); p->chirp[k].im = inv ? sin(ang) : -sin(ang);
    }
    em_fft_twiddles(p->tw2, m2);
    for (int64_t j = 0; j < m2; ++j) { p->a[j].re = 0; p->a[j].im = 0; }
    for (int64_t k = 0; k < n; ++k) {
        em_z b = p->chirp[k]; b.im = -b.im;
        p->a[k] = b;
        if (k) p->a[m2 - k] = b;
    }
    em_fft_work(p->bf, p->a, 1, fac2, m2, p->tw2, 1, 0, p->tmp);
    return p->tmp + 2;
}
/* out[0..n) = the plan's transform of in[0..n) (out and in distinct). */
static void em_fft_line(const em_fft_plan *p, const em_z *in, em_z *out) {
    if (!p->m2) { em_fft_work(out, in, 1, p->fac, p->n, p->tw, 1, p->inv, p->tmp); return; }
    const int64_t n = p->n, m2 = p->m2;
    for (int64_t k = 0; k < n; ++k) p->a[k] = em_zmul(in[k], p->chirp[k]);
    for (int64_t k = n; k < m2; ++k) { p->a[k].re = 0; p->a[k].im = 0; }
    em_fft_work(p->c, p->a, 1, p->fac2, m2, p->tw2, 1, 0, p->tmp);
    for (int64_t j = 0; j < m2; ++j) p->c[j] = em_zmul(p->c[j], p->bf[j]);
    em_fft_work(p->a, p->c, 1, p->fac2, m2, p->tw2, 1, 1, p->tmp);
    const double s = 1.0 / (double)m2;
    for (int64_t k = 0; k < n; ++k) {
        em_z r = em_zmul(p->a[k], p->chirp[k]);
        out[k].re = r.re * s; out[k].im = r.im * s;
    }
}
