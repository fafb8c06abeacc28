"""Size rules of matrix products that more than one stage reads (the rewrite passes that prepare
loops, the GEMM strategies of the scheduler, the loop-body emitter)."""

from __future__ import annotations

# products up to this many multiply-adds inside loop bodies are C loops, not BLAS (a BLAS call per
# step of an RNN costs more than its matrix-vector product)
SMALL_GEMM_FLOPS = 1 << 15
