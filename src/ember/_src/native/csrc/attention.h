/* Tiled online-softmax attention (see native/emit/attention.py), for one element type.
   Instantiated per element type by the defines in front of it: ELT (float or double), EM_T(name)
   (name##_f32 or name##_f64), EM_ATT_EXP (the exponential of that type) and EM_ATT_FMA512 (the
   AVX-512 fused multiply-add builtin of that type's 64-byte vectors); the emitter #undefs them
   after. Where the target has AVX-512 the vectors are 64 bytes and the products fused
   multiply-adds, else 32 bytes with a multiply and an add (EM_ATT_VBYTES, EM_ATT_VFMA below).

   A first parallel pass packs K transposed, per (batch, key head, block of EM_ATT_BK keys), into the
   step's workspace (kt: D x EM_ATT_BK per block, zero past S), so the scores of a query are vector
   loops over keys. Then one task is one (batch, head, block of EM_ATT_BQ queries). The task walks
   the keys in blocks: it computes the scaled scores, applies the bias, the bool mask and the causal limit (masked
   scores are -inf), and folds the block into the running row maximum m, row sum l and output
   accumulator acc (acc and l are rescaled by exp(m_old - m_new) when the maximum grows). Key
   blocks wholly above a causal diagonal are never visited. Only the task's tiles live on the
   stack: nothing of size L x S exists. A row that attended nothing (l == 0) gets, by `empty`:
   0 zeros (PyTorch), 1 the mean of all values (masked logits a finite constant, as JAX), 2 NaN
   (masked logits -inf before a plain softmax). */

#ifndef EM_ATT_BQ
#define EM_ATT_BQ 32
#define EM_ATT_BK 64
#endif

typedef struct {
    const ELT *q, *k, *v, *bias;
    const unsigned char *mask;
    ELT *o, *kt;                        /* kt: the packed K^T blocks (workspace) */
    int64_t H, G, L, S, nqb, nkb;       /* query heads, query heads per kv head, sizes, query / key blocks */
    int64_t qb_, qh_, kb_, kh_, vb_, vh_, ob_, oh_;  /* batch and head strides (rows contiguous) */
    int64_t bs[4], ms[4];               /* bias / mask strides per dim (0: broadcast) */
    ELT scale;
    int causal, empty;
    int64_t coff;                       /* causal: query i sees keys j <= i + coff */
} EM_T(em_attn_ctx);

#if defined(__AVX512F__)
#define EM_ATT_VBYTES 64
#define EM_ATT_VFMA(a, b, c) EM_ATT_FMA512((a), (b), (c))
#else
#define EM_ATT_VBYTES 32
#define EM_ATT_VFMA(a, b, c) ((a) * (b) + (c))
#endif
typedef ELT EM_T(em_attn_v) __attribute__((vector_size(EM_ATT_VBYTES), aligned(sizeof(ELT))));  /* unaligned ok */
#define EM_ATT_VW ((int64_t)(EM_ATT_VBYTES / sizeof(ELT)))
/* Register tiles: scores 4 rows x EM_ATT_SNV vectors of keys, P V EM_ATT_PR rows x 2 vectors of
   values. AVX-512's 32 registers hold 4 x 4 and 8 x 2 accumulators (each step one broadcast per
   row and one load per vector: on Zen 4 the 4 x 2 tiles of 32-byte vectors ran 12 loads per 8
   products and the product loops at 70% of the FMA peak), AVX2's 16 hold 4 x 2. */
#if EM_ATT_VBYTES == 64
#define EM_ATT_SNV 4
#define EM_ATT_PR 8
#else
#define EM_ATT_SNV 2
#define EM_ATT_PR 4
#endif

/* x in every lane (x - 0 is x for every x, signed zeros and NaN included: one broadcast) */
static inline __attribute__((always_inline)) EM_T(em_attn_v) EM_T(em_attn_bc)(const ELT x) {
    const EM_T(em_attn_v) zero = {0};
    return x - zero;
}

