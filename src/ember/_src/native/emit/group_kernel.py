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

from ember._src.native.base.gemm_sizes import GROUP_MR as MR
from ember._src.native.base.gemm_sizes import group_kernel_available as available
from ember._src.native.base.gemm_sizes import group_panel_width as panel_width
from ember._src.native.csrc import load

__all__ = ["MR", "available", "c_source", "panel_width"]


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






def c_source() -> str:
    """The static C helpers ``em_gk_pack`` and ``em_gk_rows`` (needs AVX2 and FMA: :func:`available`)."""
    rows = f"#define EM_GK_MR {MR}\n" + load("group_rows.h") + "#undef EM_GK_MR\n"
    return load("group_pack.h") + _tile(2) + _tile(1) + rows
