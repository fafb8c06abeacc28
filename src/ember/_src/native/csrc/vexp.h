/* Vectorized float32 exp over a row: em_exp_row_f32(dst, src, c, n) sets dst[j] = exp(src[j] - c)
   (the difference rounded as float32, as the C expression would) and returns the sum of the n
   results (accumulated per vector lane in a fixed order, then the lanes added: the same value on
   every call and thread for the same row).

   Algorithm: the argument clamped to [-104, 89] (below -104 every result rounds to 0, above 89
   every result overflows; NaN passes the clamps), Cody-Waite reduction x = k ln2 + r with k from
   the 1.5*2^23 shifter, e^r by a degree-6 polynomial in Horner form (6 FMAs; coefficients a
   minimax fit of the relative error on [-ln2/2, ln2/2], rounded to float32), then p 2^k rounded
   once (so subnormal results round once). Error <= 2 ulp against float64 exp over the whole
   float32 range (measured 1.06 ulp over all 2^32 inputs on the AVX-512 variant;
   tests/native/emit/test_row_kernels.py checks every 509th bit pattern, -inf, +inf, NaN, subnormal
   results and the overflow/underflow thresholds). With c = 0 it is exp(src[j]) (x - 0 is x).

   Variants, chosen by the CPU the program is compiled for (the compile cache's key records it):
   AVX-512F (16 lanes: 2^k is one vscalefps, the row's tail a masked load/store), AVX2+FMA (8
   lanes: 2^k as two exponent-field products; the tail through a padded 8-lane block so every
   element takes the vector path), else a scalar loop. All three compute the same operations in
   the same order, so they give the same bits for every input (where the target has FMA). They
   do not give em_expf's bits (the scalar exp of map kernels, native/emit/c_ops.py: a longer
   polynomial with a few more operations per element); the two agree within their bounds (each
   <= 2 ulp). src and dst may be the same buffer. */
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

#define EM_VEXP_C6 0x1.6ae730p-10f
#define EM_VEXP_C5 0x1.126782p-7f
#define EM_VEXP_C4 0x1.555822p-5f
#define EM_VEXP_C3 0x1.55541ap-3f
#define EM_VEXP_C2 0x1.fffffcp-2f

#if defined(__AVX512F__)
static inline __m512 em_vexpf16(__m512 x) {
    const __m512 sh = _mm512_set1_ps(12582912.0f);
    /* max/min return their second operand when either is NaN: NaN x stays NaN */
    x = _mm512_min_ps(_mm512_set1_ps(89.0f), _mm512_max_ps(_mm512_set1_ps(-104.0f), x));
    __m512 k = _mm512_sub_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), sh), sh);
    __m512 r = _mm512_fmadd_ps(k, _mm512_set1_ps(-0.693359375f), x);
    r = _mm512_fmadd_ps(k, _mm512_set1_ps(2.12194440e-4f), r);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(EM_VEXP_C6), r, _mm512_set1_ps(EM_VEXP_C5));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EM_VEXP_C4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EM_VEXP_C3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EM_VEXP_C2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, k);  /* p 2^k, one rounding */
}

static float em_exp_row_f32(float *dst, const float *src, float c, int64_t n) {
    const __m512 cv = _mm512_set1_ps(c);
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) {
        __m512 a = em_vexpf16(_mm512_sub_ps(_mm512_loadu_ps(src + j), cv));
        __m512 b = em_vexpf16(_mm512_sub_ps(_mm512_loadu_ps(src + j + 16), cv));
        _mm512_storeu_ps(dst + j, a);
        _mm512_storeu_ps(dst + j + 16, b);
        s0 = _mm512_add_ps(s0, a);
        s1 = _mm512_add_ps(s1, b);
    }
    for (; j < n; j += 16) {
        __mmask16 m = n - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - j)) - 1u);
        __m512 a = _mm512_maskz_mov_ps(m, em_vexpf16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, src + j), cv)));
        _mm512_mask_storeu_ps(dst + j, m, a);
        s0 = _mm512_add_ps(s0, a);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}
#elif defined(__AVX2__) && defined(__FMA__)
static inline __m256 em_vexpf8(__m256 x) {
    const __m256 sh = _mm256_set1_ps(12582912.0f);
    x = _mm256_min_ps(_mm256_set1_ps(89.0f), _mm256_max_ps(_mm256_set1_ps(-104.0f), x));
    __m256 t = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), sh);
    __m256 k = _mm256_sub_ps(t, sh);
    __m256i ki = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(0x4B400000));
    __m256 r = _mm256_fmadd_ps(k, _mm256_set1_ps(-0.693359375f), x);
    r = _mm256_fmadd_ps(k, _mm256_set1_ps(2.12194440e-4f), r);
    __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(EM_VEXP_C6), r, _mm256_set1_ps(EM_VEXP_C5));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EM_VEXP_C4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EM_VEXP_C3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EM_VEXP_C2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    /* k in [-150, 128]: 2^(k>>1) is normal, so p 2^(k>>1) is exact and the second product rounds once */
    __m256i k1 = _mm256_srai_epi32(ki, 1), k2 = _mm256_sub_epi32(ki, k1);
    const __m256i bias = _mm256_set1_epi32(127);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

