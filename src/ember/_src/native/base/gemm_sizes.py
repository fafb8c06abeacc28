"""Size rules of matrix products that more than one stage reads (the rewrite passes that prepare
loops, the GEMM strategies of the scheduler, the loop-body emitter). The GEMM kernel's own size
rules live with its library (:mod:`ember._src.native.runtime.gemm_library`)."""

from __future__ import annotations

# products up to this many multiply-adds inside loop bodies are C loops, not BLAS (a BLAS call per
# step of an RNN costs more than its matrix-vector product)
SMALL_GEMM_FLOPS = 1 << 15
