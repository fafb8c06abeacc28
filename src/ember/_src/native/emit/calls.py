"""Native *call* steps: primitives lowered to a block of C in the program (no Python fallback).

A call step runs one equation whose work does not fit the fused-kernel model (data-dependent
addressing, sequential scans, sorting, LAPACK) as straight C inside ``ember_main``. Each lowering is
a :class:`~.opinfo.CallLowering` on the primitive's entry of the op-info registry (:mod:`.opinfo`),
registered with :func:`register`:

* ``accepts(eqn)``: whether this equation (dtypes, params) can be lowered; otherwise it stays a
  fallback step;
* ``workspace(eqn)``: bytes of per-step scratch (the planner allocates a ``WORKSPACE`` buffer in
  the arena, so nothing is allocated at run time);
* ``emit(eqn, cc)``: the C statements, given a :class:`CallCode` with the operands' typed pointers
  (or C literals for scalar ``Literal`` operands), the outputs' pointers, the workspace pointer,
  and a place to register ``static`` helper functions (emitted once per program).

This module holds the generic lowerings: ``dynamic_slice``, ``dynamic_update_slice``, the
cumulative scans (``cumsum``/``cumprod``/``cummax``/``cummin``), ``threefry2x32``, the one-axis
``scatter`` and ``sort``. LAPACK-backed ones are in :mod:`.lapack`.

Semantics follow each primitive's NumPy implementation exactly: clamped start indices,
sequential accumulation order for scans (so float results are bit-identical), NaN-last stable
ordering for sort, out-of-range scatter indices dropped, duplicate ``set`` indices last-wins.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember._src.native import abi, csrc, opinfo
from ember._src.native.base.symdims import cdim
from ember._src.native.emit import c_ops, support
from ember._src.native.emit.c_ops import ctype, literal
from ember._src.native.opinfo import (  # noqa: F401  (the call steps' questions, answered by the registry)
    CallLowering,
    OpCategory,
    inplace_operand,
    lowerable,
    workspace_bytes,
)
from ember._src.native.plan.scratch import CALL_WORKSPACE
from ember._src.native.runtime.threadpool import DEFAULT_PARALLEL_THRESHOLD  # noqa: F401  (re-exported)
from ember._src.program import Eqn, Literal


@dataclass
class CallCode:
    """What an emitter sees: C expressions for operands, results and scratch."""

    eqn: Eqn
    ins: list[str]  # typed pointer expressions, or C literals for Literal operands
    outs: list[str]
    ws: str  # ``(char *)`` workspace pointer ("0" when none was requested)
    helpers: dict[str, str]  # name -> static C definition (shared across steps)
    openmp: bool = False
    parallel_threshold: int = DEFAULT_PARALLEL_THRESHOLD
    num_threads: int | None = None  # the ``num_threads`` option (None: the default)
    # the statement that runs the step's NumPy implementation through the Python callback and
    # leaves the program with its error (codegen's fallback call); for steps that detect a failure
    fail_call: Callable[[], str] | None = None
    # per operand: its value when it is a constant of a top-level program, else None
    const_ins: tuple[Any, ...] = ()
    # ``keep(nbytes)``: the C pointer (``void *``) of a zeroed, writable buffer of ``nbytes`` that
    # lives as long as the program (a derived constant); None where the step cannot have one
    keep: Callable[[int], str] | None = None
    # ``keep_array(a)``: the C pointer (``void *``) of a copy of the array ``a`` computed at emit
    # time (e.g. a constant operand packed for a kernel), living as long as the program; None where
    # ``keep`` is
    keep_array: Callable[[np.ndarray], str] | None = None
    # a fused epilogue the step applies in its stores (the lowering's ``epilogue`` accepted it):
    # (the per-feature bias's pointer expression or None, relu); None: no epilogue
    epilogue: tuple[str | None, bool] | None = None

    def fail(self) -> str:
        """C statement: run this step's primitive in Python (which raises the step's error, e.g.
        an out-of-range index with its value) and leave the program with that error."""
        assert self.fail_call is not None, "this call step cannot report a failure"
        return self.fail_call()

    def scalar(self, i: int) -> str:
        """Operand ``i`` (a scalar) as a C value."""
        a = self.eqn.inputs[i]
        return self.ins[i] if isinstance(a, Literal) else f"{self.ins[i]}[0]"

    def helper(self, name: str, text: str) -> str:
        self.helpers.setdefault(name, text)
        return name

    def chunk(self, name: str, body: str) -> str:
        """A thread-pool chunk function ``name`` running the statement ``body`` for each task ``t``
        of its range (``c_``: the context pointer), recording the thread-pool block."""
        support.need("threadpool")
        return self.helper(name, f"static EM_TASK_ATTR void {name}(void *c_, int64_t lo, int64_t hi, "
                                 f"int64_t tid) {{\n    (void)tid;\n    for (int64_t t = lo; t < hi; ++t) "
                                 f"{body};\n}}\n")

    def parallel(self, work: int) -> bool:
        return self.openmp and work >= self.parallel_threshold


def register(name: str, detail: str, accepts: Callable[[Eqn], bool] | None = None,
             workspace: Callable[[Eqn], Any] | None = None, complex_ok: bool = False,
             inplace: int | None = None, symbolic_ok: bool = False,
             epilogue: Callable[[Eqn], bool] | None = None) -> Callable:
    """Decorator registering ``emit`` as the call lowering of primitive ``name`` in the op-info
    registry (``detail``: what it does, for the feature table; ``complex_ok``: it also handles
    complex operands, otherwise an equation with one stays a fallback step; ``inplace``: the
    operand whose buffer the result may reuse; ``symbolic_ok``: it renders symbolic sizes as C
    expressions, otherwise an equation with one stays a fallback step; ``epilogue``: whether it
    applies a fused bias/ReLU on an equation, ``CallCode.epilogue``)."""
    def deco(fn: Callable[[Eqn, CallCode], list[str]]) -> Callable:
        low = CallLowering(fn, accepts or (lambda e: True), workspace or (lambda e: 0), complex_ok,
                           symbolic_ok, epilogue or (lambda e: False))
        opinfo.register(name, OpCategory.CALL, detail, call=low, inplace=inplace)
        return fn

    return deco


def emit_step(step: Any, s: int, ctx: Any, opts: Any, helpers: dict[str, str],
              fail_call: Callable[[], str] | None = None) -> list[str]:
    """C lines for call step ``step`` (index ``s``); ``ctx`` is codegen's buffer context,
    ``fail_call`` makes the statement that reports a failure (see :meth:`CallCode.fail`)."""
    e = step.eqns[0]
    ins = [literal(a.val, a.aval.dtype) if isinstance(a, Literal) else ctx.ptr(a) for a in e.inputs]
    epi = getattr(step, "epilogue", None)  # a fused bias/ReLU: the step's outputs are the epilogue's
    outs = [ctx.ptr(v) for v in (step.outputs if epi is not None else e.outvars)]
    b = ctx.plan.scratch.get((s, CALL_WORKSPACE))
    ws = ctx.base(b) if b is not None else "((char *)0)"
    gen = getattr(ctx, "gen", None)
    top = gen is not None and not getattr(ctx, "in_body", False)
    consts = getattr(ctx, "consts", {}) if top else {}
    const_ins = tuple(None if isinstance(a, Literal) else consts.get(a.id) for a in e.inputs)

    def keep_array(a: np.ndarray) -> str:
        gen.extra_consts.append(a)
        return f"((void *){abi.const_ref(len(gen.extra_consts) - 1)})"

    def keep(nbytes: int) -> str:
        return keep_array(np.zeros(nbytes, np.uint8))
    cc = CallCode(e, ins, outs, ws, helpers, bool(getattr(opts, "openmp", False)),
                  int(getattr(opts, "parallel_threshold", DEFAULT_PARALLEL_THRESHOLD)),
                  getattr(opts, "num_threads", None), fail_call, const_ins, keep if top else None,
                  keep_array if top else None,
                  None if epi is None else (None if epi.bias is None else ctx.ptr(epi.bias), epi.relu))
    low = opinfo.call_lowering(e.prim)
    assert low is not None, e.prim.name
    body = low.emit(e, cc)
    support.uses("\n".join(body))  # a lowering's hand-written statements name their headers
    return ["{", *("    " + ln for ln in body), "}"]


def _size(shape: Any) -> int:
    return int(math.prod(shape))


def row_strides(shape: Any) -> list[Any]:
    """Row-major element strides of ``shape`` (ints, or symbolic sizes: the products stay symbolic)."""
    out, acc = [], 1
    for d in reversed(tuple(shape)):
        out.append(acc)
        acc = acc * d
    return out[::-1]


def _split(shape: tuple, axis: int) -> tuple[int, int, int]:
    """(outer, n, inner) sizes around ``axis``."""
    return _size(shape[:axis]), int(shape[axis]), _size(shape[axis + 1:])


# ---------------------------------------------------------------------------------------------
# dynamic_slice / dynamic_update_slice
# ---------------------------------------------------------------------------------------------


def _block_copy(dst: str, dst_shape: tuple, dst_off: list[str], src: str, src_shape: tuple,
                src_off: list[str], sizes: tuple, item: int) -> list[str]:
    """Copy a ``sizes`` block from ``src`` at ``src_off`` to ``dst`` at ``dst_off`` (row-major),
    one memcpy per contiguous last-axis run."""
    nd = len(sizes)
    if _size(sizes) == 0:
        return []
    if nd == 0:
        return [f"memcpy({dst}, {src}, {item});"]
    ds, ss = row_strides(dst_shape), row_strides(src_shape)
    lines = []
    for k in range(nd - 1):
        lines.append("    " * k + f"for (int64_t i{k} = 0; i{k} < {sizes[k]}; ++i{k})")
    d_ix = " + ".join([f"({dst_off[k]} + i{k}) * {ds[k]}" for k in range(nd - 1)] + [dst_off[-1]])
    s_ix = " + ".join([f"({src_off[k]} + i{k}) * {ss[k]}" for k in range(nd - 1)] + [src_off[-1]])
    lines.append("    " * (nd - 1) + f"memcpy({dst} + {d_ix}, {src} + {s_ix}, {sizes[-1] * item});")
    return lines


def _clamped_starts(e: Eqn, cc: CallCode, first: int, shape: tuple, sizes: tuple) -> list[str]:
    lines = []
    for k, (d, n) in enumerate(zip(shape, sizes)):
        start = cc.scalar(first + k)
        if np.dtype(e.inputs[first + k].aval.dtype) == np.uint64:  # keep huge starts huge (clamped high)
            start = f"({start} > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t){start})"
        lines.append(f"const int64_t s{k} = em_clampi((int64_t){start}, 0, {int(d) - int(n)});")
    return lines


@register("dynamic_slice", "clamped block copy (calls.py)", lambda e: _array_operands(e, 1),
          complex_ok=True)
def _dynamic_slice(e: Eqn, cc: CallCode) -> list[str]:
    x, out = e.inputs[0], e.outvars[0]
    shape, sizes = tuple(x.aval.shape), tuple(out.aval.shape)
    item = np.dtype(x.aval.dtype).itemsize
    lines = _clamped_starts(e, cc, 1, shape, sizes)
    zero = ["0"] * len(sizes)
    return lines + _block_copy(cc.outs[0], sizes, zero, cc.ins[0], shape,
                               [f"s{k}" for k in range(len(sizes))], sizes, item)


def _copy_all(dst: str, src: str, nbytes: int) -> str:
    if not nbytes:
        return ""
    return f"if ((const void *){dst} != (const void *){src}) memcpy({dst}, {src}, {nbytes});"


@register("dynamic_update_slice", "copy, then clamped block write (calls.py)",
          lambda e: _array_operands(e, 2), complex_ok=True, inplace=0)
def _dynamic_update_slice(e: Eqn, cc: CallCode) -> list[str]:
    x, u = e.inputs[0], e.inputs[1]
    shape, sizes = tuple(x.aval.shape), tuple(u.aval.shape)
    item = np.dtype(x.aval.dtype).itemsize
    lines = [_copy_all(cc.outs[0], cc.ins[0], _size(shape) * item)]
    lines += _clamped_starts(e, cc, 2, shape, sizes)
    zero = ["0"] * len(sizes)
    return lines + _block_copy(cc.outs[0], shape, [f"s{k}" for k in range(len(sizes))], cc.ins[1], sizes,
                               zero, sizes, item)


def _array_operands(e: Eqn, n: int) -> bool:
    return all(not isinstance(a, Literal) for a in e.inputs[:n])


# ---------------------------------------------------------------------------------------------
# cumulative scans
# ---------------------------------------------------------------------------------------------


def _cum_update(name: str, acc: str, x: str, d: np.dtype) -> str:
    t = ctype(d)
    if name == "cumsum":
        return f"({t})({acc} + {x})"
    if name == "cumprod":
        return f"({t})({acc} * {x})"
    cmp = ">" if name == "cummax" else "<"
    nan = f" || {x} != {x}" if c_ops.is_float(d) else ""
    return f"(({x} {cmp} {acc}{nan}) ? {x} : {acc})"


def _cum_accepts(e: Eqn) -> bool:
    return _array_operands(e, 1) and not c_ops.is_bool(np.dtype(e.inputs[0].aval.dtype))


def _cum_emit(e: Eqn, cc: CallCode) -> list[str]:
    x = e.inputs[0]
    shape = tuple(x.aval.shape)
    if not shape:
        return [f"{cc.outs[0]}[0] = {cc.ins[0]}[0];"]
    outer, n, inner = _split(shape, e.params["axis"])
    if outer * n * inner == 0:
        return []
    d = np.dtype(x.aval.dtype)
    src, dst = cc.ins[0], cc.outs[0]
    rev = bool(e.params["reverse"])
    first, step = (n - 1, -1) if rev else (0, 1)
    upd = _cum_update(e.prim.name, "a_", "x_", d)
    t = ctype(d)
    lines = []
    if cc.parallel(outer * n * inner) and outer >= 2:
        lines.append("#pragma omp parallel for schedule(static)")
    lines += [f"for (int64_t o = 0; o < {outer}; ++o) {{",
              f"    const {t} *xr = {src} + o * {n * inner};",
              f"    {t} *yr = {dst} + o * {n * inner};"]
    if inner == 1:
        lines += [f"    {t} a_ = xr[{first}]; yr[{first}] = a_;",
                  f"    for (int64_t k = 1; k < {n}; ++k) {{",
                  f"        const int64_t j = {first} + ({step}) * k; const {t} x_ = xr[j];",
                  f"        a_ = {upd}; yr[j] = a_;",
                  "    }"]
    else:
        f0 = first * inner
        lines += [f"    for (int64_t i = 0; i < {inner}; ++i) yr[{f0} + i] = xr[{f0} + i];",
                  f"    for (int64_t k = 1; k < {n}; ++k) {{",
                  f"        const int64_t j = ({first} + ({step}) * k) * {inner};",
                  f"        const int64_t p = j - ({step}) * {inner};",
                  "        #pragma omp simd",
                  f"        for (int64_t i = 0; i < {inner}; ++i) {{",
                  f"            const {t} a_ = yr[p + i], x_ = xr[j + i]; yr[j + i] = {upd};",
                  "        }",
                  "    }"]
    lines.append("}")
    return lines


for _name in ("cumsum", "cumprod", "cummax", "cummin"):
    register(_name, "sequential C scan along the axis (calls.py)", _cum_accepts)(_cum_emit)


# ---------------------------------------------------------------------------------------------
# threefry2x32
# ---------------------------------------------------------------------------------------------

@register("threefry2x32", "C Threefry-2x32 loop (calls.py; passes.split_threefry fuses it)")
def _threefry(e: Eqn, cc: CallCode) -> list[str]:
    n = _size(e.outvars[0].aval.shape)
    if n == 0:
        return []
    ld = [f"{cc.ins[k]}[i]" if not isinstance(a, Literal) else cc.ins[k] for k, a in enumerate(e.inputs)]
    args = ", ".join(ld)
    par = "#pragma omp parallel for simd schedule(static)" if cc.parallel(n * 40) else "#pragma omp simd"
    return [par,
            f"for (int64_t i = 0; i < {n}; ++i) {{",
            f"    {cc.outs[0]}[i] = em_threefrylo({args}); {cc.outs[1]}[i] = em_threefryhi({args});",
            "}"]


# ---------------------------------------------------------------------------------------------
# scatter (one axis)
# ---------------------------------------------------------------------------------------------


def _scatter_update(mode: str, o: str, u: str, d: np.dtype) -> str:
    t = ctype(d)
    if mode == "set":
        return f"{o} = {u};"
    if c_ops.is_bool(d):
        op = {"add": "|", "mul": "&", "max": "|", "min": "&"}[mode]
        return f"{o} = (uint8_t)({o} {op} {u});"
    if mode == "add":
        return f"{o} = ({t})({o} + {u});"
    if mode == "mul":
        return f"{o} = ({t})({o} * {u});"
    cmp = ">" if mode == "max" else "<"
    if c_ops.is_float(d):
        return f"if ({o} == {o} && ({u} {cmp} {o} || {u} != {u})) {o} = {u};"
    return f"if ({u} {cmp} {o}) {o} = {u};"


@register("scatter", "C loop over indices, out-of-range dropped (calls.py)",
          lambda e: _array_operands(e, 3), inplace=0)
def _scatter(e: Eqn, cc: CallCode) -> list[str]:
    x, idx, _ = e.inputs
    shape = tuple(x.aval.shape)
    axis, mode = e.params["axis"], e.params["mode"]
    d = np.dtype(x.aval.dtype)
    outer, n, inner = _split(shape, axis)
    m = _size(idx.aval.shape)
    lines = [_copy_all(cc.outs[0], cc.ins[0], _size(shape) * d.itemsize)]
    if outer * m * inner == 0:
        return lines
    upd = _scatter_update(mode, "orow[i]", "urow[i]", d)
    t = ctype(d)
    return lines + [
        f"for (int64_t o = 0; o < {outer}; ++o)",
        f"    for (int64_t j = 0; j < {m}; ++j) {{",
        f"        const int64_t k = (int64_t){cc.ins[1]}[j];",
        f"        if (k < 0 || k >= {n}) continue;",
        f"        {t} *orow = {cc.outs[0]} + (o * {n} + k) * {inner};",
        f"        const {t} *urow = {cc.ins[2]} + (o * {m} + j) * {inner};",
        f"        for (int64_t i = 0; i < {inner}; ++i) {upd}",
        "    }"]


# ---------------------------------------------------------------------------------------------
# check_index: one pass over the indices; an index out of range hands the step to Python, whose
# implementation raises the IndexError that names the index and the bound
# ---------------------------------------------------------------------------------------------


@register("check_index", "one pass over the indices; a failure raises through the callback (calls.py)",
          lambda e: _array_operands(e, 1), inplace=0, symbolic_ok=True)
def _check_index(e: Eqn, cc: CallCode) -> list[str]:
    idx = e.inputs[0]
    t = ctype(np.dtype(idx.aval.dtype))
    m = "1"
    for d in idx.aval.shape:
        m = f"{m} * {cdim(d)}"
    bound = cdim(e.params["bound"])
    lo = f"-{bound}" if e.params["negative"] else "0"
    test = f"v_ < {lo} || v_ >= {bound}"
    if np.dtype(idx.aval.dtype).kind == "u":
        test = f"v_ >= (uint64_t){bound}"
    return [f"const {t} *i_ = {cc.ins[0]};",
            f"{t} *o_ = {cc.outs[0]};",
            "int bad_ = 0;",
            f"for (int64_t j_ = 0; j_ < {m}; ++j_) {{",
            f"    const {t} v_ = i_[j_];",
            f"    bad_ |= ({test});",
            "    o_[j_] = v_;",
            "}",
            f"if (bad_) {cc.fail()}"]


@register("check", "one pass over a boolean condition; a false one raises through the callback (calls.py)",
          lambda e: _array_operands(e, 1), symbolic_ok=True)
def _check(e: Eqn, cc: CallCode) -> list[str]:
    m = "1"
    for d in e.inputs[0].aval.shape:
        m = f"{m} * {cdim(d)}"
    return [f"const uint8_t *c_ = (const uint8_t *){cc.ins[0]};",
            "int ok_ = 1;",
            f"for (int64_t j_ = 0; j_ < {m}; ++j_) ok_ &= c_[j_] != 0;",
            f"if (!ok_) {cc.fail()}"]


# ---------------------------------------------------------------------------------------------
# sort: stable merge sort of (first key, row index) pairs; ties go to the further keys
# ---------------------------------------------------------------------------------------------


RADIX_MIN = 256  # shorter rows: the merge sort (a radix pass costs a 256-bucket histogram)


def _less(a: str, b: str, d: np.dtype) -> str:
    """``a`` sorts strictly before ``b`` (NumPy order: NaN last)."""
    if c_ops.is_float(d):
        return f"({a} < {b} || ({a} == {a} && {b} != {b}))"
    return f"({a} < {b})"


def _sort_ws(e: Eqn) -> int:
    shape = tuple(e.inputs[0].aval.shape)
    n = int(shape[e.params["dimension"]])
    return 2 * n * 16 + 64


def _sort_accepts(e: Eqn) -> bool:
    return _array_operands(e, len(e.inputs)) and len(e.inputs[0].aval.shape) >= 1


@register("sort", "stable merge sort, NaN last (calls.py)", _sort_accepts, _sort_ws)
def _sort(e: Eqn, cc: CallCode) -> list[str]:
    ops = e.inputs
    shape = tuple(ops[0].aval.shape)
    dim, nk = e.params["dimension"], e.params["num_keys"]
    outer, n, inner = _split(shape, dim)
    if outer * n * inner == 0:
        return []
    dts = [np.dtype(a.aval.dtype) for a in ops]
    if nk == 1 and n >= RADIX_MIN:
        return _radix_sort(e, cc, outer, n, inner, dts)
    kt = ctype(dts[0])
    # a comparator over (key0, index) pairs; further keys are read through the index
    sig = "_".join([str(d) for d in dts[:nk]]) + f"_{n}_{inner}"
    name = f"em_sort_{sig}"
    extra_args = "".join(f", const {ctype(d)} *k{j}" for j, d in enumerate(dts[1:nk], 1))
    extra_pass = "".join(f", k{j}" for j in range(1, nk))
    ties = []
    for j in range(1, nk):
        a, b = f"k{j}[p.i * {inner}]", f"k{j}[q.i * {inner}]"
        ties.append(f"    if ({_less(a, b, dts[j])}) return 1;\n    if ({_less(b, a, dts[j])}) return 0;\n")
    text = f"""\
