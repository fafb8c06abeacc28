"""The ``wide_matmul`` call step (``prims/wide_dot.py``): a matrix product accumulated in double.

One call step per product (``csrc/wide_gemm.h``): per batch matrix, float32 operands are converted
to double in the step's workspace (``8 (m k + k n + m n)`` bytes), SciPy's ``dgemm`` (the ``fns``
slot every program has) forms the product and the result is rounded once to float32; float64
operands go to ``dgemm`` directly. Sizes may be symbolic (the capacities of ``vsla.jit``), rendered
as C expressions, so one compile serves every size.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember._src import shapes as sh
from ember._src.native import abi
from ember._src.native.base.symdims import cdim
from ember._src.native.csrc import load
from ember._src.native.emit.calls import CallCode, register
from ember._src.program import Eqn, Literal

_SRC = load("wide_gemm.h")
_INT_MAX = 2**31 - 1


def _accepts(e: Eqn) -> bool:
    """Array operands (no literals) whose static sizes fit BLAS's 32-bit integers."""
    if any(isinstance(a, Literal) for a in e.inputs):
        return False
    x, y = (a.aval for a in e.inputs)
    dims = (x.shape[-2], x.shape[-1], y.shape[-1])
    return all(not isinstance(d, int) or d <= _INT_MAX for d in dims)


def _workspace(e: Eqn) -> Any:
    """The double copies of one matrix pair and its product (float32 operands), plus alignment."""
    if np.dtype(e.inputs[0].aval.dtype) == np.float64:
        return 0
    x, y = (a.aval for a in e.inputs)
    m, k, n = x.shape[-2], x.shape[-1], y.shape[-1]
    return 64 + 8 * (m * k + k * n + m * n)


@register("wide_matmul", "matrix product accumulated in double: float32 operands converted in the "
          "workspace, BLAS dgemm, rounded once (wide_gemm.h)", _accepts, _workspace, symbolic_ok=True)
def _wide_matmul(e: Eqn, cc: CallCode) -> list[str]:
    dt = np.dtype(e.inputs[0].aval.dtype)
    t, s = ("float", "f32") if dt == np.float32 else ("double", "f64")
    cc.helper(f"em_wide_gemm_{s}", f"#define ELT {t}\n#define EM_T(name) name##_{s}\n" + _SRC
              + "#undef EM_T\n#undef ELT\n")
    x, y = (a.aval for a in e.inputs)
    nb = cdim(sh.size(x.shape[:-2]))
    m, k, n = (cdim(d) for d in (x.shape[-2], x.shape[-1], y.shape[-1]))
    ws = f"(double *)(((uintptr_t)({cc.ws}) + 63) & ~(uintptr_t)63)"
    return [f"em_wide_matmul_{s}({abi.fn_ref('dgemm')}, {nb}, {m}, {n}, {k}, (const {t} *)({cc.ins[0]}), "
            f"(const {t} *)({cc.ins[1]}), ({t} *)({cc.outs[0]}), {ws});"]