static float em_exp_row_f32(float *dst, const float *src, float c, int64_t n) {
    const __m256 cv = _mm256_set1_ps(c);
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m256 a = em_vexpf8(_mm256_sub_ps(_mm256_loadu_ps(src + j), cv));
        __m256 b = em_vexpf8(_mm256_sub_ps(_mm256_loadu_ps(src + j + 8), cv));
        _mm256_storeu_ps(dst + j, a);
        _mm256_storeu_ps(dst + j + 8, b);
        s0 = _mm256_add_ps(s0, a);
        s1 = _mm256_add_ps(s1, b);
    }
    for (; j < n; j += 8) {  /* the tail through a zero-padded block; padding lanes are not summed */
        float buf[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
        int64_t m = n - j < 8 ? n - j : 8;
        for (int64_t t = 0; t < m; ++t) buf[t] = src[j + t];
        _mm256_storeu_ps(buf, em_vexpf8(_mm256_sub_ps(_mm256_loadu_ps(buf), cv)));
        for (int64_t t = 0; t < 8; ++t) {
            if (t < m) dst[j + t] = buf[t];
            else buf[t] = 0.0f;
        }
        s0 = _mm256_add_ps(s0, _mm256_loadu_ps(buf));
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, _mm256_add_ps(s0, s1));
    return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}
#else
static inline float em_vexpf1(float x) {
    x = x < -104.0f ? -104.0f : x;  /* NaN compares false: it stays NaN */
    x = x > 89.0f ? 89.0f : x;
    float t = EM_FMA(x, 1.44269504088896341f, 12582912.0f);
    int32_t ki = (int32_t)em_u32(t) - 0x4B400000;
    float k = t - 12582912.0f;
    float r = EM_FMA(k, -0.693359375f, x);
    r = EM_FMA(k, 2.12194440e-4f, r);
    float p = EM_FMA(EM_VEXP_C6, r, EM_VEXP_C5);
    p = EM_FMA(p, r, EM_VEXP_C4);
    p = EM_FMA(p, r, EM_VEXP_C3);
    p = EM_FMA(p, r, EM_VEXP_C2);
    p = EM_FMA(p, r, 1.0f);
    p = EM_FMA(p, r, 1.0f);
    int32_t k1 = ki >> 1, k2 = ki - k1;
    return p * em_f32((uint32_t)(k1 + 127) << 23) * em_f32((uint32_t)(k2 + 127) << 23);
}

static float em_exp_row_f32(float *dst, const float *src, float c, int64_t n) {
    float s = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
        dst[j] = em_vexpf1(src[j] - c);
        s += dst[j];
    }
    return s;
}
#endif

/* Row softmax and log-softmax of `rows` contiguous float32 rows of length n (row r at src + r n,
   its result at dst + r n). Per row: m = the row maximum (NaN when the row holds a NaN), c =
   shift(m), e_j = exp(x_j - c) by em_exp_row_f32's exp and their sum s in its order, then
     em_softmax_rows_f32:     dst_j = e_j * (1 / s)          (dst may be src)
     em_log_softmax_rows_f32: dst_j = (x_j - c) - off(s)      (dst must not overlap src)
   The results equal those of a row kernel computing the same formula through em_exp_row_f32
   (with a product by the reciprocal for the softmax), bit for bit (tests/native/emit/test_row_kernels.py),
   and do not depend on how the rows are split among calls.

   The AVX-512F variant runs the three passes of neighbouring rows in one loop: while it
   evaluates row r's exp (bound by the FMA units), it also takes row r+1's maximum and writes row
   r-1's results, so the memory traffic of those two passes overlaps the arithmetic (softmax
   1024x1024 on one AVX-512 core: about 240 us against 300 us for the three loops one after the
   other, measured in C). */
static inline float em_row_max_f32(const float *src, int64_t n) {
    float a = -INFINITY;
    int nan = 0;
    #pragma omp simd reduction(max:a) reduction(|:nan)
    for (int64_t j = 0; j < n; ++j) {
        a = src[j] > a ? src[j] : a;
        nan |= src[j] != src[j];
    }
    return nan ? (float)NAN : a;
}

/* row r-1's results: log ? (x_j - a) - b : e_j * a (e_j already in dst) */
static inline void em_row_finish_f32(int log, float *dst, const float *x, float a, float b, int64_t n) {
    if (log) {
        #pragma omp simd
        for (int64_t j = 0; j < n; ++j) dst[j] = (x[j] - a) - b;
    } else {
        #pragma omp simd
        for (int64_t j = 0; j < n; ++j) dst[j] *= a;
    }
}

#if defined(__AVX512F__)
static inline __m512 em_row_finish16(int log, __mmask16 m, const float *dst, const float *x, __m512 a, __m512 b) {
    return log ? _mm512_sub_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x), a), b)
               : _mm512_mul_ps(_mm512_maskz_loadu_ps(m, dst), a);
}