typedef struct {{ {kt} k; int64_t i; }} {name}_t;
static inline int {name}_lt({name}_t p, {name}_t q{extra_args}) {{
    if ({_less('p.k', 'q.k', dts[0])}) return 1;
    if ({_less('q.k', 'p.k', dts[0])}) return 0;
{''.join(ties)}    return p.i < q.i;
}}
/* stable: insertion sort of runs of 16, then bottom-up merges (ties keep the lower index) */
static {name}_t *{name}({name}_t *a, {name}_t *b, int64_t n{extra_args}) {{
    for (int64_t s = 0; s < n; s += 16) {{
        int64_t e = s + 16 < n ? s + 16 : n;
        for (int64_t i = s + 1; i < e; ++i) {{
            {name}_t v = a[i]; int64_t j = i;
            while (j > s && {name}_lt(v, a[j - 1]{extra_pass})) {{ a[j] = a[j - 1]; --j; }}
            a[j] = v;
        }}
    }}
    for (int64_t w = 16; w < n; w *= 2) {{
        for (int64_t lo = 0; lo < n; lo += 2 * w) {{
            int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int64_t i = lo, j = mid, k = lo;
            if (mid >= hi || !{name}_lt(a[mid], a[mid - 1]{extra_pass})) {{
                memcpy(b + lo, a + lo, (size_t)(hi - lo) * sizeof({name}_t));
                continue;
            }}
            while (i < mid && j < hi) b[k++] = {name}_lt(a[j], a[i]{extra_pass}) ? a[j++] : a[i++];
            while (i < mid) b[k++] = a[i++];
            while (j < hi) b[k++] = a[j++];
        }}
        {name}_t *t = a; a = b; b = t;
    }}
    return a;
}}
"""
    cc.helper(name, text)
    lines = [f"{name}_t *wa_ = ({name}_t *)({cc.ws}), *wb_ = wa_ + {n};",
             f"for (int64_t o = 0; o < {outer}; ++o)",
             f"    for (int64_t c = 0; c < {inner}; ++c) {{",
             f"        const int64_t base = o * {n * inner} + c;"]
    kargs = "".join(f", {cc.ins[j]} + base" for j in range(1, nk))
    lines += [f"        for (int64_t i = 0; i < {n}; ++i) {{ wa_[i].k = {cc.ins[0]}[base + i * {inner}]; "
              "wa_[i].i = i; }",
              f"        const {name}_t *r_ = {name}(wa_, wb_, {n}{kargs});"]
    for j in range(len(ops)):
        if j == 0:
            lines.append(f"        for (int64_t i = 0; i < {n}; ++i) "
                         f"{cc.outs[0]}[base + i * {inner}] = r_[i].k;")
        else:
            lines.append(f"        for (int64_t i = 0; i < {n}; ++i) {cc.outs[j]}[base + i * {inner}] = "
                         f"{cc.ins[j]}[base + r_[i].i * {inner}];")
    lines.append("    }")
    return lines



# one key: LSD radix sort of order-preserving unsigned keys (stable, so ties keep row order)



def _radix_key(v: str, d: np.dtype) -> tuple[str, str]:
    """(unsigned key type, C expression of the order-preserving key of value ``v``): NaN last
    (all NaNs equal), -0.0 == 0.0, as NumPy's sort orders them."""
    wide = d.itemsize == 8
    kt = "uint64_t" if wide else "uint32_t"
    if c_ops.is_float(d):
        sign = "0x8000000000000000ULL" if wide else "0x80000000u"
        nan = "0xFFFFFFFFFFFFFFFFULL" if wide else "0xFFFFFFFFu"
        bits = f"em_bits{d.itemsize * 8}({v})"
        return kt, (f"(({v}) != ({v}) ? {nan} : (({v}) == 0 ? {sign} : "
                    f"(({bits} & {sign}) ? ~{bits} : ({bits} | {sign}))))")
    if d.kind == "i":
        if wide:
            return kt, f"((uint64_t)({v}) ^ 0x8000000000000000ULL)"
        return kt, f"((uint32_t)((int64_t)({v}) + 2147483648LL))"
    return kt, f"(({kt})({v}))"




