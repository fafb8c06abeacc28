"""ember's thread pool: parallel loops that never wait for a thread that has not started.

Why: an OpenMP ``parallel for`` ends at a barrier that every thread of the team must reach. On a
shared virtual machine a thread's vCPU is taken away for milliseconds at a time (steal time), and
a region whose second thread is descheduled waits for it even when the first thread could have
done all the work; ember's two-thread transformer block was slower than its one-thread run on such
a host. This pool's loops are claimed chunk by chunk, and the calling thread claims chunks too: it
returns as soon as every chunk has *finished*, so work a late thread never started is done by the
caller, and a thread that wakes up after the loop finds nothing to do. (ONNX Runtime's thread pool
works the same way.)

C interface (one process-wide pool, in its own shared object built once per machine):

``void SYMBOL(em_task_t fn, void *ctx, int64_t n, int64_t nthreads, int64_t chunks_per_thread)``
    runs ``fn(ctx, lo, hi, tid)`` over consecutive ranges ``[lo, hi)`` covering ``[0, n)``
    (``min(n, nthreads * chunks_per_thread)`` chunks of near-equal size), on at most ``nthreads``
    threads, the caller included (``nthreads <= 0``: the number of online CPUs). ``tid`` is in
    ``[0, nthreads)`` and no two threads run chunks with the same ``tid`` at once (per-thread
    scratch is indexed by it). A call from inside a chunk, from a second thread while the pool is
    busy, or with one thread or one chunk, runs ``fn(ctx, 0, n, 0)`` on the calling thread.

How a chunk is claimed: one 64-bit word holds the job's generation, thread limit, next chunk and
chunk count; a thread claims chunk ``i`` by a compare-and-swap from ``next = i`` to ``i + 1`` and
only then reads the job's function, context and size (which cannot change before chunk ``i`` is
done: the caller publishes the next job only after counting every chunk finished). A stale thread's
swap fails, so it never runs a chunk of a job it did not see. Idle workers spin briefly (a program
runs its parallel loops back to back), then poll between ``sched_yield`` calls for 2 ms, then sleep
on a futex; the caller wakes them only when some sleep. The polling phase keeps a worker's CPU
awake between the calls of a model served in a loop: on the 2-vCPU VMs, a worker that slept after
40 us made the next calls slower than one thread (an LSTM at batch 8, calls 0.2 s apart: 3.9-4.9
ms at two threads, 3.3 at one; 2.9-3.2 with the polling), and a yielding worker gives its CPU to
any other runnable thread. A worker that starts a job on the CPU its caller published (Linux may
wake a thread beside its waker, and the two then share one CPU while another idles) moves itself to
the other CPUs of the set it started with: that took the LSTM's second call after a 0.2 s pause
from 3.4-3.6 ms to 2.4-2.5 (the workers are named ``ember-pool``). ``pthread_atfork`` resets the
pool in a child process.

Generated programs find the entry with ``dlsym`` (:func:`c_helpers`) and, until this library is
loaded (it builds in a background thread, like the GEMM kernel's) or where it cannot be built, run
the same chunk function under an OpenMP ``parallel`` region, or serially without OpenMP.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os

from ember._src.native.csrc import load as load_resource
from ember._src.native.csrc import with_symbol
from ember._src.native.runtime.background import BackgroundLibrary

# cost-weighted element count above which loops and calls go parallel (the one default: the
# ``parallel_threshold`` option's, and the eager GEMM's)
DEFAULT_PARALLEL_THRESHOLD = 200_000

__all__ = ["c_helpers", "load", "symbol"]

logger = logging.getLogger(__name__)

@functools.cache
def usable_cpus() -> int:
    """CPUs this process may run on: its affinity mask where the OS has one (a container or
    ``taskset`` pinned to 2 cores of a larger host counts 2), else ``os.cpu_count()``."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _library_source() -> tuple[str, str]:
    """(the pool library's C source, its exported symbol: the name carries a hash of the source)."""
    return with_symbol("threadpool.c", "ember_par_for_", "EMBER_POOL_SYMBOL")


def symbol() -> str:
    """The pool entry's exported name (whether or not the library is loaded yet)."""
    return _library_source()[1]


def _build_and_load() -> ctypes.CDLL:
    from ember._src.native.runtime import compiler

    return compiler.load_global(_library_source()[0], name_hint="threadpool")


_library: BackgroundLibrary[ctypes.CDLL] = BackgroundLibrary(
    "ember-threadpool", _build_and_load,
    on_failure=lambda reason: logger.warning(
        "ember: building the thread pool library failed (OpenMP regions are used): %s", reason))


def load(wait: bool = False) -> bool | None:
    """Start building and loading the pool library (once per process, in a background thread);
    with ``wait``, block until done. True once loaded, False when the build failed, None while
    it runs."""
    return _library.state(wait)


def workers() -> int:
    """How many worker threads the loaded pool has started (0 before its first parallel loop, or
    when the library is not loaded)."""
    lib = _library.get() if _library.done else None
    if lib is None:
        return 0
    return int(getattr(lib, symbol() + "_workers")())


# the text by which a generated program finds the pool: a program loaded from the disk cache that
# holds it starts loading the pool library (backend.NativeExecutable._from_cache), as generating
# it would have
LOOKUP = "#define EM_PAR_LOOKUP dlsym"

# set by tests: programs generated while this is set never find the pool (the fallback runs)
POOL_OFF = False


def c_helpers() -> str:
    """The C declarations a program with pooled loops needs (``em_par``, ``em_main_ctx``,
    ``EM_MAIN_UNPACK``); starts loading the library."""
    if POOL_OFF:
        return "#define EM_PAR_LOOKUP 0\n" + load_resource("pool_program.h")
    load()
    return f'{LOOKUP}((void *)0, "{symbol()}")\n' + load_resource("pool_program.h")
