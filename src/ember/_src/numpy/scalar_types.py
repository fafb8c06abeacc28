"""Callable scalar types: ``ember.numpy.float32(x)`` converts like JAX's ``jnp.float32(x)``.

Each name (``float32``, ``int8``, ``bool_``, ``bfloat16``, ...) is a class whose metaclass makes it
behave as its dtype wherever a dtype is expected -- ``np.dtype(jnp.float32)``, ``x.dtype ==
jnp.float32``, ``jnp.zeros(3, jnp.float32)``, ``np.finfo(jnp.float32)``, dictionary keys (it
hashes and compares equal to the ``np.dtype``) -- and converts when called: ``jnp.float32(1.5)``
is a float32 ember Array (strongly typed), ``jnp.int32(tracer)`` a conversion inside a trace.
``isinstance(np.float32(1), jnp.float32)`` holds as it does for the NumPy scalar type.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember._src import dtypes as dt
from ember._src.numpy.ufuncs import asarray


class _ScalarMeta(type):
    """Metaclass of ember's scalar types: a dtype that converts values when called."""

    dtype: np.dtype

    def __call__(cls, x: Any = 0, /) -> Any:
        return asarray(x, dtype=cls.dtype)

    def __eq__(cls, other: object) -> bool:
        if cls is other:
            return True
        if other is None:  # np.dtype(None) is float64, but no dtype equals None
            return False
        if isinstance(other, _ScalarMeta):
            return cls.dtype == other.dtype
        try:
            return np.dtype(other) == cls.dtype  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return False

    def __ne__(cls, other: object) -> bool:
        return not _ScalarMeta.__eq__(cls, other)

    def __hash__(cls) -> int:
        return hash(cls.dtype)

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, cls.dtype.type)

    def __repr__(cls) -> str:
        return f"<class 'ember.numpy.{cls.__name__}'>"


def _scalar_type(name: str, dtype: np.dtype) -> type:
    return _ScalarMeta(name, (), {"dtype": dtype, "__module__": "ember.numpy",
                                  "__doc__": f"The {dtype} dtype; calling it converts a value to a "
                                             f"{dtype} array (``jnp.{name}(x)``)."})


bool_ = _scalar_type("bool_", dt.bool_)
int8 = _scalar_type("int8", dt.int8)
int16 = _scalar_type("int16", dt.int16)
int32 = _scalar_type("int32", dt.int32)
int64 = _scalar_type("int64", dt.int64)
uint8 = _scalar_type("uint8", dt.uint8)
uint16 = _scalar_type("uint16", dt.uint16)
uint32 = _scalar_type("uint32", dt.uint32)
uint64 = _scalar_type("uint64", dt.uint64)
float16 = _scalar_type("float16", dt.float16)
bfloat16 = _scalar_type("bfloat16", dt.bfloat16)
float32 = _scalar_type("float32", dt.float32)
float64 = _scalar_type("float64", dt.float64)
complex64 = _scalar_type("complex64", dt.complex64)
complex128 = _scalar_type("complex128", dt.complex128)

# abstract scalar types (for issubdtype), the NumPy classes themselves as in JAX
generic, number, inexact, floating, complexfloating = (np.generic, np.number, np.inexact, np.floating,
                                                      np.complexfloating)
integer, signedinteger, unsignedinteger = np.integer, np.signedinteger, np.unsignedinteger
character, flexible = np.character, np.flexible

__all__ = ["generic", "number", "inexact", "floating", "complexfloating", "integer", "signedinteger",
           "unsignedinteger", "character", "flexible", "bool_", "int8", "int16", "int32", "int64",
           "uint8", "uint16", "uint32", "uint64", "float16", "bfloat16", "float32", "float64",
           "complex64", "complex128"]
