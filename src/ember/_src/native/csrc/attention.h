/* Tiled online-softmax attention (see native/attention.py), for one element type.
   Instantiated per program by text replacement: ELT (float or double), SFX (f32 or f64) and
   EM_ATT_EXP (the exponential of that type).

   One task is one (batch, head, block of EM_ATT_BQ queries). The task walks the keys in blocks of
   EM_ATT_BK: it packs the block's K transposed (so the scores of one query are a vector loop over
   keys), computes the scaled scores, applies the bias, the bool mask and the causal limit (masked
   scores are -inf), and folds the block into the running row maximum m, row sum l and output
   accumulator acc (acc and l are rescaled by exp(m_old - m_new) when the maximum grows). Key
   blocks wholly above a causal diagonal are never visited. Only the task's tiles live on the
   stack: nothing of size L x S exists. A row that attended nothing (l == 0) gets zeros, or the
   mean of all values (mean_empty: the JAX rule where masked logits are a finite constant). */

#ifndef EM_ATT_BQ
#define EM_ATT_BQ 32
#define EM_ATT_BK 64
#endif

typedef struct {
    const ELT *q, *k, *v, *bias;
    const unsigned char *mask;
    ELT *o;
    int64_t H, G, L, S, nqb;            /* query heads, query heads per kv head, sizes, query blocks */
    int64_t qb_, qh_, kb_, kh_, vb_, vh_, ob_, oh_;  /* batch and head strides (rows contiguous) */
    int64_t bs[4], ms[4];               /* bias / mask strides per dim (0: broadcast) */
    ELT scale;
    int causal, mean_empty;
    int64_t coff;                       /* causal: query i sees keys j <= i + coff */
} em_attn_ctx_SFX;

static inline __attribute__((always_inline)) void em_attn_task_SFX(const em_attn_ctx_SFX *c, int64_t t,
                                                                    const int64_t D, const int64_t DV) {
    const int64_t per_b = c->H * c->nqb;
    const int64_t b = t / per_b, h = (t % per_b) / c->nqb, qb = t % c->nqb;
    const int64_t i0 = qb * EM_ATT_BQ, i1 = i0 + EM_ATT_BQ < c->L ? i0 + EM_ATT_BQ : c->L;
    const int64_t kvh = h / c->G, S = c->S;
    const ELT *q = c->q + b * c->qb_ + h * c->qh_;
    const ELT *k = c->k + b * c->kb_ + kvh * c->kh_;
    const ELT *v = c->v + b * c->vb_ + kvh * c->vh_;
    ELT *o = c->o + b * c->ob_ + h * c->oh_;
    const ELT NEG = -__builtin_inf();
    ELT acc[EM_ATT_BQ * DV], m[EM_ATT_BQ], l[EM_ATT_BQ];
    ELT kt[D * EM_ATT_BK] __attribute__((aligned(64)));
    ELT s[EM_ATT_BK] __attribute__((aligned(64)));
    for (int64_t r = 0; r < EM_ATT_BQ; ++r) { m[r] = NEG; l[r] = 0; }
    for (int64_t x = 0; x < EM_ATT_BQ * DV; ++x) acc[x] = 0;
    int64_t kend = S;
    if (c->causal) {
        const int64_t lim = i1 - 1 + c->coff + 1;  /* keys the last query of the block sees */
        kend = lim < 0 ? 0 : (lim < S ? lim : S);
    }
    for (int64_t k0 = 0; k0 < kend; k0 += EM_ATT_BK) {
        const int64_t nk = kend - k0 < EM_ATT_BK ? kend - k0 : EM_ATT_BK;
        for (int64_t j = 0; j < nk; ++j) {
            const ELT *kj = k + (k0 + j) * D;
            for (int64_t d = 0; d < D; ++d) kt[d * EM_ATT_BK + j] = kj[d];
        }
        for (int64_t j = nk; j < EM_ATT_BK; ++j)
            for (int64_t d = 0; d < D; ++d) kt[d * EM_ATT_BK + j] = 0;
        for (int64_t r = 0; r < i1 - i0; ++r) {
            const int64_t i = i0 + r;
            int64_t nv = nk;
            if (c->causal) {
                const int64_t last = i + c->coff - k0;  /* the last key of this block row i sees */
                if (last < 0) continue;
                if (last + 1 < nv) nv = last + 1;
            }
            const ELT *qi = q + i * D;
            for (int64_t j = 0; j < EM_ATT_BK; ++j) s[j] = 0;
            for (int64_t d = 0; d < D; ++d) {
                const ELT qd = qi[d];
                const ELT *kd = kt + d * EM_ATT_BK;
                #pragma omp simd
                for (int64_t j = 0; j < EM_ATT_BK; ++j) s[j] += qd * kd[j];
            }
            const ELT sc = c->scale;
            #pragma omp simd
            for (int64_t j = 0; j < EM_ATT_BK; ++j) s[j] = j < nv ? s[j] * sc : NEG;
            if (c->bias) {
                const ELT *bp = c->bias + b * c->bs[0] + h * c->bs[1] + i * c->bs[2] + k0 * c->bs[3];
                const int64_t st = c->bs[3];
                for (int64_t j = 0; j < nv; ++j) s[j] += bp[j * st];
            }
            if (c->mask) {
                const unsigned char *mp = c->mask + b * c->ms[0] + h * c->ms[1] + i * c->ms[2] + k0 * c->ms[3];
                const int64_t st = c->ms[3];
                for (int64_t j = 0; j < nv; ++j) if (!mp[j * st]) s[j] = NEG;
            }
            ELT mx = NEG;
            #pragma omp simd reduction(max:mx)
            for (int64_t j = 0; j < EM_ATT_BK; ++j) mx = s[j] > mx ? s[j] : mx;
            if (mx == NEG) continue;  /* nothing attended in this block */
            const ELT mnew = mx > m[r] ? mx : m[r];
            const ELT alpha = EM_ATT_EXP(m[r] - mnew);
            ELT sum = 0;
            #pragma omp simd reduction(+:sum)
            for (int64_t j = 0; j < EM_ATT_BK; ++j) {
                const ELT p = EM_ATT_EXP(s[j] - mnew);
                s[j] = p;
                sum += p;
            }
            l[r] = l[r] * alpha + sum;
            m[r] = mnew;
            ELT *ar = acc + r * DV;
            if (alpha != 1) {
                #pragma omp simd
                for (int64_t x = 0; x < DV; ++x) ar[x] *= alpha;
            }
            for (int64_t j = 0; j < nv; ++j) {
                const ELT pj = s[j];
                const ELT *vj = v + (k0 + j) * DV;
                #pragma omp simd
                for (int64_t x = 0; x < DV; ++x) ar[x] += pj * vj[x];
            }
        }
    }
    for (int64_t r = 0; r < i1 - i0; ++r) {
        ELT *orow = o + (i0 + r) * DV;
        const ELT *ar = acc + r * DV;
        if (l[r] > 0) {
            const ELT inv = 1 / l[r];
            for (int64_t x = 0; x < DV; ++x) orow[x] = ar[x] * inv;
        } else if (c->mean_empty && S > 0) {  /* every logit equal: the mean of all values */
            for (int64_t x = 0; x < DV; ++x) orow[x] = 0;
            for (int64_t j = 0; j < S; ++j)
                for (int64_t x = 0; x < DV; ++x) orow[x] += v[j * DV + x];
            for (int64_t x = 0; x < DV; ++x) orow[x] /= (ELT)S;
        } else {
            for (int64_t x = 0; x < DV; ++x) orow[x] = 0;
        }
    }
}
