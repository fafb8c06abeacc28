"""``cse`` (equal equations -- primitive, inputs, params -- computed once) and ``dce`` (equations
and captured constants whose results are unused are dropped). Effectful equations are never
merged or dropped."""

from __future__ import annotations

from typing import Any

import numpy as np

from ember._src.program import Atom, Literal, Program, Var, eqn_effectful
from ember._src.program import dce as program_dce
from ember._src.rewrites.builder import Builder


def _freeze(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    if isinstance(v, np.dtype):
        return ("dtype", str(v))
    if isinstance(v, Program):
        return ("program", id(v))
    if isinstance(v, np.ndarray):
        return ("array", v.dtype.str, v.shape, v.tobytes())
    try:
        hash(v)
        return v
    except TypeError:
        return ("repr", repr(v))


def _atom_key(a: Atom) -> Any:
    if isinstance(a, Literal):
        return ("lit", a.val.dtype.str, a.val.tobytes())
    return ("var", a.id)


def cse(p: Program) -> Program:
    """``p`` with each repeated equation (same primitive, inputs and params) computed once."""
    b = Builder(p)
    seen: dict[Any, list[Var]] = {}
    for e in p.eqns:
        ins = [b.read(a) for a in e.inputs]
        key = (e.prim.name, tuple(_atom_key(a) for a in ins), _freeze(e.params))
        prev = None if eqn_effectful(e) else seen.get(key)
        if prev is not None:
            for old, new in zip(e.outvars, prev):
                b.sub[old.id] = new
            continue
        seen[key] = list(e.outvars)
        b.emit(e.prim, ins, e.params, e.outvars)
    return b.finish()


def dce(p: Program) -> Program:
    """Drop equations and captured constants whose results are unused (:func:`program.dce`)."""
    return program_dce(p)
