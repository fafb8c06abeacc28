/* Tiled online-softmax attention (see native/emit/attention.py), for one element type.
   Instantiated per element type by the defines in front of it: ELT (float or double), EM_T(name)
   (name##_f32 or name##_f64) and EM_ATT_EXP (the exponential of that type); the emitter
   #undefs them after.

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

typedef ELT EM_T(em_attn_v) __attribute__((vector_size(32), aligned(sizeof(ELT))));  /* unaligned loads ok */
#define EM_ATT_VW ((int64_t)(32 / sizeof(ELT)))

/* s[r][0..nkr) = q_r . kt[:, j] for the rows r < nr of qr (rows clamped to valid ones; nr a
   multiple of 4, nkr of two vectors) */
static inline __attribute__((always_inline)) void EM_T(em_attn_scores)(const ELT *const *qr, const ELT *kt,
                                                                      ELT *s, const int64_t D, int64_t nr,
                                                                      int64_t nkr) {
    const int64_t VW = EM_ATT_VW;
    for (int64_t r0 = 0; r0 < nr; r0 += 4) {
        for (int64_t j0 = 0; j0 < nkr; j0 += 2 * VW) {
            EM_T(em_attn_v) a00 = {0}, a01 = {0}, a10 = {0}, a11 = {0}, a20 = {0}, a21 = {0}, a30 = {0}, a31 = {0};
            const ELT *q0 = qr[r0], *q1 = qr[r0 + 1], *q2 = qr[r0 + 2], *q3 = qr[r0 + 3];
            for (int64_t d = 0; d < D; ++d) {
                const EM_T(em_attn_v) k0 = *(const EM_T(em_attn_v) *)(kt + d * EM_ATT_BK + j0);
                const EM_T(em_attn_v) k1 = *(const EM_T(em_attn_v) *)(kt + d * EM_ATT_BK + j0 + VW);
                const ELT x0 = q0[d], x1 = q1[d], x2 = q2[d], x3 = q3[d];
                a00 += x0 * k0; a01 += x0 * k1; a10 += x1 * k0; a11 += x1 * k1;
                a20 += x2 * k0; a21 += x2 * k1; a30 += x3 * k0; a31 += x3 * k1;
            }
            ELT *o = s + r0 * EM_ATT_BK + j0;
            *(EM_T(em_attn_v) *)o = a00; *(EM_T(em_attn_v) *)(o + VW) = a01;
            *(EM_T(em_attn_v) *)(o + EM_ATT_BK) = a10; *(EM_T(em_attn_v) *)(o + EM_ATT_BK + VW) = a11;
            *(EM_T(em_attn_v) *)(o + 2 * EM_ATT_BK) = a20; *(EM_T(em_attn_v) *)(o + 2 * EM_ATT_BK + VW) = a21;
            *(EM_T(em_attn_v) *)(o + 3 * EM_ATT_BK) = a30; *(EM_T(em_attn_v) *)(o + 3 * EM_ATT_BK + VW) = a31;
        }
    }
}

