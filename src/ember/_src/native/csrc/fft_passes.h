/* The Stockham passes of every FFT of one precision: the fft step's lanes (fft_lanes.h), the 1-D
   fft_conv step (fft_conv.h) and the 2-D convolution by FFT (conv_fft.h). Included once per
   precision (each emitter registers it as the helper em_fftp_<suffix>) with ELT (float or double),
   ELTI (int32_t or int64_t: an integer of its size) and EM_T(name) defined, after dft_small.h
   (EM_DFT_SMALL).

   A line is a vector of CW independent complex lines (one per lane: 16 floats or 8 doubles with
   AVX-512, else 8 or 4), so no pass moves data between lanes: the butterflies are vector adds and
   multiplies by broadcast twiddles. A pass of radix r (length n, stride s) reads x[q + s (p + k n / r)]
   (k < r) and writes its r-point DFT, output j times W_n^(p j), to y[q + s (r p + j)] for p < n / r,
   q < s; twiddles come from one table tw[j] = exp(-2 pi i j / m) of the whole length m (entry
   j m / n), computed in double and rounded once to ELT. sg = 1 forward, -1 inverse. Radices: 8 and 4
   (em_fftp_r8, em_fftp_r4), 2, 3 and 5 (em_fftp_rp, dft_small.h's DFTs), odd primes up to
   EM_FFT_PMAX (em_fftp_rodd). em_fftp_fft runs a power of two (radix 8, 4 for a last 16 or 4, 2 for
   a last 2; em_fftp_fft_to stops early for a caller that fuses the last pass), em_fftp_mixed any
   factor list (4s, then prime factors ascending; a 4 then a 2 as one radix-8 pass). */
#ifndef EM_FFTP_ONCE
#define EM_FFTP_ONCE
#if defined(__AVX512F__)
#define EM_CV_BYTES 64
#else
#define EM_CV_BYTES 32
#endif
#ifndef EM_FFT_PMAX
#define EM_FFT_PMAX 64  /* the largest odd prime radix (fft.py's BLUESTEIN_PRIME) */
#endif
/* the radix of em_fftp_fft_to's stage at length n: 8, 4 for the last 16 or 4, 2 for a last 2 */
static inline int em_fftp_radix(int64_t n) { return n % 8 == 0 && n != 16 ? 8 : n % 4 == 0 ? 4 : 2; }
/* the stage radices of m / 2^drop (fac: m's factors, 4s then primes ascending; m holds 2^drop) into
   rad, returning their count: its power of two 2^a as radix-8 stages (the rest one 4, two 4s or one
   2), then its odd primes ascending */
static inline __attribute__((unused)) int em_fftp_radices(const int32_t *fac, int64_t m, int drop, int8_t *rad) {
    int a = -drop, nr = 0;
    for (int64_t q = m, i = 0; q > 1; q /= fac[i++]) a += fac[i] == 4 ? 2 : fac[i] == 2;
    int n8 = a / 3;
    if (a % 3 == 1 && n8) { --n8; rad[nr++] = 4; rad[nr++] = 4; }
    else if (a % 3) rad[nr++] = (int8_t)(1 << (a % 3));
    for (int i = 0; i < n8; ++i) rad[nr++] = 8;
    for (int64_t q = m, i = 0; q > 1; q /= fac[i++])
        if (fac[i] & 1) rad[nr++] = (int8_t)fac[i];
    return nr;
}
/* the radices rad[0 .. nr) of em_fftp_radices with pairs of a 3 and a 5 merged into radix-15 stages
   (em_fftp_r15) after the powers of two; the last stage stays a 3 or a 5 for a caller that fuses it
   into its store (one pair left unmerged when there are as many 3s as 5s): returns the new count */
static inline __attribute__((unused)) int em_fftp_merge15(int8_t *rad, int nr) {
    int n3 = 0, n5 = 0, np = 0;
    for (int i = 0; i < nr; ++i) {
        n3 += rad[i] == 3; n5 += rad[i] == 5; np += rad[i] == 2 || rad[i] == 4 || rad[i] == 8;
    }
    int c = n3 < n5 ? n3 : n5;
    if (n3 + n5 + np != nr || (c -= n3 == n5) <= 0) return nr;  /* (other primes: as they are) */
    int k = np;
    for (int i = 0; i < c; ++i) rad[k++] = 15;
    for (int i = c; i < n3; ++i) rad[k++] = 3;
    for (int i = c; i < n5; ++i) rad[k++] = 5;
    return k;
}
#endif
enum { EM_T(em_cw) = EM_CV_BYTES / (int)sizeof(ELT) };
typedef ELT EM_T(em_cv) __attribute__((vector_size(EM_CV_BYTES)));
/* the same vector at any element-aligned address: loads and stores of whole vectors (memcpy of one
   was split into two 32-byte moves, and the vector read back from the stack stalled on them) */
