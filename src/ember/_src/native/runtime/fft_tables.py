"""Lifetime of the FFT tables a program library allocates at run time (``csrc/fft_core.h``).

The runtime-length plan cache (``fft_runtime.h``) and the ``fft_conv`` twiddles (``fft_conv.h``)
allocate their tables with ``malloc`` the first time a length is seen, and keep them in the
library's static storage. Loaded libraries stay mapped for the life of the process (the compiler
module keeps them, and several executables of one source share one), so the tables are tied to the
executables instead: :func:`track` counts the live executables of each library that has FFT
tables, and when the last one is garbage collected the library's ``ember_fft_release()`` frees
them all (a later executable of the same source builds them again). Unloading the library frees
them too (a C destructor). The shared FFT kernel libraries (``native/emit/fft_blocks.py``) are
tracked the same way, by every executable whose program calls them. :func:`live_tables` is the
number held, over every tracked library.
"""
from __future__ import annotations

import ctypes
import threading
import weakref

_lock = threading.Lock()
_users: dict[str, int] = {}  # library path -> live executables using it
_libs: dict[str, tuple[ctypes._CFuncPtr, ctypes._CFuncPtr]] = {}  # path -> (release, live)


def track(owner: object, lib: ctypes.CDLL, prefix: str = "ember_fft") -> None:
    """Count ``owner`` (an executable) as a user of ``lib`` until it is garbage collected; a library
    without FFT tables is ignored. ``prefix``: the names of the library's entries, ``<prefix>_release``
    and ``<prefix>_tables_live`` (a program's: ``ember_fft_release``/``ember_fft_tables_live``). Call before
    ``owner`` first runs the library."""
    try:
        release = getattr(lib, prefix + "_release")
        live = getattr(lib, prefix + "_tables_live")
    except AttributeError:
        return
    release.restype = None
    key = str(lib._name)
    with _lock:
        _users[key] = _users.get(key, 0) + 1
        _libs[key] = (release, live)
    weakref.finalize(owner, _drop, key)


def _drop(key: str) -> None:
    with _lock:
        _users[key] -= 1
        if _users[key] == 0:
            del _users[key]
            _libs[key][0]()


def live_tables() -> int:
    """FFT tables held by the tracked libraries (allocated and not yet freed)."""
    with _lock:
        return sum(int(live()) for _, live in _libs.values())