/* s[r][j0 .. j0 + NU VW) = (q_r . kt[:, j]) * scale for the 4 rows from r0 */
#define EM_ATT_SCORE_TILE(NU) do { \
    EM_T(em_attn_v) a[4][NU]; \
    _Pragma("GCC unroll 4") for (int r = 0; r < 4; ++r) \
        _Pragma("GCC unroll 4") for (int u = 0; u < (NU); ++u) a[r][u] = EM_T(em_attn_bc)(0); \
    for (int64_t d = 0; d < D; ++d) { \
        EM_T(em_attn_v) kv[NU]; \
        _Pragma("GCC unroll 4") for (int u = 0; u < (NU); ++u) \
            kv[u] = *(const EM_T(em_attn_v) *)(kt + d * EM_ATT_BK + j0 + u * VW); \
        _Pragma("GCC unroll 4") for (int r = 0; r < 4; ++r) { \
            const EM_T(em_attn_v) x = EM_T(em_attn_bc)(qr[r0 + r][d]); \
            _Pragma("GCC unroll 4") for (int u = 0; u < (NU); ++u) a[r][u] = EM_ATT_VFMA(x, kv[u], a[r][u]); \
        } \
    } \
    _Pragma("GCC unroll 4") for (int r = 0; r < 4; ++r) \
        _Pragma("GCC unroll 4") for (int u = 0; u < (NU); ++u) \
            *(EM_T(em_attn_v) *)(s + (r0 + r) * EM_ATT_BK + j0 + u * VW) = a[r][u] * sc; \
    } while (0)

/* s[r][0..nkr) = (q_r . kt[:, j]) * scale for the rows r < nr of qr (rows clamped to valid ones;
   nr a multiple of 4, nkr of a vector): tiles of EM_ATT_SNV vectors of keys, then of one */
static inline __attribute__((always_inline)) void EM_T(em_attn_scores)(const ELT *const *qr, const ELT *kt,
                                                                      ELT *s, const int64_t D, int64_t nr,
                                                                      int64_t nkr, const ELT scale) {
    const int64_t VW = EM_ATT_VW;
    const EM_T(em_attn_v) sc = EM_T(em_attn_bc)(scale);
    for (int64_t r0 = 0; r0 < nr; r0 += 4) {
        int64_t j0 = 0;
        for (; j0 + EM_ATT_SNV * VW <= nkr; j0 += EM_ATT_SNV * VW) EM_ATT_SCORE_TILE(EM_ATT_SNV);
        for (; j0 < nkr; j0 += VW) EM_ATT_SCORE_TILE(1);
    }
}
#undef EM_ATT_SCORE_TILE

/* acc[r][x0 .. x0 + NX VW) += sum_j<nk p[r][j] v[j][x0 ..] for the EM_ATT_PR rows from r0 */
#define EM_ATT_PV_TILE(NX) do { \
    EM_T(em_attn_v) a[EM_ATT_PR][NX]; \
    _Pragma("GCC unroll 8") for (int r = 0; r < EM_ATT_PR; ++r) \
        _Pragma("GCC unroll 2") for (int u = 0; u < (NX); ++u) \
            a[r][u] = *(EM_T(em_attn_v) *)(acc + (r0 + r) * DV + x0 + u * VW); \
    for (int64_t j = 0; j < nk; ++j) { \
        EM_T(em_attn_v) vv[NX]; \
        _Pragma("GCC unroll 2") for (int u = 0; u < (NX); ++u) \
            vv[u] = *(const EM_T(em_attn_v) *)(v + j * DV + x0 + u * VW); \
        _Pragma("GCC unroll 8") for (int r = 0; r < EM_ATT_PR; ++r) { \
            const EM_T(em_attn_v) pj = EM_T(em_attn_bc)(pr[r * EM_ATT_BK + j]); \
            _Pragma("GCC unroll 2") for (int u = 0; u < (NX); ++u) a[r][u] = EM_ATT_VFMA(pj, vv[u], a[r][u]); \
        } \
    } \
    _Pragma("GCC unroll 8") for (int r = 0; r < EM_ATT_PR; ++r) \
        _Pragma("GCC unroll 2") for (int u = 0; u < (NX); ++u) \
            *(EM_T(em_attn_v) *)(acc + (r0 + r) * DV + x0 + u * VW) = a[r][u]; \
    } while (0)

