/* The inline math functions of the C op table (native/emit/c_ops.py): float32 exp, log, tanh,
   logistic and erf, and digamma, erf_inv, the Hurwitz zeta and polygamma (native/emit/c_special.py).
   Each section starts with a marker line naming the function and the sections it calls; a program
   includes only the sections its emitters recorded (emit/support.py), with their dependencies,
   after c_ops.PRELUDE_HEAD (em_f32, em_u32, EM_FMA). Accuracy bounds: the c_ops docstring. */
/*@ em_expf */
/* exp for float32: Cody-Waite reduction x = k ln2 + r (k rounded by the 1.5*2^23 shifter, which
   also leaves k in the low bits; clamped at 128 in the integer domain, one vpminsd, so x > 89 and
   +inf overflow to inf), degree-6 polynomial, 2^k in two steps so results that are subnormal
   round once. x < -104 gives 0 by the one final select; NaN propagates through the arithmetic.
   Error <= 2 ulp (measured 0.98); NaN, +-inf, overflow and underflow follow IEEE. */
static inline float em_expf(float x) {
    float kf = EM_FMA(x, 1.44269504088896341f, 12582912.0f);
    int32_t ki = (int32_t)em_u32(kf) - 0x4B400000;
    ki = ki > 128 ? 128 : ki;
    float k = (float)ki;
    float r = EM_FMA(k, -0.693359375f, x);
    r = EM_FMA(k, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = EM_FMA(p, r, 1.3981999507e-3f);
    p = EM_FMA(p, r, 8.3334519073e-3f);
    p = EM_FMA(p, r, 4.1665795894e-2f);
    p = EM_FMA(p, r, 1.6666665459e-1f);
    p = EM_FMA(p, r, 5.0000001201e-1f);
    p = EM_FMA(p, r * r, r) + 1.0f;
    int32_t k1 = ki >> 1, k2 = ki - k1;
    float res = p * em_f32((uint32_t)(k1 + 127) << 23) * em_f32((uint32_t)(k2 + 127) << 23);
    return x < -104.0f ? 0.0f : res;
}
/*@ em_logf */
/* log for float32: x = m 2^e with m in [sqrt(1/2), sqrt(2)), degree-9 polynomial in (m-1) (Cephes).
   Error <= 2 ulp; log(0) = -inf, log(x<0) = NaN, log(inf) = inf, subnormals handled. */
static inline float em_logf(float x) {
    int sub = x < 1.17549435e-38f;
    float xs = sub ? x * 8388608.0f : x;
    uint32_t u = em_u32(xs);
    int32_t e = (int32_t)((u >> 23) & 0xff) - 126;
    float m = em_f32((u & 0x007fffffu) | 0x3f000000u);
    int small = m < 0.707106781186547524f;
    e = small ? e - 1 : e;
    m = small ? m + m - 1.0f : m - 1.0f;
    float z = m * m;
    float y = 7.0376836292e-2f;
    y = EM_FMA(y, m, -1.1514610310e-1f);
    y = EM_FMA(y, m, 1.1676998740e-1f);
    y = EM_FMA(y, m, -1.2420140846e-1f);
    y = EM_FMA(y, m, 1.4249322787e-1f);
    y = EM_FMA(y, m, -1.6668057665e-1f);
    y = EM_FMA(y, m, 2.0000714765e-1f);
    y = EM_FMA(y, m, -2.4999993993e-1f);
    y = EM_FMA(y, m, 3.3333331174e-1f);
    y = y * m * z;
    float fe = (float)(sub ? e - 23 : e);
    y = EM_FMA(fe, -2.12194440e-4f, y);
    y = EM_FMA(-0.5f, z, y);
    float res = m + y + fe * 0.693359375f;
    res = (x == 0.0f) ? -INFINITY : res;
    res = (x < 0.0f) ? NAN : res;
    res = (x == INFINITY) ? INFINITY : res;
    return (x != x) ? x : res;
}
/*@ em_tanhf */
/* tanh for float32: the rational approximation XLA and Eigen use on [0, 7.9] evaluated at |x|
   (odd: the sign of x is put back with one or; exactly 1 beyond), and x itself for |x| < 4e-4
   (where tanh(x) = x within 0.5 ulp, and the product n*x would lose tiny and subnormal x). One
   polynomial pair, three selects, no clamp chains, so the vectorized loop stays short. Error
   <= 7 ulp and <= 4e-7 absolute (measured 5.6 ulp near |x| = 6); NaN propagates, tanh(-0) = -0. */
static inline float em_tanhf(float x) {
    float ax = fabsf(x);
    float x2 = ax * ax;
    float n = -2.76076847742355e-16f;
    n = EM_FMA(n, x2, 2.00018790482477e-13f);
    n = EM_FMA(n, x2, -8.60467152213735e-11f);
    n = EM_FMA(n, x2, 5.12229709037114e-08f);
    n = EM_FMA(n, x2, 1.48572235717979e-05f);
    n = EM_FMA(n, x2, 6.37261928875436e-04f);
    n = EM_FMA(n, x2, 4.89352455891786e-03f);
    float d = 1.19825839466702e-06f;
    d = EM_FMA(d, x2, 1.18534705686654e-04f);
    d = EM_FMA(d, x2, 2.26843463243900e-03f);
    d = EM_FMA(d, x2, 4.89352518554385e-03f);
    float t = n * ax / d;
    t = ax > 7.90531110763549805f ? 1.0f : t;
    t = em_f32(em_u32(t) | (em_u32(x) & 0x80000000u));
    return ax < 0.0004f ? x : t;
}
/*@ em_logisticf after em_expf */
/* logistic (sigmoid) for float32: e = exp(-|x|), 1/(1+e) for x >= 0 and e/(1+e) below, so
   the tail toward -inf keeps its relative accuracy. Error <= 4 ulp; NaN propagates. */
static inline float em_logisticf(float x) {
    float e = em_expf(-fabsf(x));
    float r = 1.0f / (1.0f + e);
    return x < 0.0f ? e * r : r;
}
/*@ em_logistic */
static inline double em_logistic(double x) {
    double e = exp(-fabs(x)), r = 1.0 / (1.0 + e);
    return x < 0.0 ? e * r : r;
}
/*@ em_erff */
/* erf for float32: rational approximation p(x^2) x / q(x^2) on [0, 4] evaluated at |x| (as
   Eigen/XLA; odd: the sign of x is put back with one or), exactly 1 beyond, x * 2/sqrt(pi) below
   1e-20. Error <= 8 ulp and 5e-7 absolute; NaN propagates. */
static inline float em_erff(float x) {
    float ax = fabsf(x);
    float x2 = ax * ax;
    float p = -2.72614225801306e-10f;
    p = EM_FMA(p, x2, 2.77068142495902e-08f);
    p = EM_FMA(p, x2, -2.10102402082508e-06f);
    p = EM_FMA(p, x2, -5.69250639462346e-05f);
    p = EM_FMA(p, x2, -7.34990630326855e-04f);
    p = EM_FMA(p, x2, -2.95459980854025e-03f);
    p = EM_FMA(p, x2, -1.60960333262415e-02f);
    p = p * ax;
    float q = -1.45660718464996e-05f;
    q = EM_FMA(q, x2, -2.13374055278905e-04f);
    q = EM_FMA(q, x2, -1.68282697438203e-03f);
    q = EM_FMA(q, x2, -7.37332916720468e-03f);
    q = EM_FMA(q, x2, -1.42647390514189e-02f);
    float r = p / q;
    r = (ax > 4.0f) | (r > 1.0f) ? 1.0f : r;
    r = em_f32(em_u32(r) | (em_u32(x) & 0x80000000u));
    return ax < 1e-20f ? x * 1.12837916709551257f : r;
}
/*@ em_erfcf after em_expf em_erff */
/* erfc for float32 without a libm call (so loops over it vectorize: GELU's erf form). For
   x >= 0: erfc(x) = exp(-x^2) erfcx(x) with erfcx(x) = t g(t), t = 1 / (1 + x/2), g a degree-9
   polynomial in t - 0.58264464 fitted (relative least squares) to erfcx(x) / t on [0, 10.1];
   x^2 is split into its rounded value and the FMA residual, exp(-hi) (1 - lo) keeping the
   relative accuracy to the underflow at 10.06 (0 beyond). erfc(-x) = 2 - erfc(x). Error <= 6 ulp
   (5.4 measured on 1.1e7 points of [-12, 12] against SciPy in float64); NaN propagates. */
static inline float em_erfcf(float x) {
    float ax = fabsf(x);
    float t = 1.0f / EM_FMA(0.5f, ax, 1.0f);
    float s = t - 0.5826446413993835f;
    float g = 0.013231217861175537f;
    g = EM_FMA(g, s, -0.0586116649210453f);
    g = EM_FMA(g, s, 0.004178508184850216f);
    g = EM_FMA(g, s, 0.11180990934371948f);
    g = EM_FMA(g, s, -0.050022926181554794f);
    g = EM_FMA(g, s, -0.20388254523277283f);
    g = EM_FMA(g, s, 0.08300235122442245f);
    g = EM_FMA(g, s, 0.587518036365509f);
    g = EM_FMA(g, s, 0.7821245193481445f);
    g = EM_FMA(g, s, 0.5714730620384216f);
    float q = t * g;
    float hi = ax * ax, lo = __builtin_fmaf(ax, ax, -hi);  /* exact residual (fused even without EM_FMA) */
    float r = em_expf(-hi) * EM_FMA(-q, lo, q);
    r = ax > 10.06f ? 0.0f : r;
    r = x < 0.0f ? 2.0f - r : r;
    return x != x ? x : r;
}
/*@ em_digamma */
static double em_digamma(double x) {
    if (x != x || x == -INFINITY) return (double)NAN;
    if (x == INFINITY) return x;
    if (x == 0.0) return signbit(x) ? (double)INFINITY : -(double)INFINITY;
    double refl = 0.0;
    if (x < 0.0) {
        double fl = floor(x);
        if (x == fl) return (double)NAN;
        double r = x - floor(x + 0.5);          /* in [-0.5, 0.5]: tan(pi x) = tan(pi r) */
        refl = -3.14159265358979323846 / tan(3.14159265358979323846 * r);
        x = 1.0 - x;
    }
    double acc = 0.0;
    while (x < 10.0) { acc -= 1.0 / x; x += 1.0; }
    double z = 1.0 / (x * x);
    double s = z * (-1.0 / 12 + z * (1.0 / 120 + z * (-1.0 / 252 + z * (1.0 / 240 + z * (-1.0 / 132
               + z * (691.0 / 32760 + z * (-1.0 / 12)))))));
    return refl + acc + log(x) - 0.5 / x + s;
}
/*@ em_erfinv */
/* erf_inv(x) = ndtri((1 + x) / 2) / sqrt(2) with Wichura's AS241 rational approximations of the
   normal quantile (Appl. Statist. 37, 1988), fed the exact q = x / 2 and tail mass (1 - |x|) / 2. */
static double em_erfinv(double x) {
    if (x != x || x < -1.0 || x > 1.0) return (double)NAN;
    if (x == 1.0) return (double)INFINITY;
    if (x == -1.0) return -(double)INFINITY;
    double q = 0.5 * x, z;
    if (fabs(q) <= 0.425) {
        double r = 0.180625 - 0.25 * (x * x);
        double a = ((((((2509.0809287301226727 * r + 33430.575583588128105) * r + 67265.770927008700853) * r
                   + 45921.953931549871457) * r + 13731.693765509461125) * r + 1971.5909503065514427) * r
                   + 133.14166789178437745) * r + 3.3871328727963666080;
        double b = ((((((5226.4952788528545610 * r + 28729.085735721942674) * r + 39307.895800092710610) * r
                   + 21213.794301586595867) * r + 5394.1960214247511077) * r + 687.18700749205790830) * r
                   + 42.313330701600911252) * r + 1.0;
        /* x (a / b) / (2 sqrt 2): x first, not q = x / 2 (the smallest subnormal would halve to 0) */
        return x * (a / b) * 0.35355339059327376220;
    }
    double r = sqrt(-log(0.5 * (1.0 - fabs(x))));
    if (r <= 5.0) {
        r -= 1.6;
        z = ((((((7.74545014278341407640e-4 * r + 2.27238449892691845833e-2) * r + 2.41780725177450611770e-1)
             * r + 1.27045825245236838258) * r + 3.64784832476320460504) * r + 5.76949722146069140550) * r
             + 4.63033784615654529590) * r + 1.42343711074968357734;
        z /= ((((((1.05075007164441684324e-9 * r + 5.47593808499534494600e-4) * r + 1.51986665636164571966e-2)
              * r + 1.48103976427480074590e-1) * r + 6.89767334985100004550e-1) * r + 1.67638483018380384940)
              * r + 2.05319162663775882187) * r + 1.0;
    } else {
        r -= 5.0;
        z = ((((((2.01033439929228813265e-7 * r + 2.71155556874348757815e-5) * r + 1.24266094738807843860e-3)
             * r + 2.65321895265761230930e-2) * r + 2.96560571828504891230e-1) * r + 1.78482653991729133580)
             * r + 5.46378491116411436990) * r + 6.65790464350110377720;
        z /= ((((((2.04426310338993978564e-15 * r + 1.42151175831644588870e-7) * r
              + 1.84631831751005468180e-5) * r + 7.86869131145613259100e-4) * r + 1.48753612908506148525e-2)
              * r + 1.36929880922735805310e-1) * r + 5.99832206555887937690e-1) * r + 1.0;
    }
    z *= 0.70710678118654752440;
    return x < 0.0 ? -z : z;
}
/*@ em_hzeta */
/* Hurwitz zeta(s, q) for integer s >= 2 (Euler-Maclaurin); +inf at the non-positive integers. */
static double em_hzeta(double s, double q) {
    if (q != q) return q;
    if (q <= 0.0 && q == floor(q)) return (double)INFINITY;
    if (q == INFINITY) return 0.0;
    static const double b2k[8] = {1.0 / 6, -1.0 / 30, 1.0 / 42, -1.0 / 30, 5.0 / 66, -691.0 / 2730,
                                  7.0 / 6, -3617.0 / 510};
    double sum = 0.0, a = q;
    while (a < 10.0 + s) { sum += pow(a, -s); a += 1.0; }
    sum += pow(a, 1.0 - s) / (s - 1.0) + 0.5 * pow(a, -s);
    double fact = 1.0, rise = s, t = pow(a, -s - 1.0);  /* rise = s (s+1) ... (s+2j-2) */
    for (int j = 1; j <= 8; ++j) {
        fact *= (2.0 * j - 1.0) * (2.0 * j);
        double term = b2k[j - 1] / fact * rise * t;
        sum += term;
        if (fabs(term) <= 1e-17 * fabs(sum)) break;
        rise *= (s + 2.0 * j - 1.0) * (s + 2.0 * j);
        t /= a * a;
    }
    return sum;
}
/*@ em_polygamma after em_digamma em_hzeta */
static double em_polygamma(int n, double x) {
    if (n == 0) return em_digamma(x);
    double f = 1.0;
    for (int k = 2; k <= n; ++k) f *= k;
    return ((n + 1) % 2 ? -f : f) * em_hzeta(n + 1.0, x);
}
