/* FFT plans for a length known only when the program runs (a symbolic size; see native/emit/fft.py).

   The static path of fft.py factors each length in Python and keeps its tables in block-scope
   static storage of the call site. A runtime length is factored here instead (the same rules:
   radix 4 while four divides it, then primes ascending; a prime factor above EM_FFT_PMAX switches to
   Bluestein with the least 2-3-5-smooth convolution length >= 2n - 1), and its tables live in a
   per-program cache of EM_FFT_SLOTS entries keyed by (length, direction, real split), each table
   allocated once with malloc when its length is first seen. Lookups and fills are lock-free: a
   slot goes empty -> being filled -> ready by atomic compare-and-swap, a reader only uses ready
   slots, and a call that finds no ready slot for its key and no free slot (or loses the race for
   one, or cannot allocate) builds the tables in its own workspace for this call. */
#include <stdlib.h>
#define EM_FFT_SLOTS 64
#define EM_FFT_MAXFAC 128
typedef struct {
    int state;  /* 0 empty, 1 being filled, 2 ready, 3 unusable (allocation failed) */
    int inv, half;
    int64_t n, m2;
    int32_t fac[EM_FFT_MAXFAC], fac2[EM_FFT_MAXFAC];
    em_z *tab;
} em_fft_slot;
static em_fft_slot em_fft_slots[EM_FFT_SLOTS];
/* free every cached table (ember_fft_release: no transform is running) */
static void em_fft_slots_free(void) {
    for (int i = 0; i < EM_FFT_SLOTS; ++i) {
        em_fft_slot *s = &em_fft_slots[i];
        if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) == 2) {
            free(s->tab);
            s->tab = 0;
            __atomic_sub_fetch(&em_fft_live, 1, __ATOMIC_ACQ_REL);
        }
        __atomic_store_n(&s->state, 0, __ATOMIC_RELEASE);
    }
}
__attribute__((constructor)) static void em_fft_slots_init(void) { em_fft_on_release(em_fft_slots_free); }
/* the radices of n (4s while four divides it, then primes ascending; [1] for n = 1) */
static void em_fft_factor(int64_t n, int32_t *out) {
    int k = 0;
    while (n % 4 == 0) { out[k++] = 4; n /= 4; }
    for (int64_t p = 2; p * p <= n; ++p)
        while (n % p == 0) { out[k++] = (int32_t)p; n /= p; }
    if (n > 1 || k == 0) out[k++] = (int32_t)n;
}
/* the least length >= n whose prime factors are 2, 3 and 5 */
static int64_t em_fft_smooth(int64_t n) {
    int64_t best = 1;
    while (best < n) best *= 2;
    for (int64_t p5 = 1; p5 < best; p5 *= 5)
        for (int64_t p35 = p5; p35 < best; p35 *= 3) {
            int64_t m = p35;
            while (m < n) m *= 2;
            if (m < best) best = m;
        }
    return best;
}
/* factors of n (direct) or, when a prime factor exceeds EM_FFT_PMAX, Bluestein's length m2 and its
   factors; returns m2 (0: direct) */
static int64_t em_fft_plan_factors(int64_t n, int32_t *fac, int32_t *fac2) {
    em_fft_factor(n, fac);
    int32_t big = 0;
    for (int k = 0; k < EM_FFT_MAXFAC && fac[k]; ++k) if (fac[k] > big) big = fac[k];
    if (big <= EM_FFT_PMAX) return 0;
    const int64_t m2 = em_fft_smooth(2 * n - 1);
    em_fft_factor(m2, fac2);
    return m2;
}
static int64_t em_fft_table_elems(int64_t n, int64_t m2, int half) {
    return (m2 ? n + 2 * m2 : n) + (half ? n + 1 : 0);
}
/* Set up a plan of runtime length n (as em_fft_make). lfac: 2 * EM_FFT_MAXFAC int32 of the caller's
   for the factors when the cache cannot be used; wtab: workspace for the tables then (at most
   em_fft_table_elems entries); scratch: 2 * m2 em_vz (m2 < 4n). */
static void em_fft_make_rt(em_fft_plan *p, int64_t n, int inv, int half, int32_t *lfac, em_z *wtab,
                           em_vz *scratch) {
    p->n = n; p->inv = inv;
    p->a = scratch;
    for (int i = 0; i < EM_FFT_SLOTS; ++i) {
        em_fft_slot *s = &em_fft_slots[i];
        int st = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE), zero = 0;
        if (st == 2 && s->n == n && s->inv == inv && s->half == half) {
            p->m2 = s->m2; p->fac = s->fac; p->fac2 = s->fac2; p->c = scratch + s->m2;
            em_fft_tables(p, s->tab, half, 0);
            return;
        }
        if (st != 0) continue;
        if (!__atomic_compare_exchange_n(&s->state, &zero, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            continue;  /* another thread took it; its key may be ours, a later slot can hold a copy */
        memset(s->fac, 0, sizeof s->fac); memset(s->fac2, 0, sizeof s->fac2);
        s->n = n; s->inv = inv; s->half = half;
        s->m2 = em_fft_plan_factors(n, s->fac, s->fac2);
        s->tab = (em_z *)malloc((size_t)em_fft_table_elems(n, s->m2, half) * sizeof(em_z));
        if (!s->tab) { __atomic_store_n(&s->state, 3, __ATOMIC_RELEASE); break; }
        __atomic_add_fetch(&em_fft_live, 1, __ATOMIC_ACQ_REL);
        p->m2 = s->m2; p->fac = s->fac; p->fac2 = s->fac2; p->c = scratch + s->m2;
        em_fft_tables(p, s->tab, half, 1);
        __atomic_store_n(&s->state, 2, __ATOMIC_RELEASE);
        return;
    }
    memset(lfac, 0, 2 * EM_FFT_MAXFAC * sizeof(int32_t));
    p->m2 = em_fft_plan_factors(n, lfac, lfac + EM_FFT_MAXFAC);
    p->fac = lfac; p->fac2 = lfac + EM_FFT_MAXFAC; p->c = scratch + p->m2;
    em_fft_tables(p, wtab, half, 1);
}
