"""The host fallback of the GPU backends (``jit(f, backend=..., host_fallback=True)``).

Without the option, a primitive the device kernels do not compute is an error naming it. With it,
the program is cut into segments: runs of equations the device computes become device programs,
the others (sort, cumulative sums, ``scan``/``while``/``cond``, linear algebra, ...) host programs
run by the reference interpreter, with each segment's values copied between host and device. It
is correct and slow (a copy per segment boundary); the segments are in ``as_text()``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember._src.gpu import ops
from ember._src.interpreter import numpy_backend
from ember._src.program import Eqn, Literal, Program, Var


def device_computes(e: Eqn) -> bool:
    """Whether the device kernels compute ``e`` (an inlined call: all of its equations)."""
    param = ops.INLINED.get(e.prim.name)
    if param is not None:
        sub = e.params[param]
        return all(device_computes(x) for x in getattr(sub, "program", sub).eqns)
    return ops.supported(e.prim.name)


def split(prog: Program) -> list[tuple[bool, Program]]:
    """``prog`` as (on_device, program) segments in order: each reads the values of earlier ones
    (or the inputs and constants) and returns those used later."""
    runs: list[tuple[bool, list[Eqn]]] = []
    for e in prog.eqns:
        dev = device_computes(e)
        if runs and runs[-1][0] == dev:
            runs[-1][1].append(e)
        else:
            runs.append((dev, [e]))
    needed_after: list[set] = []
    later = {a for a in prog.outvars if isinstance(a, Var)}
    for _, eqns in reversed(runs):
        needed_after.append(set(later))
        later |= {a for e in eqns for a in e.inputs if isinstance(a, Var)}
    needed_after.reverse()
    out = []
    for (dev, eqns), after in zip(runs, needed_after):
        defined = {v for e in eqns for v in e.outvars}
        ins: list[Var] = []
        for e in eqns:
            for a in e.inputs:
                if isinstance(a, Var) and a not in defined and a not in ins:
                    ins.append(a)
        outs = [v for e in eqns for v in e.outvars if v in after]
        if outs:
            out.append((dev, Program((), ins, eqns, outs)))
    return out


class SegmentedExecutable:
    """Device and host segments run in order; ``make_device(program)`` builds a device segment."""

    def __init__(self, prog: Program, make_device: Callable[[Program], Any]):
        self.prog = prog
        self.segments = [(p, make_device(p) if dev else numpy_backend(p)) for dev, p in split(prog)]
        self.source = "\n".join(getattr(exe, "source", None) or _host_text(p) for p, exe in self.segments)

    def __call__(self, args: list) -> list:
        env: dict[Var, Any] = dict(zip(self.prog.constvars, self.prog.consts))
        env.update(zip(self.prog.invars, args))
        for p, exe in self.segments:
            env.update(zip(p.outvars, exe([env[v] for v in p.invars])))
        return [np.asarray(a.val if isinstance(a, Literal) else env[a]) for a in self.prog.outvars]


def _host_text(p: Program) -> str:
    return "// host segment: " + ", ".join(e.prim.name for e in p.eqns) + "\n"
