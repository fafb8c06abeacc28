"""``cublasGemmStridedBatchedEx`` written in NumPy over host copies of the buffers, from its
documented definition: per batch ``i``, ``C_i = op(A_i) op(B_i)`` (alpha 1, beta 0), each matrix
stored column-major at ``ptr + i * stride`` with its leading dimension, ``op`` transposing where
asked. The tests evaluate the arguments ember computes with it and compare with the row-major
product, so wrong sizes, leading dimensions, strides or op flags show as wrong values; arguments
cuBLAS rejects (a leading dimension below the stored matrix's rows) fail here too. A pointer may
lie inside a buffer (a call of a loop over an outer batch): it is resolved to the buffer whose
address is the nearest below it, its byte offset divided by the element size of the call's
data type."""

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


ITEMSIZE = {0: 4, 1: 8, 2: 2, 14: 2}  # cudaDataType -> bytes


def resolve(mem: dict[int, np.ndarray], ptr: int, data_type: int) -> tuple[np.ndarray, int]:
    """The buffer of ``mem`` that the device pointer ``ptr`` points into and the element offset."""
    base = max((p for p in mem if p <= ptr), default=None)
    assert base is not None, f"pointer {ptr} below every buffer"
    off, rem = divmod(ptr - base, ITEMSIZE[data_type])
    assert rem == 0 and off < max(mem[base].size, 1), f"pointer {ptr} not an element of the buffer at {base}"
    return mem[base], off


def column_major_gemm(a: dict, mem: dict[int, np.ndarray]) -> None:
    """Run the call ``a`` (``cuda_blas.gemm_arguments``'s dict) on the host buffers ``mem``
    (pointer -> flat array), writing its ``C``; the C matrices of the batches must not overlap."""
    m, n, k = a["m"], a["n"], a["k"]
    (abuf, aoff), (bbuf, boff), (cbuf, coff) = (resolve(mem, a[x], a[x + "type"]) for x in "ABC")
    written: set[int] = set()
    ta, tb = a["transa"] == 1, a["transb"] == 1
    assert a["lda"] >= max(1, k if ta else m), "lda below the rows of the stored A"
    assert a["ldb"] >= max(1, n if tb else k), "ldb below the rows of the stored B"
    assert a["ldc"] >= max(1, m), "ldc below m"
    for i in range(a["batchCount"]):
        sa = _stored(abuf, aoff + i * a["strideA"], a["lda"], *((k, m) if ta else (m, k)))
        sb = _stored(bbuf, boff + i * a["strideB"], a["ldb"], *((n, k) if tb else (k, n)))
        c = (sa.T if ta else sa) @ (sb.T if tb else sb)
        r, col = np.meshgrid(np.arange(m), np.arange(n), indexing="ij")
        index = coff + i * a["strideC"] + r + col * a["ldc"]
        assert not written & set(index.ravel().tolist()), "batches write the same element"
        written |= set(index.ravel().tolist())
        cbuf[index] = c


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