def _radix_sort(e: Eqn, cc: CallCode, outer: int, n: int, inner: int, dts: list[np.dtype]) -> list[str]:
    kt, key = _radix_key(f"{cc.ins[0]}[base + i * {inner}]", dts[0])
    name = f"em_radix_{kt[:-2]}"
    sort = csrc.sections("sort.h")
    cc.helper("em_bits", sort["bits"][1])
    cc.helper(name, f"#define EM_K {kt}\n#define EM_RADIX {name}\n" + sort["radix"][1]
              + "#undef EM_RADIX\n#undef EM_K\n")
    lines = [f"{kt} *ka_ = ({kt} *)({cc.ws}), *kb_ = ka_ + {n};",
             f"int64_t *ia_ = (int64_t *)(kb_ + {n}), *ib_ = ia_ + {n};",
             f"for (int64_t o = 0; o < {outer}; ++o)",
             f"    for (int64_t c = 0; c < {inner}; ++c) {{",
             f"        const int64_t base = o * {n * inner} + c;",
             f"        for (int64_t i = 0; i < {n}; ++i) {{ ka_[i] = {key}; ia_[i] = i; }}",
             f"        const int64_t *r_ = {name}(ka_, kb_, ia_, ib_, {n});"]
    for j in range(len(e.inputs)):
        lines.append(f"        for (int64_t i = 0; i < {n}; ++i) "
                     f"{cc.outs[j]}[base + i * {inner}] = {cc.ins[j]}[base + r_[i] * {inner}];")
    lines.append("    }")
    return lines


# register the fft (fft.py) and LAPACK-backed (lapack.py) lowerings
from ember._src.native.emit import attention, conv, fft, gemm_bf16, lapack, ragged, wide_dot  # noqa: E402, F401
