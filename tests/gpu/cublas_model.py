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


EPILOGUE_FUNCTIONS = {
    4: lambda x: x,  # CUBLASLT_EPILOGUE_BIAS
    6: lambda x: np.maximum(x, 0.0),  # CUBLASLT_EPILOGUE_RELU_BIAS
    36: lambda x: 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3))),  # _GELU_BIAS
}


def lt_matmul(call: dict, mem: dict[int, np.ndarray]) -> None:
    """Run a recorded ``cublasLtMatmul`` (``tests/gpu/fake_cuda.py``'s ``RecordingBlasLt``) on the
    host buffers ``mem``: per batch ``D = epilogue(alpha op(A) op(B) + beta C + bias)``, each
    matrix described by its layout (stored rows, columns, leading dimension, batch count and
    stride: attributes 5 and 6), ``op`` by the descriptor's TRANSA/TRANSB (3, 4), the epilogue (7)
    and the bias pointer (8): a vector along D's rows."""
    attrs = call["desc"]["attrs"]
    ta, tb = attrs.get(3, 0) == 1, attrs.get(4, 0) == 1
    a, b, d = call["Adesc"], call["Bdesc"], call["Ddesc"]
    batch = d["attrs"].get(5, 1)
    assert a["attrs"].get(5, 1) == b["attrs"].get(5, 1) == batch and call["C"] == call["D"]
    for lay in (a, b, d):
        assert lay["ld"] >= max(1, lay["rows"]), "a leading dimension below the stored rows"
    bias = mem[attrs[8]]
    assert bias.size >= d["rows"]
    for i in range(batch):
        sa = _stored(mem[call["A"]], i * a["attrs"].get(6, 0), a["ld"], a["rows"], a["cols"])
        sb = _stored(mem[call["B"]], i * b["attrs"].get(6, 0), b["ld"], b["rows"], b["cols"])
        prod = call["alpha"] * ((sa.T if ta else sa) @ (sb.T if tb else sb))
        assert prod.shape == (d["rows"], d["cols"]) and call["beta"] == 0.0
        value = EPILOGUE_FUNCTIONS[attrs[7]](prod + bias[:d["rows"], None])
        r, c = np.meshgrid(np.arange(d["rows"]), np.arange(d["cols"]), indexing="ij")
        mem[call["D"]][i * d["attrs"].get(6, 0) + r + c * d["ld"]] = value
