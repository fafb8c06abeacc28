"""Raw BLAS/LAPACK function pointers from the copy SciPy ships, and a ctypes ``gemm`` over them.

SciPy exports its BLAS and LAPACK as PyCapsules in ``scipy.linalg.cython_blas.__pyx_capi__`` and
``scipy.linalg.cython_lapack.__pyx_capi__``. Each capsule's name is the C signature of the
function and its pointer is a plain C function (SciPy's wrapper around the Fortran routine), so
no system BLAS is needed. Calling convention (the capsule name is the authority):

* every argument is passed by pointer: ``int *`` for sizes, leading dimensions, ``info``;
  ``char *`` for flags (``"N"``, ``"T"``, ``"L"``, ...), no hidden string-length arguments;
  scalars (``alpha``, ``beta``) by pointer to the element type;
* ``int`` is 32-bit (LP64): sizes above 2**31 - 1 must be rejected or tiled;
* matrices are column-major: a C-contiguous (row-major) ``m x n`` array is, to BLAS, the
  ``n x m`` matrix of its transpose with leading dimension ``n``.

``blas_signature(name)`` returns the signature string for code generators.
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np

__all__ = ["BLAS_NAMES", "LAPACK_NAMES", "blas_pointer", "blas_signature", "gemm", "threads_local_pointer"]

BLAS_NAMES = ("sgemm", "dgemm", "cgemm", "zgemm")
LAPACK_NAMES = (
    "spotrf", "dpotrf", "sgetrf", "dgetrf", "sgesv", "dgesv", "ssyevd", "dsyevd",
    "sgesdd", "dgesdd", "sgeqrf", "dgeqrf", "sorgqr", "dorgqr", "strtrs", "dtrtrs",
)  # fmt: skip

_INT_MAX = 2**31 - 1
_GEMM_BY_DTYPE = {
    np.dtype(np.float32): "sgemm",
    np.dtype(np.float64): "dgemm",
    np.dtype(np.complex64): "cgemm",
    np.dtype(np.complex128): "zgemm",
}

_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype = ctypes.c_char_p
_capsule_name.argtypes = [ctypes.py_object]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _capsule(name: str) -> object:
    from scipy.linalg import cython_blas, cython_lapack

    for module in (cython_blas, cython_lapack):
        capsule = module.__pyx_capi__.get(name)
        if capsule is not None:
            return capsule
    raise KeyError(f"{name!r} is not exported by scipy.linalg.cython_blas or cython_lapack")


@functools.cache
def blas_signature(name: str) -> str:
    """The C signature SciPy records for BLAS/LAPACK routine ``name`` (e.g. ``"void (char *, ...)"``)."""
    return _capsule_name(_capsule(name)).decode()


@functools.cache
def blas_pointer(name: str) -> int:
    """The address of BLAS/LAPACK routine ``name`` (lower case, e.g. ``"dgemm"``, ``"dpotrf"``).

    Raises KeyError for a name SciPy does not export.
    """
    capsule = _capsule(name)
    pointer = _capsule_pointer(capsule, _capsule_name(capsule))
    if not pointer:
        raise KeyError(f"capsule for {name!r} holds a null pointer")
    return int(pointer)


@functools.cache
def threads_local_pointer() -> int | None:
    """The address of ``int openblas_set_num_threads_local(int)`` in the OpenBLAS that SciPy's BLAS
    and LAPACK call (OpenBLAS 0.3.27 and later: the thread count of the calling thread's BLAS calls,
    returning the previous one), or None where SciPy's BLAS is not a loaded OpenBLAS that has it.
    Programs jitted with ``num_threads`` set it around their call (``emit/codegen.py``)."""
    import os

    import scipy

    blas_pointer("dgemm")  # SciPy's BLAS loaded
    root = os.path.dirname(os.path.dirname(os.path.abspath(scipy.__file__)))
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split(None, 5)[-1].strip() for line in maps if "openblas" in line.lower()}
    except OSError:
        return None
    for path in sorted(p for p in paths if p.startswith(os.path.join(root, "scipy"))):
        try:
            return int(ctypes.cast(ctypes.CDLL(path).openblas_set_num_threads_local, ctypes.c_void_p).value)
        except (OSError, AttributeError):
            continue
    return None


# 13 arguments: transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc -- all pointers.
_GEMM_TYPE = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * 13))


@functools.cache
def _gemm_function(name: str) -> ctypes._CFuncPtr:
    return _GEMM_TYPE(blas_pointer(name))


def _check_int(value: int, what: str) -> ctypes.c_int:
    if value > _INT_MAX:
        raise ValueError(f"gemm: {what}={value} exceeds the 32-bit BLAS integer range")
    return ctypes.c_int(value)


def gemm(
    a: np.ndarray,
    b: np.ndarray,
    trans_a: bool = False,
    trans_b: bool = False,
    alpha: float | complex = 1.0,
    beta: float | complex = 0.0,
    c: np.ndarray | None = None,
) -> np.ndarray:
    """``C = alpha * op(A) @ op(B) + beta * C`` for 2-D arrays through SciPy's BLAS ``?gemm``.

    ``op(X)`` is ``X.T`` when the matching ``trans_*`` flag is set. A and B are made C-contiguous
    if needed; ``c``, when given, must be C-contiguous of the result's shape and dtype and is
    updated in place. Row-major is handled by computing ``C^T = op(B)^T op(A)^T`` in column-major.
    """
    dtype = np.result_type(a, b)
    if dtype not in _GEMM_BY_DTYPE or a.dtype != dtype or b.dtype != dtype:
        raise TypeError(f"gemm: need two arrays of one dtype among float32/64, complex64/128; "
                        f"got {a.dtype}, {b.dtype}")
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(f"gemm: need 2-D arrays, got shapes {a.shape} and {b.shape}")
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    m, k = a.shape[::-1] if trans_a else a.shape
    k_b, n = b.shape[::-1] if trans_b else b.shape
    if k != k_b:
        raise ValueError(f"gemm: contraction sizes differ: op(A) is {m}x{k}, op(B) is {k_b}x{n}")
    if c is None:
        c = (np.empty if beta == 0 else np.zeros)((m, n), dtype=dtype)
    elif c.shape != (m, n) or c.dtype != dtype or not c.flags.c_contiguous:
        raise ValueError(f"gemm: c must be C-contiguous {dtype} of shape {(m, n)}, got {c.dtype} {c.shape}")
    if m == 0 or n == 0:
        return c
    # Column-major call: C^T (n x m) = op(B)^T (n x k) @ op(A)^T (k x m).
    args = [
        ctypes.c_char(b"T" if trans_b else b"N"),
        ctypes.c_char(b"T" if trans_a else b"N"),
        _check_int(n, "n"),
        _check_int(m, "m"),
        _check_int(k, "k"),
    ]
    alpha_arr, beta_arr = np.array(alpha, dtype=dtype), np.array(beta, dtype=dtype)
    lda, ldb, ldc = (_check_int(max(1, x.shape[1]), "leading dimension") for x in (b, a, c))
    transb_ptr, transa_ptr, n_ptr, m_ptr, k_ptr = (ctypes.addressof(x) for x in args)
    _gemm_function(_GEMM_BY_DTYPE[dtype])(
        transb_ptr, transa_ptr, n_ptr, m_ptr, k_ptr,
        alpha_arr.ctypes.data, b.ctypes.data, ctypes.addressof(lda),
        a.ctypes.data, ctypes.addressof(ldb),
        beta_arr.ctypes.data, c.ctypes.data, ctypes.addressof(ldc),
    )  # fmt: skip
    return c
