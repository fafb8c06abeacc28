"""Ctrl-C during a native call: generated loops poll one flag that a SIGINT handler sets.

A jitted program runs as one native call; without this, a ``fori_loop`` of ``2**31`` steps kept
running after SIGINT until it finished. Now:

* **One flag, one handler** (``csrc/interrupt.c``): a small per-machine runtime library, loaded
  with ``RTLD_GLOBAL`` before any program that polls is loaded, holds the flag and a ``sigaction``
  SIGINT handler that sets it (only while the main thread is inside a native call) and then
  chains to the handler it replaced -- Python's, so Python's own signal machinery still sees
  every SIGINT and the Python-level handler (``KeyboardInterrupt`` by default, or one the user
  installed with ``signal.signal``) runs when the call returns.
* **Installed lazily, once**: installing and restoring a handler around each call costs two
  ``sigaction`` system calls (measured ~0.54 us per pair on the development VM, more than a
  small call), so the first polling call on the main thread installs it and it stays. A later
  ``signal.signal(SIGINT, ...)`` puts Python's C handler back at the OS level; a call on the main
  thread re-checks (one ``sigaction`` query at most every 10 ms) and chains again. An ignored
  (``SIG_IGN``) or default (``SIG_DFL``) SIGINT is left alone.
* **Polling** (``csrc/interrupt_poll.h``, ``EM_POLL()``): every iteration of a compiled
  ``scan``/``fori_loop``/``while_loop`` loop, every chunk of a kernel on the thread pool, every
  row of a pooled row kernel and every block of a pooled blocked reduction read the flag through
  a thread-local pointer (one load and a predicted branch, no call: a loop's carries stay in
  registers). The pointer leads to the flag only on the main thread during its call, and on a
  pool worker while it runs a chunk of that call (the call's ``em_main_ctx`` carries the
  pointer); elsewhere (calls on other threads) to a zero, so only the main thread's call stops.
  Once stopped, ``ember_main`` returns :data:`INTERRUPTED` and :func:`check_status` raises.
  Stopped chunks return early and chunks not started are skipped, so the pool is idle and
  consistent when the call returns; nothing of the arena outlives a call, so the next call starts
  clean.
* Programs without loops or pooled kernels (a small elementwise function) do not poll and do
  not touch the runtime at all.

Not interruptible: a single BLAS/LAPACK call, a serial kernel (below the parallel threshold,
or with one thread), a sort or FFT step; the call stops at the next poll after it.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import threading
from typing import NoReturn

from ember._src.native.csrc import load as load_resource
from ember._src.native.csrc import with_symbol
from ember._src.native.runtime.background import BackgroundLibrary

__all__ = ["INTERRUPTED", "c_helpers", "check_status", "install_pair_ns", "installed", "installs", "load",
           "poll", "raise_interrupted", "symbol"]

logger = logging.getLogger(__name__)

# ember_main's result when a SIGINT stopped it (fallback failures are k + 1 > 0, -1 is the dispatcher's)
INTERRUPTED = -2
# in a generated source: the program polls (and ember_main goes through em_intr_call)
POLL = "EM_POLL()"
# set by benchmarks (with the program cache off): programs generated while False do not poll
POLLING = True


def poll() -> str:
    """The C condition a loop or chunk tests to stop on Ctrl-C (``"0"``: polling switched off)."""
    return POLL if POLLING else "0"

@functools.cache
def _library_source() -> tuple[str, str]:
    """(the runtime's C source, its exported table's name: the name carries a hash of the source)."""
    return with_symbol("interrupt.c", "ember_interrupt_", "EMBER_INTERRUPT_SYMBOL")


def symbol() -> str:
    """The exported table's name (whether or not the runtime is loaded yet)."""
    return _library_source()[1]


def _build_and_load() -> ctypes.CDLL:
    from ember._src.native.runtime import compiler

    source, name = _library_source()
    lib = compiler.load_global(source, name_hint="interrupt")
    getattr(lib, name + "_init")(ctypes.c_ulong(threading.main_thread().ident or 0))
    getattr(lib, name + "_installed").restype = ctypes.c_int
    getattr(lib, name + "_installs").restype = ctypes.c_long
    getattr(lib, name + "_install_pair_ns").restype = ctypes.c_double
    return lib


_library: BackgroundLibrary[ctypes.CDLL] = BackgroundLibrary(
    "ember-interrupt", _build_and_load,
    on_failure=lambda reason: logger.warning(
        "ember: building the interrupt runtime failed (native loops do not stop on Ctrl-C): %s", reason))


def load(wait: bool = False) -> bool | None:
    """Start building and loading the runtime (once per process, in a background thread); with
    ``wait``, block until done. True once loaded, False when the build failed, None while it runs."""
    return _library.state(wait)


def installed() -> bool:
    """Whether the runtime's SIGINT handler is the one installed now (it is installed by the first
    polling native call on the main thread)."""
    lib = _library.get() if _library.done else None
    return lib is not None and bool(getattr(lib, symbol() + "_installed")())


def installs() -> int:
    """How many times the runtime installed its handler in this process (0 before the first
    polling call; one more after each ``signal.signal(SIGINT, ...)`` that replaced it)."""
    lib = _library.get() if _library.done else None
    return 0 if lib is None else int(getattr(lib, symbol() + "_installs")())


def install_pair_ns(n: int = 100_000) -> float:
    """Nanoseconds per ``sigaction`` install-and-restore pair on this machine (the cost a handler
    installed around every call would add; benchmarks/bench_interrupt.py reports it)."""
    load(wait=True)
    lib = _library.get()
    if lib is None:
        raise RuntimeError(f"the interrupt runtime is not available: {_library.failure}")
    return float(getattr(lib, symbol() + "_install_pair_ns")(ctypes.c_int(n)))


def c_helpers() -> str:
    """The C a polling program needs (``EM_POLL()``, ``em_intr_call``, ``EM_INTERRUPTED``); loads
    the runtime first (waiting: a program must find it when it is loaded)."""
    load(wait=True)
    return (f'#define EM_INTR_NAME "{symbol()}"\n#define EM_INTERRUPTED ({INTERRUPTED})\n'
            + load_resource("interrupt_poll.h"))


def prepare_for(source: str) -> None:
    """Before loading a program: make sure the runtime is loaded when ``source`` polls (a program
    taken from the program cache skipped :func:`c_helpers`)."""
    if POLL in source:
        load(wait=True)


def raise_interrupted() -> NoReturn:
    """Raise for a native call that a SIGINT stopped. Python's own handler was chained to, so the
    Python-level handler is pending: it runs on entry to this function (the interpreter checks
    pending signals when a function starts) -- the default raises ``KeyboardInterrupt``, a user's
    handler does what it does. If it returns normally the call still has no result, so
    ``KeyboardInterrupt`` is raised here."""
    for _ in range(2):  # a backward jump: pending signal handlers run here at the latest
        pass
    raise KeyboardInterrupt("ember: native call interrupted (SIGINT)")


def check_status(rc: int) -> None:
    """Raise :func:`raise_interrupted` when ``rc`` (``ember_main``'s result) is :data:`INTERRUPTED`."""
    if rc == INTERRUPTED:
        raise_interrupted()
