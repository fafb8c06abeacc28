"""The reference interpreter: a Program run step by step with each primitive's NumPy
implementation. ``jit`` registers :func:`numpy_backend` as ``BACKENDS["numpy"]``; control flow
uses :class:`NumpyPlan` to run loop bodies eagerly."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from ember._src import core
from ember._src import dynamic as dyn
from ember._src.program import Literal, Program, resolve_value


class NumpyPlan:
    """A Program compiled for the reference executor: value slots, literals and params fixed in
    advance, intermediates released after their last use. For a symbolic Program, the steps
    whose params hold symbolic sizes are re-resolved per binding (:meth:`specialize`)."""

    def __init__(self, prog: Program):
        consts = [core.concrete_or_error(c, "a captured constant") for c in prog.consts]
        slot: dict[int, int] = {}
        template: list[Any] = []

        def alloc(v: Any, val: Any = None) -> int:
            slot[v.id] = len(template)
            template.append(val)
            return slot[v.id]

        def use(a: Any) -> int:
            if isinstance(a, Literal):
                template.append(a.val)
                return len(template) - 1
            return slot[a.id]

        for v, c in zip(prog.constvars, consts):
            alloc(v, c)
        self.in_slots = [alloc(v) for v in prog.invars]
        fixed = len(template)
        steps = []
        for e in prog.eqns:
            ins = tuple(use(a) for a in e.inputs)
            outs = tuple(alloc(v) for v in e.outvars)
            steps.append([e.prim.impl, ins, e.params, e.prim.multiple_results, outs,
                          tuple(v.aval.dtype for v in e.outvars), ()])
        self.out_slots = [use(a) for a in prog.outvars]
        last: dict[int, int] = {}
        for k, st in enumerate(steps):
            for j in st[1]:
                last[j] = k
        keep = set(self.out_slots)
        for j, k in last.items():
            if j >= fixed and j not in keep and template[j] is None:
                steps[k][6] += (j,)
        self.template = template
        self.steps = [tuple(st) for st in steps]
        self.symbolic_steps = [k for k, e in enumerate(prog.eqns) if dyn.has_dim_expr(e.params)]

    def specialize(self, env: dict[str, int]) -> Callable[[list], list]:
        memo: dict = {}
        steps = list(self.steps)
        for k in self.symbolic_steps:
            st = steps[k]
            steps[k] = (st[0], st[1], resolve_value(st[2], env, memo), *st[3:])
        return self.runner(steps)

    def runner(self, plan: list | None = None) -> Callable[[list], list]:
        plan = self.steps if plan is None else plan
        template, in_slots, out_slots = self.template, self.in_slots, self.out_slots

        def run(args: list) -> list:
            env = template.copy()
            for s, x in zip(in_slots, args):
                env[s] = x
            for impl, ins, params, multi, outs, dtypes, dead in plan:
                res = impl(*[env[j] for j in ins], **params)
                if not multi:
                    res = (res,)
                for s, o, d in zip(outs, res, dtypes):
                    if type(o) is not np.ndarray:
                        o = np.asarray(o)
                    env[s] = o if o.dtype == d else o.astype(d)
                for j in dead:
                    env[j] = None
            return [env[s] for s in out_slots]

        return run


_PLANS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def numpy_backend(prog: Program, **options: Any) -> Callable[[list], list]:
    """The reference backend: interprets the Program with each primitive's NumPy implementation."""
    return NumpyPlan(prog).runner()


def numpy_specialize(prog: Program, env: dict[str, int], **options: Any) -> Callable[[list], list]:
    """The reference backend's level 2: the plan of the symbolic Program is built once (cached per
    Program); each binding only resolves the params of the steps that hold symbolic sizes."""
    plan = _PLANS.get(prog)
    if plan is None:
        plan = _PLANS[prog] = NumpyPlan(prog)
    return plan.specialize(env)


numpy_backend.specialize = numpy_specialize  # type: ignore[attr-defined]
