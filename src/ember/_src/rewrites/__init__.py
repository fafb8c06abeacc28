"""Target-independent Program -> Program rewrites, shared by the native backend
(:mod:`ember._src.native.rewrite.passes`, which adds its CPU-specific passes around them) and the
GPU backends (:mod:`ember._src.gpu.kernels` runs :data:`SHARED_PASSES` before scheduling):

* :func:`.inline.inline_calls` -- checkpoint / custom_jvp_call / custom_vjp_call spliced in;
* :func:`.identities.simplify` -- algebraic identities, splat arithmetic, trivial or merged movement
  (transpose of transpose, reshape of reshape, ...), given the backend's :class:`.identities.OpKinds`;
* :func:`.dedup.cse`, :func:`.dedup.dce` -- common subexpressions once, dead equations dropped;
* :func:`.fold.fold_constants` -- equations of constant inputs evaluated at compile time.
"""

from __future__ import annotations

from collections.abc import Callable

from ember._src.program import Program
from ember._src.rewrites.dedup import cse, dce
from ember._src.rewrites.fold import fold_constants
from ember._src.rewrites.identities import OpKinds, simplify
from ember._src.rewrites.inline import inline_calls

SHARED_PASSES = ("inline_calls", "simplify", "cse", "fold_constants", "simplify", "cse", "dce")
"""The target-independent passes, in the order a backend without passes of its own runs them."""


def shared_pass(name: str, kinds: OpKinds) -> Callable[[Program], Program]:
    """The pass ``name`` of :data:`SHARED_PASSES` (``simplify`` bound to the backend's ``kinds``)."""
    if name == "simplify":
        return lambda p: simplify(p, kinds)
    return {"inline_calls": inline_calls, "cse": cse, "fold_constants": fold_constants, "dce": dce}[name]


def run_shared(p: Program, kinds: OpKinds) -> Program:
    """``p`` after :data:`SHARED_PASSES`."""
    for name in SHARED_PASSES:
        p = shared_pass(name, kinds)(p)
    return p
