"""The ``attention`` call step: a tiled online-softmax (flash-style) kernel inside ``ember_main``.

The primitive (:mod:`ember._src.prims.attention`) runs as one call step whose C is
``csrc/attention.h``, instantiated for the element type and specialized for the head dims ``D``
and ``Dv`` (static: the loops over them are unrolled and vectorized; the batch, head and sequence
sizes may be named dynamic axes). Work is split into tasks of one (batch, head, block of 32
queries); the tasks run on ember's thread pool (:mod:`.threadpool`, ``em_par``) when the step's
cost is above the parallel threshold. Each task keeps its tiles on the stack (a ``32 x Dv``
accumulator, a ``D x 64`` packed key block, 64 scores), so the step needs no arena scratch and
nothing of size ``L x S`` exists: activation memory is linear in the sequence length. Key blocks
wholly above a causal diagonal are skipped; the causal limit and masks are applied per score,
never materialized.
"""

from __future__ import annotations

import numpy as np

from ember._src.native import symdims as sd
from ember._src.native.calls import CallCode, register
from ember._src.native.csrc import load
from ember._src.program import Eqn

BLOCK_Q = 32  # queries per task (EM_ATT_BQ)
_TYPES = {np.dtype(np.float32): ("float", "f32", "em_expf"), np.dtype(np.float64): ("double", "f64", "exp")}
_MAX_HEAD_DIM = 512  # the per-task tiles live on the stack: 32 x Dv and D x 64 elements
_SRC = load("attention.h")


def _accepts(e: Eqn) -> bool:
    q, v = e.inputs[0].aval, e.inputs[2].aval
    D, Dv = q.shape[3], v.shape[3]
    return (np.dtype(q.dtype) in _TYPES and isinstance(D, int) and isinstance(Dv, int)
            and 0 < D <= _MAX_HEAD_DIM and 0 < Dv <= _MAX_HEAD_DIM)


def _strides(shape: tuple) -> list:
    """Row-major element strides of ``shape`` (ints or DimExprs)."""
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc = acc * d
    return out[::-1]


def _broadcast_strides(shape: tuple) -> list[str]:
    """C strides of a rank-4 bias/mask, 0 along its broadcast (size-1) dims."""
    return ["0" if isinstance(d, int) and d == 1 else sd.cdim(st) for d, st in zip(shape, _strides(shape))]


def _helpers(cc: CallCode, dtype: np.dtype, D: int, Dv: int) -> str:
    elt, sfx, exp = _TYPES[dtype]
    cc.helper(f"em_attn_{sfx}", _SRC.replace("ELT", elt).replace("SFX", sfx).replace("EM_ATT_EXP", exp))
    task = f"em_attn_run_{sfx}_{D}_{Dv}"
    cc.helper(task, f"static EM_TASK_ATTR void {task}(void *c_, int64_t lo, int64_t hi, int64_t tid) {{\n"
                    f"    (void)tid;\n"
                    f"    for (int64_t t = lo; t < hi; ++t) em_attn_task_{sfx}((const em_attn_ctx_{sfx} *)c_, t, "
                    f"{D}, {Dv});\n}}\n")
    return task


@register("attention", "tiled online-softmax kernel on the thread pool (attention.py, csrc/attention.h)",
          _accepts, symbolic_ok=True)
def _attention(e: Eqn, cc: CallCode) -> list[str]:
    p = e.params
    q, k, v = (a.aval for a in e.inputs[:3])
    dtype = np.dtype(q.dtype)
    B, H, L, D = q.shape
    Hk, S, Dv = k.shape[1], k.shape[2], v.shape[3]
    task = _helpers(cc, dtype, D, Dv)
    sfx = _TYPES[dtype][1]
    extra = 3
    bias = mask = "0"
    bs = ms = ["0"] * 4
    if p["has_bias"]:
        bias, bs = cc.ins[extra], _broadcast_strides(e.inputs[extra].aval.shape)
        extra += 1
    if p["has_mask"]:
        mask, ms = f"(const unsigned char *){cc.ins[extra]}", _broadcast_strides(e.inputs[extra].aval.shape)
    c = sd.cdim
    nqb = f"(({c(L)} + {BLOCK_Q - 1}) / {BLOCK_Q})"
    coff = {None: "0", "top_left": "0", "bottom_right": f"({c(S)} - {c(L)})"}[p["causal"]]
    fields = [cc.ins[0], cc.ins[1], cc.ins[2], bias, mask, cc.outs[0],
              c(H), f"({c(H)} / {c(Hk)})", c(L), c(S), nqb,
              c(H * L * D), c(L * D), c(Hk * S * D), c(S * D), c(Hk * S * Dv), c(S * Dv), c(H * L * Dv),
              c(L * Dv), "{" + ", ".join(bs) + "}", "{" + ", ".join(ms) + "}",
              repr(float(p["scale"])), "1" if p["causal"] else "0", "0" if p["mask_value"] is None else "1",
              coff]
    n = f"(int64_t){c(B)} * {c(H)} * {nqb}"
    lines = [f"em_attn_ctx_{sfx} ac_ = {{{', '.join(fields)}}};",
             f"const int64_t n_ = {n};"]
    if cc.openmp and cc.num_threads != 1:
        work = f"(double){c(B)} * {c(H)} * {c(L)} * {c(S)} * {D + Dv}"
        threads = cc.num_threads or 0
        lines.append(f"if (n_ > 1 && {work} >= {cc.parallel_threshold}.0) em_par({task}, &ac_, n_, {threads}, 0, 4);")
        lines.append(f"else {task}(&ac_, 0, n_, 0);")
    else:
        lines.append(f"{task}(&ac_, 0, n_, 0);")
    return lines
