"""The native backend: passes, fused-kernel scheduling, C code generation, memory planning, and the
compiler/BLAS infrastructure under them. Importing this package registers ``BACKENDS["native"]``.

Stages (each its own module), run in order by :func:`.pipeline.lower` with the options of
:class:`.options.NativeOptions`: :mod:`.passes` (Program -> Program rewrites), :mod:`.schedule`
(kernels and calls, fusion decided by :mod:`.kernel`), :mod:`.loops` (native loop bodies),
:mod:`.planner` (arena plan; per-step scratch named in :mod:`.scratch`), :mod:`.codegen` with
:mod:`.c_ops` (one C translation unit; its function-pointer table in :mod:`.abi`). Then
:mod:`.compiler` (build and cache), :mod:`.backend` (the executable), :mod:`.specialize` (symbolic
programs: compile once, bind the axes per call).
"""

from ember._src.array import register_memory_reporter
from ember._src.jit import BACKENDS, CLEAR_HOOKS
from ember._src.native import (  # noqa: F401
    compiler,
    dispatch,
    gemm_kernel,
    interrupt,
    opinfo,
    pool,
    threadpool,
    validators,
)
from ember._src.native import memory as native_memory
from ember._src.native import mpi_calls as _mpi_calls  # noqa: F401 - registers the MPI steps
from ember._src.native.backend import NativeExecutable, native_backend
from ember._src.native.specialize import native_specialize


def prepare(wait: bool = True) -> dict[str, bool | None]:
    """Start (and with ``wait``, finish) building the per-machine runtime libraries that are
    otherwise built in the background on first need: the C call dispatcher (:mod:`.dispatch`),
    the float32 GEMM kernel (:mod:`.gemm_kernel`), the thread pool (:mod:`.threadpool`) and the
    interrupt runtime (:mod:`.interrupt`). Until they load, calls take the Python path, products
    call BLAS and parallel loops run in OpenMP regions (the interrupt runtime is loaded before
    the first program that polls in any case). Returns whether each is loaded (None: still
    building). Benchmarks call this so they time the steady state."""
    return {"dispatch": dispatch.module(wait=wait) is not None, "gemm_kernel": gemm_kernel.load(wait=wait),
            "threadpool": threadpool.load(wait=wait), "interrupt": interrupt.load(wait=wait)}


def build_stats() -> tuple[int, int]:
    """The C compiler's counters ``(compiles, disk_hits)`` (backend protocol: ``build_stats``)."""
    st = compiler.cache_stats()
    return st["compiles"], st["disk_hits"]


def unavailable_reason() -> str | None:
    """Why this backend cannot run here (no working C compiler), or None (backend protocol).
    Raises CompileError when ``$EMBER_CC`` names a missing or broken compiler."""
    if compiler.find_compiler() is None:
        return "no working C compiler found (set $EMBER_CC or install cc/gcc/clang)"
    return None


# the backend protocol (docs/INTERNALS.md): the factory and its optional hooks
native_backend.specialize = native_specialize  # named dynamic axes: one C compile per symbolic Program
native_backend.dispatcher = dispatch  # the jit fast path's C dispatcher
native_backend.build_stats = build_stats
native_backend.unavailable_reason = unavailable_reason
BACKENDS["native"] = native_backend
register_memory_reporter("native", native_memory.report)
CLEAR_HOOKS.append(pool.POOL.clear)  # clear_caches() releases the shared output pool's idle blocks
opinfo.declare()  # Primitive.lowering from the op-info registry

__all__ = ["NativeExecutable", "native_backend", "prepare"]
