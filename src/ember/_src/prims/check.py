"""``check``: a condition a program asserts at run time, raising ``CheckError`` with a message when it
fails (torch's ``_assert_async`` in an imported model, e.g. a model path that the import supports
only for some input values).

The primitive is *effectful* (``Primitive.effectful``): it has no results, so without that the
passes would drop it; they also never merge two checks or fold one at compile time. Its operand is
a boolean array that must be all true. Rules:

* ``jvp``: the check runs on the primals; nothing to differentiate.
* ``transpose``: nothing flows back.
* ``batch``: the batched condition, checked whole (every element must hold).

The native backend tests the condition in C (a call step, in program order); a false element hands
the step to Python, whose implementation raises, as a failed index check does. The GPU backends run
it on the host only with ``host_fallback=True``, as ``debug_callback``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember._src.core import Primitive, ShapedArray
from ember.errors import CheckError

check_p = Primitive("check", multiple_results=True, effectful=True)


def _impl(cond: np.ndarray, *, message: str) -> list:
    if not np.all(cond):
        raise CheckError(message)
    return []


def _abstract(cond: ShapedArray, *, message: str) -> list:
    if np.dtype(cond.dtype) != np.bool_:
        raise TypeError(f"check: the condition must be boolean, got {np.dtype(cond.dtype)}")
    return []


def _jvp(primals: list, tangents: list, *, message: str) -> tuple[list, list]:
    check_p.bind(primals[0], message=message)
    return [], []


def _batch(vals: list, dims: list, *, message: str) -> tuple[list, list]:
    check_p.bind(vals[0], message=message)
    return [], []


check_p.impl = _impl
check_p.abstract_eval = _abstract
check_p.jvp = _jvp
check_p.transpose = lambda cts, cond, *, message: [None]
check_p.batch = _batch


def check(cond: Any, message: str) -> None:
    """Assert at run time that every element of the boolean ``cond`` is true; otherwise the call
    raises :class:`ember.errors.CheckError` with ``message``. Inside ``jit`` the check stays in the
    compiled program (it is never dropped, merged or folded)."""
    check_p.bind(cond, message=str(message))
