/* Direct / implicit-GEMM 2-D convolution (see native/emit/conv.py), for one element type.
   Instantiated per element type by the defines in front of it: ELT (float or double) and EM_T(name)
   (name##_f32 or name##_f64); the emitter #undefs them after.

   The input is read channels-last (NHWC: a pixel's channels contiguous); another layout is first
   copied into the step's workspace in that order (em_cv_tr: register transposes), except for the
   depthwise kernel on channel planes (em_cv_dwplane). The kernel is packed once per call into panels
   of NR = 2 vectors of output features: wp[g][panel][k][NR], k = (kh * KW + kw) * Cg + c, zero
   past the group's Og features. One task is one (image, group, panel, chunk of CB blocks); a block
   is MR consecutive output pixels of the image (row-major), an MR x NR tile of accumulators in
   registers:

   * interior blocks (every tap of every pixel inside the image) multiply straight from the input:
     pixel m of the block reads the input at a fixed stride (sw * C) from pixel 0, and the taps
     are segments of it: one per kernel row of KW * C contiguous values (one group, no column
     dilation) or one per tap of Cg values. No copy of the input is made;
   * other blocks (touching the padding, spanning two output rows, or the image's tail) first
     pack their MR patches
     (K = KH * KW * Cg values each, zeros for taps in the padding, so NaN/Inf in the kernel
     propagate as in the zero-padded definition) into the thread's tile in the workspace
     (MR x K values: bounded by the tile, not by the image) and multiply from there;
   * narrow images, where most blocks would be packed, run flat blocks instead (em_cv_flat: one
     padded copy per stride phase, read in place by blocks of virtual pixels).

   Depthwise convolutions (Cg = Og = 1) run a direct loop vectorized over the channels. */

#ifndef EM_CV_COMMON
#define EM_CV_COMMON
#if defined(__AVX512F__) && defined(__FMA__)
#define EM_CV_BYTES 64
#define EM_CV_MR 14
#define EM_CV_FMA_f32(a, b, c) __builtin_ia32_vfmaddps512_mask((a), (b), (c), (short)-1, 4)
#define EM_CV_FMA_f64(a, b, c) __builtin_ia32_vfmaddpd512_mask((a), (b), (c), (char)-1, 4)
#define EM_CV_BC_f32(x) {x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}
#define EM_CV_BC_f64(x) {x, x, x, x, x, x, x, x}
#elif defined(__AVX2__) && defined(__FMA__)
#define EM_CV_BYTES 32
#define EM_CV_MR 6
#define EM_CV_FMA_f32(a, b, c) __builtin_ia32_vfmaddps256((a), (b), (c))
#define EM_CV_FMA_f64(a, b, c) __builtin_ia32_vfmaddpd256((a), (b), (c))
#define EM_CV_BC_f32(x) {x, x, x, x, x, x, x, x}
#define EM_CV_BC_f64(x) {x, x, x, x}
#else
#define EM_CV_BYTES 32
#define EM_CV_MR 4
#define EM_CV_FMA_f32(a, b, c) ((a) * (b) + (c))
#define EM_CV_FMA_f64(a, b, c) ((a) * (b) + (c))
#define EM_CV_BC_f32(x) {x, x, x, x, x, x, x, x}
#define EM_CV_BC_f64(x) {x, x, x, x}
#endif
#define EM_CV_DW_CHUNK 64  /* channels per accumulator chunk of the depthwise loop (DW_CHUNK in conv.py) */
#define EM_CV_VL_f32 ((int64_t)(EM_CV_BYTES / 4))  /* elements per vector (the emitter's panel width) */
#define EM_CV_VL_f64 ((int64_t)(EM_CV_BYTES / 8))

/* The step's geometry (static: the emitter writes it as a constant the inlined tasks fold). */
typedef struct {
    int64_t H, W, C, OH, OW, G, Cg, Og, P, KH, KW, sh, sw, dh, dw, hlo, wlo, K;
    int64_t xsn, xsc, xsh, xsw;      /* input strides (elements) of the original layout */
    int64_t wso, wsi, wsh, wsw;      /* kernel strides */
    int64_t osn, oso, osh, osw;      /* output strides */
    int64_t tile;                    /* elements per thread tile (MR x K, rounded to 16, then the local
                                        output of lout > 0) */
    int64_t lout;                    /* > 0: the direct kernel writes an NCHW output through a local
                                        pixel-major buffer at this offset of the thread's tile */
    int64_t CB, NCH;                 /* blocks per task, tasks (chunks) per image and panel */
    int64_t Hz, Wz;                  /* flat blocks (Wz > 0): rows and columns of each stride phase's
                                        padded copy (em_cv_flat); 0 otherwise */
    int64_t relu;                    /* the fused epilogue's ReLU (after em_cv_ctx's bias) */
} em_cv_geo;

static inline int64_t em_cv_min(int64_t a, int64_t b) { return a < b ? a : b; }
/* The taps k = r + i s below n along one axis (phase r of stride s). */
static inline int64_t em_cv_ntaps(int64_t n, int64_t r, int64_t s) { return (n - r + s - 1) / s; }

/* Flat blocks (em_cv_flat): the real output pixels (oh OW + ow) before virtual pixel q; the
   elements of one stride phase's padded copy. */
static inline int64_t em_cv_real(const em_cv_geo g, int64_t q) { return (q / g.Wz) * g.OW + em_cv_min(q % g.Wz, g.OW); }
#define EM_CV_ZIMG(g) ((g).Hz * (g).Wz * (g).C)

/* Where tap (kh, kw) starts in the packed kernel, in taps: row-major, except with flat blocks
   (em_cv_flat), where the taps are grouped by stride phase (kh % sh, kw % sw), phases row-major,
   each phase's taps row-major. */
static inline int64_t em_cv_tapos(const em_cv_geo g, int64_t kh, int64_t kw) {
    const int64_t fh = g.Wz ? g.sh : 1, fw = g.Wz ? g.sw : 1, a = kh % fh, b = kw % fw;
    int64_t pos = 0;
    for (int64_t pa = 0; pa < fh; ++pa)
        for (int64_t pb = 0; pb < fw; ++pb)
            if (pa * fw + pb < a * fw + b) pos += em_cv_ntaps(g.KH, pa, fh) * em_cv_ntaps(g.KW, pb, fw);
    return pos + (kh / fh) * em_cv_ntaps(g.KW, b, fw) + kw / fw;
}
typedef int32_t em_cv_i_f32 __attribute__((vector_size(EM_CV_BYTES)));  /* shuffle masks per element type */
typedef int64_t em_cv_i_f64 __attribute__((vector_size(EM_CV_BYTES)));
#endif

typedef ELT EM_T(em_cv_v) __attribute__((vector_size(EM_CV_BYTES)));
typedef ELT EM_T(em_cv_u) __attribute__((vector_size(EM_CV_BYTES), aligned(sizeof(ELT))));  /* unaligned */

typedef struct {
    const ELT *xsrc, *w;   /* the operands as given */
    const ELT *x;          /* the input in NHWC order (xsrc itself, or its copy xt) */
    ELT *xt, *wp, *tiles;  /* workspace: NHWC copy, packed kernel, per-thread tiles */
    ELT *out;              /* where the tasks write: the output, or its NHWC staging copy */
    ELT *y;                /* the output (an NHWC staging copy is moved there last) */
    const ELT *bias;       /* the fused epilogue's per-feature bias (null: none) */
} EM_T(em_cv_ctx);

/* dst[j ds + i] = src[i ss + j] for i < R, j < Cn: VL x VL blocks transposed in registers (log2 VL
   rounds of zips: rows 2r, 2r + 1 <- interleaved halves of rows r, r + VL / 2); the last block of
   rows / columns overlaps the one before (the same values stored twice), so only R or Cn below VL
   goes scalar. */
static inline __attribute__((always_inline)) void EM_T(em_cv_tr)(const ELT *src, const int64_t ss, ELT *dst,
                                                                const int64_t ds, const int64_t R,
                                                                const int64_t Cn) {
    enum { VL = EM_CV_BYTES / sizeof(ELT) };
    if (R < VL || Cn < VL) {
        for (int64_t i = 0; i < R; ++i)
            for (int64_t j = 0; j < Cn; ++j) dst[j * ds + i] = src[i * ss + j];
        return;
    }
    EM_T(em_cv_i) lo, hi;
#pragma GCC unroll 16
    for (int k = 0; k < VL / 2; ++k) {
        lo[2 * k] = k;
        lo[2 * k + 1] = VL + k;
        hi[2 * k] = VL / 2 + k;
        hi[2 * k + 1] = VL + VL / 2 + k;
    }
    for (int64_t ib = 0; ib < R; ib += VL) {
        const int64_t i0 = em_cv_min(ib, R - VL);
        for (int64_t jb = 0; jb < Cn; jb += VL) {
            const int64_t j0 = em_cv_min(jb, Cn - VL);
            EM_T(em_cv_v) x[VL], y[VL];
#pragma GCC unroll 16
            for (int r = 0; r < VL; ++r) x[r] = *(const EM_T(em_cv_u) *)(src + (i0 + r) * ss + j0);
            EM_ZIP_TRANSPOSE(x, y, VL, lo, hi);
#pragma GCC unroll 16
            for (int r = 0; r < VL; ++r) *(EM_T(em_cv_u) *)(dst + (j0 + r) * ds + i0) = x[r];
        }
    }
}

