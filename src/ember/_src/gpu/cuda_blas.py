"""cuBLAS for the CUDA backend's GEMM steps (kernels of kind ``gemm``, :func:`.gemm_layouts.gemm_layout`).

The library is found at run time and loaded with ctypes: ``$EMBER_CUBLAS`` (a path to
``libcublas.so``), the lib directory of the ``nvidia-cublas-cu13`` / ``nvidia-cublas-cu12`` wheels
(CuPy and PyTorch use the same wheels) on ``sys.path``, the CUDA toolkit (``$CUDA_HOME``,
``$CUDA_PATH``, ``/usr/local/cuda*``), then the loader's own search. Where none loads, every GEMM
step launches its tiled kernel and the reason is logged once (logger ``ember.gpu``). ember does not
depend on cuBLAS: it is in the ``gpu`` extra.

A step is one ``cublasGemmStridedBatchedEx`` on the call stream (so it is captured into the
program's graph), or one per index of the outer batch dimensions that no single batch stride
reads (``einsum("bqhd,bkhd->bhqk")``: a call per ``b``, over the heads). ember's buffers are
row-major and cuBLAS is column-major: a row-major
``C[b] = A[b] @ B[b]`` (M x N) is the column-major ``C^T = B^T A^T`` (N x M), so cuBLAS gets
``m = N``, ``n = M``, the rhs buffer as its first operand and the lhs buffer as its second, each
transposed where the buffer stores its matrix the other way round, with the leading dimension and
batch stride the buffer has (:func:`gemm_arguments`): an operand read through a ``transpose`` or
with its batch dimensions inside (``einsum("mbk,bkn->bmn")``) is read in place, no copy.

Precision (float32 operands): full float32 (``CUBLAS_COMPUTE_32F``) unless the product's
``precision=`` or else ``jax_default_matmul_precision`` says otherwise: ``"tensorfloat32"`` / ``"high"`` /
``"bfloat16_3x"`` is TF32 (``CUBLAS_COMPUTE_32F_FAST_TF32``), ``"bfloat16"`` / ``"default"`` /
``"fastest"`` is one bfloat16 pass (``CUBLAS_COMPUTE_32F_FAST_16BF``). float16 and bfloat16
operands accumulate in float32; float64 computes in float64.
"""

from __future__ import annotations

import ctypes
import glob
import logging
import os
import sys
from typing import Any

import numpy as np

from ember._src.prims.dot import Precision, matmul_precision_setting

LOG = logging.getLogger("ember.gpu")
OP_N, OP_T = 0, 1
DATA_TYPES = {"float32": 0, "float64": 1, "float16": 2, "bfloat16": 14}  # cudaDataType
COMPUTE_32F, COMPUTE_32F_FAST_16BF, COMPUTE_32F_FAST_TF32, COMPUTE_64F = 68, 75, 77, 70
GEMM_DEFAULT = -1  # cublasGemmAlgo_t
WORKSPACE = 32 << 20  # bytes: cuBLAS's workspace, set once so that captured calls allocate nothing
SYMBOLS = ("cublasCreate_v2", "cublasDestroy_v2", "cublasSetStream_v2", "cublasSetWorkspace_v2",
           "cublasGemmStridedBatchedEx")

_STATE: dict[str, Any] = {}


def candidates() -> list[str]:
    """Where :func:`load` looks for libcublas, in order (paths, then sonames for the loader)."""
    out = [os.environ["EMBER_CUBLAS"]] if os.environ.get("EMBER_CUBLAS") else []
    for base in sys.path:
        for sub in ("nvidia/cu13/lib", "nvidia/cublas/lib"):
            out += sorted(glob.glob(os.path.join(base, sub, "libcublas.so.*")), reverse=True)
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda",
             *sorted(glob.glob("/usr/local/cuda-*"), reverse=True)]
    for root in roots:
        if root:
            out += sorted(glob.glob(os.path.join(root, "lib64", "libcublas.so.*")), reverse=True)
    return out + ["libcublas.so.13", "libcublas.so.12", "libcublas.so"]


