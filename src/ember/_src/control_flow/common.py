"""Machinery shared by the control-flow primitives (``scan``, ``while``, ``cond``).

Each of them holds sub-:class:`~ember._src.program.Program` s in its params. The helpers here
trace user functions into such bodies, rewrite bodies for the transformation rules (JVP,
partial evaluation, transposition, batching) and run them on NumPy values:

* :func:`trace_user_fun` traces a user function and *hoists* its captured constants: they become
  leading inputs of the body and explicit operands of the primitive (they may be tracers of an
  enclosing transformation, which must be differentiated/batched like any operand).
* Bodies built by the rules may keep *concrete* constants (``body.consts``: NumPy/Array values,
  never tracers): every consumer evaluates them with ``eval_program(body, body.consts, ...)``.
* :func:`jvp_body`, :func:`partial_eval_body`, :func:`depends_on`, :func:`reorder` and
  :func:`select_outputs` are the program surgery the rules share; derived bodies are cached per
  body (:func:`derived`) so repeated transformations produce the same Program objects.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from ember._src import ad, core
from ember._src import debug as dbg
from ember._src import partial_eval as peval
from ember._src.ad_util import Zero, instantiate, is_zero, tangent_aval
from ember._src.batching import _leaf_paths
from ember._src.core import ShapedArray
from ember._src.interpreter import NumpyPlan
from ember._src.prims.elementwise import convert_element_type
from ember._src.prims.movement import full
from ember._src.program import Program, Var, dce, eval_program, trace_to_program
from ember.errors import EmberError

# ---------------------------------------------------------------------------------------------
# Tracing
# ---------------------------------------------------------------------------------------------


def hoist_consts(prog: Program) -> tuple[Program, list]:
    """``prog`` with its captured constants turned into leading inputs, and those constants."""
    if not prog.constvars:
        return prog, []
    return Program((), (*prog.constvars, *prog.invars), prog.eqns, prog.outvars), list(prog.consts)


def trace_user_fun(flat_fun: Callable, in_avals: Sequence[ShapedArray]) -> tuple[Program, list]:
    """Trace ``flat_fun(*tracers) -> list`` into a closed body; returns it and the hoisted consts."""
    prog, _ = trace_to_program(flat_fun, list(in_avals))
    return hoist_consts(prog)


def trace_internal(flat_fun: Callable, in_avals: Sequence[ShapedArray]) -> Program:
    """Trace a body built by a transformation rule; it may only capture concrete constants."""
    prog, _ = trace_to_program(flat_fun, list(in_avals))
    if any(isinstance(c, core.Tracer) for c in prog.consts):  # pragma: no cover - a broken rule
        raise AssertionError("a control-flow rule captured a traced value in a sub-program")
    return prog


def leaf_aval(x: Any, path: str, what: str) -> ShapedArray:
    try:
        return core.get_aval(x)
    except TypeError:
        raise TypeError(f"{what}: {path} of type {type(x).__name__} is not an array") from None


def leaf_paths(tree: Any, prefix: str) -> list[str]:
    return _leaf_paths(tree, prefix)


def match_aval(x: Any, aval: ShapedArray) -> Any:
    """``x`` converted to ``aval``'s weak typing when only the weak type differs."""
    a = core.get_aval(x)
    if a.dtype == aval.dtype and a.weak_type != aval.weak_type:
        return convert_element_type(x, aval.dtype, weak_type=aval.weak_type)
    return x


def type_mismatch(what: str, path: str, a: ShapedArray, b: ShapedArray) -> str | None:
    """A sentence explaining why ``a`` and ``b`` differ in shape or dtype (``None``: they match)."""
    if tuple(a.shape) != tuple(b.shape):
        return f"{path} has type {a.str_short()} but the corresponding {what} has type " \
               f"{b.str_short()}, so the shapes do not match"
    if a.dtype != b.dtype:
        return f"{path} has type {a.str_short()} but the corresponding {what} has type " \
               f"{b.str_short()}, so the dtypes do not match"
    return None


