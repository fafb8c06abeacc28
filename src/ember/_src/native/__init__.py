"""The native backend: passes, fused-kernel scheduling, memory planning, C emission, and the
compiler/runtime infrastructure under them. Importing this package registers ``BACKENDS["native"]``.

One subpackage per stage, run in order by :func:`.pipeline.lower` with the options of
:class:`.options.NativeOptions`:

- :mod:`.rewrite` -- Program -> Program passes (:mod:`.rewrite.passes`), the analyses they share,
  the backend-internal primitives they rewrite into;
- :mod:`.scheduling` -- steps: fused kernels (:mod:`.scheduling.kernel`, index expressions),
  calls, native loop bodies (:mod:`.scheduling.loops`), GEMM epilogues;
- :mod:`.plan` -- the arena plan (:mod:`.plan.planner`), named per-step scratch, symbolic sizes and
  per-binding layouts;
- :mod:`.emit` -- one C translation unit (:mod:`.emit.codegen`, the op table :mod:`.emit.c_ops`)
  and the call steps rendered into it (BLAS, LAPACK, FFT, MPI, ember's GEMM kernel);
- :mod:`.runtime` -- the C compiler and its cache, the call dispatcher, the per-machine runtime
  libraries, output pools, the program-level disk cache;
- ``csrc`` -- hand-written C (``.c``/``.h``) loaded as package resources.

At this level: what spans the stages -- :mod:`.opinfo` (what the backend knows about each
primitive), :mod:`.options`, :mod:`.abi` (the function-pointer table), :mod:`.pipeline`,
:mod:`.backend` (the executable), :mod:`.specialize` (symbolic programs: compile once, bind the
axes per call) and :mod:`.validators`.
"""

from ember._src.array import register_memory_reporter
from ember._src.jit import BACKENDS, CLEAR_HOOKS
from ember._src.native import opinfo, validators  # noqa: F401
from ember._src.native.backend import NativeExecutable, native_backend
from ember._src.native.emit import gemm_kernel  # noqa: F401
from ember._src.native.emit import mpi_calls as _mpi_calls  # noqa: F401
from ember._src.native.runtime import (  # noqa: F401
    compiler,
    dispatch,
    gemm_library,
    interrupt,
    pool,
    threadpool,
    toolchain,
)
from ember._src.native.runtime import memory as native_memory
from ember._src.native.specialize import native_specialize


def prepare(wait: bool = True) -> dict[str, bool | None]:
    """Start (and with ``wait``, finish) building the per-machine runtime libraries that are
    otherwise built in the background on first need: the C call dispatcher (:mod:`.runtime.dispatch`),
    the float32 GEMM kernel (:mod:`.emit.gemm_kernel`), the thread pool (:mod:`.runtime.threadpool`) and the
    interrupt runtime (:mod:`.runtime.interrupt`). Until they load, calls take the Python path, products
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
    if toolchain.find_compiler() is None:
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
# eager float32 matrix products (no jit) on the same GEMM kernel as jitted ones
gemm_library.dot_prims.dot_general_p.eager_impl = gemm_library.eager_dot_general

__all__ = ["NativeExecutable", "native_backend", "prepare"]