typedef ELT EM_T(em_cvu) __attribute__((vector_size(EM_CV_BYTES), aligned(sizeof(ELT))));
typedef ELTI EM_T(em_ci) __attribute__((vector_size(EM_CV_BYTES)));
typedef struct { EM_T(em_cv) re, im; } EM_T(em_cz);
#define CW EM_T(em_cw)
#define CV EM_T(em_cv)
#define CZ EM_T(em_cz)
#define SZ EM_T(em_fftc_sz)
typedef struct { ELT re, im; } EM_T(em_fftc_sz);

/* the twiddle table tw[j] = exp(-2 pi i j / n), j < n (computed in double, rounded once to ELT): the
   passes' table (fft_conv.h's cache by log2 length, conv_fft.h's tables of any length) */
static __attribute__((unused)) void EM_T(em_fftp_twiddles)(SZ *tw, int64_t n) {
    for (int64_t j = 0; j < n; ++j) {
        const double a = -6.283185307179586476925286766559 * (double)j / (double)n;
        tw[j].re = (ELT)cos(a); tw[j].im = (ELT)sin(a);
    }
}
static inline CZ EM_T(em_czmul)(CZ a, SZ w) {
    CZ r = {a.re * w.re - a.im * w.im, a.re * w.im + a.im * w.re};
    return r;
}
static inline CZ EM_T(em_czmulv)(CZ a, CZ b) {
    CZ r = {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
    return r;
}
/* a butterfly's twiddles w[k] = W^(k e) for 0 < k < r (e: the butterfly's step in tw; conjugated for
   the inverse, sg = -1) */
static inline __attribute__((always_inline)) void EM_T(em_fftp_twr)(SZ *w, const int r, int64_t e, const SZ *tw, ELT sg) {
    for (int k = 1; k < r; ++k) { w[k] = tw[k * e]; w[k].im *= sg; }
}
/* the 4-point DFT of (a, b, c, d) in place (sg = 1 forward, -1 inverse: W_4 = -sg i) */
static inline __attribute__((always_inline)) void EM_T(em_fftp_dft4)(CZ *a, CZ *b, CZ *c, CZ *d, ELT sg) {
    const CV apr = a->re + c->re, api = a->im + c->im, amr = a->re - c->re, ami = a->im - c->im;
    const CV bpr = b->re + d->re, bpi = b->im + d->im, bmr = b->re - d->re, bmi = b->im - d->im;
    const CV jr = -sg * bmi, ji = sg * bmr;  /* sg i (b - d) */
    a->re = apr + bpr; a->im = api + bpi;
    b->re = amr - jr; b->im = ami - ji;
    c->re = apr - bpr; c->im = api - bpi;
    d->re = amr + jr; d->im = ami + ji;
}
/* one radix-4 Stockham stage (length n, stride s) from x to y; half: x's entries from n/2 on are
   zero (the first stage of a zero-extended line), so c = d = 0 and they are not read */
static inline __attribute__((always_inline)) void EM_T(em_fftp_r4)(const CZ *x, CZ *y, int64_t n, int64_t s,
                                                                    int64_t m, const SZ *tw, ELT sg, int half) {
    const int64_t n1 = n / 4, ts = m / n;
    const CZ zero = {{0}, {0}};
    for (int64_t p = 0; p < n1; ++p) {
        SZ w[4];
        EM_T(em_fftp_twr)(w, 4, p * ts, tw, sg);
        const CZ *xa = x + s * p;
        CZ *yo = y + s * 4 * p;
        for (int64_t q = 0; q < s; ++q) {
            CZ v[4] = {xa[q], xa[q + s * n1], zero, zero};
            if (!half) { v[2] = xa[q + 2 * s * n1]; v[3] = xa[q + 3 * s * n1]; }
            EM_T(em_fftp_dft4)(&v[0], &v[1], &v[2], &v[3], sg);
            yo[q] = v[0];
            for (int k = 1; k < 4; ++k) yo[q + k * s] = p ? EM_T(em_czmul)(v[k], w[k]) : v[k];
        }
    }
}
/* one radix-8 butterfly: X_2r = DFT_4(x_k + x_k+4), X_2r+1 = DFT_4((x_k - x_k+4) W_8^k) of the inputs
   xa[k is], k < 8 (half: x_k+4 = 0, not read), output j times w[j] (tw_on; w[0] unused) to yo[j os] */
static inline __attribute__((always_inline)) void EM_T(em_fftp_bf8)(const CZ *xa, int64_t is, CZ *yo, int64_t os,
                                                                     const SZ *w, int tw_on, ELT sg, int half) {
    const ELT h = (ELT)0.70710678118654752440084436210484904;
    CZ e[4], o[4];
    for (int k = 0; k < 4; ++k) {
        const CZ u = xa[k * is];
        if (half) { e[k] = u; o[k] = u; }
        else {
            const CZ v = xa[(k + 4) * is];
            e[k].re = u.re + v.re; e[k].im = u.im + v.im;
            o[k].re = u.re - v.re; o[k].im = u.im - v.im;
        }
    }
    /* o_k times W_8^k: W_8 = (1 - sg i) / sqrt 2, W_8^2 = -sg i, W_8^3 = (-1 - sg i) / sqrt 2 */
    const CV r1 = h * (o[1].re + sg * o[1].im), i1 = h * (o[1].im - sg * o[1].re);
    o[1].re = r1; o[1].im = i1;
    const CV r2 = sg * o[2].im, i2 = -sg * o[2].re;
    o[2].re = r2; o[2].im = i2;
    const CV r3 = h * (sg * o[3].im - o[3].re), i3 = -h * (o[3].im + sg * o[3].re);
    o[3].re = r3; o[3].im = i3;
    EM_T(em_fftp_dft4)(&e[0], &e[1], &e[2], &e[3], sg);
    EM_T(em_fftp_dft4)(&o[0], &o[1], &o[2], &o[3], sg);
    yo[0] = e[0];
    yo[os] = tw_on ? EM_T(em_czmul)(o[0], w[1]) : o[0];
    for (int r = 1; r < 4; ++r) {
        yo[2 * r * os] = tw_on ? EM_T(em_czmul)(e[r], w[2 * r]) : e[r];
        yo[(2 * r + 1) * os] = tw_on ? EM_T(em_czmul)(o[r], w[2 * r + 1]) : o[r];
    }
}
/* one radix-8 Stockham stage (as em_fftp_r4) */
static inline __attribute__((always_inline)) void EM_T(em_fftp_r8)(const CZ *x, CZ *y, int64_t n, int64_t s,
                                                                    int64_t m, const SZ *tw, ELT sg, int half) {
    const int64_t n1 = n / 8, ts = m / n;
    for (int64_t p = 0; p < n1; ++p) {
        SZ w[8];
        EM_T(em_fftp_twr)(w, 8, p * ts, tw, sg);
        const CZ *xa = x + s * p;
        CZ *yo = y + s * 8 * p;
        for (int64_t q = 0; q < s; ++q) EM_T(em_fftp_bf8)(xa + q, s * n1, yo + q, s, w, p != 0, sg, half);
    }
}
/* unnormalized DFT of the lines x[0..m) (m a power of two, at least 2), sg = 1 forward, -1
   inverse; y is scratch of m entries; half: x's entries from m/2 on are zero and not read (m >= 8).
   Stockham stages of radix 8 (radix 4 for the last 16 or 4, radix 2 for a last 2). Returns the
   buffer holding the result (x or y). em_fftp_fft_to: the stages from length n, stride s on (the
   earlier ones done) down to length nend (1: all of them; else the last stage's radix, left to the
   caller). */
static CZ *EM_T(em_fftp_fft_to)(CZ *x, CZ *y, int64_t m, int64_t n, int64_t s, const SZ *tw, ELT sg, int half,
                                int64_t nend) {
    for (; n > nend;) {
        const int64_t r = em_fftp_radix(n);
        const int first = half && n == m;
        if (r == 8) {
            if (first) EM_T(em_fftp_r8)(x, y, n, s, m, tw, sg, 1);
            else EM_T(em_fftp_r8)(x, y, n, s, m, tw, sg, 0);
        } else if (r == 4) {
            if (first) EM_T(em_fftp_r4)(x, y, n, s, m, tw, sg, 1);
            else EM_T(em_fftp_r4)(x, y, n, s, m, tw, sg, 0);
        } else {
            for (int64_t q = 0; q < s; ++q) {
                const CZ a = x[q], b = x[q + s];
                y[q].re = a.re + b.re; y[q].im = a.im + b.im;
                y[q + s].re = a.re - b.re; y[q + s].im = a.im - b.im;
            }
        }
        n /= r; s *= r;
        CZ *t = x; x = y; y = t;
    }
    return x;
}
static CZ *EM_T(em_fftp_fft)(CZ *x, CZ *y, int64_t m, const SZ *tw, ELT sg, int half) {
    return EM_T(em_fftp_fft_to)(x, y, m, m, 1, tw, sg, half, 1);
}
/* one Stockham stage of radix 2, 3 or 5 (as em_fftp_r4: length n, stride s, from x to
   y; outputs twiddled after the butterfly), the small DFTs from dft_small.h */
static inline __attribute__((always_inline)) void EM_T(em_fftp_rp)(const CZ *x, CZ *y, int64_t n, int64_t s,
                                                                    int64_t m, const SZ *tw, ELT sg, const int r) {
    const int64_t n1 = n / r, ts = m / n;
    for (int64_t p = 0; p < n1; ++p) {
        SZ w[5];
        EM_T(em_fftp_twr)(w, r, p * ts, tw, sg);
        const CZ *xa = x + s * p;
        CZ *yo = y + s * r * p;
        for (int64_t q = 0; q < s; ++q) {
            CZ v[5];
            for (int k = 0; k < r; ++k) v[k] = xa[q + k * s * n1];
            EM_DFT_SMALL(v, r, sg, CV, ELT);
            yo[q] = v[0];
            for (int k = 1; k < r; ++k) yo[q + k * s] = p ? EM_T(em_czmul)(v[k], w[k]) : v[k];
        }
    }
}
/* one Stockham stage of radix 15 (as em_fftp_rp): the 15-point DFT as 3 x 5 by the prime-factor
   mapping, no twiddles inside (input k = 5 k1 + 3 k2, output j = 10 j1 + 6 j2, mod 15: five 3-point
   DFTs over k1, then three 5-point DFTs over k2), in place of a radix-3 and a radix-5 stage (one pass
   over the line instead of two, 14 twiddle products per butterfly instead of 22) */
static void EM_T(em_fftp_r15)(const CZ *x, CZ *y, int64_t n, int64_t s, int64_t m, const SZ *tw, ELT sg) {
    const int64_t n1 = n / 15, ts = m / n, sn = s * n1;
    for (int64_t p = 0; p < n1; ++p) {
        SZ w[15];
        EM_T(em_fftp_twr)(w, 15, p * ts, tw, sg);
        const CZ *xa = x + s * p;
        CZ *yo = y + s * 15 * p;
        for (int64_t q = 0; q < s; ++q) {
            CZ a0[3], a1[3], a2[3], a3[3], a4[3];
#define EM_FFTP_R15_IN(A, K2)                                                                               \
            (A)[0] = xa[q + (3 * (K2)) % 15 * sn]; (A)[1] = xa[q + (5 + 3 * (K2)) % 15 * sn];               \
            (A)[2] = xa[q + (10 + 3 * (K2)) % 15 * sn];                                                     \
            EM_DFT_SMALL((A), 3, sg, CV, ELT)
            EM_FFTP_R15_IN(a0, 0); EM_FFTP_R15_IN(a1, 1); EM_FFTP_R15_IN(a2, 2); EM_FFTP_R15_IN(a3, 3);
            EM_FFTP_R15_IN(a4, 4);
#undef EM_FFTP_R15_IN
#define EM_FFTP_R15_OUT(J1)                                                                                 \
            do {                                                                                            \
                CZ u[5] = {a0[J1], a1[J1], a2[J1], a3[J1], a4[J1]};                                         \
                EM_DFT_SMALL(u, 5, sg, CV, ELT);                                                            \
                for (int j2 = 0; j2 < 5; ++j2) {                                                            \
                    const int j = (10 * (J1) + 6 * j2) % 15;                                                \
                    yo[q + j * s] = p && j ? EM_T(em_czmul)(u[j2], w[j]) : u[j2];                           \
                }                                                                                           \
            } while (0)
            EM_FFTP_R15_OUT(0); EM_FFTP_R15_OUT(1); EM_FFTP_R15_OUT(2);
#undef EM_FFTP_R15_OUT
        }
    }
}
/* one Stockham stage of an odd prime radix r from 7 to EM_FFT_PMAX (as em_fftp_rp): outputs u and
   r - u share the sums over the input pairs (q, r - q), since W^(qu) t_q + W^(-qu) t_(r-q) =
   c (t_q + t_(r-q)) + i s (t_q - t_(r-q)) with W^(qu) = c + i s (O(r^2 / 2) per butterfly) */
static void EM_T(em_fftp_rodd)(const CZ *x, CZ *y, int64_t n, int64_t s, int64_t m, const SZ *tw, ELT sg,
                               const int r) {
    const int64_t n1 = n / r, ts = m / n;
    const int h = (r - 1) / 2;
    ELT cs[EM_FFT_PMAX / 2][EM_FFT_PMAX / 2], sn[EM_FFT_PMAX / 2][EM_FFT_PMAX / 2];
    for (int u = 1; u <= h; ++u)
        for (int q = 1; q <= h; ++q) {
            const SZ w = tw[(int64_t)((u * q) % r) * (m / r)];
            cs[u - 1][q - 1] = w.re; sn[u - 1][q - 1] = w.im * sg;
        }
    for (int64_t p = 0; p < n1; ++p) {
        SZ w[EM_FFT_PMAX];
        EM_T(em_fftp_twr)(w, r, p * ts, tw, sg);
        const CZ *xa = x + s * p;
        CZ *yo = y + s * r * p;
        for (int64_t q = 0; q < s; ++q) {
            CZ v[EM_FFT_PMAX];
            for (int k = 0; k < r; ++k) v[k] = xa[q + k * s * n1];
            CZ s0 = v[0];
            for (int k = 1; k < r; ++k) { s0.re += v[k].re; s0.im += v[k].im; }
            yo[q] = s0;
            for (int u = 1; u <= h; ++u) {
                const CV zero = {0};
                CV ar = zero, ai = zero, br = zero, bi = zero;
                for (int k = 1; k <= h; ++k) {
                    const ELT c = cs[u - 1][k - 1], sv = sn[u - 1][k - 1];
                    ar += (v[k].re + v[r - k].re) * c; ai += (v[k].im + v[r - k].im) * c;
                    br += (v[k].re - v[r - k].re) * sv; bi += (v[k].im - v[r - k].im) * sv;
                }
                CZ a = {v[0].re + ar - bi, v[0].im + ai + br}, b = {v[0].re + ar + bi, v[0].im + ai - br};
                yo[q + u * s] = p ? EM_T(em_czmul)(a, w[u]) : a;
                yo[q + (r - u) * s] = p ? EM_T(em_czmul)(b, w[r - u]) : b;
            }
        }
    }
}
/* one Stockham stage of radix r (8, 4, 2, 3, 5, 15 or an odd prime to EM_FFT_PMAX) at length n, stride s */
static void EM_T(em_fftp_stage)(const CZ *x, CZ *y, int64_t n, int64_t s, int64_t m, const SZ *tw, ELT sg, int r) {
    if (r == 8) EM_T(em_fftp_r8)(x, y, n, s, m, tw, sg, 0);
    else if (r == 4) EM_T(em_fftp_r4)(x, y, n, s, m, tw, sg, 0);
    else if (r == 2) EM_T(em_fftp_rp)(x, y, n, s, m, tw, sg, 2);
    else if (r == 3) EM_T(em_fftp_rp)(x, y, n, s, m, tw, sg, 3);
    else if (r == 5) EM_T(em_fftp_rp)(x, y, n, s, m, tw, sg, 5);
    else if (r == 15) EM_T(em_fftp_r15)(x, y, n, s, m, tw, sg);
    else EM_T(em_fftp_rodd)(x, y, n, s, m, tw, sg, r);
}
/* the stages of radices rad[0 .. nr) from length n, stride s on (the earlier ones done) of a
   length-m transform, ping-ponging x / y: returns the buffer holding the result */
static CZ *EM_T(em_fftp_stages)(CZ *x, CZ *y, int64_t m, int64_t n, int64_t s, const int8_t *rad, int nr,
                                const SZ *tw, ELT sg) {
    for (int i = 0; i < nr; ++i) {
        EM_T(em_fftp_stage)(x, y, n, s, m, tw, sg, rad[i]);
        n /= rad[i]; s *= rad[i];
        CZ *t = x; x = y; y = t;
    }
    return x;
}
/* the mixed-radix Stockham transform over the factors fac (4, 2, 3, 5, odd primes to 64; a 4 then a 2 as one radix-8
   stage) of m: as em_fftp_fft, returns the buffer holding the result (x or y) */
static CZ *EM_T(em_fftp_mixed)(CZ *x, CZ *y, int64_t m, const int32_t *fac, const SZ *tw, ELT sg) {
    int64_t s = 1;
    for (int64_t n = m, i = 0; n > 1; ++i) {
        int r = fac[i];
        if (r == 4 && n > 4 && fac[i + 1] == 2) { r = 8; ++i; }
        EM_T(em_fftp_stage)(x, y, n, s, m, tw, sg, r);
        n /= r; s *= r;
        CZ *t = x; x = y; y = t;
    }
    return x;
}
#undef CW
#undef CV
#undef CZ
#undef SZ