/* Move the staged NHWC output row (image n, row h) = t into the output's layout (strides osn, oso,
   osh, osw): contiguous reads of an L1-sized row, writes along the pixels for NCHW. */
static inline __attribute__((always_inline)) void EM_T(em_cv_unstage)(const EM_T(em_cv_ctx) *c, const em_cv_geo g,
                                                                     int64_t t, int64_t osn, int64_t oso,
                                                                     int64_t osh, int64_t osw) {
    const int64_t n = t / g.OH, h = t % g.OH, O = g.G * g.Og;
    const ELT *src = c->out + t * g.OW * O;
    ELT *dst = c->y + n * osn + h * osh;
    if (osw == 1) {  /* NCHW: pixels contiguous per feature */
        EM_T(em_cv_tr)(src, O, dst, oso, g.OW, O);
        return;
    }
    for (int64_t o = 0; o < O; ++o)
        for (int64_t x = 0; x < g.OW; ++x) dst[o * oso + x * osw] = src[x * O + o];
}

/* Whether input index i (padding lo) is read by some tap (k taps, dilation d, stride s, o outputs). */
static inline int em_cv_read(int64_t i, int64_t lo, int64_t k, int64_t d, int64_t s, int64_t o) {
    for (int64_t kk = 0; kk < k; ++kk) {
        const int64_t j = i + lo - kk * d;
        if (j >= 0 && j % s == 0 && j / s < o) return 1;
    }
    return 0;
}

/* Copy the input row (image n, row h) = t into NHWC order; rows (and, when allcols is 0, pixels)
   that no tap reads are skipped (a strided 1x1 convolution reads a quarter of the input). */
static inline __attribute__((always_inline)) void EM_T(em_cv_nhwc)(const EM_T(em_cv_ctx) *c, const em_cv_geo g,
                                                                  const int allcols, int64_t t) {
    const int64_t n = t / g.H, h = t % g.H;
    if (!em_cv_read(h, g.hlo, g.KH, g.dh, g.sh, g.OH)) return;
    const ELT *src = c->xsrc + n * g.xsn + h * g.xsh;
    ELT *dst = c->xt + t * g.W * g.C;
    if (g.xsw == 1) {  /* NCHW: one transpose (all columns: cheaper than skipping scalar ones) */
        EM_T(em_cv_tr)(src, g.xsc, dst, g.C, g.C, g.W);
        return;
    }
    if (allcols) {
        for (int64_t ch = 0; ch < g.C; ++ch)
            for (int64_t x = 0; x < g.W; ++x) dst[x * g.C + ch] = src[ch * g.xsc + x * g.xsw];
        return;
    }
    for (int64_t x = 0; x < g.W; ++x)
        if (em_cv_read(x, g.wlo, g.KW, g.dw, g.sw, g.OW))
            for (int64_t ch = 0; ch < g.C; ++ch) dst[x * g.C + ch] = src[ch * g.xsc + x * g.xsw];
}

/* A strided 1x1 convolution without low padding reads input pixels (oh sh, ow sw) only: copy those
   of output row t = n * OH + oh into an OH x OW channels-last image (the multiply then runs it at
   stride 1): the row's columns gathered per channel into the thread's tile, then transposed. */
static inline __attribute__((always_inline)) void EM_T(em_cv_nhwc_sub)(const EM_T(em_cv_ctx) *c, const em_cv_geo g,
                                                                      int64_t t, int64_t tid) {
    const int64_t n = t / g.OH, ih = (t % g.OH) * g.sh;
    const int64_t wv = em_cv_min(g.OW, (g.W + g.sw - 1) / g.sw);  /* output columns inside the input */
    ELT *dst = c->xt + t * g.OW * g.C, *tmp = c->tiles + tid * g.tile;
    if (ih < g.H) {
        const ELT *src = c->xsrc + n * g.xsn + ih * g.xsh;
        for (int64_t ch = 0; ch < g.C; ++ch)
            for (int64_t ow = 0; ow < wv; ++ow) tmp[ch * wv + ow] = src[ch * g.xsc + ow * g.sw * g.xsw];
        EM_T(em_cv_tr)(tmp, wv, dst, g.C, g.C, wv);
    }
    for (int64_t k = ih < g.H ? wv * g.C : 0; k < g.OW * g.C; ++k) dst[k] = 0;
}

/* Pack panel t = g * P + p of the kernel: wp[t][k][NR]. */
static inline __attribute__((always_inline)) void EM_T(em_cv_packw)(const EM_T(em_cv_ctx) *c, const em_cv_geo g,
                                                                   int64_t t) {
    const int64_t NR = 2 * EM_T(EM_CV_VL), gi = t / g.P, p = t % g.P;
    ELT *dst = c->wp + t * g.K * NR;
    for (int64_t kh = 0; kh < g.KH; ++kh)
        for (int64_t kw = 0; kw < g.KW; ++kw)
            for (int64_t ci = 0; ci < g.Cg; ++ci) {
                ELT *d = dst + (em_cv_tapos(g, kh, kw) * g.Cg + ci) * NR;
                for (int64_t j = 0; j < NR; ++j) {
                    const int64_t o = p * NR + j;
                    d[j] = o < g.Og ? c->w[(gi * g.Og + o) * g.wso + ci * g.wsi + kh * g.wsh + kw * g.wsw] : 0;
                }
            }
}

/* em_cv_tacc's loop for one (two = 0) or two (two = 1) vectors of features: a constant at each
   inlined call, so each instance keeps only its own FMAs. */
static inline __attribute__((always_inline)) void EM_T(em_cv_tacc_nv)(
        EM_T(em_cv_v) acc[EM_CV_MR][2], const ELT *a, const int64_t PS, const int64_t NI, const int64_t RS,
        const int64_t NJ, const int64_t JS, const int64_t L, const ELT *wp, const int two) {
    const int64_t VL = EM_T(EM_CV_VL), NR = 2 * EM_T(EM_CV_VL);
    for (int64_t i = 0; i < NI; ++i)
        for (int64_t j = 0; j < NJ; ++j) {
            const ELT *ap = a + i * RS + j * JS;
            const ELT *wq = wp + (i * NJ + j) * L * NR;
            for (int64_t k = 0; k < L; ++k) {
                const EM_T(em_cv_v) w0 = *(const EM_T(em_cv_v) *)(wq + k * NR);
                const EM_T(em_cv_v) w1 = two ? *(const EM_T(em_cv_v) *)(wq + k * NR + VL) : w0;
#pragma GCC unroll 32
                for (int m = 0; m < EM_CV_MR; ++m) {
                    const ELT s = ap[m * PS + k];
                    const EM_T(em_cv_v) b = EM_T(EM_CV_BC)(s);
                    acc[m][0] = EM_T(EM_CV_FMA)(b, w0, acc[m][0]);
                    if (two) acc[m][1] = EM_T(EM_CV_FMA)(b, w1, acc[m][1]);
                }
            }
        }
}

/* Add to the MR x NR accumulators (MR x VL when nv <= VL) the sum over NI x NJ segments of L values
   of a[i RS + j JS + m PS + k] * wp[((i NJ + j) L + k) NR + ...]. */
static inline __attribute__((always_inline)) void EM_T(em_cv_tacc)(
        EM_T(em_cv_v) acc[EM_CV_MR][2], const ELT *a, const int64_t PS, const int64_t NI, const int64_t RS,
        const int64_t NJ, const int64_t JS, const int64_t L, const ELT *wp, const int64_t nv) {
    if (nv <= EM_T(EM_CV_VL))  /* one vector of features (Og <= VL, e.g. a 16-feature input cotangent): half the FMAs */
        EM_T(em_cv_tacc_nv)(acc, a, PS, NI, RS, NJ, JS, L, wp, 0);
    else
        EM_T(em_cv_tacc_nv)(acc, a, PS, NI, RS, NJ, JS, L, wp, 1);
}

/* The fused epilogue on a tile's accumulators (the step's bias/ReLU, a rule of the schedule,
   native/scheduling/conv_epilogue.py): + bias[j] (bias non-null: the panel's NR values, aligned, zero
   past its features: em_cv_pbias), then max(., 0) keeping NaN (relu), in registers before the store. */