/* acc[r][0..DV) += sum_j<nk p[r][j] v[j][:] for the rows r < nr (a multiple of 4) */
static inline __attribute__((always_inline)) void EM_T(em_attn_pv)(const ELT *p, const ELT *v, int64_t nk,
                                                                  ELT *acc, const int64_t DV, int64_t nr) {
    const int64_t VW = EM_ATT_VW;
    for (int64_t r0 = 0; r0 < nr; r0 += 4) {
        int64_t x0 = 0;
        for (; x0 + 2 * VW <= DV; x0 += 2 * VW) {
            ELT *c0 = acc + r0 * DV + x0;
            EM_T(em_attn_v) a00 = *(EM_T(em_attn_v) *)c0, a01 = *(EM_T(em_attn_v) *)(c0 + VW);
            EM_T(em_attn_v) a10 = *(EM_T(em_attn_v) *)(c0 + DV), a11 = *(EM_T(em_attn_v) *)(c0 + DV + VW);
            EM_T(em_attn_v) a20 = *(EM_T(em_attn_v) *)(c0 + 2 * DV), a21 = *(EM_T(em_attn_v) *)(c0 + 2 * DV + VW);
            EM_T(em_attn_v) a30 = *(EM_T(em_attn_v) *)(c0 + 3 * DV), a31 = *(EM_T(em_attn_v) *)(c0 + 3 * DV + VW);
            const ELT *pr = p + r0 * EM_ATT_BK;
            for (int64_t j = 0; j < nk; ++j) {
                const EM_T(em_attn_v) v0 = *(const EM_T(em_attn_v) *)(v + j * DV + x0);
                const EM_T(em_attn_v) v1 = *(const EM_T(em_attn_v) *)(v + j * DV + x0 + VW);
                const ELT p0 = pr[j], p1 = pr[EM_ATT_BK + j], p2 = pr[2 * EM_ATT_BK + j], p3 = pr[3 * EM_ATT_BK + j];
                a00 += p0 * v0; a01 += p0 * v1; a10 += p1 * v0; a11 += p1 * v1;
                a20 += p2 * v0; a21 += p2 * v1; a30 += p3 * v0; a31 += p3 * v1;
            }
            *(EM_T(em_attn_v) *)c0 = a00; *(EM_T(em_attn_v) *)(c0 + VW) = a01;
            *(EM_T(em_attn_v) *)(c0 + DV) = a10; *(EM_T(em_attn_v) *)(c0 + DV + VW) = a11;
            *(EM_T(em_attn_v) *)(c0 + 2 * DV) = a20; *(EM_T(em_attn_v) *)(c0 + 2 * DV + VW) = a21;
            *(EM_T(em_attn_v) *)(c0 + 3 * DV) = a30; *(EM_T(em_attn_v) *)(c0 + 3 * DV + VW) = a31;
        }
        for (int64_t r = r0; r < r0 + 4; ++r)  /* the columns past the last whole pair of vectors */
            for (int64_t j = 0; j < nk; ++j) {
                const ELT pj = p[r * EM_ATT_BK + j];
                for (int64_t x = x0; x < DV; ++x) acc[r * DV + x] += pj * v[j * DV + x];
            }
    }
}

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
    const int64_t nr = (i1 - i0 + 3) / 4 * 4;  /* rows computed: the block's, rounded up to 4 */
    for (int64_t x = 0; x < nr * DV; ++x) acc[x] = 0;
    int64_t kend = S;
    if (c->causal) {
        const int64_t lim = i1 - 1 + c->coff + 1;  /* keys the last query of the block sees */
        kend = lim < 0 ? 0 : (lim < S ? lim : S);
    }
    for (int64_t k0 = 0; k0 < kend; k0 += EM_ATT_BK) {
        const int64_t nk = kend - k0 < EM_ATT_BK ? kend - k0 : EM_ATT_BK;
        const int64_t nkr = (nk + 2 * EM_ATT_VW - 1) / (2 * EM_ATT_VW) * (2 * EM_ATT_VW);
        EM_T(em_attn_scores)(qr, kts + (k0 / EM_ATT_BK) * D * EM_ATT_BK, s, D, nr, nkr);
        int any = 0;
        for (int64_t r = 0; r < nr; ++r) {
            const int64_t i = i0 + r;
            ELT *sr = s + r * EM_ATT_BK;
            int64_t nv = i < i1 ? nk : 0;
            if (c->causal) {
                const int64_t last = i + c->coff - k0;  /* the last key of this block row i sees */
                if (last + 1 < nv) nv = last + 1 < 0 ? 0 : last + 1;
            }
            const ELT sc = c->scale;
            #pragma omp simd
            for (int64_t j = 0; j < nkr; ++j) sr[j] = j < nv ? sr[j] * sc : NEG;
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
