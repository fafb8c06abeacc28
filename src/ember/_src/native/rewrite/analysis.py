"""Read-only analyses of a Program that the native backend's passes share: which equation produces
a value, how often and by whom a value is used. (Dead-code
elimination, shared with autodiff, is :func:`ember._src.program.dce`.)"""

from __future__ import annotations

from collections import defaultdict

from ember._src.program import Eqn, Program, Var


def producers(p: Program) -> dict[int, Eqn]:
    """Var id -> the equation that defines it."""
    return {v.id: e for e in p.eqns for v in e.outvars}


def use_counts(p: Program) -> dict[int, int]:
    """Var id -> number of uses (an equation operand or a program output; 0 when absent)."""
    n: dict[int, int] = defaultdict(int)
    for e in p.eqns:
        for a in e.inputs:
            if isinstance(a, Var):
                n[a.id] += 1
    for a in p.outvars:
        if isinstance(a, Var):
            n[a.id] += 1
    return n


def consumers(p: Program) -> dict[int, list[Eqn]]:
    """Var id -> the equations reading it, in program order (once per operand slot)."""
    out: dict[int, list[Eqn]] = defaultdict(list)
    for e in p.eqns:
        for a in e.inputs:
            if isinstance(a, Var):
                out[a.id].append(e)
    return out
