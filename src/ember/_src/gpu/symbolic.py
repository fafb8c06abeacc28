"""Named dynamic axes on the GPU backends: one compile per symbolic signature.

``jit(f, dynamic_axes=...)`` hands a backend's ``specialize(program, env, **options)`` a symbolic
Program and one binding of its axes (:mod:`ember._src.dynamic`). The GPU backends schedule and
compile such a program **once** (:func:`make_specialize`): its sizes are expressions over the axis
values (:mod:`.kernels`), so every binding runs the same pipelines / CUDA module, and a binding is
only a :class:`BoundRun` -- the executable with the axis values it passes to the kernels, the
buffer sizes and the launch grids it evaluates per call.

A program the symbolic path does not take -- device loops (``scan``, host-driven ``while`` and
``cond``), host segments (``host_fallback=True``), or a size the kernels cannot express -- is
resolved to a static program per binding and compiled for it, as before (correct, but a new
compile for each new size).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ember._src.dynamic import program_axes
from ember._src.program import Program, resolve_program

STATS = {"symbolic": 0, "per_binding": 0}
"""Symbolic programs compiled once, and per-binding compiles of programs the symbolic path
does not take (since the process started)."""


class BoundRun:
    """A symbolic executable with one binding of its axes: ``run(args)`` and ``run_device(args)``
    as a static executable's (what a :class:`~ember._src.dynamic.Specialization` runs)."""

    def __init__(self, exe: Any, env: dict[str, int]):
        self.exe, self.env = exe, dict(env)

    @property
    def source(self) -> str:
        """The kernels' source (the same for every binding)."""
        return self.exe.source

    def __call__(self, args: list) -> list:
        return self.exe(args, self.env)

    def run_device(self, args: list) -> list:
        return self.exe.run_device(args, self.env)


def make_specialize(factory: Callable[..., Any],
                    symbolic_executable: Callable[[Program, tuple, dict], Any]) -> Callable[..., Any]:
    """A backend factory's ``specialize`` hook. ``symbolic_executable(program, axes, options)``
    builds the one executable of a symbolic ``program`` (called with ``(args, env)``), or returns
    None (or raises NotImplementedError) for a program it does not take: that one goes to
    ``factory`` once per binding."""
    def specialize(program: Program, env: dict[str, int], **options: Any) -> Any:
        # kept on the Program (an executable may hold its program: a cycle the collector frees)
        built = program.__dict__.setdefault("_gpu_symbolic", {})
        key = (factory, repr(sorted(options.items())))
        exe = built.get(key, False)
        if exe is False:
            try:
                exe = symbolic_executable(program, program_axes(program), options)
            except NotImplementedError:
                exe = None  # (a primitive without a kernel raises again below, naming itself)
            if exe is not None:
                STATS["symbolic"] += 1
            built[key] = exe
        if exe is None:
            STATS["per_binding"] += 1
            return factory(resolve_program(program, env), **options)
        return BoundRun(exe, env)

    return specialize
