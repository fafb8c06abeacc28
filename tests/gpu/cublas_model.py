"""``cublasGemmStridedBatchedEx`` written in NumPy over host copies of the buffers, from its
documented definition: per batch ``i``, ``C_i = op(A_i) op(B_i)`` (alpha 1, beta 0), each matrix
stored column-major at ``ptr + i * stride`` with its leading dimension, ``op`` transposing where
asked. The tests evaluate the arguments ember computes with it and compare with the row-major
product, so wrong sizes, leading dimensions, strides or op flags show as wrong values; arguments
cuBLAS rejects (a leading dimension below the stored matrix's rows) fail here too."""

from __future__ import annotations

import numpy as np


def _stored(buf: np.ndarray, offset: int, ld: int, rows: int, cols: int) -> np.ndarray:
    """The ``rows x cols`` column-major matrix at ``offset`` of ``buf`` with leading dimension
    ``ld`` (an IndexError where it reaches past the buffer)."""
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    index = offset + r + c * ld
    if index.size and index.max() >= buf.size:
        raise IndexError(f"the matrix reaches element {index.max()} of a buffer of {buf.size}")
    return buf[index]


def column_major_gemm(a: dict, mem: dict[int, np.ndarray]) -> None:
    """Run the call ``a`` (``cuda_blas.gemm_arguments``'s dict) on the host buffers ``mem``
    (pointer -> flat array), writing its ``C``."""
    m, n, k = a["m"], a["n"], a["k"]
    ta, tb = a["transa"] == 1, a["transb"] == 1
    assert a["lda"] >= max(1, k if ta else m), "lda below the rows of the stored A"
    assert a["ldb"] >= max(1, n if tb else k), "ldb below the rows of the stored B"
    assert a["ldc"] >= max(1, m), "ldc below m"
    for i in range(a["batchCount"]):
        sa = _stored(mem[a["A"]], i * a["strideA"], a["lda"], *((k, m) if ta else (m, k)))
        sb = _stored(mem[a["B"]], i * a["strideB"], a["ldb"], *((n, k) if tb else (k, n)))
        c = (sa.T if ta else sa) @ (sb.T if tb else sb)
        r, col = np.meshgrid(np.arange(m), np.arange(n), indexing="ij")
        mem[a["C"]][i * a["strideC"] + r + col * a["ldc"]] = c
