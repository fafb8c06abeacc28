"""Checks of ``jit``'s arguments that name what is wrong: a leaf whose dtype ember does not support,
``static_argnums`` beyond the function's positional parameters."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

from ember._src import core
from ember._src.core import ShapedArray
from ember.errors import DTypeError


def leaf_aval(x: Any) -> ShapedArray:
    """The abstract value of one jit argument leaf, with an error that says why it is not one."""
    try:
        return core.get_aval(x)
    except DTypeError as e:
        raise DTypeError(f"jit: an argument has {e}") from None
    except TypeError:
        raise TypeError(f"jit: argument of type {type(x).__name__} is not an array; mark it static "
                        "with static_argnums/static_argnames") from None


def check_static_argnums(sig: inspect.Signature | None, nums: Sequence[int], label: str) -> None:
    """``static_argnums`` must index the function's positional parameters (unless it takes
    ``*args``), as JAX requires."""
    if sig is None or not nums:
        return
    kinds = [p.kind for p in sig.parameters.values()]
    if inspect.Parameter.VAR_POSITIONAL in kinds:
        return
    n = sum(k in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD) for k in kinds)
    bad = [i for i in nums if not -n <= i < n]
    if bad:
        raise ValueError(f"{label}: static_argnums={tuple(nums)} but the function accepts only {n} "
                         f"positional argument{'s' if n != 1 else ''} (out of range: {bad})")