/* acc[r][0..DV) += sum_j<nk p[r][j] v[j][:] for the rows r < nr (a multiple of EM_ATT_PR) */
static inline __attribute__((always_inline)) void EM_T(em_attn_pv)(const ELT *p, const ELT *v, int64_t nk,
                                                                  ELT *acc, const int64_t DV, int64_t nr) {
    const int64_t VW = EM_ATT_VW;
    for (int64_t r0 = 0; r0 < nr; r0 += EM_ATT_PR) {
        const ELT *pr = p + r0 * EM_ATT_BK;
        int64_t x0 = 0;
        for (; x0 + 2 * VW <= DV; x0 += 2 * VW) EM_ATT_PV_TILE(2);
        for (; x0 + VW <= DV; x0 += VW) EM_ATT_PV_TILE(1);
        for (int64_t r = r0; r < r0 + EM_ATT_PR; ++r)  /* the columns past the last whole vector */
            for (int64_t j = 0; j < nk; ++j) {
                const ELT pj = p[r * EM_ATT_BK + j];
                for (int64_t x = x0; x < DV; ++x) acc[r * DV + x] += pj * v[j * DV + x];
            }
    }
}
#undef EM_ATT_PV_TILE

/* pack the K^T block t = (b * Hk + kvh) * nkb + kb */
static inline __attribute__((always_inline)) void EM_T(em_attn_pack)(const EM_T(em_attn_ctx) *c, int64_t t,
                                                                    const int64_t D) {
    const int64_t kb = t % c->nkb, bh = t / c->nkb, Hk = c->H / c->G;
    const ELT *k = c->k + (bh / Hk) * c->kb_ + (bh % Hk) * c->kh_;
    ELT *kt = c->kt + t * D * EM_ATT_BK;
    const int64_t k0 = kb * EM_ATT_BK, nk = c->S - k0 < EM_ATT_BK ? c->S - k0 : EM_ATT_BK;
    for (int64_t j = 0; j < nk; ++j) {
        const ELT *kj = k + (k0 + j) * D;
        for (int64_t d = 0; d < D; ++d) kt[d * EM_ATT_BK + j] = kj[d];
    }
    for (int64_t j = nk; j < EM_ATT_BK; ++j)
        for (int64_t d = 0; d < D; ++d) kt[d * EM_ATT_BK + j] = 0;
}

