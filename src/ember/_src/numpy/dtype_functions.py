"""dtype utilities of ``ember.numpy``: finfo/iinfo, promotion queries, casting checks."""

from __future__ import annotations

from typing import Any

import numpy as np

from ember._src import dtypes as dt

__all__ = ["can_cast", "dtype", "finfo", "iinfo", "isdtype", "issubdtype", "promote_types", "result_type"]


class finfo:  # noqa: N801 - NumPy's name
    """Machine limits of a floating dtype, as ``numpy.finfo``.

    The Array API's fields (``bits``, ``eps``, ``max``, ``min``, ``smallest_normal``, ``dtype``)
    are Python ints/floats; every other attribute of NumPy's (or ml_dtypes') ``finfo`` is there too."""

    def __init__(self, dtype: Any):
        if hasattr(dtype, "dtype") and not isinstance(dtype, (type, np.dtype)):
            dtype = dtype.dtype  # an array
        self._info = dt.finfo(dtype)
        self.dtype = dt.canonicalize(self._info.dtype)
        self.bits = int(self._info.bits)
        if dt.is_complex(self.dtype):
            self.dtype = dt.real_dtype(self.dtype)
        conv = float
        self.eps = conv(self._info.eps)
        self.max = conv(self._info.max)
        self.min = conv(self._info.min)
        self.smallest_normal = conv(self._info.smallest_normal)
        self.tiny = self.smallest_normal
        self.resolution = conv(self._info.resolution)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._info, name)

    def __repr__(self) -> str:
        return (f"finfo(resolution={self.resolution:g}, min={self.min:g}, max={self.max:g}, "
                f"dtype={self.dtype})")


iinfo = dt.iinfo


def dtype(x: Any) -> np.dtype:
    """The ember dtype for a dtype-like (``'float32'``, ``jnp.int8``, ``bfloat16``, ...)."""
    return dt.canonicalize(x)


def promote_types(a: Any, b: Any) -> np.dtype:
    """The dtype two dtypes promote to under ember's (JAX's) lattice."""
    return dt.promote_types(a, b)


def result_type(*args: Any) -> np.dtype:
    """The dtype an operation on ``args`` produces (weak Python scalars yield)."""
    return dt.result_type(*args)


_KIND_ORDER = {"b": 0, "u": 1, "i": 2, "f": 3, "c": 4}


def can_cast(from_: Any, to: Any, casting: str = "safe") -> bool:
    """Whether a cast is allowed under ``casting``: no, equiv, safe, same_kind or unsafe."""
    a = dt.canonicalize(from_.dtype if hasattr(from_, "dtype") and not isinstance(from_, type) else from_)
    b = dt.canonicalize(to)
    if casting in ("no", "equiv"):
        return a == b
    if casting == "unsafe":
        return True
    if casting == "safe":
        return dt.promote_types(a, b) == b
    if casting == "same_kind":
        ka, kb = _KIND_ORDER[_kind(a)], _KIND_ORDER[_kind(b)]
        return ka < kb or (ka == kb and (dt.promote_types(a, b) == b or _kind(a) in "fc")) or \
            dt.promote_types(a, b) == b
    raise ValueError(f"casting must be one of 'no', 'equiv', 'safe', 'same_kind', 'unsafe'; got {casting!r}")


def _kind(d: np.dtype) -> str:
    return "f" if d == dt.bfloat16 else d.kind


_ISDTYPE_KINDS = {
    "bool": lambda d: d == dt.bool_,
    "signed integer": lambda d: d.kind == "i",
    "unsigned integer": lambda d: d.kind == "u",
    "integral": lambda d: d.kind in "iu",
    "real floating": dt.is_float,
    "complex floating": dt.is_complex,
    "numeric": lambda d: d != dt.bool_,
}


def isdtype(dtype: Any, kind: Any) -> bool:
    """Array-API ``isdtype``: ``kind`` is a dtype, a kind name, or a tuple of them."""
    d = dt.canonicalize(dtype)
    kinds = kind if isinstance(kind, tuple) else (kind,)
    for k in kinds:
        if isinstance(k, str):
            if k not in _ISDTYPE_KINDS:
                raise ValueError(f"unknown dtype kind {k!r}; expected one of {sorted(_ISDTYPE_KINDS)}")
            if _ISDTYPE_KINDS[k](d):
                return True
        elif dt.canonicalize(k) == d:
            return True
    return False


def issubdtype(arg1: Any, arg2: Any) -> bool:
    """NumPy's ``issubdtype`` (``bfloat16`` counts as ``np.floating``)."""
    d = dt.canonicalize(arg1)
    if d == dt.bfloat16:
        return arg2 in (np.floating, np.inexact, np.number, np.generic) or \
            (not isinstance(arg2, type) and dt.canonicalize(arg2) == d)
    return bool(np.issubdtype(d, arg2))
