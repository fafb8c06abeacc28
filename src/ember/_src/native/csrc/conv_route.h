/* Route choice of a convolution step whose sizes are symbolic (native/emit/conv.py): the cost
   rules the static emitter evaluates in Python, evaluated here on one call's sizes, so that a
   program compiled once for every size runs, at each size, the route a static build would. */

/* Whether flat blocks (em_cv_flat) are estimated cheaper than blocks of consecutive output pixels:
   the rule of _Geo._flat_wins (conv.py's flat_wins), term for term. mr: pixels per block;
   nvec: vectors of output features per panel; pack, copy: FLAT_PACK_COST, FLAT_COPY_COST. */
static int em_cv_flat_wins(int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t KH, int64_t KW,
                           int64_t sh, int64_t sw, int64_t hlo, int64_t wlo, int64_t C, int64_t K,
                           int64_t nvec, int64_t mr, int64_t max_width, double pack, double copy) {
    if (OW <= 0 || OW > max_width || OH <= 0) return 0;
    const int64_t q = OH * OW;
    int64_t packed = 0;
    for (int64_t q0 = 0; q0 < q; q0 += mr) {
        const int64_t oh = q0 / OW, ow0 = q0 % OW;
        const int64_t ih0 = oh * sh - hlo, iw0 = ow0 * sw - wlo;
        packed += !(q0 + mr <= q && ow0 + mr <= OW && ih0 >= 0 && ih0 + KH <= H && iw0 >= 0
                    && iw0 + (mr - 1) * sw + KW <= W);
    }
    const int64_t Hz = (KH + sh - 1) / sh + OH - 1, Wz = (KW + sw - 1) / sw + OW - 1;
    const int64_t blocks = (q + mr - 1) / mr, vblocks = ((OH - 1) * Wz + OW + mr - 1) / mr;
    const double direct = (double)(mr * K) * ((double)(blocks * nvec) + (double)packed * pack);
    const double flat = (double)(mr * K) * (double)(vblocks * nvec) + copy * (double)(sh * sw * Hz * Wz * C);
    return flat < direct;
}

/* Blocks per task: about one output row of OW pixels in blocks of mr, 1 to cb_max (_Geo.CB). */
static inline int64_t em_cv_task_blocks(int64_t OW, int64_t mr, int64_t cb_max) {
    const int64_t cb = (OW + mr - 1) / mr;
    return cb < 1 ? 1 : cb > cb_max ? cb_max : cb;
}

/* The GEMM route (conv.py's _gemm_route): the patches of a channels-last batch (x: channel stride 1,
   image, row and pixel strides xn, xh, xw) as the rows of an (N OH OW) x (KH KW C) matrix, tap-major
   with the channels inner (zeros where a tap reads the padding): the A operand of one product with
   the kernel as a (KH KW C) x O matrix. Rows [r0, r1) of the matrix (r = (n OH + oh) OW + ow). */
static void em_cv_cols_f32(const float *x, int64_t xn, int64_t xh, int64_t xw, int64_t H, int64_t W,
                           int64_t C, int64_t OH, int64_t OW, int64_t KH, int64_t KW, int64_t sh,
                           int64_t sw, int64_t dh, int64_t dw, int64_t hlo, int64_t wlo, float *cols,
                           int64_t r0, int64_t r1) {
    const int64_t K = KH * KW * C;
    for (int64_t r = r0; r < r1; ++r) {
        const int64_t n = r / (OH * OW), oh = r / OW % OH, ow = r % OW;
        float *row = cols + r * K;
        for (int64_t i = 0; i < KH; ++i) {
            const int64_t ih = oh * sh - hlo + i * dh;
            for (int64_t j = 0; j < KW; ++j) {
                const int64_t iw = ow * sw - wlo + j * dw;
                float *dst = row + (i * KW + j) * C;
                if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                    __builtin_memcpy(dst, x + n * xn + ih * xh + iw * xw, (size_t)C * sizeof(float));
                else
                    __builtin_memset(dst, 0, (size_t)C * sizeof(float));
            }
        }
    }
}
