"""Partial evaluation: run a function on partly known inputs.

Operations on known values run at once (on the enclosing level: eagerly, or recorded by an enclosing
``jit``); operations touching unknown values are staged into a :class:`~ember._src.program.Program`
(:func:`partial_eval_flat`). A primitive holding sub-programs (control flow, checkpoint) registers
its own rule in :data:`partial_eval_rules`. ``linearize`` (:mod:`ember._src.ad`) is JVP plus partial
evaluation with the primals known and the tangents unknown.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ember._src import core
from ember._src.array import asarray_eager
from ember._src.core import Primitive, ShapedArray
from ember._src.program import Eqn, Program, Var, inline_literals
from ember.errors import TracerError

__all__ = ["PartialEvalTrace", "PartialEvalTracer", "PartialVal", "partial_eval_flat", "partial_eval_rules",
           "tracers_to_program"]


def _concrete(x: Any) -> np.ndarray:
    if isinstance(x, core.Tracer):
        return x.to_concrete()
    return np.asarray(getattr(x, "value", x))


class PartialVal:
    """A value that is either known (``const``) or unknown (only its ``aval``)."""

    __slots__ = ("aval", "const", "is_known")

    def __init__(self, aval: ShapedArray, const: Any, is_known: bool):
        self.aval = aval
        self.const = const
        self.is_known = is_known

    @classmethod
    def known(cls, val: Any) -> PartialVal:
        return cls(core.get_aval(val), val, True)

    @classmethod
    def unknown(cls, aval: ShapedArray) -> PartialVal:
        return cls(aval, None, False)

    def __repr__(self) -> str:
        return f"PartialVal({'known' if self.is_known else 'unknown'} {self.aval.str_short()})"


class _LambdaBinding:
    """Recipe of an unknown input of the staged program."""


class _ConstRecipe:
    """Recipe of a known value used by a staged equation: a constant of the staged program."""

    __slots__ = ("val",)

    def __init__(self, val: Any):
        self.val = val


class _EqnRecipe:
    """Recipe of the outputs of a staged equation."""

    __slots__ = ("prim", "tracers_in", "params", "tracers_out")

    def __init__(self, prim: Primitive, tracers_in: list, params: dict):
        self.prim = prim
        self.tracers_in = tracers_in
        self.params = params
        self.tracers_out: list = []


class PartialEvalTracer(core.Tracer):
    """A partially known value; unknown ones remember how they are computed (their recipe)."""

    __slots__ = ("_trace", "pval", "recipe")

    def __init__(self, trace: PartialEvalTrace, pval: PartialVal, recipe: Any):
        self._trace = trace
        self.pval = pval
        self.recipe = recipe

    @property
    def aval(self) -> ShapedArray:
        return self.pval.aval

    def full_lower(self) -> Any:
        if self.pval.is_known:
            return core.full_lower(self.pval.const)
        return self

    def to_concrete(self) -> np.ndarray:
        if self.pval.is_known:
            return _concrete(self.pval.const)
        return super().to_concrete()


class PartialEvalTrace(core.Trace):
    """Computes what is known and stages what is not into equations (for :func:`tracers_to_program`)."""

    def new_arg(self, pval: PartialVal) -> PartialEvalTracer:
        return PartialEvalTracer(self, pval, None if pval.is_known else _LambdaBinding())

    def pure(self, val: Any) -> PartialEvalTracer:
        return PartialEvalTracer(self, PartialVal.known(val), None)

    lift = pure

    def instantiate_const(self, tracer: PartialEvalTracer) -> PartialEvalTracer:
        """The unknown version of ``tracer``: known values become constants of the staged program."""
        if not tracer.pval.is_known:
            return tracer
        cache = self.main.global_data
        hit = cache.get(id(tracer))
        if hit is not None:
            return hit[1]
        t = PartialEvalTracer(self, PartialVal.unknown(tracer.aval), _ConstRecipe(tracer.pval.const))
        cache[id(tracer)] = (tracer, t)  # keeps `tracer` alive so its id stays unique
        return t

    def new_staged(self, prim: Primitive, tracers_in: list, params: dict,
                   avals_out: Sequence[ShapedArray]) -> list[PartialEvalTracer]:
        """Stage ``prim`` on (already instantiated) unknown tracers; returns its output tracers."""
        recipe = _EqnRecipe(prim, tracers_in, params)
        outs = [PartialEvalTracer(self, PartialVal.unknown(a), recipe) for a in avals_out]
        recipe.tracers_out = outs
        return outs

    def process_primitive(self, prim: Primitive, tracers: list, params: dict) -> list:
        if all(t.pval.is_known for t in tracers):
            out = prim.bind(*(t.pval.const for t in tracers), **params)
            return list(out) if prim.multiple_results else [out]
        rule = partial_eval_rules.get(prim)
        if rule is not None:
            return rule(self, tracers, **params)
        tracers_in = [self.instantiate_const(t) for t in tracers]
        avals_out = prim.abstract([t.aval for t in tracers_in], params)
        return self.new_staged(prim, tracers_in, params, avals_out)


#: Custom partial-evaluation rules ``rule(trace, tracers, **params) -> list of tracers/values``,
#: for primitives that must see their known/unknown split whole (``checkpoint``).
partial_eval_rules: dict[Primitive, Callable] = {}


def _toposort(out_tracers: Sequence[PartialEvalTracer]) -> list[PartialEvalTracer]:
    order: list = []
    visited: set[int] = set()
    stack: list = [(t, False) for t in reversed(out_tracers)]
    while stack:
        t, done = stack.pop()
        if done:
            order.append(t)
            continue
        if id(t) in visited:
            continue
        visited.add(id(t))
        stack.append((t, True))
        if isinstance(t.recipe, _EqnRecipe):
            for p in reversed(t.recipe.tracers_in):
                if id(p) not in visited:
                    stack.append((p, False))
    return order


def tracers_to_program(in_tracers: Sequence[PartialEvalTracer],
                       out_tracers: Sequence[PartialEvalTracer]) -> Program:
    """Build the Program computing the unknown ``out_tracers`` from the unknown ``in_tracers``."""
    var_of: dict[int, Var] = {}
    invars = []
    for t in in_tracers:
        v = var_of[id(t)] = Var(t.aval)
        invars.append(v)
    constvars, consts, eqns = [], [], []
    done_eqns: set[int] = set()
    for t in _toposort(out_tracers):
        r = t.recipe
        if isinstance(r, _LambdaBinding):
            if id(t) not in var_of:
                raise TracerError("partial evaluation: an unknown input that is not an input of the "
                                  "staged program was used (a leaked tracer?)")
        elif isinstance(r, _ConstRecipe):
            if id(t) not in var_of:
                val = r.val
                if not isinstance(val, core.Tracer) and not hasattr(val, "value"):
                    val = asarray_eager(val)
                v = var_of[id(t)] = Var(core.get_aval(val))
                constvars.append(v)
                consts.append(val)
        elif isinstance(r, _EqnRecipe):
            if id(r) in done_eqns:
                continue
            done_eqns.add(id(r))
            ins = [var_of[id(x)] for x in r.tracers_in]
            outs = []
            for o in r.tracers_out:
                v = var_of.get(id(o))
                if v is None:
                    v = var_of[id(o)] = Var(o.aval)
                outs.append(v)
            eqns.append(Eqn(r.prim, ins, r.params, outs))
        else:  # pragma: no cover - known tracers are instantiated before staging
            raise AssertionError("known tracer reached the staged program")
    outvars = [var_of[id(t)] for t in out_tracers]
    return inline_literals(Program(constvars, invars, eqns, outvars, consts))


def partial_eval_flat(fun: Callable, pvals_in: Sequence[PartialVal],
                      instantiate: bool | Sequence[bool] | Callable[[int], Sequence[bool]] = False,
                      ) -> tuple[Program, list[PartialVal]]:
    """Run the flat ``fun(*xs) -> list`` on partially known inputs.

    Returns ``(program, pvals_out)``: known outputs are in ``pvals_out`` (their ``const``); the
    Program takes the unknown inputs (in order) and returns the unknown outputs (in order); its
    constants are the known values it needs (the residuals). ``instantiate`` (a bool, one per
    output, or a function of the number of outputs) forces outputs to be unknown.
    """
    with core.new_main(PartialEvalTrace, {}) as main:
        trace = PartialEvalTrace(main)
        tracers_in = [trace.new_arg(pv) for pv in pvals_in]
        outs = fun(*tracers_in)
        tracers_out = [trace.full_raise(o) for o in outs]
        if callable(instantiate):
            inst = list(instantiate(len(tracers_out)))
        elif isinstance(instantiate, bool):
            inst = [instantiate] * len(tracers_out)
        else:
            inst = list(instantiate)
        tracers_out = [trace.instantiate_const(t) if f else t for t, f in zip(tracers_out, inst)]
        pvals_out = [t.pval for t in tracers_out]
        unk_in = [t for t in tracers_in if not t.pval.is_known]
        unk_out = [t for t in tracers_out if not t.pval.is_known]
        prog = tracers_to_program(unk_in, unk_out)
    return prog, pvals_out