static inline __attribute__((always_inline)) void EM_T(em_cv_epi1)(EM_T(em_cv_v) acc[2], const ELT *bias,
                                                                  const int64_t relu) {
    const int64_t VL = EM_T(EM_CV_VL);
    if (bias) {
        acc[0] += *(const EM_T(em_cv_v) *)bias;
        acc[1] += *(const EM_T(em_cv_v) *)(bias + VL);
    }
    if (relu) {
        const EM_T(em_cv_v) z = {0};
        for (int h = 0; h < 2; ++h)
            acc[h] = (EM_T(em_cv_v))((EM_T(em_cv_i))acc[h] & ((acc[h] > z) | (acc[h] != acc[h])));
    }
}
static inline __attribute__((always_inline)) void EM_T(em_cv_epi)(EM_T(em_cv_v) acc[EM_CV_MR][2],
                                                                 const ELT *bias, const int64_t relu) {
    const int64_t VL = EM_T(EM_CV_VL);
    if (bias) {
        const EM_T(em_cv_v) b0 = *(const EM_T(em_cv_v) *)bias, b1 = *(const EM_T(em_cv_v) *)(bias + VL);
#pragma GCC unroll 32
        for (int m = 0; m < EM_CV_MR; ++m) {
            acc[m][0] += b0;
            acc[m][1] += b1;
        }
    }
    if (relu) {
        const EM_T(em_cv_v) z = {0};
#pragma GCC unroll 32
        for (int m = 0; m < EM_CV_MR; ++m)
            for (int h = 0; h < 2; ++h)
                acc[m][h] = (EM_T(em_cv_v))((EM_T(em_cv_i))acc[m][h]
                                            & ((acc[m][h] > z) | (acc[m][h] != acc[m][h])));
    }
}

/* The epilogue's bias of the panel's nv features from f0 into pb (NR values, zeros past nv); pb, or
   null when the step has no bias. */
static inline __attribute__((always_inline)) const ELT *EM_T(em_cv_pbias)(const EM_T(em_cv_ctx) *c,
                                                                         const int64_t f0, const int64_t nv,
                                                                         ELT *pb) {
    if (!c->bias) return 0;
    for (int64_t j = 0; j < 2 * EM_T(EM_CV_VL); ++j) pb[j] = j < nv ? c->bias[f0 + j] : 0;
    return pb;
}

/* Store the accumulators to o (pixel stride om, feature stride oc): mv pixels and nv features, after
   the epilogue (bias: em_cv_pbias's, or null; relu). */
static inline __attribute__((always_inline)) void EM_T(em_cv_tstore)(EM_T(em_cv_v) acc[EM_CV_MR][2], ELT *o,
                                                                    const int64_t om, const int64_t oc,
                                                                    const int64_t mv, const int64_t nv,
                                                                    const ELT *bias, const int64_t relu) {
    const int64_t VL = EM_T(EM_CV_VL), NR = 2 * EM_T(EM_CV_VL);
    EM_T(em_cv_epi)(acc, bias, relu);
    if (mv == EM_CV_MR && nv == VL && oc == 1) {
#pragma GCC unroll 32
        for (int m = 0; m < EM_CV_MR; ++m) *(EM_T(em_cv_u) *)(o + m * om) = acc[m][0];
        return;
    }
    if (mv == EM_CV_MR && nv == NR && oc == 1) {
#pragma GCC unroll 32
        for (int m = 0; m < EM_CV_MR; ++m) {
            *(EM_T(em_cv_u) *)(o + m * om) = acc[m][0];
            *(EM_T(em_cv_u) *)(o + m * om + VL) = acc[m][1];
        }
        return;
    }
    ELT t[EM_CV_MR][2 * EM_T(EM_CV_VL)] __attribute__((aligned(64)));
#pragma GCC unroll 32
    for (int m = 0; m < EM_CV_MR; ++m) {
        *(EM_T(em_cv_v) *)&t[m][0] = acc[m][0];
        *(EM_T(em_cv_v) *)&t[m][VL] = acc[m][1];
    }
    if (oc == 1) {
        for (int64_t m = 0; m < mv; ++m)
            for (int64_t j = 0; j < nv; ++j) o[m * om + j] = t[m][j];
    } else {  /* features strided (NCHW): write along the pixels */
        for (int64_t j = 0; j < nv; ++j)
            for (int64_t m = 0; m < mv; ++m) o[m * om + j * oc] = t[m][j];
    }
}

/* One MR x NR output tile: em_cv_tacc from zero, then em_cv_tstore. */
static inline __attribute__((always_inline)) void EM_T(em_cv_tile)(
        const ELT *a, const int64_t PS, const int64_t NI, const int64_t RS, const int64_t NJ, const int64_t JS,
        const int64_t L, const ELT *wp, ELT *o, const int64_t om, const int64_t oc, const int64_t mv,
        const int64_t nv, const ELT *bias, const int64_t relu) {
    EM_T(em_cv_v) acc[EM_CV_MR][2];
#pragma GCC unroll 32
    for (int m = 0; m < EM_CV_MR; ++m) {
        acc[m][0] = (EM_T(em_cv_v)){0};
        acc[m][1] = (EM_T(em_cv_v)){0};
    }
    EM_T(em_cv_tacc)(acc, a, PS, NI, RS, NJ, JS, L, wp, nv);
    EM_T(em_cv_tstore)(acc, o, om, oc, mv, nv, bias, relu);
}

/* The patch of output pixel q (flattened oh * OW + ow) of image xn (group offset applied) into
   d[K]: zeros in the padding. */
static inline __attribute__((always_inline)) void EM_T(em_cv_pack1)(ELT *d, const ELT *xn, const em_cv_geo g,
                                                                   int64_t q) {
    const int64_t ih0 = (q / g.OW) * g.sh - g.hlo, iw0 = (q % g.OW) * g.sw - g.wlo;
    if (g.G == 1 && g.dw == 1) {  /* a kernel row's taps are one run of the input row: copy it clipped */
        const int64_t kl = em_cv_min(g.KW, iw0 < 0 ? -iw0 : 0);
        const int64_t kr = iw0 + g.KW > g.W ? (g.W - iw0 > kl ? g.W - iw0 : kl) : g.KW;
        for (int64_t kh = 0; kh < g.KH; ++kh) {
            const int64_t ih = ih0 + kh * g.dh;
            ELT *dd = d + kh * g.KW * g.C;
            if (ih < 0 || ih >= g.H) {
                for (int64_t k = 0; k < g.KW * g.C; ++k) dd[k] = 0;
                continue;
            }
            const ELT *s = xn + (ih * g.W + iw0 + kl) * g.C;
            for (int64_t k = 0; k < kl * g.C; ++k) dd[k] = 0;
            for (int64_t k = 0; k < (kr - kl) * g.C; ++k) dd[kl * g.C + k] = s[k];
            for (int64_t k = kr * g.C; k < g.KW * g.C; ++k) dd[k] = 0;
        }
        return;
    }
    for (int64_t kh = 0; kh < g.KH; ++kh) {
        const int64_t ih = ih0 + kh * g.dh;
        for (int64_t kw = 0; kw < g.KW; ++kw) {
            const int64_t iw = iw0 + kw * g.dw;
            ELT *dd = d + (kh * g.KW + kw) * g.Cg;
            if (ih >= 0 && ih < g.H && iw >= 0 && iw < g.W) {
                const ELT *s = xn + (ih * g.W + iw) * g.C;
                for (int64_t ci = 0; ci < g.Cg; ++ci) dd[ci] = s[ci];
            } else {
                for (int64_t ci = 0; ci < g.Cg; ++ci) dd[ci] = 0;
            }
        }
    }
}

/* The patches of output pixels q0 .. q0 + mv of image xn into tile[m][K], zeros for the rows past mv. */
static inline __attribute__((always_inline)) void EM_T(em_cv_pack)(ELT *tile, const ELT *xn, const em_cv_geo g,
                                                                  int64_t q0, int64_t mv) {
    for (int64_t m = 0; m < EM_CV_MR; ++m) {
        if (m < mv) {
            EM_T(em_cv_pack1)(tile + m * g.K, xn, g, q0 + m);
        } else {
            for (int64_t k = 0; k < g.K; ++k) tile[m * g.K + k] = 0;
        }
    }
}

/* Task t = ((n * G + g) * P + p) * NCH + chunk: blocks [chunk CB, chunk CB + CB) of MR output
   pixels (flattened oh * OW + ow over the image) of one feature panel. rowmode: the taps of a
   kernel row are one contiguous segment (one group, no column dilation). */
