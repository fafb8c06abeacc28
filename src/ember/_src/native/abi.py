"""The C ABI of a generated program: its entry point and the slots of its function-pointer table.

Every program the native backend generates defines one entry point::

    int ember_main(void **bufs, char *arena, const int64_t *dims, void **fns);

``bufs``: the inputs, the captured constants, the outputs. ``arena``: the planned scratch memory.
``dims``: the axis values and per-binding arena offsets of a symbolic program (null for a static
one). ``fns``: run-time pointers, in the slots named here:

====================  =====================================================================
slot                  content
====================  =====================================================================
:data:`SGEMM` (0)     ``sgemm`` (BLAS from SciPy)
:data:`DGEMM` (1)     ``dgemm``
:data:`CALLBACK` (2)  the Python callback running fallback steps (:data:`CALLBACK_T`; null when
                      the program has none)
:data:`SGEMV` (3)     ``sgemv``
:data:`DGEMV` (4)     ``dgemv``
5 ..                  :data:`LINALG_NAMES`: LAPACK routines and the complex BLAS products
:data:`BLAS_THREADS`  ``openblas_set_num_threads_local`` of SciPy's OpenBLAS (null where it has
                      none): a program jitted with ``num_threads`` sets its BLAS threads with it
:data:`N_FIXED_FNS`   derived constants, in order: loop-body constants, prepacked weights,
+ k                   the cells of argument-packed products (``Generated.extra_consts``)
====================  =====================================================================

The code generator names slots with :func:`slot` / :func:`fn_ref` / :func:`const_ref`; the
executables (static :mod:`.backend`, symbolic :mod:`.specialize`) build the table with
:func:`fn_table`; the C dispatcher (``csrc/dispatch.c``) passes an executable's table through
unchanged. The result of ``ember_main`` is 0, or ``k + 1`` when step ``k`` failed.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence
from typing import Any

from ember._src.native.runtime import blas

ENTRY = "ember_main"  # the entry point's symbol
# int (*)(int64_t step, void **buffers): runs fallback step ``step`` on its buffers, 0 on success
CALLBACK_T = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int64, ctypes.POINTER(ctypes.c_void_p))
CALLBACK_C_TYPEDEF = "typedef int (*em_cb_t)(int64_t, void **);\n"

SGEMM, DGEMM, CALLBACK, SGEMV, DGEMV = range(5)
_LAPACK_ROUTINES = ("potrf", "trsm", "getrf", "geqrf", "orgqr", "syevd", "gesdd", "geev")
# the LAPACK routines (single and double precision), then the complex BLAS products of complex
# ``native_gemm`` steps and complex ``geev``
LINALG_NAMES = tuple(p + r for r in _LAPACK_ROUTINES for p in ("s", "d")) + (
    "cgemm", "zgemm", "cgemv", "zgemv", "zgeev")
SLOT_NAMES = ("sgemm", "dgemm", "callback", "sgemv", "dgemv", *LINALG_NAMES, "blas_threads")
BLAS_THREADS = len(SLOT_NAMES) - 1
N_FIXED_FNS = len(SLOT_NAMES)  # the fixed slots; derived constants start here
_SLOT = {name: i for i, name in enumerate(SLOT_NAMES)}


def slot(name: str) -> int:
    """Index in ``fns`` of the routine ``name`` (``"sgemm"``, ``"callback"``, ``"dpotrf"``, ...)."""
    try:
        return _SLOT[name]
    except KeyError:
        raise ValueError(f"no fns slot named {name!r}; slots: {SLOT_NAMES}") from None


def fn_ref(name: str) -> str:
    """The C expression of routine ``name``'s pointer: ``fns[<slot>]``."""
    return f"fns[{slot(name)}]"


def const_slot(k: int) -> int:
    """Index in ``fns`` of derived constant ``k`` (``Generated.extra_consts[k]``)."""
    return N_FIXED_FNS + k


def const_ref(k: int) -> str:
    """The C expression of derived constant ``k``'s pointer: ``fns[N_FIXED_FNS + k]``."""
    return f"fns[{const_slot(k)}]"


@functools.cache
def _routine_pointers() -> tuple[int | None, ...]:
    return tuple(None if name == "callback" else blas.threads_local_pointer() if name == "blas_threads"
                 else blas.blas_pointer(name) for name in SLOT_NAMES)


def fn_table(callback: Any = None, consts: Sequence[Any] = ()) -> ctypes.Array:
    """The ``fns`` array of one executable: the routines, ``callback`` (a :data:`CALLBACK_T`
    object, or None for a program without fallback steps) and the data pointers of the derived
    constants ``consts`` (NumPy arrays, kept alive by the caller)."""
    ptrs = list(_routine_pointers())
    if callback is not None:
        ptrs[CALLBACK] = ctypes.cast(callback, ctypes.c_void_p).value
    ptrs += [c.ctypes.data for c in consts]
    return (ctypes.c_void_p * len(ptrs))(*ptrs)


def bind_entry(lib: Any) -> Any:
    """The entry point of a loaded program library as a ctypes function with its signature."""
    fn = getattr(lib, ENTRY)
    fn.argtypes = [ctypes.c_void_p] * 4
    fn.restype = ctypes.c_int
    return fn
