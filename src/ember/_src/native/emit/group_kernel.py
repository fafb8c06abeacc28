"""Row-block products for batch-interleaved ``gemm -> row kernel -> gemm`` groups (attention).

A group (:mod:`.batch_groups`) computes, per batch, ``S = alpha1 op(A1) op(B1)`` (``m x n``), a row
kernel ``P = R(S)`` and ``O = alpha2 P op(B2)`` (``m x n2``). Per batch these helpers pack ``op(B1)``
(``k1 x n``, e.g. ``K^T``: 16 KiB for 128 keys of 32) and ``op(B2)`` (``n x n2``, e.g. ``V``) once
into zero-padded row panels that stay in L1/L2, then walk the rows in blocks of ``MR``: the block's
rows of ``S`` (register tiles of ``MR x 16``, the whole contraction in registers, ``A1`` read in
place through its strides), the row kernel on those rows, and the block's rows of ``O`` (``P``
read from the ``MR``-row buffer the row kernel just wrote, still in L1). ``S`` and ``P`` never
exist beyond one row block.

The products are register-blocked FMA loops over GCC vector types (AVX2 + FMA, the ``-march=native``
of such a CPU; :func:`available`), summing each element's terms in contraction order, then scaling
by alpha (as the small-GEMM kernel and BLAS do, up to summation order).
"""

from __future__ import annotations

from ember._src.native.csrc import load

MR = 6  # rows per block: 6 x 16 tiles keep 12 accumulators, two panel vectors and a broadcast in ymm
NV = 2  # vectors of 8 floats per tile row (16 columns); a last 8-column piece uses one

__all__ = ["MR", "available", "c_source", "panel_width"]


def available() -> bool:
    """Whether programs on this machine may use these helpers (GCC with AVX2 and FMA)."""
    from ember._src.native.emit import gemm_kernel

    return gemm_kernel.kernel_symbol() is not None


def panel_width(n: int) -> int:
    """Columns of a packed panel: ``n`` rounded up to a multiple of 8."""
    return (n + 7) // 8 * 8


def _tile(nv: int) -> str:
    """``em_gk_tile{w}``: rows ``< mr`` of an ``MR x w`` block of ``C = alpha A Bp``, columns ``< cols``
    (stores straight from the accumulators when the block is whole)."""
    w = 8 * nv
    acc = [[f"c{r}_{v}" for v in range(nv)] for r in range(MR)]
    lines = [
        f"static inline void em_gk_tile{w}(int64_t k, const float *const *ar, int64_t csa, const float *bp,",
        "                                 int64_t np, float alpha, int64_t mr, int64_t cols, float *c,",
        "                                 int64_t ldc) {",
        "    em_gv8 " + ", ".join(f"{x} = {{0}}" for row in acc for x in row) + ";",
        *(f"    const float *a{r} = ar[{r}];" for r in range(MR)),
        "    for (int64_t p = 0; p < k; ++p) {",
        *(f"        const em_gv8 b{v} = *(const em_gv8 *)(bp + p * np + {8 * v});" for v in range(nv)),
    ]
    for r in range(MR):
        lines.append(f"        {{ const float x = a{r}[p * csa]; "
                     "const em_gv8 a = {x, x, x, x, x, x, x, x};")
        lines.extend(f"          {acc[r][v]} = EM_GFMA(a, b{v}, {acc[r][v]});" for v in range(nv))
        lines.append("        }")
    lines += ["    }",
              "    const em_gv8 al = {alpha, alpha, alpha, alpha, alpha, alpha, alpha, alpha};",
              f"    if (mr == {MR} && cols == {w}) {{",
              *(f"        *(em_gv8u *)(c + {r} * ldc + {8 * v}) = al * {acc[r][v]};"
                for r in range(MR) for v in range(nv)),
              "        return;",
              "    }",
              f"    em_gv8 t[{MR * nv}];",
              *(f"    t[{r * nv + v}] = al * {acc[r][v]};" for r in range(MR) for v in range(nv)),
              "    for (int64_t r = 0; r < mr; ++r)",
              "        for (int64_t j = 0; j < cols; ++j)",
              f"            c[r * ldc + j] = ((const float *)(t + r * {nv}))[j];",
              "}"]
    return "\n".join(lines) + "\n"


