"""A per-machine native library built once per process in a background thread.

The C call dispatcher (:mod:`.dispatch`) and the GEMM kernel library (:mod:`.gemm_kernel`) are
compiled on first use (or taken from the disk cache) while the program that asked for them keeps
running on its fallback path. :class:`BackgroundLibrary` holds that state: the first :meth:`get`
starts one daemon thread running the build function; every caller, concurrent or later, shares its
outcome -- the result, or the reason it failed (the build is never retried in the process).

A build still running when the interpreter exits is waited for (at most
:data:`EXIT_WAIT_SECONDS`), so that its library reaches the disk cache: daemon threads are stopped
at exit, and a short script that exited during the build used to leave it unfinished, so every
new process started it again (the GEMM kernel library: ~1.7 s of gcc on a core the program's own
first call then shared).
"""

from __future__ import annotations

import atexit
import threading
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["BackgroundLibrary"]

T = TypeVar("T")

EXIT_WAIT_SECONDS = 60.0  # the longest the interpreter's exit waits for builds in progress
_RUNNING: weakref.WeakSet[BackgroundLibrary] = weakref.WeakSet()


@atexit.register
def _finish_builds() -> None:
    """Let builds in progress end (and reach the disk cache) before the interpreter stops them."""
    for lib in list(_RUNNING):
        thread = lib._thread
        if thread is not None and not lib.done:
            thread.join(EXIT_WAIT_SECONDS)


class BackgroundLibrary(Generic[T]):
    """``build()`` run at most once, in a daemon thread named ``name``, on the first :meth:`get`.

    A build that raises (any :class:`Exception`) leaves :attr:`failure` set to
    ``"<ExceptionType>: <message>"``, passed to ``on_failure`` (e.g. to log it) once.
    """

    def __init__(self, name: str, build: Callable[[], T], *,
                 on_failure: Callable[[str], None] | None = None) -> None:
        self.name = name
        self._build = build
        self._on_failure = on_failure
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._result: T | None = None
        self._failure: str | None = None
        self._done = False

    def _run(self) -> None:
        try:
            result = self._build()
        except Exception as exc:  # noqa: BLE001 - any failure only leaves the caller's fallback on
            self._failure = f"{type(exc).__name__}: {exc}"
            self._done = True
            if self._on_failure is not None:
                self._on_failure(self._failure)
            return
        self._result = result
        self._done = True

    def get(self, wait: bool = False) -> T | None:
        """The build's result; None while it runs (the first call starts it) or when it failed.
        ``wait=True`` blocks until the build has ended."""
        if self._done:
            return self._result
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                _RUNNING.add(self)
                self._thread.start()
            thread = self._thread
        if wait:
            thread.join()
        return self._result

    def state(self, wait: bool = False) -> bool | None:
        """:meth:`get` as a status: True once built, False when the build failed, None while it
        runs (the first call starts it)."""
        if self.get(wait) is not None:
            return True
        return False if self._failure is not None else None

    @property
    def started(self) -> bool:
        """Whether the build has been requested (it may still run, or have ended)."""
        return self._thread is not None or self._done

    @property
    def done(self) -> bool:
        """Whether the build has ended (loaded or failed)."""
        return self._done

    @property
    def failure(self) -> str | None:
        """Why the build failed (``"<ExceptionType>: <message>"``), or None (loaded, running or not
        started)."""
        return self._failure