# ---------------------------------------------------------------------------------------------
# Program surgery
# ---------------------------------------------------------------------------------------------


def reorder(prog: Program, in_perm: Sequence[int] | None = None,
            out_perm: Sequence[int] | None = None) -> Program:
    """``prog`` with inputs ``[invars[i] for i in in_perm]`` and outputs likewise."""
    invars = prog.invars if in_perm is None else [prog.invars[i] for i in in_perm]
    outvars = prog.outvars if out_perm is None else [prog.outvars[i] for i in out_perm]
    return Program(prog.constvars, invars, prog.eqns, outvars, prog.consts)


def select_outputs(prog: Program, keep: Sequence[bool]) -> Program:
    """``prog`` restricted to the flagged outputs (dead equations removed; inputs unchanged)."""
    return dce(prog, keep)


def add_unused_inputs(prog: Program, avals: Sequence[ShapedArray], at: int | None = None) -> Program:
    """``prog`` with extra inputs (of ``avals``) that it ignores, inserted at position ``at``."""
    new = [Var(a) for a in avals]
    invars = list(prog.invars)
    at = len(invars) if at is None else at
    invars[at:at] = new
    return Program(prog.constvars, invars, prog.eqns, prog.outvars, prog.consts)


def depends_on(prog: Program, flags: Sequence[bool]) -> list[bool]:
    """Which outputs of ``prog`` depend on the inputs flagged in ``flags`` (conservatively)."""
    dep = {v.id for v, f in zip(prog.invars, flags) if f}
    for e in prog.eqns:
        if any(isinstance(a, Var) and a.id in dep for a in e.inputs):
            dep.update(o.id for o in e.outvars)
    return [isinstance(a, Var) and a.id in dep for a in prog.outvars]


def run_program(prog: Program, args: Sequence[Any]) -> list:
    """Evaluate ``prog`` (binding each primitive: works under any transformation)."""
    return eval_program(prog, prog.consts, list(args))


_DERIVED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def derived(prog: Program, key: tuple, build: Callable[[], Any]) -> Any:
    """``build()``, cached per ``(prog, key)`` while ``prog`` is alive."""
    table = _DERIVED.get(prog)
    if table is None:
        table = _DERIVED[prog] = {}
    hit = table.get(key)
    if hit is None:
        hit = table[key] = build()
    return hit


_RUNNERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def numpy_runner(prog: Program) -> Callable[[list], list]:
    """A fast reference executor of ``prog`` on NumPy values (the numpy backend's plan), cached."""
    run = _RUNNERS.get(prog)
    if run is None:
        run = _RUNNERS[prog] = NumpyPlan(prog).runner()
    return run


def zeros(aval: ShapedArray) -> Any:
    return full(aval.shape, 0, aval.dtype)


def zeros_np(aval: ShapedArray) -> np.ndarray:
    return np.zeros(tuple(int(d) for d in aval.shape), aval.dtype)


def instantiate_zero(t: Any, aval: ShapedArray) -> Any:
    """A concrete (traced) zero for a :class:`Zero` or ``None``, else ``t``."""
    if t is None or is_zero(t):
        return zeros(tangent_aval(aval))
    return t


# ---------------------------------------------------------------------------------------------
# JVP of a body
# ---------------------------------------------------------------------------------------------


def jvp_body(prog: Program, nonzero: Sequence[bool], inst: Sequence[bool]) -> tuple[Program, list[bool]]:
    """The JVP of ``prog``: inputs ``[primals, tangents of the nonzero inputs]``, outputs
    ``[primal outs, tangents of the outputs flagged in the returned list]``. Output tangents
    flagged in ``inst`` are always present (zeros when symbolically zero). Cached per body."""
    key = ("jvp", tuple(nonzero), tuple(inst))
    return derived(prog, key, lambda: _jvp_body(prog, list(nonzero), list(inst)))