static inline __attribute__((always_inline)) void EM_T(em_cv_blocks)(const EM_T(em_cv_ctx) *c, const em_cv_geo g,
                                                                    const int rowmode, int64_t t, int64_t tid) {
    const int64_t NR = 2 * EM_T(EM_CV_VL), MR = EM_CV_MR, Q = g.OH * g.OW;
    const int64_t chunk = t % g.NCH;
    int64_t r = t / g.NCH;
    const int64_t p = r % g.P;
    r /= g.P;
    const int64_t gi = r % g.G, n = r / g.G;
    const ELT *wp = c->wp + (gi * g.P + p) * g.K * NR;
    const int64_t nv = em_cv_min(NR, g.Og - p * NR);
    ELT pb[2 * EM_T(EM_CV_VL)] __attribute__((aligned(64)));
    const ELT *bias = EM_T(em_cv_pbias)(c, gi * g.Og + p * NR, nv, pb);
    ELT *obase = c->out + n * g.osn + (gi * g.Og + p * NR) * g.oso;
    const ELT *xn = c->x + n * g.H * g.W * g.C + gi * g.Cg;
    ELT *tile = c->tiles + tid * g.tile;
    ELT ot[EM_CV_MR * 2 * EM_T(EM_CV_VL)] __attribute__((aligned(64)));
    const int64_t qs = chunk * g.CB * MR, qend = em_cv_min(Q, qs + g.CB * MR);
    /* lout: pixel q's features at lo + (q - qs) NR (any block, one store), moved out transposed last */
    ELT *lo = tile + g.lout;
    const int64_t om = g.lout ? NR : g.osw, oc = g.lout ? 1 : g.oso;
    for (int64_t q0 = qs; q0 < qend; q0 += MR) {
        const int64_t mv = em_cv_min(MR, Q - q0), oh = q0 / g.OW, ow0 = q0 % g.OW;
        const int64_t ih0 = oh * g.sh - g.hlo, iw0 = ow0 * g.sw - g.wlo;
        ELT *o = g.lout ? lo + (q0 - qs) * NR : obase + oh * g.osh + ow0 * g.osw;
        if (mv == MR && ow0 + MR <= g.OW && ih0 >= 0 && ih0 + (g.KH - 1) * g.dh < g.H && iw0 >= 0
                && iw0 + (MR - 1) * g.sw + (g.KW - 1) * g.dw < g.W) {
            const ELT *a = xn + (ih0 * g.W + iw0) * g.C;
            if (rowmode)
                EM_T(em_cv_tile)(a, g.sw * g.C, g.KH, g.dh * g.W * g.C, 1, 0, g.KW * g.C, wp, o, om, oc, MR, nv,
                                 bias, g.relu);
            else
                EM_T(em_cv_tile)(a, g.sw * g.C, g.KH, g.dh * g.W * g.C, g.KW, g.dw * g.C, g.Cg, wp, o, om, oc,
                               MR, nv, bias, g.relu);
            continue;
        }
        EM_T(em_cv_pack)(tile, xn, g, q0, mv);
        if (g.lout || ow0 + mv <= g.OW) {  /* one output row (or the local buffer): store in place */
            EM_T(em_cv_tile)(tile, g.K, 1, 0, 1, 0, g.K, wp, o, om, oc, mv, nv, bias, g.relu);
            continue;
        }
        EM_T(em_cv_tile)(tile, g.K, 1, 0, 1, 0, g.K, wp, ot, NR, 1, MR, NR, bias, g.relu);
        for (int64_t m = 0; m < mv; ++m) {
            ELT *o = obase + ((q0 + m) / g.OW) * g.osh + ((q0 + m) % g.OW) * g.osw;
            for (int64_t j = 0; j < nv; ++j) o[j * g.oso] = ot[m * NR + j];
        }
    }
    if (g.lout)  /* NCHW (osh = OW, osw = 1): the chunk's pixels are contiguous per feature */
        EM_T(em_cv_tr)(lo, NR, obase + qs, g.oso, qend - qs, nv);
}

/* Flat blocks (Wz > 0; one group, no dilation; chosen for narrow images, where most blocks of MR
   pixels would span two rows and be packed): the image is first copied (em_cv_flatcopy) into one
   padded channels-last image per stride phase (a, b) < (sh, sw), Z_ab[u][v] = x[u sh + a - hlo]
   [v sw + b - wlo] (zeros outside), Hz x Wz pixels each, and the output is computed on a virtual
   image of Wz columns: virtual pixel q = oh Wz + ow reads every tap of phase (a, b) at
   Z_ab + q C + (i Wz + j) C (kh = a + i sh, kw = b + j sw), so every block of MR virtual pixels
   multiplies straight from the copy at pixel stride C, one segment per kernel row of a phase.
   Virtual columns ow >= OW are computed and dropped (Wz - OW = ceil(KW / sw) - 1 of them). */

/* Copy padded row t (t = u sh + a, input row t - hlo) of every phase (a, b) with taps, for b < sw;
   the last row also zeroes the MR pixels past the last phase, which the last block's dropped pixels
   read. */
static inline __attribute__((always_inline)) void EM_T(em_cv_flatcopy)(const EM_T(em_cv_ctx) *c, const em_cv_geo g,
                                                                      int64_t t, int64_t tid) {
    const int64_t a = t % g.sh, u = t / g.sh, ih = t - g.hlo, C = g.C;
    if (t == g.sh * g.Hz - 1) {
        ELT *tail = c->xt + g.sh * g.sw * EM_CV_ZIMG(g);
        for (int64_t k = 0; k < EM_CV_MR * C; ++k) tail[k] = 0;
    }
    if (em_cv_ntaps(g.KH, a, g.sh) == 0) return;  /* a phase no tap reads (stride above the kernel) */
    const int inside = ih >= 0 && ih < g.H;
    const ELT *row = c->xsrc + ih * g.xsh;
    int64_t ps = g.xsw;
    if (inside && g.xsc != 1) {  /* channels strided (NCHW): the row transposed into the thread's tile */
        ELT *tmp = c->tiles + tid * g.tile;
        if (g.xsw == 1) {
            EM_T(em_cv_tr)(row, g.xsc, tmp, C, C, g.W);
        } else {
            for (int64_t x = 0; x < g.W; ++x)
                for (int64_t ch = 0; ch < C; ++ch) tmp[x * C + ch] = row[ch * g.xsc + x * g.xsw];
        }
        row = tmp;
        ps = C;
    }
    for (int64_t b = 0; b < g.sw; ++b) {
        if (em_cv_ntaps(g.KW, b, g.sw) == 0) continue;
        ELT *dst = c->xt + (a * g.sw + b) * EM_CV_ZIMG(g) + u * g.Wz * C;
        /* columns [v0, v1) inside the input: iw = v sw + b - wlo in [0, W) */
        const int64_t off = b - g.wlo, v0 = em_cv_min(g.Wz, off < 0 ? (-off + g.sw - 1) / g.sw : 0);
        int64_t v1 = inside && g.W - off > 0 ? em_cv_min(g.Wz, (g.W - off + g.sw - 1) / g.sw) : v0;
        v1 = v1 < v0 ? v0 : v1;
        for (int64_t k = 0; k < v0 * C; ++k) dst[k] = 0;
        const ELT *src = row + (v0 * g.sw + off) * ps;
        for (int64_t v = v0; v < v1; ++v, src += g.sw * ps)
            for (int64_t ch = 0; ch < C; ++ch) dst[v * C + ch] = src[ch];
        for (int64_t k = v1 * C; k < g.Wz * C; ++k) dst[k] = 0;
    }
}

/* Task t = (n * P + p) * NCH + chunk (one group): blocks [chunk CB, chunk CB + CB) of MR virtual pixels
   of one feature panel, on the phases' copies of image n. */
