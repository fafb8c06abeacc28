"""The ragged call steps (``prims/ragged.py``): one pass over the rows of flat ragged batches.

``ragged_binary`` (row-wise ``+ - *`` under zero extension), ``ragged_rowsum`` (the sum of each row)
and ``ragged_rowbroadcast`` (one value per row written over the row: the sum's transpose). The C
(``csrc/ragged.h``) is included once per element type and table type (and op); a step fills a job
with its operands, result, row table, role columns and workspace (the row offsets and lengths,
summed from the lengths in one pass over the table, each row cut to its buffer) and runs the rows on
the thread pool when the rows hold at least ``parallel_threshold`` elements (summed from the
lengths), else on the calling thread. Sizes may be symbolic (the flat lengths and the row count are
named axes under ``vsla.Ragged``'s jitted operations), so one compile serves every set of row
lengths.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember._src.native.base.symdims import cdim
from ember._src.native.csrc import load
from ember._src.native.emit import support
from ember._src.native.emit.c_ops import ctype
from ember._src.native.emit.calls import CallCode, register
from ember._src.native.runtime.threadpool import usable_cpus
from ember._src.program import Eqn, Literal

_SRC = load("ragged.h")
_OPS = {"add": "((a) + (b))", "sub": "((a) - (b))", "mul": "((a) * (b))"}
_REAL = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int32), np.dtype(np.int64))
THREADS = max(1, min(usable_cpus(), 64))


def _accepts(e: Eqn) -> bool:
    return (not any(isinstance(a, Literal) for a in e.inputs) and np.dtype(e.inputs[0].aval.dtype) in _REAL
            and e.params.get("op", "add") in _OPS)


def _include(e: Eqn, cc: CallCode, kind: str, define: str) -> tuple[str, str, str]:
    """Register ragged.h for this step's element and table types and ``define`` (the op or the
    accumulator); (the element C type, the table C type, the names' suffix)."""
    dt, it = np.dtype(e.inputs[0].aval.dtype), np.dtype(e.inputs[-1].aval.dtype)
    s = f"{kind}_{dt.name}_{it.name}"
    support.need("threadpool")  # the rows on the pool (em_par)
    macro = define.split(" ")[0]
    cc.helper(f"em_rag_{s}", f"#define ELT {ctype(dt)}\n#define IDX {ctype(it)}\n#define EM_T(name) "
              f"name##_{s}\n#define {define}\n" + _SRC
              + f"#undef {macro}\n#undef EM_T\n#undef IDX\n#undef ELT\n")
    return ctype(dt), ctype(it), s


def _par(cc: CallCode) -> tuple[int, str]:
    """(the elements from which the rows run on the pool, -1: never; the threads, a C expression
    decided per call: ``num_threads`` where given, else the OpenMP default, which follows
    ``OMP_NUM_THREADS`` and the affinity mask): the step decides on the rows' actual size, summed
    from the lengths, not on the buffers' capacity."""
    return ((int(cc.parallel_threshold) if cc.openmp else -1),
            f"em_threads({cc.num_threads or 0}, {min(THREADS, cc.num_threads or THREADS)})")


def _offsets_ws(e: Eqn) -> Any:
    """Bytes of the row layout (an int64 offset, size and ``rank`` axes per row and role) plus
    alignment slack."""
    table = next(a for a in e.inputs if a.aval.ndim == 2)
    return 64 + 8 * (e.params.get("rank", 1) + 2) * len(e.params["roles"]) * table.aval.shape[0]


def _ws(cc: CallCode) -> str:
    return f"(int64_t *)(((uintptr_t)({cc.ws}) + 63) & ~(uintptr_t)63)"


@register("ragged_binary", "row-wise +, - or * of two ragged batches under zero extension: one pass over "
          "the rows, reading the stored data only (ragged.h)", _accepts, _offsets_ws, symbolic_ok=True)
def _ragged_binary(e: Eqn, cc: CallCode) -> list[str]:
    op = e.params["op"]
    t, it, s = _include(e, cc, op, f"EM_RAG_OP(a, b) {_OPS[op]}")
    rows, k = (cdim(d) for d in e.inputs[2].aval.shape)
    roles = ", ".join(str(int(r)) for r in e.params["roles"])
    par, nt = _par(cc)
    caps = ", ".join(cdim(v.aval.shape[0]) for v in (e.inputs[0], e.inputs[1], e.outvars[0]))
    return ["{",
            f"    em_rag_job_{s} j_ = {{(const {t} *)({cc.ins[0]}), (const {t} *)({cc.ins[1]}), ({t} *)"
            f"({cc.outs[0]}), (const {it} *)({cc.ins[2]}), {k}, {rows}, {e.params.get('rank', 1)}, "
            f"{{{roles}}}, {{{caps}}}, {_ws(cc)}}};",
            f"    em_rag_run_{s}(&j_, {par}, {nt});",
            "}"]


def _rows_step(e: Eqn, cc: CallCode, bcast: int) -> list[str]:
    dt = np.dtype(e.inputs[0].aval.dtype)
    acc = "double" if dt.kind == "f" else "int64_t"
    t, it, s = _include(e, cc, "rows", f"EM_RAG_ACC {acc}")
    rows, k = (cdim(d) for d in e.inputs[1].aval.shape)
    roles = ", ".join(str(int(r)) for r in e.params["roles"])
    par, nt = _par(cc)
    cap = cdim((e.outvars[0] if bcast else e.inputs[0]).aval.shape[0])  # the ragged side
    return ["{",
            f"    em_rags_job_{s} j_ = {{(const {t} *)({cc.ins[0]}), ({t} *)({cc.outs[0]}), "
            f"(const {it} *)({cc.ins[1]}), {k}, {rows}, {e.params.get('rank', 1)}, {{{roles}}}, {{{cap}}}, "
            f"{_ws(cc)}}};",
            f"    em_rags_run_{s}(&j_, {bcast}, {par}, {nt});",
            "}"]


@register("ragged_rowsum", "the sum of each row of a ragged batch (one pass, 8 partial sums per row in "
          "double or int64; ragged.h)", _accepts, _offsets_ws, symbolic_ok=True)
def _ragged_rowsum(e: Eqn, cc: CallCode) -> list[str]:
    return _rows_step(e, cc, 0)


@register("ragged_rowbroadcast", "one value per row written over each row of a ragged batch (the row "
          "sum's transpose; ragged.h)", _accepts, _offsets_ws, symbolic_ok=True)
def _ragged_rowbroadcast(e: Eqn, cc: CallCode) -> list[str]:
    return _rows_step(e, cc, 1)