def _jvp_body(prog: Program, nonzero: list[bool], inst: list[bool]) -> tuple[Program, list[bool]]:
    n = len(prog.invars)
    in_avals = [v.aval for v in prog.invars]
    t_avals = [tangent_aval(a) for a, nz in zip(in_avals, nonzero) if nz]
    box: list = []

    def f(*args: Any) -> list:
        it = iter(args[n:])
        ts = [next(it) if nz else Zero(tangent_aval(a)) for a, nz in zip(in_avals, nonzero)]
        outs, touts = ad.jvp_flat(lambda *xs: run_program(prog, xs), args[:n], ts)
        out_nz = [not is_zero(t) or i for t, i in zip(touts, inst)]
        box.append(out_nz)
        touts = [instantiate(t) for t, z in zip(touts, out_nz) if z]
        return [*outs, *touts]

    jprog = trace_internal(f, [*in_avals, *t_avals])
    return jprog, box[0]


# ---------------------------------------------------------------------------------------------
# Partial evaluation of a body
# ---------------------------------------------------------------------------------------------


class PartialEvalBody:
    """A body split by partial evaluation into a known and an unknown part.

    ``known``: known inputs (in order) -> known outputs (in order) + ``num_res`` residuals.
    ``unknown``: residuals + unknown inputs (in order) -> unknown outputs (in order).
    ``out_unknown[i]``: whether output ``i`` of the body is computed by ``unknown``.
    """

    def __init__(self, known: Program, unknown: Program, out_unknown: list[bool], num_res: int):
        self.known = known
        self.unknown = unknown
        self.out_unknown = out_unknown
        self.num_res = num_res

    @property
    def num_known_out(self) -> int:
        return len(self.out_unknown) - sum(self.out_unknown)


def partial_eval_body(prog: Program, unknowns: Sequence[bool], inst: Sequence[bool]) -> PartialEvalBody:
    """Partially evaluate ``prog`` with the inputs flagged in ``unknowns`` unknown; outputs flagged
    in ``inst`` are forced unknown. Both parts are Programs (the known one is traced, not run)."""
    key = ("pe", tuple(unknowns), tuple(inst))
    return derived(prog, key, lambda: _partial_eval_body(prog, list(unknowns), list(inst)))


def _partial_eval_body(prog: Program, unknowns: list[bool], inst: list[bool]) -> PartialEvalBody:
    in_avals = [v.aval for v in prog.invars]
    known_avals = [a for a, u in zip(in_avals, unknowns) if not u]
    box: dict = {}

    def known_fun(*kvals: Any) -> list:
        it = iter(kvals)
        pvals = [peval.PartialVal.unknown(a) if u else peval.PartialVal.known(next(it))
                 for a, u in zip(in_avals, unknowns)]
        uprog, pvals_out = peval.partial_eval_flat(lambda *xs: run_program(prog, xs), pvals, inst)
        box["uprog"] = uprog
        box["out_unknown"] = [not pv.is_known for pv in pvals_out]
        return [pv.const for pv in pvals_out if pv.is_known] + list(uprog.consts)

    kprog = trace_internal(known_fun, known_avals)
    uprog = box["uprog"]
    unknown = Program((), (*uprog.constvars, *uprog.invars), uprog.eqns, uprog.outvars)
    return PartialEvalBody(kprog, unknown, box["out_unknown"], len(uprog.constvars))


