"""``eval_shape``: the output shapes and dtypes of a function, found by tracing (nothing runs)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ember._src import core
from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src import tree as tu
from ember._src.core import ShapedArray
from ember._src.program import trace_to_program

__all__ = ["ShapeDtypeStruct", "eval_shape"]


class ShapeDtypeStruct:
    """A shape and a dtype standing in for an array (``jax.ShapeDtypeStruct``).

    Dims may be symbolic (named axes). Usable as an argument of :func:`eval_shape`, and anywhere
    an abstract value is read with ``core.get_aval``.
    """

    __slots__ = ("shape", "dtype", "weak_type")

    def __init__(self, shape: Sequence[sh.Dim], dtype: Any, weak_type: bool = False):
        self.shape = sh.canonical_shape(shape)
        self.dtype = dt.canonicalize(dtype)
        self.weak_type = bool(weak_type)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> sh.Dim:
        return sh.size(self.shape)

    @property
    def aval(self) -> ShapedArray:
        return ShapedArray(self.shape, self.dtype, self.weak_type)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __repr__(self) -> str:
        weak = ", weak_type=True" if self.weak_type else ""
        return f"ShapeDtypeStruct(shape={self.shape}, dtype={self.dtype.name}{weak})"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, ShapeDtypeStruct) and self.shape == other.shape
                and self.dtype == other.dtype and self.weak_type == other.weak_type)

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype, self.weak_type))


def _abstractify(x: Any, where: str) -> ShapedArray:
    aval = getattr(x, "aval", None)
    if isinstance(aval, ShapedArray):
        return aval
    if isinstance(x, (bool, int, float, complex, np.ndarray, np.generic)):
        return core.get_aval(x)
    shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
    if shape is not None and dtype is not None:  # duck-typed shape/dtype holders (jax/torch structs)
        return ShapedArray(sh.canonical_shape(shape), dt.canonicalize(dtype), False)
    raise TypeError(f"eval_shape: {where} of type {type(x).__name__} is not an array or a "
                    "ShapeDtypeStruct")


def eval_shape(fun: Callable, *args: Any, **kwargs: Any) -> Any:
    """The pytree of :class:`ShapeDtypeStruct` that ``fun(*args, **kwargs)`` would return.

    Arguments are pytrees of arrays or ShapeDtypeStructs (or anything with ``shape`` and
    ``dtype``); ``fun`` is traced abstractly, so no computation runs.
    """
    leaves, in_tree = tu.flatten((args, kwargs))
    avals = [_abstractify(x, f"argument leaf {i}") for i, x in enumerate(leaves)]
    store: list = []

    def flat(*xs: Any) -> list:
        a, k = tu.unflatten(in_tree, xs)
        out_leaves, out_tree = tu.flatten(fun(*a, **k))
        store.append(out_tree)
        return out_leaves

    prog, _ = trace_to_program(flat, avals)
    outs = [ShapeDtypeStruct(a.shape, a.dtype, a.weak_type) for a in prog.out_avals]
    return tu.unflatten(store[0], outs)
