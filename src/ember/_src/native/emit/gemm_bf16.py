"""The ``native_gemm_bf16`` call step: a float32 ``[M, K]`` operand times a bfloat16 weight held as
its ``uint16`` bits (:mod:`ember._src.native.rewrite.bf16_weights`), on ``csrc/gemm_bf16.h``.

The weight is packed once into the kernel's panel layout (pairs of ``k`` interleaved, as
``vdpbf16ps`` and AMX's ``tdpbf16ps`` take them): a program constant into a buffer that lives as
long as the program (``csrc/prepack.h``'s claim protocol, so concurrent first calls never wait);
elsewhere (a loop body) into a buffer allocated per call. The code path is the one :func:`.bf16_isa.bf16_path`
picks for the CPU the program is compiled on, written into the C as ``EM_BF16_PATH``. On the
``vdpbf16ps`` and AMX paths the activations are first rounded to bfloat16 pairs in the step's
workspace.
Tasks of (192 rows, 8 panels of 32 columns) run on ember's thread pool above the parallel threshold; ``M`` may
be a named dynamic axis.
"""

from __future__ import annotations

from ember._src import shapes as sh
from ember._src.native.base import symdims as sd
from ember._src.native.csrc import load
from ember._src.native.emit.calls import CallCode, register
from ember._src.native.runtime import bf16_isa
from ember._src.program import Eqn

_NR = 32  # EM_BF16_NR: columns per packed panel
_MC = 192  # EM_BF16_MC: rows per task
_ROUNDING = ("amx", "avx512bf16")  # the paths that round A to bfloat16 pairs first


def _sizes(e: Eqn) -> tuple:
    """(M, N, K) of the product."""
    m, k = e.inputs[0].aval.shape
    w = e.inputs[1].aval.shape
    n = w[0] if e.params["trans_b"] else w[1]
    return m, n, k


def _accepts(e: Eqn) -> bool:
    _, n, k = _sizes(e)
    return isinstance(n, int) and isinstance(k, int)


def _pairs(k: int) -> int:
    """Pairs of ``k`` per packed row, rounded up to 16 (``em_bf16_pairs``: an AMX tile's depth)."""
    return ((k + 1) // 2 + 15) // 16 * 16


def _workspace(e: Eqn) -> object:
    """Bytes of ``A`` rounded to bfloat16 pairs (the ``vdpbf16ps`` and AMX paths): rows of
    :func:`_pairs` words, ``M`` rounded up to 32 rows (an AMX block's)."""
    m, _, k = _sizes(e)
    if bf16_isa.bf16_path() not in _ROUNDING:
        return 0
    rows = sh.floordiv(m + 31, 32) * 32 if sh.is_symbolic(m) else -(-m // 32) * 32
    return rows * _pairs(k) * 4


@register("native_gemm_bf16", "products with bfloat16 weights: vdpbf16ps, or the weights widened on the fly "
          "(gemm_bf16.py, csrc/gemm_bf16.h)", _accepts, _workspace, symbolic_ok=True)
def _gemm_bf16(e: Eqn, cc: CallCode) -> list[str]:
    m, n, k = _sizes(e)
    trans = 1 if e.params["trans_b"] else 0
    path = bf16_isa.bf16_path()
    number = bf16_isa.path_number(path)
    cc.helper("em_gemm_bf16", f"#define EM_BF16_PATH {number}\n" + load("gemm_bf16.h"))
    run = cc.chunk("em_bf16_run", "em_bf16_task((const em_bf16_ctx *)c_, t)")
    rnd = cc.chunk("em_bf16_rnd", "em_bf16_round_task((const em_bf16_ctx *)c_, t)")
    kp, kps, npan = (k + 1) // 2, _pairs(k), -(-n // _NR)
    words = npan * kps * _NR
    c = sd.cdim
    w = f"(const uint16_t *){cc.ins[1]}"
    lines = ["uint32_t *bp_ = 0, *own_ = 0;"]
    const = cc.const_ins[1] if len(cc.const_ins) > 1 else None
    if cc.keep is not None and const is not None and words > 0:
        cc.helper("em_prepack", load("prepack.h"))
        kept = cc.keep(64 + 63 + 4 * words)
        lines += [f"int64_t *pst_ = (int64_t *){kept}; const int pcl_ = em_prepack_claim(pst_);",
                  f"if (pcl_ >= 0) bp_ = (uint32_t *)em_prepack_data({kept});",
                  f"if (pcl_ == 0) {{ em_bf16_pack({w}, {trans}, {k}, {n}, bp_); em_prepack_done(pst_); }}"]
    lines += [f"if (!bp_) {{ own_ = em_bf16_alloc({words}); em_bf16_pack({w}, {trans}, {k}, {n}, own_); "
              "bp_ = own_; }"]
    ab = f"(const uint32_t *){cc.ws}" if path in _ROUNDING else "0"
    nrb = f"(({c(m)} + {_MC - 1}) / {_MC})"
    lines += [f"em_bf16_ctx bc_ = {{{c(m)}, {n}, {k}, {kp}, {kps}, {npan}, {nrb}, {cc.ins[0]}, {k}, {ab}, "
              f"bp_, {cc.outs[0]}, {n}, 0}};",
              "const int64_t nt_ = em_bf16_tasks(&bc_);"]
    if cc.openmp and cc.num_threads != 1:
        threads = cc.num_threads or 0
        lines.append(f"const int par_ = (double){c(m)} * {n} * {k} >= {cc.parallel_threshold}.0;")
        if path in _ROUNDING:
            lines.append(f"if (par_ && {nrb} > 1) em_par({rnd}, &bc_, {nrb}, {threads}, 0, 2); "
                         f"else {rnd}(&bc_, 0, {nrb}, 0);")
        lines.append(f"if (par_ && nt_ > 1) em_par({run}, &bc_, nt_, {threads}, 0, 4); "
                     f"else {run}(&bc_, 0, nt_, 0);")
    else:
        if path in _ROUNDING:
            lines.append(f"{rnd}(&bc_, 0, {nrb}, 0);")
        lines.append(f"{run}(&bc_, 0, nt_, 0);")
    lines.append("em_bf16_free(own_);")
    return ["{", *lines, "}"]
