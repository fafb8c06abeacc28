"""Operators and NumPy-style methods, attached to :class:`Array` and to every tracer.

Methods look the function up in :mod:`ember.numpy` when called, so the same expression means
the same thing eagerly, under ``jit`` and under every transformation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember._src import core
from ember._src.array import Array
from ember._src.numpy.indexing import AtIndexer, getitem
from ember._src.shapes import DimExpr


def _np() -> Any:
    import ember.numpy as jnp
    return jnp


def _forward(name: str) -> Callable:
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(_np(), name)(self, *args, **kwargs)

    method.__name__ = name
    method.__doc__ = f"See :func:`ember.numpy.{name}`."
    return method


def _reflected(name: str) -> Callable:
    def method(self: Any, other: Any) -> Any:
        return getattr(_np(), name)(other, self)

    method.__name__ = f"__r{name}__"
    return method


def _binop(name: str) -> Callable:
    fn: list = []  # the ember.numpy function, looked up on first use (the module imports this one)

    def method(self: Any, other: Any) -> Any:
        if not isinstance(other, _OPERAND_TYPES):  # (_is_operand, inlined: a call per operator)
            return NotImplemented
        if not fn:
            fn.append(getattr(_np(), name))
        return fn[0](self, other)

    return method


def _rbinop(name: str) -> Callable:
    fn: list = []

    def method(self: Any, other: Any) -> Any:
        if not _is_operand(other):
            return NotImplemented
        if not fn:
            fn.append(getattr(_np(), name))
        return fn[0](other, self)

    return method


_OPERAND_TYPES = (Array, core.Tracer, bool, int, float, complex, np.ndarray, np.generic, list, tuple, DimExpr)


def _is_operand(x: Any) -> bool:
    return isinstance(x, _OPERAND_TYPES)


_BINOPS = {"add": "add", "sub": "subtract", "mul": "multiply", "truediv": "true_divide",
           "floordiv": "floor_divide", "mod": "remainder", "pow": "power", "matmul": "matmul",
           "and": "bitwise_and", "or": "bitwise_or", "xor": "bitwise_xor", "lshift": "left_shift",
           "rshift": "right_shift"}
_CMPOPS = {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal", "gt": "greater",
           "ge": "greater_equal"}
_UNOPS = {"neg": "negative", "pos": "positive", "abs": "absolute", "invert": "invert"}
_METHODS = ["reshape", "transpose", "squeeze", "flatten", "ravel", "sum", "prod", "mean", "var", "std",
            "max", "min", "argmax", "argmin", "all", "any", "cumsum", "cumprod", "clip", "round",
            "astype", "swapaxes", "take", "repeat", "dot", "conj", "conjugate", "nonzero", "sort",
            "argsort", "trace", "diagonal", "ptp", "searchsorted", "squeeze", "copy"]


def _divmod(self: Any, other: Any) -> Any:
    jnp = _np()
    return jnp.floor_divide(self, other), jnp.remainder(self, other)


def _rdivmod(self: Any, other: Any) -> Any:
    jnp = _np()
    return jnp.floor_divide(other, self), jnp.remainder(other, self)


def _getitem(self: Any, idx: Any) -> Any:
    return getitem(self, idx)


def _at(self: Any) -> Any:
    return AtIndexer(self)


def _setitem(self: Any, idx: Any, value: Any) -> None:
    raise TypeError("ember arrays are immutable; use x = x.at[idx].set(value) instead")


def _array_namespace(self: Any, api_version: Any = None) -> Any:
    return _np()


def attach(cls: type) -> None:
    for dunder, name in _BINOPS.items():
        setattr(cls, f"__{dunder}__", _binop(name))
        setattr(cls, f"__r{dunder}__", _rbinop(name))
    for dunder, name in _CMPOPS.items():
        setattr(cls, f"__{dunder}__", _binop(name))
    for dunder, name in _UNOPS.items():
        setattr(cls, f"__{dunder}__", _forward(name))
    for name in _METHODS:
        setattr(cls, name, _forward(name))
    cls.__divmod__, cls.__rdivmod__ = _divmod, _rdivmod
    cls.__getitem__ = _getitem
    cls.__setitem__ = _setitem
    cls.at = property(_at)
    cls.T = property(lambda self: _np().transpose(self))
    cls.mT = property(lambda self: _np().matrix_transpose(self))
    cls.real = property(lambda self: _np().real(self))
    cls.imag = property(lambda self: _np().imag(self))
    cls.__array_namespace__ = _array_namespace
    cls.__hash__ = None  # arrays are not hashable (== is elementwise)


def attach_all() -> None:
    attach(Array)
    attach(core.Tracer)
