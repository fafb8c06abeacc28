"""Helpers shared by the primitive families: dtype checks and implementation wrappers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember._src import dtypes as dt
from ember._src.core import call_ignoring_fp_errors
from ember.errors import DTypeError

KINDS: dict[str, Callable[[np.dtype], bool]] = {
    "any": lambda d: True,
    "num": lambda d: d != dt.bool_,
    "inexact": dt.is_inexact,
    "float": dt.is_float,
    "real": lambda d: not dt.is_complex(d),
    "realnum": lambda d: not dt.is_complex(d) and d != dt.bool_,
    "int": dt.is_integer,
    "intbool": lambda d: dt.is_integer(d) or d == dt.bool_,
    "complex": dt.is_complex,
}

KIND_TEXT = {"any": "any dtype", "num": "a numeric dtype", "inexact": "a floating or complex dtype",
             "float": "a real floating dtype", "real": "a non-complex dtype",
             "realnum": "a real numeric dtype", "int": "an integer dtype",
             "intbool": "an integer or bool dtype", "complex": "a complex dtype"}


def check_kind(name: str, dtype: np.dtype, kind: str) -> None:
    if not KINDS[kind](dtype):
        raise DTypeError(f"{name} requires {KIND_TEXT[kind]}, got {dtype}")


def upcast_lowp(fn: Callable) -> Callable:
    """Run ``fn`` in float32 for float16/bfloat16 inputs (NumPy lacks fast low-precision math)."""

    def wrapped(*args: Any, **params: Any) -> Any:
        args2 = [a.astype(np.float32) if isinstance(a, np.ndarray) and dt.is_low_precision(a.dtype)
                 else a for a in args]
        return call_ignoring_fp_errors(fn, *args2, **params)

    wrapped.__name__ = getattr(fn, "__name__", "impl")
    wrapped.upcast_inner = fn  # for callers that know no operand is low-precision (eager plans)
    return wrapped
