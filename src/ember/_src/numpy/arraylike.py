"""JAX's refusal of Python lists and tuples where ``jax.numpy`` expects an array.

``jnp.sum([1, 2, 3])`` and ``jnp.sin([0.5])`` are ``TypeError``s in JAX (its ``check_arraylike``):
a list is converted element by element, which under ``jit`` means one traced constant per element,
so JAX asks for the explicit ``jnp.asarray(...)``. ``ember.numpy`` exports the functions below
checked the same way: the tables name, per function, the positional parameters that must be
array-like (arrays, NumPy arrays, scalars), found by calling each JAX function with a list in each
position. The implementations in the other modules stay unchecked, so ember's own code may still
pass them lists.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ember._src.numpy import (
    bit_packing,
    contractions,
    creation,
    diagonals,
    extras,
    histograms,
    indexing,
    manipulation,
    more_ufuncs,
    padding,
    polynomial,
    reductions,
    searching,
    statistics,
    ufuncs,
)

_MODULES = (bit_packing, contractions, creation, diagonals, extras, histograms, indexing, manipulation,
            more_ufuncs, padding, polynomial, reductions, searching, statistics, ufuncs)

# the first positional parameter
_FIRST = """
abs absolute acos acosh all amax amin angle any arccos arccosh arcsin arcsinh arctan arctanh argmax
argmin argsort argwhere around array_split asin asinh astype atan atanh bincount bitwise_count
bitwise_invert bitwise_not broadcast_to cbrt ceil choose conj conjugate copy corrcoef cos cosh
count_nonzero cov cumprod cumsum cumulative_prod cumulative_sum deg2rad degrees diag
diag_indices_from diagflat diagonal diff dsplit ediff1d empty_like exp exp2 expand_dims expm1 fabs
flatnonzero flip fliplr flipud floor frexp histogram histogram_bin_edges hsplit i0 imag invert
iscomplex isfinite isinf isnan isneginf isposinf isreal log log10 log1p log2 logical_not
matrix_transpose max mean median min modf moveaxis nan_to_num nanargmax nanargmin nancumprod
nancumsum nanmax nanmean nanmedian nanmin nanprod nanstd nansum nanvar negative nonzero ones_like
packbits pad permute_dims poly polyder polyint positive prod ptp rad2deg radians ravel real
reciprocal reshape rint roll roots rot90 round sign signbit sin sinc sinh sort sort_complex spacing
split sqrt square squeeze std sum tan tanh tile trace transpose trapezoid tril tril_indices_from
trim_zeros triu triu_indices_from trunc unique unique_all unique_counts unique_inverse unique_values
unpackbits unstack unwrap vander var vsplit zeros_like
"""
# the first two
_FIRST_TWO = """
add allclose append arctan2 atan2 bitwise_and bitwise_left_shift bitwise_or bitwise_right_shift
bitwise_xor compress convolve copysign correlate cross delete digitize divide divmod dot equal
extract float_power floor_divide fmax fmin fmod full_like gcd greater greater_equal heaviside
histogram2d hypot inner intersect1d isclose isin kron lcm ldexp left_shift less less_equal linspace
logaddexp logaddexp2 logical_and logical_or logical_xor matmul matvec maximum minimum mod multiply
nanpercentile nanquantile nextafter not_equal outer percentile polyadd polydiv polymul polysub
polyval pow power quantile remainder repeat right_shift searchsorted setdiff1d setxor1d subtract
take take_along_axis tensordot true_divide union1d vdot vecdot vecmat
"""
POSITIONS: dict[str, tuple[int, ...]] = {
    **{n: (0,) for n in _FIRST.split()},
    **{n: (0, 1) for n in _FIRST_TWO.split()},
    "full": (1,), "insert": (0, 1, 2), "interp": (0, 1, 2), "where": (0, 1, 2), "clip": (0, 1, 2),
}
# every positional argument (``*arrays``)
VARARGS = frozenset({"atleast_1d", "atleast_2d", "atleast_3d", "broadcast_arrays", "ix_", "meshgrid"})
# each element of the sequence of arrays that is the first argument
SEQUENCE = frozenset({"concatenate", "concat", "stack", "hstack", "vstack", "dstack", "column_stack"})


_SEQ = frozenset({list, tuple})


def check_arraylike(name: str, *args: Any) -> None:
    """Raise JAX's ``TypeError`` when one of ``args`` is a list or a tuple."""
    for i, a in enumerate(args):
        if isinstance(a, (list, tuple)):
            raise TypeError(f"{name} requires ndarray or scalar arguments, got {type(a)} at position {i}.")


def _checked(name: str, fn: Callable) -> Callable:
    if name in VARARGS:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            check_arraylike(name, *args)
            return fn(*args, **kwargs)
    elif name in SEQUENCE:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if args and isinstance(args[0], (list, tuple)):
                check_arraylike(name, *args[0])
            return fn(*args, **kwargs)
    elif POSITIONS[name] == (0,):  # the common cases, spelled out: this runs on every eager call
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if args and args[0].__class__ in _SEQ:
                check_arraylike(name, args[0])
            return fn(*args, **kwargs)
    elif POSITIONS[name] == (0, 1):
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if args and (args[0].__class__ in _SEQ or len(args) > 1 and args[1].__class__ in _SEQ):
                check_arraylike(name, *args[:2])
            return fn(*args, **kwargs)
    else:
        positions = POSITIONS[name]

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            for i in positions:
                if i < len(args) and isinstance(args[i], (list, tuple)):
                    raise TypeError(f"{name} requires ndarray or scalar arguments, got {type(args[i])} "
                                    f"at position {i}.")
            return fn(*args, **kwargs)

    return functools.wraps(fn)(wrapper)


def _find(name: str) -> Callable | None:
    for mod in _MODULES:
        if name in getattr(mod, "__all__", ()):
            return getattr(mod, name)
    return None


_CHECKED = {n: f for n in sorted({*POSITIONS, *VARARGS, *SEQUENCE}) if (f := _find(n)) is not None}
globals().update({n: _checked(n, f) for n, f in _CHECKED.items()})
__all__ = sorted(_CHECKED)