_HEAD = """\
/* Row-block products of batch-interleaved groups (group_kernel.py): AVX2/FMA register tiles. */
typedef float em_gv8 __attribute__((vector_size(32)));
typedef float em_gv8u __attribute__((vector_size(32), aligned(4)));
#define EM_GFMA(a, b, c) __builtin_ia32_vfmaddps256((a), (b), (c))
/* bp[p * np + j0 + i] = B(p, j0 + i) for p in [p0, p0 + 8), i < 8, where row j0 + i of B^T (B's
   column, 8 contiguous floats from p0) starts at src + i * csb: an 8 x 8 transpose in registers */
static inline void em_gk_t8x8(const float *src, int64_t csb, float *dst, int64_t np) {
    em_gv8 r0 = *(const em_gv8u *)(src), r1 = *(const em_gv8u *)(src + csb),
           r2 = *(const em_gv8u *)(src + 2 * csb), r3 = *(const em_gv8u *)(src + 3 * csb),
           r4 = *(const em_gv8u *)(src + 4 * csb), r5 = *(const em_gv8u *)(src + 5 * csb),
           r6 = *(const em_gv8u *)(src + 6 * csb), r7 = *(const em_gv8u *)(src + 7 * csb);
    em_gv8 t0 = __builtin_ia32_unpcklps256(r0, r1), t1 = __builtin_ia32_unpckhps256(r0, r1),
           t2 = __builtin_ia32_unpcklps256(r2, r3), t3 = __builtin_ia32_unpckhps256(r2, r3),
           t4 = __builtin_ia32_unpcklps256(r4, r5), t5 = __builtin_ia32_unpckhps256(r4, r5),
           t6 = __builtin_ia32_unpcklps256(r6, r7), t7 = __builtin_ia32_unpckhps256(r6, r7);
    em_gv8 u0 = __builtin_ia32_shufps256(t0, t2, 0x44), u1 = __builtin_ia32_shufps256(t0, t2, 0xEE),
           u2 = __builtin_ia32_shufps256(t1, t3, 0x44), u3 = __builtin_ia32_shufps256(t1, t3, 0xEE),
           u4 = __builtin_ia32_shufps256(t4, t6, 0x44), u5 = __builtin_ia32_shufps256(t4, t6, 0xEE),
           u6 = __builtin_ia32_shufps256(t5, t7, 0x44), u7 = __builtin_ia32_shufps256(t5, t7, 0xEE);
    *(em_gv8u *)(dst) = __builtin_ia32_vperm2f128_ps256(u0, u4, 0x20);
    *(em_gv8u *)(dst + np) = __builtin_ia32_vperm2f128_ps256(u1, u5, 0x20);
    *(em_gv8u *)(dst + 2 * np) = __builtin_ia32_vperm2f128_ps256(u2, u6, 0x20);
    *(em_gv8u *)(dst + 3 * np) = __builtin_ia32_vperm2f128_ps256(u3, u7, 0x20);
    *(em_gv8u *)(dst + 4 * np) = __builtin_ia32_vperm2f128_ps256(u0, u4, 0x31);
    *(em_gv8u *)(dst + 5 * np) = __builtin_ia32_vperm2f128_ps256(u1, u5, 0x31);
    *(em_gv8u *)(dst + 6 * np) = __builtin_ia32_vperm2f128_ps256(u2, u6, 0x31);
    *(em_gv8u *)(dst + 7 * np) = __builtin_ia32_vperm2f128_ps256(u3, u7, 0x31);
}
/* B(p, j) (p < k, j < n) at b[p * rsb + j * csb] into bp[p * np + j], zero past n (np % 8 == 0) */
static void em_gk_pack(int64_t k, int64_t n, int64_t np, const float *b, int64_t rsb, int64_t csb,
                       float *restrict bp) {
    if (rsb == 1 && csb != 1 && k % 8 == 0) {  /* B^T rows contiguous (K of attention): 8 x 8 blocks */
        const int64_t n8 = n / 8 * 8;
        for (int64_t j = 0; j < n8; j += 8)
            for (int64_t p = 0; p < k; p += 8) em_gk_t8x8(b + j * csb + p, csb, bp + p * np + j, np);
        for (int64_t j = n8; j < n; ++j)
            for (int64_t p = 0; p < k; ++p) bp[p * np + j] = b[j * csb + p];
        for (int64_t p = 0; p < k; ++p)
            for (int64_t j = n; j < np; ++j) bp[p * np + j] = 0.0f;
    } else if (csb == 1) {
        for (int64_t p = 0; p < k; ++p) {
            for (int64_t j = 0; j < n; ++j) bp[p * np + j] = b[p * rsb + j];
            for (int64_t j = n; j < np; ++j) bp[p * np + j] = 0.0f;
        }
    } else {  /* columns of B are contiguous runs (rsb == 1 when B is a transposed operand) */
        for (int64_t j = 0; j < n; ++j) {
            const float *src = b + j * csb;
            for (int64_t p = 0; p < k; ++p) bp[p * np + j] = src[p * rsb];
        }
        for (int64_t p = 0; p < k; ++p)
            for (int64_t j = n; j < np; ++j) bp[p * np + j] = 0.0f;
    }
}
"""




def c_source() -> str:
    """The static C helpers ``em_gk_pack`` and ``em_gk_rows`` (needs AVX2 and FMA: :func:`available`)."""
    rows = f"#define EM_GK_MR {MR}\n" + load("group_rows.h") + "#undef EM_GK_MR\n"
    return _HEAD + _tile(2) + _tile(1) + rows
