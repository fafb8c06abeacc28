"""Dtypes and type promotion.

ember's dtypes are NumPy dtypes (plus ``bfloat16`` from ml_dtypes). Promotion follows JAX's type
lattice, including *weak types*: a Python scalar carries a weak dtype that yields to the other
operand (``float32_array * 2.0`` stays float32). Python floats default to float32 and ints to int32.

64-bit dtypes follow JAX's ``jax_enable_x64`` setting (the flag of that name, environment variable
``EMBER_ENABLE_X64`` or ``JAX_ENABLE_X64``). Off, the default: :func:`canonicalize` maps float64,
int64, uint64 and complex128 to their 32-bit counterparts, so NumPy float64 input becomes float32
and an explicit ``dtype=float64`` request is truncated with a warning (:func:`check_user_dtype`).
On: every dtype keeps its width, as in NumPy.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

import ml_dtypes
import numpy as np

from ember._src import flags
from ember.errors import DTypeError

bool_ = np.dtype(np.bool_)
int8, int16, int32, int64 = (np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64))
uint8, uint16, uint32, uint64 = (np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64))
float16, float32, float64 = (np.dtype(t) for t in (np.float16, np.float32, np.float64))
bfloat16 = np.dtype(ml_dtypes.bfloat16)
complex64, complex128 = np.dtype(np.complex64), np.dtype(np.complex128)

SUPPORTED = (bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64,
             float16, bfloat16, float32, float64, complex64, complex128)
_SUPPORTED_SET = frozenset(SUPPORTED)

default_float = float32
default_int = int32
default_complex = complex64

X64 = flags.define_bool(
    "jax_enable_x64", False, "EMBER_ENABLE_X64",
    "64-bit dtypes. Off (JAX's default): float64/int64/uint64/complex128 inputs and dtype requests "
    "become float32/int32/uint32/complex64. On: 64-bit values stay 64-bit, as in NumPy.",
    env_aliases=("JAX_ENABLE_X64",))
_NARROW = {float64: float32, int64: int32, uint64: uint32, complex128: complex64}


def x64_enabled() -> bool:
    """Whether 64-bit dtypes are enabled (``ember.config.update("jax_enable_x64", True)``)."""
    return X64.value


def narrows(dtype: np.dtype) -> bool:
    """True when ``dtype`` is a 64-bit dtype that :func:`canonicalize` maps to 32 bits now."""
    return not X64.value and dtype in _NARROW


def narrow(dtype: np.dtype) -> np.dtype:
    """The 32-bit dtype that ``dtype`` becomes while ``jax_enable_x64`` is off (itself if it is not
    a 64-bit dtype), whatever the flag says now."""
    return _NARROW.get(dtype, dtype)


def check_user_dtype(dtype: Any, where: str) -> None:
    """Warn (as JAX does) when a function is explicitly asked for a 64-bit ``dtype`` that is
    truncated to 32 bits because ``jax_enable_x64`` is off."""
    if dtype is None or X64.value or any(dtype is t for t in (float, int, complex, bool)):
        return
    try:
        d = np.dtype(dtype)
    except TypeError:
        return  # canonicalize reports it
    if d in _NARROW:
        warnings.warn(f"Explicitly requested dtype {d} requested in {where} is not available, and will "
                      f"be truncated to dtype {_NARROW[d]}. To enable more dtypes, call "
                      "ember.config.update('jax_enable_x64', True) or set the EMBER_ENABLE_X64 "
                      "environment variable.", UserWarning, stacklevel=_user_stacklevel())


def user_dtype(dtype: Any, where: str) -> np.dtype | None:
    """A ``dtype=`` argument of public function ``where``: ``None`` stays ``None``; otherwise
    :func:`check_user_dtype` then :func:`canonicalize`."""
    if dtype is None:
        return None
    check_user_dtype(dtype, where)
    return canonicalize(dtype)


def _user_stacklevel() -> int:
    """The ``warnings`` stack level of the first caller outside ember (the user's line)."""
    f, level = sys._getframe(1), 1
    while f is not None and f.f_globals.get("__name__", "").startswith("ember."):
        f, level = f.f_back, level + 1
    return level

# Lattice nodes: dtypes, plus the weak kinds "i*", "f*", "c*" of Python scalars.
_LATTICE: dict[Any, list[Any]] = {
    bool_: ["i*"],
    "i*": [uint8, int8],
    uint8: [int16, uint16], uint16: [int32, uint32], uint32: [int64, uint64], uint64: ["f*"],
    int8: [int16], int16: [int32], int32: [int64], int64: ["f*"],
    "f*": ["c*", float16, bfloat16],
    float16: [float32], bfloat16: [float32], float32: [float64, complex64], float64: [complex128],
    "c*": [complex64], complex64: [complex128], complex128: [],
}


def _upper_bounds(node: Any) -> frozenset:
    seen = {node}
    stack = [node]
    while stack:
        for nxt in _LATTICE[stack.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return frozenset(seen)


_UPPER = {n: _upper_bounds(n) for n in _LATTICE}
_WEAK_NODE = {"b": bool_, "i": "i*", "u": "i*", "f": "f*", "c": "c*"}
# When two strong types meet at a weak node (uint64 + int64), take the widest concrete type.
_STRONG_FROM_WEAK = {"i*": int64, "f*": float64, "c*": complex128}
_DEFAULT_FROM_WEAK = {"i*": int32, "f*": float32, "c*": complex64}


def canonicalize(dtype: Any) -> np.dtype:
    """Return the ``np.dtype`` ember uses for ``dtype`` (64-bit dtypes become 32-bit while
    ``jax_enable_x64`` is off) or raise :class:`DTypeError` if ember lacks it."""
    dt = lookup(dtype)
    if not X64.value:
        return _NARROW.get(dt, dt)
    return dt


def lookup(dtype: Any) -> np.dtype:
    """The ``np.dtype`` for ``dtype`` (its own width, whatever ``jax_enable_x64`` says), or a
    :class:`DTypeError` if ember lacks it."""
    if dtype is float:
        return default_float
    if dtype is int:
        return default_int
    if dtype is complex:
        return default_complex
    if dtype is bool:
        return bool_
    try:
        dt = np.dtype(dtype)
    except TypeError as e:
        raise DTypeError(f"not a dtype: {dtype!r}") from e
    if dt not in _SUPPORTED_SET:
        raise DTypeError(f"dtype {dt} is not supported by ember (supported: "
                         f"{', '.join(str(d) for d in SUPPORTED)})")
    return dt


def _node(dtype: np.dtype, weak: bool) -> Any:
    return _WEAK_NODE[dtype.kind] if weak and dtype != bool_ else dtype


def _lub(a: Any, b: Any) -> Any:
    # least upper bound: the common upper bound that is below all other common upper bounds
    common = _UPPER[a] & _UPPER[b]
    for c in common:
        if common <= _UPPER[c]:
            return c
    raise DTypeError(f"no common dtype for {a} and {b}")  # pragma: no cover


def promote(*typed: tuple[np.dtype, bool]) -> tuple[np.dtype, bool]:
    """Promote ``(dtype, weak)`` pairs; return the result dtype and whether it is weak (JAX rules;
    a 64-bit result is canonicalized to 32 bits while ``jax_enable_x64`` is off)."""
    res = _promote(typed)
    if not X64.value and res[0] in _NARROW:
        return _NARROW[res[0]], res[1]
    return res


def _promote(typed: tuple[tuple[np.dtype, bool], ...]) -> tuple[np.dtype, bool]:
    if not typed:
        raise DTypeError("promote needs at least one dtype")
    if len(typed) == 1:
        return typed[0]
    if all(weak for _, weak in typed):
        node = typed[0][0]
        for dt, _ in typed[1:]:
            node = _lub(node, dt)
        if isinstance(node, str):  # uint64 + int64 style meeting on a weak node
            return _STRONG_FROM_WEAK[node], True
        return node, node != bool_
    node = _node(*typed[0])
    for dt, weak in typed[1:]:
        node = _lub(node, _node(dt, weak))
    if isinstance(node, str):
        # A weak node as result: int array * 2.0 -> default float, weakly typed; a strong 64-bit
        # integer reaching a float node (uint64 + int64) gives float64 as NumPy does.
        wide = any(not weak and dt.itemsize == 8 for dt, weak in typed)
        return (_STRONG_FROM_WEAK if wide else _DEFAULT_FROM_WEAK)[node], True
    return node, False


def promote_types(a: Any, b: Any) -> np.dtype:
    """Promote two dtypes (both strong), as ``jnp.promote_types`` (which keeps 64-bit results
    whatever ``jax_enable_x64`` says)."""
    return _promote(((lookup(a), False), (lookup(b), False)))[0]


def result_type(*args: Any) -> np.dtype:
    """The dtype an operation on ``args`` (arrays, dtypes or Python scalars) produces."""
    return promote(*(dtype_and_weak(a) for a in args))[0]


def dtype_and_weak(x: Any) -> tuple[np.dtype, bool]:
    """The (dtype, weak) pair of an array, dtype or Python scalar."""
    if isinstance(x, np.generic):
        return canonicalize(x.dtype), False
    if isinstance(x, bool):
        return bool_, False
    if isinstance(x, int):
        return default_int, True
    if isinstance(x, float):
        return default_float, True
    if isinstance(x, complex):
        return default_complex, True
    aval = getattr(x, "aval", None)
    if aval is not None:
        return aval.dtype, aval.weak_type
    if hasattr(x, "dtype") and not isinstance(x, type):
        return canonicalize(x.dtype), False
    return canonicalize(x), False


def python_scalar_dtype(x: Any) -> np.dtype:
    """Dtype of a Python scalar as ember stores it (weak); ints beyond int32 widen to int64."""
    if isinstance(x, bool):
        return bool_
    if isinstance(x, int):
        if -(2**31) <= x < 2**31:
            return int32
        if not X64.value:
            raise OverflowError(f"Python int {x} too large to convert to int32 (64-bit integers need "
                                "ember.config.update('jax_enable_x64', True))")
        if -(2**63) <= x < 2**63:
            return int64
        if 0 <= x < 2**64:
            return uint64
        raise OverflowError(f"Python int {x} is too large for any ember integer dtype")
    if isinstance(x, float):
        return float32
    if isinstance(x, complex):
        return complex64
    raise DTypeError(f"not a Python scalar: {x!r}")


def is_float(dt: np.dtype) -> bool:
    return dt.kind == "f" or dt == bfloat16


def is_complex(dt: np.dtype) -> bool:
    return dt.kind == "c"


def is_inexact(dt: np.dtype) -> bool:
    return is_float(dt) or is_complex(dt)


def is_integer(dt: np.dtype) -> bool:
    return dt.kind in "iu"


def is_low_precision(dt: np.dtype) -> bool:
    """float16/bfloat16: NumPy implementations compute these in float32."""
    return dt in (float16, bfloat16)


def to_float(dt: np.dtype) -> np.dtype:
    """The float dtype a function like ``sqrt`` returns for an input of ``dt``."""
    if is_inexact(dt):
        return dt
    if dt.kind in "iu" and dt.itemsize >= 8:
        return float64
    return default_float


def real_dtype(dt: np.dtype) -> np.dtype:
    return {complex64: float32, complex128: float64}.get(dt, dt)


def complex_dtype(dt: np.dtype) -> np.dtype:
    return complex128 if dt in (float64, complex128) else complex64


def finfo(dtype: Any) -> Any:
    dt = lookup(dtype)
    if dt == bfloat16:
        return ml_dtypes.finfo(dt)
    return np.finfo(dt)


def iinfo(dtype: Any) -> Any:
    return np.iinfo(lookup(dtype))