def classify_residuals(pe: PartialEvalBody, num_consts: int, num_fwd_from: int | None) -> list[tuple]:
    """Sort the residuals of ``pe.known`` (inputs: ``num_consts`` loop-invariant ones first).

    Returns one entry per residual: ``("invariant",)`` (depends on the invariant inputs only:
    computed once, outside the loop), ``("forward", i)`` (it *is* known input ``i`` with
    ``i >= num_fwd_from``: the caller passes that operand instead of a copy) or ``("step",)``
    (a per-iteration value).
    """
    k = pe.known
    n_out = pe.num_known_out
    res = k.outvars[n_out:]
    variant = depends_on(k, [i >= num_consts for i in range(len(k.invars))])[n_out:]
    pos = {v.id: i for i, v in enumerate(k.invars)}
    kinds: list[tuple] = []
    for a, var in zip(res, variant):
        i = pos.get(a.id) if isinstance(a, Var) else None
        if i is not None and num_fwd_from is not None and i >= num_fwd_from:
            kinds.append(("forward", i))
        elif not var:
            kinds.append(("invariant",))
        else:
            kinds.append(("step",))
    return kinds


def invariant_values(pe: PartialEvalBody, kinds: Sequence[tuple], const_vals: Sequence[Any]) -> list:
    """Compute the loop-invariant residuals from the known invariant inputs."""
    n_out = pe.num_known_out
    flags = [False] * n_out + [k[0] == "invariant" for k in kinds]
    if not any(flags):
        return []
    p = select_outputs(pe.known, flags)
    args = list(const_vals) + [None] * (len(p.invars) - len(const_vals))
    return eval_program(p, p.consts, args)


# ---------------------------------------------------------------------------------------------
# How a loop runs: the debug log and ``require_native``
# ---------------------------------------------------------------------------------------------


class NativeLoopError(EmberError, RuntimeError):
    """A loop created with ``require_native=True`` would not run as a native loop."""


_REQUIRE_NATIVE = threading.local()


@contextlib.contextmanager
def require_native_loops(flag: bool = True) -> Iterator[None]:
    """Within the block, ``scan``/``while_loop``/``fori_loop`` default to ``require_native=flag``
    (the default applies when the loop is created, i.e. traced)."""
    prev = getattr(_REQUIRE_NATIVE, "flag", False)
    _REQUIRE_NATIVE.flag = bool(flag)
    try:
        yield
    finally:
        _REQUIRE_NATIVE.flag = prev


def require_native_default(value: bool | None) -> bool:
    """``value``, or the default set by :func:`require_native_loops` when it is ``None``."""
    return bool(getattr(_REQUIRE_NATIVE, "flag", False)) if value is None else bool(value)


REFERENCE_LOOP = "reference loop"
NATIVE_LOOP = "native loop"
_reported: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def describe_loop(kind: str, body: Program, params: dict) -> str:
    length = params.get("length")
    what = f"length={length}, " if length is not None else ""
    return f"{kind}[{what}body of {len(body.eqns)} equations]"


def report_loop_path(kind: str, body: Program, params: dict, path: str, reason: str | None = None,
                     backend: str | None = None) -> None:
    """Log how a loop runs (once per body, path and backend) and enforce ``require_native``.

    Backends call this when they decide how to run a loop primitive: the native backend with
    ``path=NATIVE_LOOP`` when it compiles the loop into its native entry point, or with
    ``path=REFERENCE_LOOP`` and the ``reason`` when it falls back to the reference loop (at
    compile time, before running anything, so that ``require_native=True`` raises early). The
    reference implementation (``impl``: eager calls, the numpy backend, a backend's per-step
    fallback) reports ``REFERENCE_LOOP`` itself when it runs.
    """
    where = f" on backend {backend!r}" if backend else ""
    if params.get("require_native") and path != NATIVE_LOOP:
        raise NativeLoopError(f"{describe_loop(kind, body, params)} would run as a {path}{where}, not as a "
                              f"native loop" + (f" ({reason})" if reason else "") + "; it was created "
                              "with require_native=True")
    seen = _reported.get(body)
    if seen is None:
        seen = _reported[body] = set()
    if (path, backend) in seen:
        return
    seen.add((path, backend))
    dbg.logger.debug("%s: %s%s%s", describe_loop(kind, body, params), path, where,
                     f" ({reason})" if reason else "")
