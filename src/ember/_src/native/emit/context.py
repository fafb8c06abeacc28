"""What every emitter shares: the codegen options, the generated translation unit being built
(:class:`Generated`), and :class:`EmitContext` (where buffers live: arena offsets, inputs, constants).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ember._src.native.emit import calls as calls_mod
from ember._src.native.emit.c_ops import ctype
from ember._src.native.plan.planner import EXTERNAL_IN, EXTERNAL_OUT, PARAMS, Buffer, MemoryPlan
from ember._src.native.scheduling.schedule import Step
from ember._src.program import Var

# callback ids of fallback steps inside loop bodies (those of ember_main's own steps are step indices)
BODY_CALLBACK_BASE = 1 << 20



@dataclass
class CodegenOptions:
    openmp: bool = False
    num_threads: int | None = None  # None: the OpenMP default
    workspace_threads: int = 1  # per-thread row caches the planner sized (caps such loops' teams)
    parallel_threshold: int = calls_mod.DEFAULT_PARALLEL_THRESHOLD  # loops above this cost go parallel
    simd: bool = True
    axes: tuple[str, ...] = ()  # symbolic schedule: the axes read from dims[0..len(axes))
    prepack: bool = True  # a constant B, or a repeated Array argument B, packed once for the GEMM kernel
    # products above this cost share their panels out on ember's pool (None: parallel_threshold);
    # loop bodies raise parallel_threshold (their OpenMP regions) but not this (loop_bodies.emit_body)
    pool_threshold: int | None = None



@dataclass
class Generated:
    source: str
    fallback_steps: dict[int, Step] = field(default_factory=dict)  # callback id -> step
    # derived constants (loop bodies', prepacked weights), read through abi.const_ref(k)
    extra_consts: list[np.ndarray] = field(default_factory=list)
    # products whose B is an argument: (index in extra_consts of the 8-byte cell the runtime may
    # point at a packed copy of the argument, input index, k, n, rsb, csb); see _argument_packed_b
    packed_args: list[tuple[int, int, int, int, int, int]] = field(default_factory=list)
    # prepacked constant B operands: (shape, dtype, digest of the bytes, k, n, rsb, csb) -> index in
    # extra_consts
    prepacked: dict[tuple, int] = field(default_factory=dict)
    emitted_bodies: set[str] = field(default_factory=set)  # loop-body functions already written
    helpers: dict[str, str] = field(default_factory=dict)  # static C helpers shared by call steps
    # what the emitted code uses besides its functions: headers, prelude functions, support blocks
    # (emit/support.py; an insertion-ordered set)
    needs: dict[str, None] = field(default_factory=dict)



class EmitContext:
    def __init__(self, plan: MemoryPlan, n_in: int, n_par: int):
        self.plan, self.n_in, self.n_par = plan, n_in, n_par
        # the program's constants by Var id, and where derived constants go (abi.const_ref(k)):
        # set for a top-level program, so a product with a constant B can use it prepacked
        self.consts: dict[int, Any] = {}
        self.inputs: dict[int, int] = {}  # Var id -> input index (static top-level programs)
        self.gen: Generated | None = None
        # parallel loops run on ember's thread pool (.threadpool): set for ember_main's own steps,
        # whose chunk functions unpack bufs/arena/dims/fns from an em_main_ctx (not in loop bodies)
        self.pooled = False
        self.top = False  # ember_main's own steps: a loop step returns EM_INTERRUPTED once stopped

    in_body = False  # a loop body's function (loop_bodies._BodyCtx): returns void, see _fallback_call

    def base(self, b: Buffer) -> str:
        if b.cls == EXTERNAL_IN:
            return f"((char *)bufs[{b.index}])"
        if b.cls == PARAMS:
            return f"((char *)bufs[{self.n_in + b.index}])"
        if b.cls == EXTERNAL_OUT:
            return f"((char *)bufs[{self.n_in + self.n_par + b.index}])"
        return f"(arena + {b.offset})"  # an int, or "dims[k]" in a symbolic plan

    def inline_gemm(self, step: Step, has_c: bool, alpha: float, beta: float) -> list[str]:
        """C loops computing a ``gemm`` step whose strategy is ``INLINE`` (only loop bodies,
        :mod:`ember._src.native.scheduling.loops`, choose it: a BLAS call per iteration costs more
        than small products)."""
        raise ValueError(f"gemm step {step.name}: the INLINE route outside a loop body")

    def ptr(self, v: Var, dtype: Any = None) -> str:
        b = self.plan.value_buffer[v.id]
        t = ctype(dtype if dtype is not None else v.aval.dtype)
        return f"(({t} *){self.base(b)})"
