"""Record on each primitive how the native backend lowers it (``Primitive.lowering``).

The lowerings themselves live in this package (the C op table, the kernel builder's index maps,
the matmul pass); this module only fills the registry's ``lowering`` slot with a short description
so that ``registry_report`` shows which primitives run as fused kernels or native calls. Primitives
left without one run as fallback steps (their NumPy implementation, called back from the native
program). A primitive that declares ``na("lowering", ...)`` is left alone.
"""

from __future__ import annotations

from ember._src import core
from ember._src.native import c_ops
from ember._src.native.calls import CALLS
from ember._src.native.kernel import MOVEMENT_PRIMS, REDUCE_PRIMS
from ember._src.native.passes import INLINE_PARAM


def describe(name: str) -> str | None:
    if name in c_ops.OPS and name not in ("copy", "stop_gradient"):
        return "native kernel: elementwise C expression (c_ops.OPS)"
    if name in c_ops.COMPLEX_OPS and name not in ("copy", "stop_gradient"):
        return "native kernel: elementwise C expression on complex values (c_complex.py)"
    if name in MOVEMENT_PRIMS or name in ("iota", "take"):
        return "native kernel: read through an index expression (kernel.py)"
    if name in REDUCE_PRIMS:
        return "native kernel: reduction loop with fused prologue/epilogue (kernel.py)"
    if name in ("copy", "stop_gradient"):
        return "native: identity (removed by passes.simplify)"
    if name in ("scan", "while", "cond"):
        return "native loop: bodies compiled into the entry point (loops.py); else a fallback step"
    if name == "dot_general":
        return "native call: BLAS ?gemm/?gemv via passes.lower_matmul"
    if name in CALLS:
        return CALLS[name].description
    if name in INLINE_PARAM:
        return "native: inlined by passes.inline_calls (the sub-program's equations fuse with the caller)"
    return None


# Primitives that deliberately have no native lowering: the reason is recorded with
# ``prim.na("lowering", reason)``. Those marked "fallback step" still run inside the one native
# call, through a Python callback to their NumPy implementation.
_FALLBACK = "runs as a native fallback step (its NumPy implementation is called back from the program)"
NO_LOWERING = {
    "random_gamma": f"{_FALLBACK}: rejection sampling with data-dependent loops stays in NumPy",
    "random_gamma_grad": f"{_FALLBACK}: series/asymptotic gradient of the gamma CDF stays in NumPy",
    "random_poisson": f"{_FALLBACK}: rejection sampling with data-dependent loops stays in NumPy",
    "custom_lin": "never reaches a backend: grad transposes it into the bwd program; its forward "
                  "evaluation is an error (forward-mode of a custom_vjp function)",
}


def native_kind(p: core.Primitive) -> str:
    """A one-word summary of how the native backend runs ``p``: kernel, call, loop, inlined,
    identity, fallback step, or not applicable."""
    text = p.lowering or ""
    for prefix, kind in (("native kernel", "fused kernel"), ("native call", "native call"),
                         ("native loop", "native loop"), ("native: inlined", "inlined"),
                         ("native: identity", "removed (identity)")):
        if text.startswith(prefix):
            return kind
    reason = p.not_applicable.get("lowering", "")
    return "fallback step" if "fallback step" in reason else "never lowered"


def declare() -> None:
    """Fill ``lowering`` on every primitive the native backend lowers; record the exceptions."""
    for name, reason in NO_LOWERING.items():
        p = core.PRIMITIVES.get(name)
        if p is not None and p.lowering is None and "lowering" not in p.not_applicable:
            p.na("lowering", reason)
    for name, p in core.PRIMITIVES.items():
        if p.lowering is None and "lowering" not in p.not_applicable:
            d = describe(name)
            if d is not None:
                p.lowering = d