static inline __attribute__((always_inline)) void EM_T(em_cv_flat)(const EM_T(em_cv_ctx) *c, const em_cv_geo g,
                                                                  int64_t t, int64_t tid) {
    const int64_t NR = 2 * EM_T(EM_CV_VL), MR = EM_CV_MR, WZ = g.Wz, C = g.C;
    const int64_t QV = (g.OH - 1) * WZ + g.OW, chunk = t % g.NCH, p = (t / g.NCH) % g.P, n = t / g.NCH / g.P;
    const ELT *wp = c->wp + p * g.K * NR;
    const int64_t nv = em_cv_min(NR, g.Og - p * NR);
    ELT pb[2 * EM_T(EM_CV_VL)] __attribute__((aligned(64)));
    const ELT *bias = EM_T(em_cv_pbias)(c, p * NR, nv, pb);
    ELT *obase = c->out + n * g.osn + p * NR * g.oso;
    const ELT *z = c->x + n * (g.sh * g.sw * EM_CV_ZIMG(g) + MR * C);
    ELT ot[EM_CV_MR * 2 * EM_T(EM_CV_VL)] __attribute__((aligned(64)));
    const int64_t qs = chunk * g.CB * MR, qe = em_cv_min(QV, qs + g.CB * MR), rs = em_cv_real(g, qs);
    ELT *lo = c->tiles + tid * g.tile + g.lout;  /* lout: real pixel r's features at lo + (r - rs) NR */
    const int64_t om = g.lout ? NR : g.osw, oc = g.lout ? 1 : g.oso;
    for (int64_t q0 = qs; q0 < qe; q0 += MR) {
        EM_T(em_cv_v) acc[EM_CV_MR][2];
#pragma GCC unroll 32
        for (int m = 0; m < EM_CV_MR; ++m) {
            acc[m][0] = (EM_T(em_cv_v)){0};
            acc[m][1] = (EM_T(em_cv_v)){0};
        }
        const ELT *wq = wp;
        for (int64_t a = 0; a < g.sh; ++a)
            for (int64_t b = 0; b < g.sw; ++b) {
                const int64_t ni = em_cv_ntaps(g.KH, a, g.sh), nj = em_cv_ntaps(g.KW, b, g.sw);
                if (ni == 0 || nj == 0) continue;
                EM_T(em_cv_tacc)(acc, z + (a * g.sw + b) * EM_CV_ZIMG(g) + q0 * C, C, ni, WZ * C, 1, 0, nj * C,
                                 wq, nv);
                wq += ni * nj * C * NR;
            }
        const int64_t oh = q0 / WZ, ow0 = q0 % WZ;
        if (ow0 + MR <= g.OW) {  /* the block lies in one output row */
            ELT *o = g.lout ? lo + (oh * g.OW + ow0 - rs) * NR : obase + oh * g.osh + ow0 * g.osw;
            EM_T(em_cv_tstore)(acc, o, om, oc, MR, nv, bias, g.relu);
            continue;
        }
        EM_T(em_cv_tstore)(acc, ot, NR, 1, MR, NR, bias, g.relu);
        for (int64_t m = 0; m < MR && q0 + m < qe; ++m) {
            const int64_t ow = (q0 + m) % WZ, h = (q0 + m) / WZ;
            if (ow >= g.OW) continue;
            ELT *o = g.lout ? lo + (h * g.OW + ow - rs) * NR : obase + h * g.osh + ow * g.osw;
            for (int64_t j = 0; j < nv; ++j) o[j * oc] = ot[m * NR + j];
        }
    }
    if (g.lout)  /* NCHW (osh = OW, osw = 1): the chunk's real pixels are contiguous per feature */
        EM_T(em_cv_tr)(lo, NR, obase + rs, g.oso, em_cv_real(g, qe) - rs, nv);
}

/* Depthwise kernel packing: wp[kh][kw][c] = w[o = c, i = 0, kh, kw]. */
static inline __attribute__((always_inline)) void EM_T(em_cv_packdw)(const EM_T(em_cv_ctx) *c, const em_cv_geo g) {
    for (int64_t k = 0; k < g.KH * g.KW; ++k)
        for (int64_t ch = 0; ch < g.C; ++ch)
            c->wp[k * g.C + ch] = c->w[ch * g.wso + (k / g.KW) * g.wsh + (k % g.KW) * g.wsw];
}

/* Depthwise: the taps of pixels [p0, p1) of output row oh, one tap at a time over the pixels
   (bounds per tap), added to acc[ow][cn]. Taps in the padding multiply zeros, so a non-finite
   kernel value propagates as in the zero-padded definition. */
static inline __attribute__((always_inline)) void EM_T(em_cv_dwtaps)(const EM_T(em_cv_ctx) *c, const em_cv_geo g,
                                                                    const ELT *xn, ELT *acc, int64_t oh,
                                                                    int64_t c0, int64_t cn, int64_t p0, int64_t p1) {
    for (int64_t kh = 0; kh < g.KH; ++kh) {
        const int64_t ih = oh * g.sh - g.hlo + kh * g.dh;
        for (int64_t kw = 0; kw < g.KW; ++kw) {
            const ELT *wq = c->wp + (kh * g.KW + kw) * g.C + c0;
            const int64_t off = kw * g.dw - g.wlo;  /* iw = ow sw + off */
            int64_t lo = off < 0 ? (-off + g.sw - 1) / g.sw : 0;
            int64_t hi = g.W - off > 0 ? (g.W - off + g.sw - 1) / g.sw : 0;
            if (ih < 0 || ih >= g.H) lo = hi = 0;
            lo = lo < p0 ? p0 : em_cv_min(lo, p1);
            hi = hi < lo ? lo : em_cv_min(hi, p1);
            for (int64_t ow = p0; ow < lo; ++ow) {
#pragma omp simd
                for (int64_t ch = 0; ch < cn; ++ch) acc[ow * cn + ch] += (ELT)0 * wq[ch];
            }
            for (int64_t ow = lo; ow < hi; ++ow) {
                const ELT *xp = xn + (ih * g.W + ow * g.sw + off) * g.C + c0;
#pragma omp simd
                for (int64_t ch = 0; ch < cn; ++ch) acc[ow * cn + ch] += xp[ch] * wq[ch];
            }
            for (int64_t ow = hi; ow < p1; ++ow) {
#pragma omp simd
                for (int64_t ch = 0; ch < cn; ++ch) acc[ow * cn + ch] += (ELT)0 * wq[ch];
            }
        }
    }
}

/* Depthwise task t = n * OH + oh: one output row, in chunks of up to EM_CV_DW_CHUNK channels
   accumulated in the thread's tile (OW x chunk values). Pixels whose every tap lies inside the
   image sum their taps in registers (vectorized over the channels); the others go tap by tap
   (em_cv_dwtaps). The summation order is the same (taps row-major) either way. */
static inline __attribute__((always_inline)) void EM_T(em_cv_dwrow)(const EM_T(em_cv_ctx) *c, const em_cv_geo g,
                                                                   int64_t t, int64_t tid) {
    const int64_t n = t / g.OH, oh = t % g.OH;
    const ELT *xn = c->x + n * g.H * g.W * g.C;
    ELT *acc = c->tiles + tid * g.tile;
    const int64_t ih0 = oh * g.sh - g.hlo;
    /* interior pixels [a, b): iw = ow sw - wlo + kw dw inside [0, W) for every kw */
    int64_t a = g.wlo > 0 ? (g.wlo + g.sw - 1) / g.sw : 0;
    const int64_t span = g.W + g.wlo - (g.KW - 1) * g.dw;  /* ow sw < span */
    int64_t b = span > 0 ? (span + g.sw - 1) / g.sw : 0;
    if (ih0 < 0 || ih0 + (g.KH - 1) * g.dh >= g.H) a = b = 0;
    a = em_cv_min(a, g.OW);
    b = b < a ? a : em_cv_min(b, g.OW);
    for (int64_t c0 = 0; c0 < g.C; c0 += EM_CV_DW_CHUNK) {
        const int64_t cn = em_cv_min(EM_CV_DW_CHUNK, g.C - c0);
        for (int64_t k = 0; k < a * cn; ++k) acc[k] = 0;
        for (int64_t k = b * cn; k < g.OW * cn; ++k) acc[k] = 0;
        EM_T(em_cv_dwtaps)(c, g, xn, acc, oh, c0, cn, 0, a);
        EM_T(em_cv_dwtaps)(c, g, xn, acc, oh, c0, cn, b, g.OW);
        for (int64_t ow = a; ow < b; ++ow) {
            const ELT *xp = xn + (ih0 * g.W + ow * g.sw - g.wlo) * g.C + c0;
#pragma omp simd
            for (int64_t ch = 0; ch < cn; ++ch) {
                ELT s = 0;
                for (int64_t kh = 0; kh < g.KH; ++kh)
                    for (int64_t kw = 0; kw < g.KW; ++kw)
                        s += xp[(kh * g.dh * g.W + kw * g.dw) * g.C + ch] * c->wp[(kh * g.KW + kw) * g.C + c0 + ch];
                acc[ow * cn + ch] = s;
            }
        }
        for (int64_t ow = 0; ow < g.OW; ++ow) {
            ELT *o = c->out + n * g.osn + oh * g.osh + ow * g.osw + c0 * g.oso;
            if (g.oso == 1) {
                for (int64_t ch = 0; ch < cn; ++ch) o[ch] = acc[ow * cn + ch];
            } else {
                for (int64_t ch = 0; ch < cn; ++ch) o[ch * g.oso] = acc[ow * cn + ch];
            }
        }
    }
}

/* Depthwise on channel planes (the input not channels-last, e.g. NCHW): task t = n * C + ch, one
   plane, no layout copies. The plane's rows are first copied with their padding zeros into the
   thread's buffer (row r is input row r - hlo, column k input column k - wlo, zeros past the row up
   to the end of the last chunk); then chunks of up to EM_CV_DWP pixels of an output row accumulate
   every tap in registers, vectorized over the pixels, taps row-major as the channels-last loop sums
   them. Taps in the padding multiply zeros (a non-finite kernel value propagates as in the
   zero-padded definition). */
#ifndef EM_CV_DWP
#define EM_CV_DWP 64  /* pixels per register chunk (DWP in conv.py) */
#endif

