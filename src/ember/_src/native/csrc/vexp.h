/* Vectorized float32 exp over a row: em_exp_row_f32(dst, src, c, n) sets dst[j] = exp(src[j] - c)
   (the difference rounded as float32, as the C expression would) and returns the sum of the n results (accumulated per vector lane in a fixed order, then the lanes
   added: the same value on every call and thread for the same row).

   The same algorithm as the scalar em_expf of the generated prelude (native/emit/c_ops.py), with the
   same operations in the same order, so a value is bit-identical whichever path computes it (a
   row kernel here, a map kernel through em_expf): Cody-Waite reduction x = k ln2 + r with k from
   the 1.5*2^23 shifter, k clamped at 128 (x > 89 and +inf overflow to inf), the degree-6
   polynomial, the product p 2^k rounded once (so subnormal results round once), 0 for x < -104,
   NaN propagated. Error <= 2 ulp against float64 exp over the whole float32 range
   (tests/native/test_row_kernels.py measures it, including -inf, +inf, NaN, subnormal results and
   the overflow/underflow thresholds). With c = 0 it is exp(src[j]) (x - 0 is x for every x).

   Variants, chosen by the CPU the program is compiled for (the compile cache's key records it):
   AVX-512F (16 lanes: the 2^k step is one vscalefps, and the row's tail is a masked load/store),
   AVX2+FMA (8 lanes: 2^k as two exponent-field products, as em_expf; the tail goes through a
   padded 8-lane block so every element takes the vector path), else the scalar em_expf. src and
   dst may be the same buffer. */
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

#if defined(__AVX512F__)
static inline __m512 em_vexpf16(__m512 x) {
    const __m512 sh = _mm512_set1_ps(12582912.0f);
    __m512 k = _mm512_sub_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), sh), sh);
    k = _mm512_min_ps(k, _mm512_set1_ps(128.0f));
    __m512 r = _mm512_fmadd_ps(k, _mm512_set1_ps(-0.693359375f), x);
    r = _mm512_fmadd_ps(k, _mm512_set1_ps(2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    /* lanes with x < -104 are 0; the others p 2^k, one rounding (NaN x: k and p are NaN) */
    __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-104.0f), _CMP_NLT_UQ);
    return _mm512_maskz_scalef_ps(keep, p, k);
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
    __m256i ki = _mm256_sub_epi32(
        _mm256_castps_si256(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), sh)),
        _mm256_set1_epi32(0x4B400000));
    ki = _mm256_min_epi32(ki, _mm256_set1_epi32(128));
    __m256 k = _mm256_cvtepi32_ps(ki);
    __m256 r = _mm256_fmadd_ps(k, _mm256_set1_ps(-0.693359375f), x);
    r = _mm256_fmadd_ps(k, _mm256_set1_ps(2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    __m256i k1 = _mm256_srai_epi32(ki, 1), k2 = _mm256_sub_epi32(ki, k1);
    const __m256i bias = _mm256_set1_epi32(127);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
    __m256 res = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    __m256 low = _mm256_cmp_ps(x, _mm256_set1_ps(-104.0f), _CMP_LT_OQ);
    return _mm256_andnot_ps(low, res);
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
static float em_exp_row_f32(float *dst, const float *src, float c, int64_t n) {
    float s = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
        dst[j] = em_expf(src[j] - c);
        s += dst[j];
    }
    return s;
}
#endif
