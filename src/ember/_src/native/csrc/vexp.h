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
   tests/native/test_row_kernels.py checks every 509th bit pattern, -inf, +inf, NaN, subnormal
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

/* Row softmax of `rows` contiguous float32 rows of length n (row r at src + r n, its result at
   dst + r n; dst may be src): per row m = the row maximum (NaN when the row holds a NaN), c =
   shift(m), e_j = exp(x_j - c) by em_exp_row_f32's exp and its sum s in its order, then
   dst_j = e_j * (1 / s). The results equal a row kernel computing the same formula through
   em_exp_row_f32 and a product with the reciprocal, bit for bit (tests/native/test_row_kernels.py),
   and do not depend on how the rows are split among calls.

   The AVX-512F variant runs the three passes of neighbouring rows in one loop: while it
   evaluates row r's exp (bound by the FMA units), it also takes row r+1's maximum and scales row
   r-1 by its reciprocal sum, so the memory traffic of those two passes overlaps the arithmetic
   (1024x1024 on one AVX-512 core: about 240 us for the three-loop form's 290, measured in C). */
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

static inline void em_row_scale_f32(float *dst, float q, int64_t n) {
    #pragma omp simd
    for (int64_t j = 0; j < n; ++j) dst[j] *= q;
}

#if defined(__AVX512F__)
/* one row of the pipeline: exp of `cur` (into `out`, its sum returned, in em_exp_row_f32's order),
   the maximum of `next` (when not NULL) into *next_max, `prev` scaled by qprev (when not NULL) */
static inline float em_softmax_step_f32(float *out, const float *cur, float c, const float *next,
                                        float *next_max, float *prev, float qprev, int64_t n) {
    const __m512 cv = _mm512_set1_ps(c), qv = _mm512_set1_ps(qprev);
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    __m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0;
    __mmask16 nan = 0;
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) {
        __m512 a = em_vexpf16(_mm512_sub_ps(_mm512_loadu_ps(cur + j), cv));
        __m512 b = em_vexpf16(_mm512_sub_ps(_mm512_loadu_ps(cur + j + 16), cv));
        if (prev) {  /* before the stores: out may be the row after prev, never prev itself */
            _mm512_storeu_ps(prev + j, _mm512_mul_ps(_mm512_loadu_ps(prev + j), qv));
            _mm512_storeu_ps(prev + j + 16, _mm512_mul_ps(_mm512_loadu_ps(prev + j + 16), qv));
        }
        if (next) {  /* vmaxps returns its second operand for a NaN: NaNs are flagged apart */
            __m512 u = _mm512_loadu_ps(next + j), v = _mm512_loadu_ps(next + j + 16);
            m0 = _mm512_max_ps(u, m0);
            m1 = _mm512_max_ps(v, m1);
            nan |= _mm512_cmp_ps_mask(u, v, _CMP_UNORD_Q);
        }
        _mm512_storeu_ps(out + j, a);
        _mm512_storeu_ps(out + j + 16, b);
        s0 = _mm512_add_ps(s0, a);
        s1 = _mm512_add_ps(s1, b);
    }
    for (; j < n; j += 16) {
        __mmask16 m = n - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - j)) - 1u);
        __m512 a = _mm512_maskz_mov_ps(m, em_vexpf16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, cur + j), cv)));
        if (prev)
            _mm512_mask_storeu_ps(prev + j, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, prev + j), qv));
        if (next) {
            __m512 u = _mm512_maskz_loadu_ps(m, next + j);
            m0 = _mm512_mask_max_ps(m0, m, u, m0);
            nan |= _mm512_mask_cmp_ps_mask(m, u, u, _CMP_UNORD_Q);
        }
        _mm512_mask_storeu_ps(out + j, m, a);
        s0 = _mm512_add_ps(s0, a);
    }
    if (next)
        *next_max = nan ? (float)NAN : _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

static void em_softmax_rows_f32(float *dst, const float *src, int64_t rows, int64_t n, float (*shift)(float)) {
    if (rows <= 0 || n <= 0)
        return;
    float m = em_row_max_f32(src, n), q = 0.0f;
    for (int64_t r = 0; r < rows; ++r) {
        const float *next = r + 1 < rows ? src + (r + 1) * n : (const float *)0;
        float *prev = r > 0 ? dst + (r - 1) * n : (float *)0;
        float m_next = 0.0f;
        float s = em_softmax_step_f32(dst + r * n, src + r * n, shift(m), next, &m_next, prev, q, n);
        q = 1.0f / s;
        m = m_next;
    }
    em_row_scale_f32(dst + (rows - 1) * n, q, n);
}
#else
static void em_softmax_rows_f32(float *dst, const float *src, int64_t rows, int64_t n, float (*shift)(float)) {
    for (int64_t r = 0; r < rows && n > 0; ++r) {
        float s = em_exp_row_f32(dst + r * n, src + r * n, shift(em_row_max_f32(src + r * n, n)), n);
        em_row_scale_f32(dst + r * n, 1.0f / s, n);
    }
}
#endif