def _open(path: str) -> Any:
    """The library at ``path``, its libcublasLt (same directory) loaded first; raises OSError, or
    AttributeError naming a missing symbol."""
    lt = os.path.join(os.path.dirname(path), os.path.basename(path).replace("libcublas.", "libcublasLt."))
    if os.path.dirname(path) and os.path.exists(lt):
        ctypes.CDLL(lt, mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(path)
    for name in SYMBOLS:
        getattr(lib, name)
    vp, i, ll = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
    lib.cublasCreate_v2.argtypes = [ctypes.POINTER(vp)]
    lib.cublasSetStream_v2.argtypes = [vp, vp]
    lib.cublasSetWorkspace_v2.argtypes = [vp, vp, ctypes.c_size_t]
    gemm = [vp, i, i, i, i, i, vp, vp, i, i, ll, vp, i, i, ll, vp, vp, i, i, ll, i, i, i]
    lib.cublasGemmStridedBatchedEx.argtypes = gemm
    return lib


def load() -> Any:
    """The loaded cuBLAS library, or None (the reason in :func:`unavailable_reason`, logged once)."""
    if "lib" in _STATE:
        return _STATE["lib"]
    tried = []
    for path in candidates():
        try:
            _STATE["lib"], _STATE["path"] = _open(path), path
            return _STATE["lib"]
        except (OSError, AttributeError) as e:
            tried.append(f"{path}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
    _STATE["lib"] = None
    _STATE["reason"] = ("cuBLAS not found (pip install nvidia-cublas-cu12, or install the CUDA toolkit, or "
                        "set EMBER_CUBLAS to libcublas.so); GEMMs run as ember's tiled kernels. Tried: "
                        + "; ".join(tried[-4:]))
    LOG.warning("cuda: %s", _STATE["reason"])
    return None


def unavailable_reason() -> str | None:
    """Why GEMM steps launch the tiled kernel instead of cuBLAS, or None."""
    return None if load() is not None else _STATE["reason"]


def compute_type(dtype: np.dtype, precision: Precision | None) -> int:
    """The cuBLAS compute type of a product of ``dtype`` operands under ``precision``."""
    if np.dtype(dtype) == np.float64:
        return COMPUTE_64F
    if np.dtype(dtype) != np.float32 or precision in (None, Precision.HIGHEST):
        return COMPUTE_32F  # (float16 / bfloat16 operands: float32 accumulation)
    return COMPUTE_32F_FAST_TF32 if precision == Precision.HIGH else COMPUTE_32F_FAST_16BF


LAYOUT_SIZES = ("a_ld", "b_ld", "c_ld", "a_stride", "b_stride", "c_stride", "call_m", "call_n", "call_batch")
"""The size expressions of a GEMM layout (:func:`.gemm_layouts.gemm_layout`) bound per call, as its
``B``, ``M``, ``N``, ``K`` (and each of its ``loops``)."""


def gemm_arguments(layout: dict, sizes: tuple[int, int, int, int], a: int, b: int, c: int,
                   precision: Precision | None) -> dict[str, Any]:
    """The ``cublasGemmStridedBatchedEx`` arguments (but the handle and the scalars' addresses) of
    the row-major product ``c[B, M, N] = a @ b`` of :func:`.gemm_layouts.gemm_layout` ``layout``, its
    sizes ``(B, M, N, K)`` and :data:`LAYOUT_SIZES` bound, at device pointers ``a``, ``b``, ``c``
    (module docstring): the first call of a layout with ``loops`` (:func:`gemm_calls`). A layout
    without leading dimensions or batch strides reads row-major operands. The product's own
    precision (``precision=`` of ``dot``/``matmul``/``dot_general``/``einsum``) wins over
    ``precision``, the configured default."""
    bsz, m, n, k = sizes
    m, n, bsz = int(layout.get("call_m", m)), int(layout.get("call_n", n)), int(layout.get("call_batch", bsz))
    dt, out = DATA_TYPES[np.dtype(layout["dtype"]).name], DATA_TYPES[np.dtype(layout["out_dtype"]).name]
    a_ld = int(layout.get("a_ld", m if layout["a_trans"] else k))
    b_ld = int(layout.get("b_ld", k if layout["b_trans"] else n))
    return {"transa": OP_T if layout["b_trans"] else OP_N, "transb": OP_T if layout["a_trans"] else OP_N,
            "m": n, "n": m, "k": k,
            "A": b, "Atype": dt, "lda": max(b_ld, 1), "strideA": int(layout.get("b_stride", k * n)),
            "B": a, "Btype": dt, "ldb": max(a_ld, 1), "strideB": int(layout.get("a_stride", m * k)),
            "C": c, "Ctype": out, "ldc": max(int(layout.get("c_ld", n)), 1),
            "strideC": int(layout.get("c_stride", m * n)), "batchCount": bsz,
            "computeType": compute_type(layout["dtype"], layout.get("precision") or precision),
            "algo": GEMM_DEFAULT}


def gemm_calls(layout: dict, sizes: tuple[int, int, int, int], a: int, b: int, c: int,
               precision: Precision | None) -> list[dict[str, Any]]:
    """The ``cublasGemmStridedBatchedEx`` calls of the product (:func:`gemm_arguments`): one, or
    for a layout with ``loops`` (bound: ``(count, a stride, b stride, c stride)`` ints, the outer
    first) one per index of the outer batch, its operands' and result's pointers moved by the
    loops' strides (elements, as bytes of the dtypes)."""
    first = gemm_arguments(layout, sizes, a, b, c, precision)
    item = np.dtype(layout["dtype"]).itemsize
    out_item = np.dtype(layout["out_dtype"]).itemsize
    calls = [first]
    for count, sa, sb, sc in layout.get("loops", ()):
        calls = [dict(call, B=call["B"] + i * int(sa) * item, A=call["A"] + i * int(sb) * item,
                      C=call["C"] + i * int(sc) * out_item)
                 for call in calls for i in range(int(count))]
    return calls


class Blas:
    """A cuBLAS handle over the loaded library ``lib`` (made at the first call, a context current),
    with its workspace (``alloc(nbytes)`` returns a buffer with ``.ptr``, kept here)."""

    def __init__(self, lib: Any):
        self.lib, self.handle, self.stream, self.workspace = lib, None, None, None
        self.one32, self.zero32 = ctypes.c_float(1.0), ctypes.c_float(0.0)
        self.one64, self.zero64 = ctypes.c_double(1.0), ctypes.c_double(0.0)

    def _check(self, status: int, what: str) -> None:
        if int(status) != 0:
            raise RuntimeError(f"cuda: {what} failed (cuBLAS status {int(status)})")

    def prepare(self, alloc: Any) -> None:
        """The handle exists and has its workspace (made outside any stream capture: creating a
        handle or allocating is not allowed while a stream captures)."""
        if self.handle is None:
            h = ctypes.c_void_p()
            self._check(self.lib.cublasCreate_v2(ctypes.byref(h)), "cublasCreate")
            self.handle = h.value
            self.workspace = alloc(WORKSPACE)
            self._check(self.lib.cublasSetWorkspace_v2(self.handle, int(self.workspace.ptr), WORKSPACE),
                        "cublasSetWorkspace")

    def ready(self, stream: Any) -> None:
        """The (prepared) handle issues on ``stream``."""
        if self.stream is not stream:
            self._check(self.lib.cublasSetStream_v2(self.handle, int(stream)), "cublasSetStream")
            self.stream = stream

    def gemm(self, args: dict[str, Any]) -> None:
        """One ``cublasGemmStridedBatchedEx`` (:func:`gemm_arguments`) on the handle's stream."""
        f64 = args["computeType"] == COMPUTE_64F
        one, zero = (self.one64, self.zero64) if f64 else (self.one32, self.zero32)
        a = args
        self._check(self.lib.cublasGemmStridedBatchedEx(
            self.handle, a["transa"], a["transb"], a["m"], a["n"], a["k"], ctypes.addressof(one),
            a["A"], a["Atype"], a["lda"], a["strideA"], a["B"], a["Btype"], a["ldb"], a["strideB"],
            ctypes.addressof(zero), a["C"], a["Ctype"], a["ldc"], a["strideC"], a["batchCount"],
            a["computeType"], a["algo"]), "cublasGemmStridedBatchedEx")


class GemmStep:
    """A GEMM step of a call: ``issue(drv, stream)`` makes its calls (:func:`gemm_calls`, the
    first is ``args``) on ``stream`` (a product with no elements does nothing; one with an
    empty contraction zeroes the result)."""

    def __init__(self, blas: Blas, alloc: Any, args: dict[str, Any], out_bytes: int,
                 calls: list[dict[str, Any]] | None = None):
        self.blas, self.args, self.out_bytes = blas, args, out_bytes
        self.calls = [args] if calls is None else calls
        if alloc is not None:
            blas.prepare(alloc)  # (steps are made before their capture)

    def issue(self, drv: Any, stream: Any) -> None:
        a = self.args
        if not (a["m"] and a["n"] and a["batchCount"] and self.calls):
            return
        if not a["k"]:
            err = drv.cuMemsetD8Async(a["C"], 0, self.out_bytes, stream)
            if int(err[0] if isinstance(err, tuple) else err) != 0:
                raise RuntimeError(f"cuda: cuMemsetD8Async failed ({err})")
            return
        self.blas.ready(stream)
        for call in self.calls:
            self.blas.gemm(call)


def blas() -> Blas | None:
    """The process's cuBLAS handle wrapper (None where the library is absent)."""
    if "blas" not in _STATE:
        lib = load()
        _STATE["blas"] = Blas(lib) if lib is not None else None
    return _STATE["blas"]


def precision() -> Precision | None:
    """The precision float32 GEMMs run at now (``jax_default_matmul_precision``; None: full)."""
    return matmul_precision_setting()
