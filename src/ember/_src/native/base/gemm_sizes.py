"""Size rules of matrix products that more than one stage reads (the rewrite passes that prepare
loops, the GEMM strategies of the scheduler, the loop-body emitter), and the tile facts of the
attention group kernel (:mod:`ember._src.native.emit.group_kernel`) that the scheduler sizes its
panels by. The GEMM kernel's own size rules live with its library
(:mod:`ember._src.native.runtime.gemm_library`)."""

from __future__ import annotations

# products up to this many multiply-adds inside loop bodies are C loops, not BLAS (a BLAS call per
# step of an RNN costs more than its matrix-vector product)
SMALL_GEMM_FLOPS = 1 << 15

# the attention group kernel's register tiles: rows per block (6 x 16 tiles keep 12 accumulators,
# two panel vectors and a broadcast in ymm) and vectors of 8 floats per tile row (16 columns; a
# last 8-column piece uses one)
GROUP_MR = 6
GROUP_NV = 2


def group_panel_width(n: int) -> int:
    """Columns of a packed panel of the group kernel: ``n`` rounded up to a multiple of 8."""
    return (n + 7) // 8 * 8


def group_kernel_available() -> bool:
    """Whether programs on this machine may use the group kernel (GCC with AVX2 and FMA: where the
    GEMM kernel library builds)."""
    from ember._src.native.runtime import gemm_library

    return gemm_library.kernel_symbol() is not None
