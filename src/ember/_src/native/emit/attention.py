"""The ``attention`` call step: a tiled online-softmax (flash-style) kernel inside ``ember_main``.

The primitive (:mod:`ember._src.prims.attention`) runs as one call step whose C is
``csrc/attention.h``, instantiated for the element type and specialized for the head dims ``D``
and ``Dv`` (static: the loops over them are unrolled and vectorized; the batch, head and sequence
sizes may be named dynamic axes). Work is split into tasks of one (batch, head, block of 32
queries); the tasks run on ember's thread pool (:mod:`.threadpool`, ``em_par``) when the step's
cost is above the parallel threshold. A first pass packs ``K`` transposed in blocks of 64 keys
into the step's arena workspace (the size of ``K``); each task keeps its tiles on the stack (a
``32 x Dv`` accumulator, ``32 x 64`` scores), so nothing of size ``L x S`` exists: activation
memory is linear in the sequence length. Key blocks
wholly above a causal diagonal are skipped; the causal limit and masks are applied per score,
never materialized.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember._src import shapes as sh
from ember._src.native.base import symdims as sd
from ember._src.native.csrc import load
from ember._src.native.emit import support
from ember._src.native.emit.calls import CallCode, register, row_strides
from ember._src.program import Eqn

BLOCK_Q = 32  # queries per task (EM_ATT_BQ)
BLOCK_K = 64  # keys per block (EM_ATT_BK)
_TYPES = {np.dtype(np.float32): ("float", "f32", "em_expf"), np.dtype(np.float64): ("double", "f64", "exp")}
# AVX-512's fused multiply-add of two 64-byte vectors and an accumulator, per element type
# (EM_ATT_FMA512; attention.h uses it where the target has AVX-512)
_FMA512 = {"f32": "__builtin_ia32_vfmaddps512_mask((a), (b), (c), (short)-1, 4)",
           "f64": "__builtin_ia32_vfmaddpd512_mask((a), (b), (c), (unsigned char)-1, 4)"}
_MAX_HEAD_DIM = 512  # the per-task tiles live on the stack: 32 x Dv and D x 64 elements
_SRC = load("attention.h")


def _accepts(e: Eqn) -> bool:
    q, v = e.inputs[0].aval, e.inputs[2].aval
    D, Dv = q.shape[3], v.shape[3]
    return (np.dtype(q.dtype) in _TYPES and isinstance(D, int) and isinstance(Dv, int)
            and 0 < D <= _MAX_HEAD_DIM and 0 < Dv <= _MAX_HEAD_DIM)


def _key_blocks(S: Any) -> Any:
    return sh.floordiv(S + (BLOCK_K - 1), BLOCK_K) if sh.is_symbolic(S) else -(-S // BLOCK_K)


def _workspace(e: Eqn) -> Any:
    """Bytes of the packed ``K^T`` blocks: ``B * Hk * ceil(S / 64) * D * 64`` elements (linear in S)."""
    B, Hk, S, D = e.inputs[1].aval.shape
    return B * Hk * _key_blocks(S) * BLOCK_K * D * np.dtype(e.inputs[1].aval.dtype).itemsize


def _empty_mode(mask_value: float | None) -> str:
    """How the kernel fills a row that attends nothing: 0 zeros, 1 the mean of the values, 2 NaN."""
    if mask_value is None:
        return "0"
    return "2" if mask_value == -np.inf else "1"


def _broadcast_strides(shape: tuple) -> list[str]:
    """C strides of a rank-4 bias/mask, 0 along its broadcast (size-1) dims."""
    return ["0" if isinstance(d, int) and d == 1 else sd.cdim(st) for d, st in zip(shape, row_strides(shape))]


def _helpers(cc: CallCode, dtype: np.dtype, D: int, Dv: int) -> str:
    elt, sfx, exp = _TYPES[dtype]
    support.need(exp if exp.startswith("em_") else "math.h")  # the exponential EM_ATT_EXP names
    head = (f"#define ELT {elt}\n#define EM_T(name) name##_{sfx}\n#define EM_ATT_EXP {exp}\n"
            f"#define EM_ATT_FMA512(a, b, c) {_FMA512[sfx]}\n")
    tail = "#undef EM_ATT_FMA512\n#undef EM_ATT_EXP\n#undef EM_T\n#undef ELT\n"
    cc.helper(f"em_attn_{sfx}", head + _SRC + tail)
    task, pack = f"em_attn_run_{sfx}_{D}_{Dv}", f"em_attn_packk_{sfx}_{D}"
    cc.chunk(task, f"em_attn_task_{sfx}((const em_attn_ctx_{sfx} *)c_, t, {D}, {Dv})")
    cc.chunk(pack, f"em_attn_pack_{sfx}((const em_attn_ctx_{sfx} *)c_, t, {D})")
    return task, pack


@register("attention", "tiled online-softmax kernel on the thread pool (attention.py, csrc/attention.h)",
          _accepts, _workspace, symbolic_ok=True)
def _attention(e: Eqn, cc: CallCode) -> list[str]:
    p = e.params
    q, k, v = (a.aval for a in e.inputs[:3])
    dtype = np.dtype(q.dtype)
    B, H, L, D = q.shape
    Hk, S, Dv = k.shape[1], k.shape[2], v.shape[3]
    task, pack = _helpers(cc, dtype, D, Dv)
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
    nkb = c(_key_blocks(S))
    fields = [cc.ins[0], cc.ins[1], cc.ins[2], bias, mask, cc.outs[0], f"({_TYPES[dtype][0]} *){cc.ws}",
              c(H), f"({c(H)} / {c(Hk)})", c(L), c(S), nqb, nkb,
              c(H * L * D), c(L * D), c(Hk * S * D), c(S * D), c(Hk * S * Dv), c(S * Dv), c(H * L * Dv),
              c(L * Dv), "{" + ", ".join(bs) + "}", "{" + ", ".join(ms) + "}",
              repr(float(p["scale"])), "1" if p["causal"] else "0", _empty_mode(p["mask_value"]),
              coff]
    lines = [f"em_attn_ctx_{sfx} ac_ = {{{', '.join(fields)}}};",
             f"const int64_t n_ = (int64_t){c(B)} * {c(H)} * {nqb}, nk_ = (int64_t){c(B)} * {c(Hk)} * {nkb};"]
    if cc.openmp and cc.num_threads != 1:
        work = f"(double){c(B)} * {c(H)} * {c(L)} * {c(S)} * {D + Dv}"
        threads = cc.num_threads or 0
        lines.append(f"const int par_ = {work} >= {cc.parallel_threshold}.0;")
        lines += [f"if (par_ && {n} > 1) em_par({fn}, &ac_, {n}, {threads}, 0, {chunks}); "
                  f"else {fn}(&ac_, 0, {n}, 0);" for fn, n, chunks in ((pack, "nk_", 2), (task, "n_", 4))]
    else:
        lines += [f"{pack}(&ac_, 0, nk_, 0);", f"{task}(&ac_, 0, n_, 0);"]
    return lines