/* nv vectors of output pixels from the padded rows at bp (row stride LP): acc = sum of the taps. */
static inline __attribute__((always_inline)) void EM_T(em_cv_dwchunk)(const ELT *bp, const int64_t LP,
                                                                     const ELT *wk, const em_cv_geo g,
                                                                     const int nv, ELT *o, const int64_t m) {
    enum { VL = EM_CV_BYTES / sizeof(ELT), NV = EM_CV_DWP / VL };
    EM_T(em_cv_v) acc[NV];
#pragma GCC unroll 16
    for (int v = 0; v < nv; ++v) acc[v] = (EM_T(em_cv_v)){0};
    for (int64_t kh = 0; kh < g.KH; ++kh)
        for (int64_t kw = 0; kw < g.KW; ++kw) {
            const EM_T(em_cv_v) w = EM_T(EM_CV_BC)(wk[(kh * g.KW + kw) * g.C]);
            const ELT *p = bp + kh * g.dh * LP + kw * g.dw;
#pragma GCC unroll 16
            for (int v = 0; v < nv; ++v) {
                EM_T(em_cv_v) x;
                if (g.sw == 1) {
                    x = *(const EM_T(em_cv_u) *)(p + v * VL);
                } else {
#pragma GCC unroll 16
                    for (int l = 0; l < VL; ++l) x[l] = p[(v * VL + l) * g.sw];
                }
                acc[v] = EM_T(EM_CV_FMA)(x, w, acc[v]);
            }
        }
    if (m == nv * VL && g.osw == 1) {
#pragma GCC unroll 16
        for (int v = 0; v < nv; ++v) *(EM_T(em_cv_u) *)(o + v * VL) = acc[v];
        return;
    }
    ELT tmp[EM_CV_DWP] __attribute__((aligned(64)));
#pragma GCC unroll 16
    for (int v = 0; v < nv; ++v) *(EM_T(em_cv_v) *)(tmp + v * VL) = acc[v];
    for (int64_t k = 0; k < m; ++k) o[k * g.osw] = tmp[k];
}

static inline __attribute__((always_inline)) void EM_T(em_cv_dwplane)(const EM_T(em_cv_ctx) *c, const em_cv_geo g,
                                                                     int64_t t, int64_t tid) {
    enum { VL = EM_CV_BYTES / sizeof(ELT) };
    if (g.OH <= 0 || g.OW <= 0) return;
    const int64_t n = t / g.C, ch = t % g.C;
    const int64_t OWP = (g.OW + EM_CV_DWP - 1) / EM_CV_DWP * EM_CV_DWP;
    const int64_t L = (g.KW - 1) * g.dw + (OWP - 1) * g.sw + 1, LP = (L + 15) & ~(int64_t)15;
    const int64_t RH = (g.OH - 1) * g.sh + (g.KH - 1) * g.dh + 1;  /* padded rows read */
    ELT *buf = c->tiles + tid * g.tile;
    const ELT *xp = c->xsrc + n * g.xsn + ch * g.xsc;
    const int64_t a = em_cv_min(g.wlo > 0 ? g.wlo : 0, L);  /* buf columns [a, b) hold input columns */
    const int64_t b = em_cv_min(g.wlo + g.W > a ? g.wlo + g.W : a, L);
    for (int64_t r = 0; r < RH; ++r) {
        const int64_t ih = r - g.hlo;
        ELT *d = buf + r * LP;
        if (ih >= 0 && ih < g.H) {
            const ELT *row = xp + ih * g.xsh + (a - g.wlo) * g.xsw;
            for (int64_t k = 0; k < a; ++k) d[k] = 0;
            for (int64_t k = a; k < b; ++k) d[k] = row[(k - a) * g.xsw];
            for (int64_t k = b; k < L; ++k) d[k] = 0;
        } else {
            for (int64_t k = 0; k < L; ++k) d[k] = 0;
        }
    }
    const ELT *wk = c->wp + ch;
    const int64_t full = g.OW / EM_CV_DWP * EM_CV_DWP, tail = g.OW - full;
    for (int64_t oh = 0; oh < g.OH; ++oh) {
        ELT *o = c->y + n * g.osn + ch * g.oso + oh * g.osh;
        const ELT *bp = buf + oh * g.sh * LP;
        for (int64_t ow0 = 0; ow0 < full; ow0 += EM_CV_DWP)
            EM_T(em_cv_dwchunk)(bp + ow0 * g.sw, LP, wk, g, EM_CV_DWP / VL, o + ow0 * g.osw, EM_CV_DWP);
        if (tail)
            EM_T(em_cv_dwchunk)(bp + full * g.sw, LP, wk, g, (int)((tail + VL - 1) / VL), o + full * g.osw, tail);
    }
}

/* ---- Winograd F(2x2, 3x3) for 3x3 stride-1 undilated single-group convolutions -------------------
   Y = A^T [(G g G^T) . (B^T d B)] A per 2x2 output tile: 16 products of (tiles x C) by (C x O) in
   place of 36, the transforms vectorized over the channels. An Inf in the input can come out as NaN
   where the direct sum gives +-Inf (the transforms subtract input values); NaN propagates. */

/* Transformed kernel panel t, panel-major: U[p][e][c][NR] = (G g G^T)[e] for o = p NR + j (a panel's
   16 C NR values contiguous: em_cv_wino streams them from memory while the previous panel runs). */
static inline __attribute__((always_inline)) void EM_T(em_cv_wino_packw)(const EM_T(em_cv_ctx) *c, const em_cv_geo g,
                                                                        int64_t t, int64_t tid) {
    const int64_t NR = 2 * EM_T(EM_CV_VL), p = t;
    ELT bad = 0;  /* x * 0 over the kernel values read: NaN when one is not finite */
    for (int64_t ci = 0; ci < g.C; ++ci)
        for (int64_t j = 0; j < NR; ++j) {
            const int64_t o = p * NR + j;
            ELT u[16];
            if (o < g.Og) {
                ELT w[3][3], r[4][3];
                for (int a = 0; a < 3; ++a)
                    for (int b = 0; b < 3; ++b) {
                        w[a][b] = c->w[o * g.wso + ci * g.wsi + a * g.wsh + b * g.wsw];
                        bad += w[a][b] * 0;
                    }
                for (int b = 0; b < 3; ++b) {  /* G g */
                    r[0][b] = w[0][b];
                    r[1][b] = (ELT)0.5 * (w[0][b] + w[1][b] + w[2][b]);
                    r[2][b] = (ELT)0.5 * (w[0][b] - w[1][b] + w[2][b]);
                    r[3][b] = w[2][b];
                }
                for (int a = 0; a < 4; ++a) {  /* (G g) G^T */
                    u[a * 4 + 0] = r[a][0];
                    u[a * 4 + 1] = (ELT)0.5 * (r[a][0] + r[a][1] + r[a][2]);
                    u[a * 4 + 2] = (ELT)0.5 * (r[a][0] - r[a][1] + r[a][2]);
                    u[a * 4 + 3] = r[a][2];
                }
            } else {
                for (int e = 0; e < 16; ++e) u[e] = 0;
            }
            for (int e = 0; e < 16; ++e) c->wp[((p * 16 + e) * g.C + ci) * NR + j] = u[e];
        }
    c->tiles[tid * g.tile + g.tile - 1] += bad;
}

/* Task t = n * NCH + chunk: CB blocks of MR tiles (row-major over the ceil(OH/2) x ceil(OW/2) tile
   grid), all feature panels. The chunk's tiles are transformed first (V[block][16][MR][C] in the
   thread's tile), then each panel of the transformed kernel multiplies every block in turn: a kernel
   too large for L2 (14x14x256: 4 MiB) is read from memory once per chunk, not once per block. */