static inline __attribute__((always_inline)) void EM_T(em_attn_task)(const EM_T(em_attn_ctx) *c, int64_t t,
                                                                    const int64_t D, const int64_t DV) {
    const int64_t per_b = c->H * c->nqb;
    const int64_t b = t / per_b, h = (t % per_b) / c->nqb, qb = t % c->nqb;
    const int64_t i0 = qb * EM_ATT_BQ, i1 = i0 + EM_ATT_BQ < c->L ? i0 + EM_ATT_BQ : c->L;
    const int64_t kvh = h / c->G, S = c->S;
    const ELT *q = c->q + b * c->qb_ + h * c->qh_;
    const ELT *kts = c->kt + (b * (c->H / c->G) + kvh) * c->nkb * D * EM_ATT_BK;
    const ELT *v = c->v + b * c->vb_ + kvh * c->vh_;
    ELT *o = c->o + b * c->ob_ + h * c->oh_;
    const ELT NEG = -__builtin_inf();
    ELT acc[EM_ATT_BQ * DV] __attribute__((aligned(64)));
    ELT m[EM_ATT_BQ], l[EM_ATT_BQ];
    ELT s[EM_ATT_BQ * EM_ATT_BK] __attribute__((aligned(64)));
    const ELT *qr[EM_ATT_BQ];
    for (int64_t r = 0; r < EM_ATT_BQ; ++r) {
        m[r] = NEG; l[r] = 0;
        qr[r] = q + (i0 + r < i1 ? i0 + r : i1 - 1) * D;
    }
    /* rows computed: the block's, rounded up to a whole P V tile (the extra rows repeat the last) */
    const int64_t nr = (i1 - i0 + EM_ATT_PR - 1) / EM_ATT_PR * EM_ATT_PR;
    for (int64_t x = 0; x < nr * DV; ++x) acc[x] = 0;
    int64_t kend = S;
    if (c->causal) {
        const int64_t lim = i1 - 1 + c->coff + 1;  /* keys the last query of the block sees */
        kend = lim < 0 ? 0 : (lim < S ? lim : S);
    }
    for (int64_t k0 = 0; k0 < kend; k0 += EM_ATT_BK) {
        const int64_t nk = kend - k0 < EM_ATT_BK ? kend - k0 : EM_ATT_BK;
        const int64_t nkr = (nk + EM_ATT_VW - 1) / EM_ATT_VW * EM_ATT_VW;
        EM_T(em_attn_scores)(qr, kts + (k0 / EM_ATT_BK) * D * EM_ATT_BK, s, D, nr, nkr, c->scale);
        int any = 0;
        for (int64_t r = 0; r < nr; ++r) {
            const int64_t i = i0 + r;
            ELT *sr = s + r * EM_ATT_BK;
            int64_t nv = i < i1 ? nk : 0;
            if (c->causal) {
                const int64_t last = i + c->coff - k0;  /* the last key of this block row i sees */
                if (last + 1 < nv) nv = last + 1 < 0 ? 0 : last + 1;
            }
            for (int64_t j = nv; j < nkr; ++j) sr[j] = NEG;  /* the scores came scaled */
            if (c->bias) {
                const ELT *bp = c->bias + b * c->bs[0] + h * c->bs[1] + i * c->bs[2] + k0 * c->bs[3];
                const int64_t st = c->bs[3];
                for (int64_t j = 0; j < nv; ++j) sr[j] += bp[j * st];
            }
            if (c->mask) {
                const unsigned char *mp = c->mask + b * c->ms[0] + h * c->ms[1] + i * c->ms[2] + k0 * c->ms[3];
                const int64_t st = c->ms[3];
                for (int64_t j = 0; j < nv; ++j) if (!mp[j * st]) sr[j] = NEG;
            }
            ELT mx = NEG;
            #pragma omp simd reduction(max:mx)
            for (int64_t j = 0; j < nkr; ++j) mx = sr[j] > mx ? sr[j] : mx;
            if (mx == NEG) {  /* nothing attended in this block: the row adds nothing */
                for (int64_t j = 0; j < nkr; ++j) sr[j] = 0;
                continue;
            }
            any = 1;
            const ELT mnew = mx > m[r] ? mx : m[r];
            const ELT alpha = EM_ATT_EXP(m[r] - mnew);
            ELT sum = 0;
            #pragma omp simd reduction(+:sum)
            for (int64_t j = 0; j < nkr; ++j) {
                const ELT p = EM_ATT_EXP(sr[j] - mnew);
                sr[j] = p;
                sum += p;
            }
            l[r] = l[r] * alpha + sum;
            m[r] = mnew;
            if (alpha != 1) {
                ELT *ar = acc + r * DV;
                #pragma omp simd
                for (int64_t x = 0; x < DV; ++x) ar[x] *= alpha;
            }
        }
        if (any) EM_T(em_attn_pv)(s, v + k0 * DV, nk, acc, DV, nr);
    }
    for (int64_t r = 0; r < i1 - i0; ++r) {
        ELT *orow = o + (i0 + r) * DV;
        const ELT *ar = acc + r * DV;
        if (l[r] > 0) {
            const ELT inv = 1 / l[r];
            for (int64_t x = 0; x < DV; ++x) orow[x] = ar[x] * inv;
        } else if (c->empty == 2 && S > 0) {  /* 0 / 0 */
            for (int64_t x = 0; x < DV; ++x) orow[x] = __builtin_nan("");
        } else if (c->empty == 1 && S > 0) {  /* every logit equal: the mean of all values */
            for (int64_t x = 0; x < DV; ++x) orow[x] = 0;
            for (int64_t j = 0; j < S; ++j)
                for (int64_t x = 0; x < DV; ++x) orow[x] += v[j * DV + x];
            for (int64_t x = 0; x < DV; ++x) orow[x] /= (ELT)S;
        } else {
            for (int64_t x = 0; x < DV; ++x) orow[x] = 0;
        }
    }
}
#undef EM_ATT_VW
#undef EM_ATT_SNV
#undef EM_ATT_PR
#undef EM_ATT_VFMA
#undef EM_ATT_VBYTES
