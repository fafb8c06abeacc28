"""The dtypes the native backend has a C type for, and their C spelling: a fact every stage reads
(the scheduler keeps other dtypes out of kernels and calls, the emitters write the types)."""

from __future__ import annotations

from typing import Any

import numpy as np

C_TYPES = {
    np.dtype(np.bool_): "uint8_t", np.dtype(np.int8): "int8_t", np.dtype(np.int16): "int16_t",
    np.dtype(np.int32): "int32_t", np.dtype(np.int64): "int64_t", np.dtype(np.uint8): "uint8_t",
    np.dtype(np.uint16): "uint16_t", np.dtype(np.uint32): "uint32_t", np.dtype(np.uint64): "uint64_t",
    np.dtype(np.float32): "float", np.dtype(np.float64): "double",
    np.dtype(np.complex64): "em_c64", np.dtype(np.complex128): "em_c128",  # typedefs: PRELUDE_HEAD
}
SUPPORTED_DTYPES = frozenset(C_TYPES)


def ctype(dtype: Any) -> str:
    return C_TYPES[np.dtype(dtype)]


def is_float(d: np.dtype) -> bool:
    return d.kind == "f"


def is_complex(d: np.dtype) -> bool:
    return d.kind == "c"


def real_ctype(d: np.dtype) -> str:
    """The C type of a complex dtype's parts (``float`` or ``double``)."""
    return "float" if d.itemsize == 8 else "double"


def is_bool(d: np.dtype) -> bool:
    return d.kind == "b"


def is_unsigned(d: np.dtype) -> bool:
    return d.kind == "u"