static inline __attribute__((always_inline)) void EM_T(em_cv_wino)(const EM_T(em_cv_ctx) *c, const em_cv_geo g,
                                                                  int64_t t, int64_t tid) {
    const int64_t NR = 2 * EM_T(EM_CV_VL), MR = EM_CV_MR, C = g.C;
    const int64_t TW = (g.OW + 1) / 2, T = ((g.OH + 1) / 2) * TW;
    const int64_t n = t / g.NCH, q0 = (t % g.NCH) * MR * g.CB;
    const int64_t nb = (em_cv_min(MR * g.CB, T - q0) + MR - 1) / MR;  /* blocks in this chunk */
    const ELT *xn = c->x + n * g.H * g.W * C;
    ELT *vt = c->tiles + tid * g.tile;  /* V[nb][16][MR][C] */
    ELT zs[64] __attribute__((aligned(64))) = {0};  /* x * 0 over the inputs read, per channel lane */
    for (int64_t bk = 0; bk < nb; ++bk) {
        const int64_t b0 = q0 + bk * MR, mv = em_cv_min(MR, T - b0);
        ELT *v = vt + bk * 16 * MR * C;
        for (int64_t m = 0; m < MR; ++m) {
            if (m >= mv) {
                for (int e = 0; e < 16; ++e)
                    for (int64_t ci = 0; ci < C; ++ci) v[(e * MR + m) * C + ci] = 0;
                continue;
            }
            const int64_t ty = (b0 + m) / TW, tx = (b0 + m) % TW;
            const int64_t ih0 = 2 * ty - g.hlo, iw0 = 2 * tx - g.wlo;
            const ELT *d[4][4];
            for (int a = 0; a < 4; ++a)
                for (int b = 0; b < 4; ++b) {
                    const int64_t ih = ih0 + a, iw = iw0 + b;
                    d[a][b] = (ih >= 0 && ih < g.H && iw >= 0 && iw < g.W) ? xn + (ih * g.W + iw) * C : 0;
                }
            for (int64_t c0 = 0; c0 < C; c0 += 64) {
                const int64_t cn = em_cv_min(64, C - c0);
                ELT s[4][4][64] __attribute__((aligned(64)));
                for (int a = 0; a < 4; ++a)
                    for (int b = 0; b < 4; ++b) {
                        if (d[a][b]) {
                            for (int64_t k = 0; k < cn; ++k) {
                                s[a][b][k] = d[a][b][c0 + k];
                                zs[k] += s[a][b][k] * 0;
                            }
                        } else {
                            for (int64_t k = 0; k < cn; ++k) s[a][b][k] = 0;
                        }
                    }
                ELT r[4][4][64] __attribute__((aligned(64)));
                for (int b = 0; b < 4; ++b) {  /* B^T d */
#pragma omp simd
                    for (int64_t k = 0; k < cn; ++k) {
                        r[0][b][k] = s[0][b][k] - s[2][b][k];
                        r[1][b][k] = s[1][b][k] + s[2][b][k];
                        r[2][b][k] = s[2][b][k] - s[1][b][k];
                        r[3][b][k] = s[1][b][k] - s[3][b][k];
                    }
                }
                for (int a = 0; a < 4; ++a) {  /* (B^T d) B */
                    ELT *o0 = v + ((a * 4 + 0) * MR + m) * C + c0, *o1 = v + ((a * 4 + 1) * MR + m) * C + c0;
                    ELT *o2 = v + ((a * 4 + 2) * MR + m) * C + c0, *o3 = v + ((a * 4 + 3) * MR + m) * C + c0;
#pragma omp simd
                    for (int64_t k = 0; k < cn; ++k) {
                        o0[k] = r[a][0][k] - r[a][2][k];
                        o1[k] = r[a][1][k] + r[a][2][k];
                        o2[k] = r[a][2][k] - r[a][1][k];
                        o3[k] = r[a][1][k] - r[a][3][k];
                    }
                }
            }
        }
    }
    ELT zsum = 0;
    for (int k = 0; k < 64; ++k) zsum += zs[k];
    c->tiles[tid * g.tile + g.tile - 1] += zsum;  /* (the tile's last element: past V) */
    ELT mb[16][EM_CV_MR * 2 * EM_T(EM_CV_VL)] __attribute__((aligned(64)));
    const int64_t pan = 16 * C * NR, lines = pan * (int64_t)sizeof(ELT) / 64;  /* one panel of U */
    const int64_t per = (lines + 16 * nb - 1) / (16 * nb);  /* its lines prefetched per tile */
    for (int64_t p = 0; p < g.P; ++p) {
        const int64_t nv = em_cv_min(NR, g.Og - p * NR);
        ELT pb[2 * EM_T(EM_CV_VL)] __attribute__((aligned(64)));
        const ELT *bias = EM_T(em_cv_pbias)(c, p * NR, nv, pb);
        const ELT *u = c->wp + p * pan;
        const char *next = (const char *)(u + pan);
        for (int64_t bk = 0; bk < nb; ++bk) {
            const int64_t b0 = q0 + bk * MR, mv = em_cv_min(MR, T - b0);
            const ELT *v = vt + bk * 16 * MR * C;
            for (int e = 0; e < 16; ++e) {
                if (nb > 1 && p + 1 < g.P) {  /* the next panel into L2 while this one runs */
                    const int64_t l0 = (bk * 16 + e) * per, l1 = em_cv_min(lines, l0 + per);
                    for (int64_t l = l0; l < l1; ++l) __builtin_prefetch(next + l * 64, 0, 2);
                }
                EM_T(em_cv_tile)(v + e * MR * C, C, 1, 0, 1, 0, C, u + e * C * NR, mb[e], NR, 1, MR, NR, 0, 0);
            }
            for (int64_t m = 0; m < mv; ++m) {
                const int64_t ty = (b0 + m) / TW, tx = (b0 + m) % TW;
                ELT y[2][2][2 * EM_T(EM_CV_VL)] __attribute__((aligned(64)));
#pragma omp simd
                for (int64_t j = 0; j < NR; ++j) {
                    ELT s0[4], s1[4];
                    for (int b = 0; b < 4; ++b) {  /* A^T M */
                        const ELT m0 = mb[b][m * NR + j], m1 = mb[4 + b][m * NR + j];
                        const ELT m2 = mb[8 + b][m * NR + j], m3 = mb[12 + b][m * NR + j];
                        s0[b] = m0 + m1 + m2;
                        s1[b] = m1 - m2 - m3;
                    }
                    y[0][0][j] = s0[0] + s0[1] + s0[2];
                    y[0][1][j] = s0[1] - s0[2] - s0[3];
                    y[1][0][j] = s1[0] + s1[1] + s1[2];
                    y[1][1][j] = s1[1] - s1[2] - s1[3];
                }
                if (bias || g.relu)  /* the fused epilogue (em_cv_epi's) */
                    for (int a = 0; a < 2; ++a)
                        for (int b = 0; b < 2; ++b) {
                            EM_T(em_cv_v) *yv = (EM_T(em_cv_v) *)y[a][b];
                            EM_T(em_cv_epi1)(yv, bias, g.relu);
                        }
                for (int a = 0; a < 2; ++a)
                    for (int b = 0; b < 2; ++b) {
                        const int64_t oh = 2 * ty + a, ow = 2 * tx + b;
                        if (oh >= g.OH || ow >= g.OW) continue;
                        ELT *o = c->out + n * g.osn + oh * g.osh + ow * g.osw + p * NR * g.oso;
                        if (g.oso == 1) {
                            for (int64_t j = 0; j < nv; ++j) o[j] = y[a][b][j];
                        } else {
                            for (int64_t j = 0; j < nv; ++j) o[j * g.oso] = y[a][b][j];
                        }
                    }
            }
        }
    }
}

/* ---- Kernel-gradient shape: a kernel larger than the output (the kernel cotangent's transpose) ----
   out[b, o, p, q] = sum over (f, i, j) of x[b, f, p sh + i dh - hlo, q sw + j dw - wlo] w[o, f, i, j]
   as one GEMM over every image: M = (p, q, b) (few), N = o, K = (f, i, j) (the whole kernel: the
   original convolution's output pixels of every image). Vectors run along b (the original input
   features, contiguous in NHWC), broadcasts along o (the cotangent's features): a register tile of
   NO features x up to 3 vectors of (p, q, b) sums K = KH x KW values per image. Image f's rows are
   first copied with their padding into xp[r][c][BV] (b padded with zeros to BV, a multiple of the
   vector length), so a vector of tap (p, q) is one load at a fixed offset and taps in the padding
   multiply zeros (a non-finite kernel value propagates as in the zero-padded definition). The
   images run one after another (copy, multiply), every tile accumulating into its slot of the
   workspace; the last pass moves the sums out. Tasks are groups of NO-feature tiles, which share
   each chunk of kernel rows in cache. */
#ifndef EM_CV_WG_COMMON
#define EM_CV_WG_COMMON
#if EM_CV_BYTES == 64
#define EM_CV_WG_NO 8   /* features per register tile: 8 x 3 zmm accumulators */
#else
#define EM_CV_WG_NO 4   /* 4 x 3 ymm accumulators of the 16 registers */
#endif
#define EM_CV_WG_NV 3   /* vectors of (p, q, b) per register tile */
#endif

/* Padded row t = r of the image (c->xsrc and c->w offset to image f): xp[r][c][b] = x[b, f, r - hlo,
   c - wlo] (zeros outside; b < B). */
static inline __attribute__((always_inline)) void EM_T(em_cv_wg_copy)(const EM_T(em_cv_ctx) *c, const em_cv_geo g,
                                                                     const int64_t B, int64_t t) {
    const int64_t BV = (B + EM_T(EM_CV_VL) - 1) / EM_T(EM_CV_VL) * EM_T(EM_CV_VL);
    const int64_t WP = (g.OW - 1) * g.sw + (g.KW - 1) * g.dw + 1, h = t - g.hlo;
    ELT *d = c->xt + t * WP * BV;
    for (int64_t col = 0; col < WP; ++col) {
        const int64_t w = col - g.wlo;
        ELT *dd = d + col * BV;
        if (h < 0 || h >= g.H || w < 0 || w >= g.W) {
            for (int64_t b = 0; b < BV; ++b) dd[b] = 0;
            continue;
        }
        const ELT *s = c->xsrc + h * g.xsh + w * g.xsw;
        if (g.xsn == 1) {
            for (int64_t b = 0; b < B; ++b) dd[b] = s[b];
        } else {
            for (int64_t b = 0; b < B; ++b) dd[b] = s[b * g.xsn];
        }
        for (int64_t b = B; b < BV; ++b) dd[b] = 0;
    }
}

