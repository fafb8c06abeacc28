"""Ahead-of-time stages under JAX's names: ``jit(f).trace(...)``, ``.lower(...)``, ``.compile()``.

``jit(f).trace(*args)`` returns a :class:`Traced` (it still unpacks as ``program, out_tree``);
``jit(f).lower(*args)`` returns the jitted function's compiled signature, which carries
:class:`LoweredStage`'s methods: ``as_text()`` (the Program), ``cost_analysis()`` (flops,
transcendentals and bytes estimated from the Program), ``compile()`` (a :class:`CompiledStage`
with ``as_text()`` = the generated C, ``memory_analysis()`` = arena / argument / output bytes, and
``__call__``). The existing inspection (``.program``, ``.executable``) stays as it was.

The cost model counts, per equation of the Program before fusion, by each primitive's
``cost_class`` (declared beside the primitive): ``2*M*N*K`` for products
(convolutions are composed from products), one flop per output element of an arithmetic
elementwise op, one transcendental per output element of ``exp``/``log``/``tanh``/...,
``in - out`` flops for reductions, nothing for data movement; loops multiply their body by the
trip count when it is static (``scan``), a ``while`` body counts once. ``bytes accessed`` sums
every equation's operand and result bytes, an upper bound on traffic that fusion lowers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember._src import shapes as sh
from ember._src import tree as tu
from ember._src.array import wrap_result
from ember._src.core import ShapedArray
from ember._src.program import Program, resolve_program


def _size(aval: ShapedArray) -> int:
    n = sh.size(aval.shape)
    return n if isinstance(n, int) else 0


def _nbytes(aval: ShapedArray) -> int:
    return _size(aval) * np.dtype(aval.dtype).itemsize


def _dot_flops(eqn: Any) -> int:
    (lc, _rc), _batch = eqn.params["dimension_numbers"]
    lhs = eqn.inputs[0].aval.shape
    k = math.prod(int(lhs[d]) for d in lc) if all(isinstance(lhs[d], int) for d in lc) else 0
    return 2 * _size(eqn.outvars[0].aval) * k


def _sub_programs(params: dict) -> list[Program]:
    found: list[Program] = []
    for v in params.values():
        if isinstance(v, Program):
            found.append(v)
        elif isinstance(v, (tuple, list)):
            found.extend(x for x in v if isinstance(x, Program))
    return found


def estimate_cost(program: Program) -> dict[str, float]:
    """``{"flops", "transcendentals", "bytes accessed"}`` estimated from ``program`` (see module doc)."""
    flops = trans = nbytes = 0.0
    for eqn in program.eqns:
        kind = eqn.prim.cost_class  # declared beside the primitive (core.Primitive.cost_class)
        out = sum(_size(v.aval) for v in eqn.outvars)
        nbytes += sum(_nbytes(a.aval) for a in eqn.inputs) + sum(_nbytes(v.aval) for v in eqn.outvars)
        if kind == "contraction":
            flops += _dot_flops(eqn)
        elif kind == "transcendental":
            trans += out
        elif kind == "arithmetic":
            flops += out
        elif kind == "reduction":
            flops += max(0, sum(_size(a.aval) for a in eqn.inputs) - out)
        subs = _sub_programs(eqn.params)
        if subs:
            times = eqn.params.get("length", 1)
            times = times if isinstance(times, int) else 1
            for sub in subs:
                c = estimate_cost(sub)
                flops += times * c["flops"]
                trans += times * c["transcendentals"]
                nbytes += times * c["bytes accessed"]
    return {"flops": flops, "transcendentals": trans, "bytes accessed": nbytes}


@dataclass(frozen=True)
class MemoryAnalysis:
    """Bytes a compiled signature uses, under the field names of JAX's ``CompiledMemoryStats``.

    ``temp_size_in_bytes`` is the planned arena (every intermediate of one call); ``None`` where the
    backend plans no arena (the NumPy reference backend).
    """

    argument_size_in_bytes: int
    output_size_in_bytes: int
    temp_size_in_bytes: int | None
    alias_size_in_bytes: int
    generated_code_size_in_bytes: int


class Traced(tuple):
    """``jit(f).trace(*args)``: unpacks as ``(program, out_tree)``; ``.jaxpr`` is the Program and
    ``.lower()`` continues to the compiled signature for the same arguments."""

    _lower: Callable[[], Any]

    def __new__(cls, program: Program, out_tree: Any, lower: Callable[[], Any]) -> Traced:
        self = super().__new__(cls, (program, out_tree))
        self._lower = lower
        return self

    @property
    def jaxpr(self) -> Program:
        """The traced Program (JAX's name for it)."""
        return self[0]

    @property
    def out_tree(self) -> Any:
        return self[1]

    def lower(self) -> Any:
        """The lowered (compiled) signature, as ``jit(f).lower(*args)``."""
        return self._lower()


class LoweredStage:
    """Methods of ``jit(f).lower(*args)`` (mixed into the jit's compiled-signature class, which
    has ``program``, ``out_tree`` and ``executable``)."""

    program: Program
    out_tree: Any
    executable: Any

    def as_text(self) -> str:
        """The Program as text (the counterpart of JAX's StableHLO text)."""
        return str(self.program)

    def cost_analysis(self) -> dict[str, float]:
        """Estimated ``flops``, ``transcendentals`` and ``bytes accessed`` of one call."""
        return estimate_cost(self.program)

    @property
    def in_avals(self) -> list[ShapedArray]:
        return self.program.in_avals

    @property
    def out_info(self) -> Any:
        """The output structure with a ShapedArray for each leaf."""
        return tu.unflatten(self.out_tree, list(self.program.out_avals))

    def compile(self, **sizes: int) -> CompiledStage:
        """The compiled stage. With named dynamic axes, ``sizes`` binds them (``batch=32``) to
        report the specialization's C and memory; without them the symbolic executable's."""
        spec = self.specialize(**sizes) if sizes else None  # type: ignore[attr-defined]
        return CompiledStage(self, spec)


class CompiledStage:
    """``jit(f).lower(*args).compile()``: the generated C, memory figures, and a callable."""

    def __init__(self, lowered: LoweredStage, specialized: Any = None):
        self.lowered = lowered
        self._spec = specialized
        # the Program with named axes bound to the specialization's sizes (the static one as is)
        self.program = lowered.program if specialized is None else \
            resolve_program(lowered.program, specialized.env)

    def _exe(self) -> Any:
        return self._spec.run if self._spec is not None else self.lowered.executable

    def as_text(self) -> str | None:
        """The C source the native backend generated (``None`` for backends that emit none)."""
        exe = self._exe()
        for obj in (exe, getattr(exe, "sym", None), getattr(exe, "native", None)):
            src = getattr(obj, "source", None)
            if isinstance(src, str):
                return src
        return None

    def cost_analysis(self) -> dict[str, float]:
        """As :meth:`LoweredStage.cost_analysis`, for the bound sizes of a specialization."""
        return estimate_cost(self.program)

    def memory_analysis(self) -> MemoryAnalysis:
        """Argument, output and arena bytes of one call (symbolic sizes count as 0 until bound)."""
        prog = self.program
        exe = self._exe()
        arena = None
        for obj in (exe, getattr(exe, "_plan", None), getattr(exe, "plan", None)):
            v = getattr(obj, "arena_bytes", None)
            if isinstance(v, (int, np.integer)):
                arena = int(v)
                break
        src = self.as_text()
        return MemoryAnalysis(
            argument_size_in_bytes=sum(_nbytes(a) for a in prog.in_avals),
            output_size_in_bytes=sum(_nbytes(a) for a in prog.out_avals),
            temp_size_in_bytes=arena,
            alias_size_in_bytes=0,
            generated_code_size_in_bytes=len(src.encode()) if src else 0,
        )

    def __call__(self, *args: Any) -> Any:
        """Run the compiled signature on arguments of the lowered shapes (flat positional)."""
        leaves = [np.asarray(a) for a in tu.leaves(args)]
        if self._spec is not None:
            outs, avals = self._spec(leaves), self._spec.out_avals
        else:
            outs, avals = self.lowered.executable(leaves), self.lowered.program.out_avals
        arrays = [wrap_result(o, ShapedArray(np.shape(o), a.dtype, a.weak_type)) for o, a in zip(outs, avals)]
        return tu.unflatten(self.lowered.out_tree, arrays)