/* one row of the pipeline: the exp of `cur` (stored into `out` unless log; its sum returned, in
   em_exp_row_f32's order), the maximum of `next` (when not NULL) into *next_max, and the results
   of the previous row (when prev is not NULL: em_row_finish_f32's, from prev_x) */
static inline float em_rows_step_f32(int log, float *out, const float *cur, float c, const float *next,
                                     float *next_max, float *prev, const float *prev_x, float a, float b,
                                     int64_t n) {
    const __m512 cv = _mm512_set1_ps(c), av = _mm512_set1_ps(a), bv = _mm512_set1_ps(b);
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    __m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0;
    __mmask16 nan = 0;
    const __mmask16 all = (__mmask16)0xFFFF;
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) {
        __m512 e0 = em_vexpf16(_mm512_sub_ps(_mm512_loadu_ps(cur + j), cv));
        __m512 e1 = em_vexpf16(_mm512_sub_ps(_mm512_loadu_ps(cur + j + 16), cv));
        if (prev) {  /* before the stores: out may be the row after prev, never prev itself */
            _mm512_storeu_ps(prev + j, em_row_finish16(log, all, prev + j, prev_x + j, av, bv));
            _mm512_storeu_ps(prev + j + 16, em_row_finish16(log, all, prev + j + 16, prev_x + j + 16, av, bv));
        }
        if (next) {  /* vmaxps returns its second operand for a NaN: NaNs are flagged apart */
            __m512 u = _mm512_loadu_ps(next + j), v = _mm512_loadu_ps(next + j + 16);
            m0 = _mm512_max_ps(u, m0);
            m1 = _mm512_max_ps(v, m1);
            nan |= _mm512_cmp_ps_mask(u, v, _CMP_UNORD_Q);
        }
        if (!log) {
            _mm512_storeu_ps(out + j, e0);
            _mm512_storeu_ps(out + j + 16, e1);
        }
        s0 = _mm512_add_ps(s0, e0);
        s1 = _mm512_add_ps(s1, e1);
    }
    for (; j < n; j += 16) {
        __mmask16 m = n - j >= 16 ? all : (__mmask16)((1u << (n - j)) - 1u);
        __m512 e = _mm512_maskz_mov_ps(m, em_vexpf16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, cur + j), cv)));
        if (prev)
            _mm512_mask_storeu_ps(prev + j, m, em_row_finish16(log, m, prev + j, prev_x + j, av, bv));
        if (next) {
            __m512 u = _mm512_maskz_loadu_ps(m, next + j);
            m0 = _mm512_mask_max_ps(m0, m, u, m0);
            nan |= _mm512_mask_cmp_ps_mask(m, u, u, _CMP_UNORD_Q);
        }
        if (!log)
            _mm512_mask_storeu_ps(out + j, m, e);
        s0 = _mm512_add_ps(s0, e);
    }
    if (next)
        *next_max = nan ? (float)NAN : _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

static inline void em_rows_f32(int log, float *dst, const float *src, int64_t rows, int64_t n,
                               float (*shift)(float), float (*off)(float)) {
    if (rows <= 0 || n <= 0)
        return;
    float m = em_row_max_f32(src, n), a = 0.0f, b = 0.0f;
    for (int64_t r = 0; r < rows; ++r) {
        const float *next = r + 1 < rows ? src + (r + 1) * n : (const float *)0;
        float *prev = r > 0 ? dst + (r - 1) * n : (float *)0;
        float m_next = 0.0f, c = shift(m);
        float s = em_rows_step_f32(log, dst + r * n, src + r * n, c, next, &m_next, prev,
                                   r > 0 ? src + (r - 1) * n : src, a, b, n);
        a = log ? c : 1.0f / s;
        b = log ? off(s) : 0.0f;
        m = m_next;
    }
    em_row_finish_f32(log, dst + (rows - 1) * n, src + (rows - 1) * n, a, b, n);
}
#else
static inline void em_rows_f32(int log, float *dst, const float *src, int64_t rows, int64_t n,
                               float (*shift)(float), float (*off)(float)) {
    for (int64_t r = 0; r < rows && n > 0; ++r) {  /* the exps go into dst's row (log: overwritten) */
        float c = shift(em_row_max_f32(src + r * n, n));
        float s = em_exp_row_f32(dst + r * n, src + r * n, c, n);
        em_row_finish_f32(log, dst + r * n, src + r * n, log ? c : 1.0f / s, log ? off(s) : 0.0f, n);
    }
}
#endif

static inline void em_softmax_rows_f32(float *dst, const float *src, int64_t rows, int64_t n, float (*shift)(float)) {
    em_rows_f32(0, dst, src, rows, n, shift, shift);
}

static inline void em_log_softmax_rows_f32(float *dst, const float *src, int64_t rows, int64_t n,
                                           float (*shift)(float), float (*off)(float)) {
    em_rows_f32(1, dst, src, rows, n, shift, off);
}