/* One register tile over kernel rows [i0, i1) of image f: acc (no features from wk, nv vectors at
   the xp offsets off[]) loaded from and stored back to its slot s[NO][NV][VL]. */
static inline __attribute__((always_inline)) void EM_T(em_cv_wg_tile)(
        const ELT *xp, const int64_t *off, const int nv, const ELT *wk, const int no, const em_cv_geo g,
        const int64_t WP, const int64_t BV, const int64_t i0, const int64_t i1, ELT *s) {
    enum { NO = EM_CV_WG_NO, NV = EM_CV_WG_NV };
    const int64_t VL = EM_T(EM_CV_VL);
    EM_T(em_cv_v) acc[NO][NV];
#pragma GCC unroll 8
    for (int o = 0; o < NO; ++o)
#pragma GCC unroll 3
        for (int v = 0; v < nv; ++v) acc[o][v] = *(const EM_T(em_cv_v) *)(s + (o * NV + v) * VL);
    const int64_t o0 = off[0], o1 = nv > 1 ? off[1] : 0, o2 = nv > 2 ? off[2] : 0;
    for (int64_t i = i0; i < i1; ++i) {
        const ELT *xr = xp + i * g.dh * WP * BV;
        const ELT *wr = wk + i * g.wsh;
        for (int64_t j = 0; j < g.KW; ++j) {
            const ELT *xq = xr + j * g.dw * BV, *wq = wr + j * g.wsw;
            const EM_T(em_cv_v) a0 = *(const EM_T(em_cv_v) *)(xq + o0);
            const EM_T(em_cv_v) a1 = nv > 1 ? *(const EM_T(em_cv_v) *)(xq + o1) : a0;
            const EM_T(em_cv_v) a2 = nv > 2 ? *(const EM_T(em_cv_v) *)(xq + o2) : a0;
#pragma GCC unroll 8
            for (int o = 0; o < NO; ++o) {
                const ELT sv = wq[(o < no ? o : no - 1) * g.wso];
                const EM_T(em_cv_v) b = EM_T(EM_CV_BC)(sv);
                acc[o][0] = EM_T(EM_CV_FMA)(b, a0, acc[o][0]);
                if (nv > 1) acc[o][1] = EM_T(EM_CV_FMA)(b, a1, acc[o][1]);
                if (nv > 2) acc[o][2] = EM_T(EM_CV_FMA)(b, a2, acc[o][2]);
            }
        }
    }
#pragma GCC unroll 8
    for (int o = 0; o < NO; ++o)
#pragma GCC unroll 3
        for (int v = 0; v < nv; ++v) *(EM_T(em_cv_v) *)(s + (o * NV + v) * VL) = acc[o][v];
}

/* Task t of the image (c->w offset to it): feature tiles [t OG, t OG + OG) over every (p, q, b) tile, kernel rows in
   chunks of RC (the chunk's kernel values stay in cache across the tiles). c->tiles holds the
   accumulators: slot (feature tile, (p, q, b) tile) of NO x NV vectors. */
static inline __attribute__((always_inline)) void EM_T(em_cv_wg)(const EM_T(em_cv_ctx) *c, const em_cv_geo g,
                                                                const int64_t B, const int64_t OG,
                                                                const int64_t RC, int64_t t) {
    enum { NO = EM_CV_WG_NO, NV = EM_CV_WG_NV };
    const int64_t VL = EM_T(EM_CV_VL), BV = (B + VL - 1) / VL * VL;
    const int64_t WP = (g.OW - 1) * g.sw + (g.KW - 1) * g.dw + 1;
    const int64_t MV = g.OH * g.OW * (BV / VL), MT = (MV + NV - 1) / NV, OT = (g.Og + NO - 1) / NO;
    const int64_t ot0 = t * OG, ot1 = em_cv_min(OT, ot0 + OG);
    for (int64_t i0 = 0; i0 < g.KH; i0 += RC) {
        const int64_t i1 = em_cv_min(g.KH, i0 + RC);
        for (int64_t mt = 0; mt < MT; ++mt) {
            const int nv = (int)em_cv_min(NV, MV - mt * NV);
            int64_t off[NV];
            for (int v = 0; v < nv; ++v) {  /* vector m = (p, q, b block) reads xp[p sh][q sw][bv VL] */
                const int64_t m = mt * NV + v, pq = m / (BV / VL), bv = m % (BV / VL);
                off[v] = ((pq / g.OW) * g.sh * WP + (pq % g.OW) * g.sw) * BV + bv * VL;
            }
            for (int64_t ot = ot0; ot < ot1; ++ot) {
                const int no = (int)em_cv_min(NO, g.Og - ot * NO);
                ELT *s = c->tiles + (ot * MT + mt) * NO * NV * VL;
                const ELT *wk = c->w + ot * NO * g.wso;
                if (no == NO && nv == NV)
                    EM_T(em_cv_wg_tile)(c->xt, off, NV, wk, NO, g, WP, BV, i0, i1, s);
                else if (nv == 3)
                    EM_T(em_cv_wg_tile)(c->xt, off, 3, wk, no, g, WP, BV, i0, i1, s);
                else if (nv == 2)
                    EM_T(em_cv_wg_tile)(c->xt, off, 2, wk, no, g, WP, BV, i0, i1, s);
                else
                    EM_T(em_cv_wg_tile)(c->xt, off, 1, wk, no, g, WP, BV, i0, i1, s);
            }
        }
    }
}

/* Move the sums out: out[b, o, p, q] from the slots (zeroed before the first image). */
static inline __attribute__((always_inline)) void EM_T(em_cv_wg_out)(const EM_T(em_cv_ctx) *c, const em_cv_geo g,
                                                                    const int64_t B) {
    enum { NO = EM_CV_WG_NO, NV = EM_CV_WG_NV };
    const int64_t VL = EM_T(EM_CV_VL), BV = (B + VL - 1) / VL * VL;
    const int64_t MV = g.OH * g.OW * (BV / VL), MT = (MV + NV - 1) / NV;
    for (int64_t o = 0; o < g.Og; ++o)
        for (int64_t m = 0; m < MV; ++m) {
            const int64_t pq = m / (BV / VL), b0 = (m % (BV / VL)) * VL;
            const ELT *s = c->tiles + (((o / NO) * MT + m / NV) * NO * NV + (o % NO) * NV + m % NV) * VL;
            ELT *d = c->y + o * g.oso + (pq / g.OW) * g.osh + (pq % g.OW) * g.osw;
            for (int64_t l = 0; l < em_cv_min(VL, B - b0); ++l) d[(b0 + l) * g.osn] = s[l];
        }
}

/* ---- Input-dilated convolutions (a strided convolution's input cotangent) ----------------------------
   Each residue class (rh, rw) of the output position modulo the dilation (ah, aw) is a stride-1
   convolution of the undilated input with the taps that reach it, written channels-last into the
   staging area at off[p] (p = rh aw + rw; -1: no tap reaches it, zeros), pu[p] x pv[p] pixels per
   image. Output row t = n H + y is assembled from them in one pass (writes along the features, or
   along the pixels when those are contiguous). */
static inline __attribute__((always_inline)) void EM_T(em_cv_dil_out)(
        const ELT *stage, ELT *y, const int64_t *off, const int64_t *pu, const int64_t *pv, const int64_t ah,
        const int64_t aw, const int64_t H, const int64_t W, const int64_t O, const int64_t osn, const int64_t oso,
        const int64_t osh, const int64_t osw, int64_t t) {
    const int64_t n = t / H, yy = t % H, rh = yy % ah, u = yy / ah;
    ELT *d = y + n * osn + yy * osh;
    const ELT *src[64];  /* the row of each residue rw of the column (NULL: zeros) */
    for (int64_t rw = 0; rw < aw && rw < 64; ++rw) {
        const int64_t p = rh * aw + rw;
        src[rw] = off[p] < 0 ? 0 : stage + off[p] + ((n * pu[p] + u) * pv[p]) * O;
    }
    if (osw == 1 && oso != 1) {  /* pixels contiguous per feature (NCHW) */
        for (int64_t o = 0; o < O; ++o)
            for (int64_t x = 0; x < W; ++x) {
                const ELT *s = src[x % aw];
                d[o * oso + x] = s ? s[(x / aw) * O + o] : 0;
            }
        return;
    }
    for (int64_t x = 0; x < W; ++x) {
        const ELT *s = src[x % aw];
        ELT *dd = d + x * osw;
        if (!s) {
            for (int64_t o = 0; o < O; ++o) dd[o * oso] = 0;
        } else {
            s += (x / aw) * O;
            for (int64_t o = 0; o < O; ++o) dd[o * oso] = s[o];
        }
    }
}
