"""``inline_calls``: ``checkpoint``, ``custom_jvp_call`` and ``custom_vjp_call`` are plain calls of a
sub-program in forward evaluation; their equations (and captured constants) are spliced into the
parent with fresh variables, recursively, so they fuse with their surroundings."""

from __future__ import annotations

from collections.abc import Sequence

from ember._src.program import Atom, Eqn, Program, Var
from ember._src.rewrites.builder import Builder

INLINED: dict[str, str] = {"checkpoint": "program", "custom_jvp_call": "call", "custom_vjp_call": "call"}
"""The calls whose sub-program is spliced into the caller -> the parameter holding it."""


def inline_target(e: Eqn) -> Program | None:
    """The sub-program ``e`` calls when it is a plain call (forward evaluation), else None."""
    key = INLINED.get(e.prim.name)
    sub = e.params.get(key) if key else None
    if not isinstance(sub, Program) or len(sub.invars) != len(e.inputs):
        return None
    if sub.constvars and len(sub.consts) != len(sub.constvars):
        return None
    return sub


def _splice(b: Builder, sub: Program, ins: Sequence[Atom]) -> list[Atom]:
    """Emit ``sub``'s equations into ``b`` reading ``ins``; returns ``sub``'s outputs."""
    env: dict[int, Atom] = {v.id: a for v, a in zip(sub.invars, ins)}
    for v, c in zip(sub.constvars, sub.consts):
        nv = Var(v.aval)
        b.constvars.append(nv)
        b.consts.append(c)
        env[v.id] = nv

    def rd(a: Atom) -> Atom:
        return env[a.id] if isinstance(a, Var) else a

    for e in sub.eqns:
        eins = [rd(a) for a in e.inputs]
        inner = inline_target(e)
        if inner is not None and (not inner.constvars or len(b.consts) == len(b.constvars)):
            outs = _splice(b, inner, eins)
        else:
            outs = b.emit(e.prim, eins, e.params, [Var(v.aval) for v in e.outvars])
        env.update((v.id, o) for v, o in zip(e.outvars, outs))
    return [rd(a) for a in sub.outvars]


def inline_calls(p: Program) -> Program:
    """Splice the sub-programs of checkpoint / custom_jvp_call / custom_vjp_call into ``p``."""
    if not any(inline_target(e) is not None for e in p.eqns):
        return p
    b = Builder(p)
    for e in p.eqns:
        ins = [b.read(a) for a in e.inputs]
        sub = inline_target(e)
        # captured constants of the callee join the parent's (only when the parent's are concrete)
        if sub is None or (sub.constvars and len(b.consts) != len(b.constvars)):
            b.emit(e.prim, ins, e.params, e.outvars)
            continue
        for v, o in zip(e.outvars, _splice(b, sub, ins)):
            b.sub[v.id] = o
    return b.finish()
