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
from ember._src.native.kernel import MOVEMENT_PRIMS, REDUCE_PRIMS


def describe(name: str) -> str | None:
    if name in c_ops.OPS and name not in ("copy", "stop_gradient"):
        return "native kernel: elementwise C expression (c_ops.OPS)"
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
    return None


def declare() -> None:
    for name, p in core.PRIMITIVES.items():
        if p.lowering is None and "lowering" not in p.not_applicable:
            d = describe(name)
            if d is not None:
                p.lowering = d
