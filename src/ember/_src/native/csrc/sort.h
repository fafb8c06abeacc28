/* Sorting helpers of the sort call step (native/emit/calls.py), as sections a program includes
   one at a time: the bit patterns of floats (keys of the radix sort) and a stable LSD radix sort,
   instantiated by the defines in front of it: EM_K (the unsigned key type) and EM_RADIX (its
   name). */
/*@ bits */
static inline uint32_t em_bits32(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline uint64_t em_bits64(double f) { uint64_t u; memcpy(&u, &f, 8); return u; }
/*@ radix */
/* Stable LSD radix sort (8-bit digits) of keys ka with row indices ia (0..n-1 on entry); digits
   on which all keys agree are skipped. Returns the sorted index array (ia or ib). */
static int64_t *EM_RADIX(EM_K *ka, EM_K *kb, int64_t *ia, int64_t *ib, int64_t n) {
    enum { NB = (int)sizeof(EM_K) };
    int64_t cnt[NB][256];
    memset(cnt, 0, sizeof(cnt));
    for (int64_t i = 0; i < n; ++i)
        for (int b = 0; b < NB; ++b) cnt[b][(ka[i] >> (8 * b)) & 255]++;
    for (int b = 0; b < NB; ++b) {
        int64_t *c = cnt[b], off = 0;
        if (c[(ka[0] >> (8 * b)) & 255] == n) continue;
        for (int d = 0; d < 256; ++d) { int64_t t = c[d]; c[d] = off; off += t; }
        for (int64_t i = 0; i < n; ++i) {
            int64_t p = c[(ka[i] >> (8 * b)) & 255]++;
            kb[p] = ka[i]; ib[p] = ia[i];
        }
        EM_K *tk = ka; ka = kb; kb = tk;
        int64_t *ti = ia; ia = ib; ib = ti;
    }
    return ia;
}
